package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"mspd/tool"
	"mspd/tool/tooltest"
)

// httpServer serves a tooltest server over streamable HTTP, refusing with
// 401 every request whose Authorization is not the given one.
func httpServer(t *testing.T, authorization string) (*tooltest.Server, *httptest.Server, *atomic.Int64) {
	t.Helper()
	s := tooltest.New("")
	refused := new(atomic.Int64)
	h := s.HTTPHandler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != authorization {
			refused.Add(1)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return s, srv, refused
}

func httpConfig(url, authorization string) tool.ServerConfig {
	return tool.ServerConfig{Name: "web", URL: url, Headers: map[string]string{"Authorization": authorization}, Approval: tool.ApprovalNever}
}

func TestHTTPServerGetsTheConfiguredHeaders(t *testing.T) {
	s, srv, refused := httpServer(t, "Bearer hdr-secret")
	c := start(t, httpConfig(srv.URL, "Bearer hdr-secret"), tool.Options{})
	res, err := c.Call(context.Background(), tooltest.Lookup, json.RawMessage(`{"key":"k"}`))
	if err != nil || res.Text != "value of k" {
		t.Fatalf("%+v, %v", res, err)
	}
	if n := refused.Load(); n != 0 {
		t.Errorf("%d requests came without the header", n)
	}
	if s.Count(tooltest.Lookup) != 1 {
		t.Errorf("lookup ran %d times", s.Count(tooltest.Lookup))
	}

	// Without the header the server refuses: the client is not connected.
	bad, err := tool.Start(httpConfig(srv.URL, "Bearer wrong"), tool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	ctx, cancel := context.WithCancel(context.Background())
	waitFor(t, bad, "the refused connection is reported", func() bool { return bad.Status().Err != nil })
	cancel()
	if err := bad.WaitReady(ctx); err == nil {
		t.Error("a refused server is ready")
	}
	if refused.Load() == 0 {
		t.Error("the server saw no refused request")
	}
}

func TestToolListChangedRelists(t *testing.T) {
	t.Run("http", func(t *testing.T) {
		s, srv, _ := httpServer(t, "Bearer x")
		c := start(t, httpConfig(srv.URL, "Bearer x"), tool.Options{})
		checkRelist(t, c, func() { s.AddTool("extra") })
	})
	t.Run("stdio", func(t *testing.T) {
		cfg, _ := stdioConfig(t, "counter")
		c := start(t, cfg, tool.Options{})
		checkRelist(t, c, func() {
			if _, err := c.Call(context.Background(), tooltest.AddTool, json.RawMessage(`{"name":"extra"}`)); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func checkRelist(t *testing.T, c *tool.Client, add func()) {
	t.Helper()
	reg, err := tool.NewRegistry(c)
	if err != nil {
		t.Fatal(err)
	}
	before := reg.Snapshot()
	if _, ok := before.Lookup(c.Name() + "__extra"); ok {
		t.Fatal("extra listed before it was added")
	}
	add()
	waitFor(t, c, "extra is listed", func() bool {
		_, ok := reg.Lookup(c.Name() + "__extra")
		return ok
	})
	after := reg.Snapshot()
	if after.Version == before.Version || len(after.Tools) != len(before.Tools)+1 {
		t.Errorf("version %d → %d, %d → %d tools", before.Version, after.Version, len(before.Tools), len(after.Tools))
	}
	res, err := reg.Call(context.Background(), c.Name()+"__extra", nil)
	if err != nil || res.Text != "extra" {
		t.Errorf("calling the new tool: %+v, %v", res, err)
	}
}

func inProcess(t *testing.T, opts tool.Options) (*tooltest.Server, *tool.Client) {
	t.Helper()
	s := tooltest.New("")
	c, err := tool.StartInProcess("test", s.MCP, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, c
}

func TestArgumentsAreCheckedBeforeTheCall(t *testing.T) {
	s, c := inProcess(t, tool.Options{})
	reg, _ := tool.NewRegistry(c)
	tests := []struct {
		name, args string
		path, msg  string
	}{
		{"test__append", `{"text": 3}`, "text", "want string"},
		{"test__append", `{}`, "text", "required"},
		{"test__append", `{"text": "a"`, "", "not JSON"},
		{"test__append", `["a"]`, "", "must be a JSON object"},
		{"test__big", `{"bytes": "many"}`, "bytes", "want integer"},
		{"test__nothing", `{}`, "", "no such tool"},
	}
	for _, tt := range tests {
		_, err := reg.Call(context.Background(), tt.name, json.RawMessage(tt.args))
		var ae *tool.ArgumentError
		if !errors.As(err, &ae) || tool.KindOf(err) != tool.KindArgument {
			t.Errorf("%s %s: %v, want an ArgumentError", tt.name, tt.args, err)
			continue
		}
		if ae.Name != tt.name || ae.Path != tt.path || !strings.Contains(ae.Message, tt.msg) {
			t.Errorf("%s %s: %+v, want path %q, message with %q", tt.name, tt.args, ae, tt.path, tt.msg)
		}
	}
	if n := s.Count(tooltest.Append) + s.Count(tooltest.Big); n != 0 {
		t.Errorf("tools ran %d times on bad arguments", n)
	}
	// Empty arguments are the empty object.
	s.AddTool("noargs")
	waitFor(t, c, "noargs is listed", func() bool { _, ok := reg.Lookup("test__noargs"); return ok })
	if res, err := reg.Call(context.Background(), "test__noargs", json.RawMessage(" ")); err != nil || res.Text != "noargs" {
		t.Errorf("no arguments: %+v, %v", res, err)
	}
}

func TestCallTimeoutAndCancellation(t *testing.T) {
	s := tooltest.New("")
	start := func(name string, opts tool.Options) *tool.Client {
		c, err := tool.StartInProcess(name, s.MCP, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := c.WaitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		return c
	}
	short := start("short", tool.Options{CallTimeout: 50 * time.Millisecond})
	_, err := short.Call(context.Background(), tooltest.Slow, nil)
	var te *tool.Error
	if !errors.As(err, &te) || te.Kind != tool.KindTimeout || !te.MayHaveRun {
		t.Fatalf("slow call: %v, want a timeout", err)
	}

	long := start("long", tool.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := long.Call(ctx, tooltest.Slow, nil)
		done <- err
	}()
	// Cancel once the call is running on the server.
	if err := s.WaitCount(context.Background(), tooltest.Slow, 2); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; tool.KindOf(err) != tool.KindCancelled {
		t.Fatalf("cancelled call: %v", err)
	}
	// Both clients still work.
	s.Release()
	for _, c := range []*tool.Client{short, long} {
		if res, err := c.Call(context.Background(), tooltest.Slow, nil); err != nil || res.Text != "done" {
			t.Fatalf("%s after the failed call: %+v, %v", c.Name(), res, err)
		}
	}
}

func TestToolErrorIsAResult(t *testing.T) {
	_, c := inProcess(t, tool.Options{})
	res, err := c.Call(context.Background(), tooltest.Fail, json.RawMessage(`{"message":"disk full"}`))
	if err != nil || !res.IsError || res.Text != "disk full" || res.Output != "disk full" {
		t.Fatalf("%+v, %v", res, err)
	}
}

func TestOutputIsBounded(t *testing.T) {
	_, c := inProcess(t, tool.Options{Limits: tool.Limits{ItemBytes: 10, OutputBytes: 100}})
	tests := []struct {
		bytes                   int
		text, output            int
		truncated, outTruncated bool
	}{
		{9, 9, 9, false, false},
		{10, 10, 10, false, false},
		// "éxéxé…": byte 10 is inside an é, so the item stops at 9.
		{50, 9, 50, true, false},
		{100, 9, 100, true, false},
		{101, 9, 100, true, true}, // ends "xx"
		{5000, 9, 99, true, true},
	}
	for _, tt := range tests {
		res, err := c.Call(context.Background(), tooltest.Big, json.RawMessage(fmt.Sprintf(`{"bytes":%d}`, tt.bytes)))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Text) != tt.text || len(res.Output) != tt.output || res.Truncated != tt.truncated ||
			res.OutputTruncated != tt.outTruncated || res.Bytes != tt.bytes {
			t.Errorf("%d bytes: text %d output %d truncated %v/%v bytes %d, want %d %d %v/%v",
				tt.bytes, len(res.Text), len(res.Output), res.Truncated, res.OutputTruncated, res.Bytes,
				tt.text, tt.output, tt.truncated, tt.outTruncated)
		}
		if !utf8.ValidString(res.Text) || !utf8.ValidString(res.Output) {
			t.Errorf("%d bytes: a cut split a character", tt.bytes)
		}
	}
}

func TestConcurrentCalls(t *testing.T) {
	s, c := inProcess(t, tool.Options{})
	const n = 32
	var wg sync.WaitGroup
	seen := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			res, err := c.Call(context.Background(), tooltest.Append, json.RawMessage(fmt.Sprintf(`{"text":"%d"}`, i)))
			seen[i], errs[i] = res.Text, err
		})
	}
	wg.Wait()
	distinct := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		distinct[seen[i]] = true
	}
	if len(distinct) != n || s.Count(tooltest.Append) != n {
		t.Errorf("%d distinct answers, %d appends, want %d", len(distinct), s.Count(tooltest.Append), n)
	}
}

func TestEveryPageIsListed(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "paged"}, &mcp.ServerOptions{PageSize: 2})
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		mcp.AddTool(s, &mcp.Tool{Name: name}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil, nil
		})
	}
	c, err := tool.StartInProcess("paged", s, tool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	tools, _ := c.Tools()
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, " ") != "a b c d e" {
		t.Errorf("listed %v", names)
	}
}
