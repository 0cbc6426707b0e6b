package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mspd/internal/testlog"
	"mspd/tool"
	"mspd/tool/tooltest"
)

func TestStdioServer(t *testing.T) {
	var logs testlog.Buffer
	cfg, journal := stdioConfig(t, "counter")
	c := start(t, cfg, tool.Options{Logger: logs.JSONLogger()})
	tools, version := c.Tools()
	if version != 1 {
		t.Errorf("version %d", version)
	}
	byName := map[string]tool.Tool{}
	for _, tl := range tools {
		byName[tl.Name] = tl
	}
	app, ok := byName[tooltest.Append]
	if !ok {
		t.Fatalf("no append tool in %+v", tools)
	}
	if app.ModelName != "counter__append" || app.Server != "counter" || app.Repeatable() || !app.Annotations.DestructiveHint {
		t.Errorf("append: %+v", app)
	}
	if look := byName[tooltest.Lookup]; !look.Annotations.ReadOnlyHint || !look.Repeatable() || look.Annotations.DestructiveHint {
		t.Errorf("lookup: %+v", look)
	}
	var schema map[string]any
	if err := json.Unmarshal(app.InputSchema, &schema); err != nil || schema["type"] != "object" {
		t.Errorf("input schema %s", app.InputSchema)
	}
	res, err := c.Call(context.Background(), tooltest.Append, json.RawMessage(`{"text":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "appended 1" || res.IsError || res.Truncated {
		t.Errorf("result %+v", res)
	}
	if n, _ := tooltest.Count(journal, tooltest.Append); n != 1 {
		t.Errorf("journal counts %d appends", n)
	}
	t.Log(logs.String())
}

// heldSleep is an Options.Sleep that holds every reconnection until the
// test releases it, so that the test sees the server down.
type heldSleep struct {
	waiting chan struct{}
	release chan struct{}
}

func newHeldSleep() *heldSleep {
	return &heldSleep{waiting: make(chan struct{}, 16), release: make(chan struct{})}
}

func (h *heldSleep) sleep(ctx context.Context, _ time.Duration) error {
	h.waiting <- struct{}{}
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestStdioServerRestartsAfterItDies(t *testing.T) {
	var logs testlog.Buffer
	held := newHeldSleep()
	cfg, journal := stdioConfig(t, "counter")
	c := start(t, cfg, tool.Options{Logger: logs.JSONLogger(), Sleep: held.sleep})
	first := c.Status().PID
	if first == 0 {
		t.Fatal("no pid")
	}
	_, version := c.Tools()

	// A call in flight when the server dies fails unavailable, and may
	// have run.
	inFlight := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), tooltest.Slow, nil)
		inFlight <- err
	}()
	waitForCount(t, journal, tooltest.Slow, 1)
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := receive(t, inFlight, "the in-flight call's end")
	var te *tool.Error
	if !errors.As(err, &te) || te.Kind != tool.KindUnavailable || !te.MayHaveRun || te.Server != "counter" || te.Tool != tooltest.Slow {
		t.Fatalf("in-flight call: %v (%#v)", err, te)
	}

	// While it is down, calls fail at once, typed, and did not run.
	receive(t, held.waiting, "a reconnection waiting")
	if st := c.Status(); st.Connected || st.Err == nil {
		t.Fatalf("status while down: %+v", st)
	}
	_, err = c.Call(context.Background(), tooltest.Append, json.RawMessage(`{"text":"down"}`))
	if !errors.As(err, &te) || te.Kind != tool.KindUnavailable || te.MayHaveRun {
		t.Fatalf("call while down: %v", err)
	}
	if tools, _ := c.Tools(); len(tools) == 0 {
		t.Error("a server that is down lost its tool list")
	}

	// Released, it starts again: a new process, the same list.
	close(held.release)
	waitFor(t, c, "reconnected", func() bool { return c.Status().Connected })
	st := c.Status()
	if st.PID == first || st.PID == 0 || st.Restarts != 1 {
		t.Errorf("after restart: %+v (first pid %d)", st, first)
	}
	if _, v := c.Tools(); v != version {
		t.Errorf("version %d after a restart with the same list, was %d", v, version)
	}
	res, err := c.Call(context.Background(), tooltest.Append, json.RawMessage(`{"text":"up"}`))
	if err != nil || res.Text != "appended 1" {
		t.Fatalf("after restart: %+v, %v", res, err)
	}
	if n, _ := tooltest.Count(journal, tooltest.Append); n != 1 {
		t.Errorf("append ran %d times, want 1 (the call while down must not run)", n)
	}
	if !strings.Contains(logs.String(), "mcp server is down") || strings.Count(logs.String(), tooltest.StartedLine) != 2 {
		t.Errorf("log lacks the restart:\n%s", logs.String())
	}
}

// receive waits for a value on ch, failing the test if none comes.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// waitForCount waits until the journal counts n invocations of tool. The
// journal is written by another process: there is nothing to wait on but
// the file, so it is polled.
func waitForCount(t *testing.T, journal, name string, n int) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	bound := time.After(30 * time.Second)
	for {
		got, err := tooltest.Count(journal, name)
		if err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		select {
		case <-tick.C:
		case <-bound:
			t.Fatalf("%s ran %d times, waiting for %d", name, got, n)
		}
	}
}

func TestLogsShowNoSecret(t *testing.T) {
	var logs testlog.Buffer
	opts := tool.Options{Logger: logs.JSONLogger(), Sleep: newHeldSleep().sleep}

	// A stdio server with a secret in its environment, killed once.
	cfg, _ := stdioConfig(t, "counter")
	cfg.Env["SECRET_TOKEN"] = "env-secret-value"
	c := start(t, cfg, opts)
	if err := syscall.Kill(c.Status().PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, "down", func() bool { return !c.Status().Connected })

	// An HTTP server that refuses the header, and one that is not there.
	_, srv, _ := httpServer(t, "Bearer right")
	for _, url := range []string{srv.URL, "http://127.0.0.1:1/mcp"} {
		bad, err := tool.Start(httpConfig(url, "Bearer hdr-secret-value"), opts)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, bad, "refused", func() bool { return bad.Status().Err != nil })
		bad.Close()
	}
	out := logs.String()
	for _, secret := range []string{"env-secret-value", "hdr-secret-value"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log shows %s:\n%s", secret, out)
		}
	}
	for _, want := range []string{"SECRET_TOKEN", "Authorization", "mcp server is down"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
}

func TestStdioServerEnvironment(t *testing.T) {
	cfg, _ := stdioConfig(t, "counter")
	cfg.Env["SERVER_TOKEN"] = "tok"
	t.Setenv("MSPD_ONLY", "mspd's")
	getenv := func(c *tool.Client, name string) string {
		t.Helper()
		res, err := c.Call(context.Background(), tooltest.Env, json.RawMessage(`{"name":"`+name+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		return res.Text
	}
	inherits := start(t, cfg, tool.Options{})
	if got := getenv(inherits, "SERVER_TOKEN"); got != "tok" {
		t.Errorf("SERVER_TOKEN %q: env is not added", got)
	}
	if got := getenv(inherits, "MSPD_ONLY"); got != "mspd's" {
		t.Errorf("MSPD_ONLY %q: mspd's environment is not the default base", got)
	}
	cfg.Name = "bare"
	bare := start(t, cfg, tool.Options{BaseEnv: []string{"BASE=1"}})
	if getenv(bare, "MSPD_ONLY") != "" || getenv(bare, "BASE") != "1" || getenv(bare, "SERVER_TOKEN") != "tok" {
		t.Error("BaseEnv is not the child's whole base environment")
	}
}

func TestMissingCommandIsReported(t *testing.T) {
	c, err := tool.Start(tool.ServerConfig{Name: "gone", Command: filepath.Join(t.TempDir(), "no-such-server")}, tool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// WaitTried returns once the first attempt failed, long before its
	// deadline (which would fail the test by its own timeout).
	tried, stop := context.WithTimeout(context.Background(), time.Hour)
	defer stop()
	c.WaitTried(tried)
	if tried.Err() != nil || c.Status().Err == nil {
		t.Fatalf("WaitTried returned with the status %+v", c.Status())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.WaitReady(ctx); err == nil || !strings.Contains(err.Error(), "no-such-server") {
		t.Errorf("WaitReady: %v", err)
	}
	if _, err := c.Call(context.Background(), "anything", nil); tool.KindOf(err) != tool.KindArgument {
		t.Errorf("a call before any listing: %v", err)
	}
}
