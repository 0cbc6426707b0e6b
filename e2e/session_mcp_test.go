package e2e

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"mspd/auth"
	"mspd/client"
	"mspd/daemon"
	"mspd/internal/testlog"
	"mspd/provider/scripted"
	"mspd/schema/msp"
	"mspd/tool/sessionmcp"
	"mspd/tool/tooltest"
)

// headerSecret is the credential a client gives its session's server.
const headerSecret = "Bearer session-mcp-secret-7f3a"

// wireLog keeps every frame a client sends and receives.
type wireLog struct {
	mu     sync.Mutex
	frames []string
}

func (w *wireLog) add(frame []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.frames = append(w.frames, string(frame))
}

// options are o with every frame received kept.
func (w *wireLog) options(o client.Options) client.Options {
	o.OnFrame = w.add
	return o
}

func (w *wireLog) holds(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.frames {
		if strings.Contains(f, s) {
			return true
		}
	}
	return false
}

// mcpServer serves tooltest's tools over streamable HTTP on loopback,
// counting the requests that carried the client's credential.
func mcpServer(t *testing.T) (ts *tooltest.Server, endpoint string, authorized func() int) {
	t.Helper()
	ts = tooltest.New("")
	var mu sync.Mutex
	n := 0
	h := ts.HTTPHandler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == headerSecret {
			mu.Lock()
			n++
			mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return ts, srv.URL + "/mcp", func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// startWithServers starts a session naming servers. It selects MSP's
// approval mode allowAll: a session server's tools are marked as needing
// a person's consent (see docs/tools.md), and these tests have no person;
// a server without approvals ignores the member.
func startWithServers(ctx context.Context, c *checkedClient, servers map[string]msp.SessionMCPServerConfig) (msp.SessionStartResult, error) {
	var res msp.SessionStartResult
	err := c.Call(ctx, msp.MethodSessionStart, struct {
		msp.SessionStartParams
		ApprovalMode string `json:"approvalMode"`
	}{msp.SessionStartParams{CommandID: client.NewCommandID(), Config: &msp.SessionConfig{MCPServers: servers}}, "allowAll"}, &res)
	return res, err
}

// wantRefused checks that err is the typed MSP error kind, naming field
// (when given) and reason (when given).
func wantRefused(t *testing.T, what string, err error, kind, field, reason string) *msp.Error {
	t.Helper()
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != kind || field != "" && me.Data.Details["field"] != field || me.Data.Reason != reason {
		t.Fatalf("%s: got %v (%+v), want %s field %q reason %q", what, err, me, kind, field, reason)
	}
	return me
}

// sessionCount is how many sessions c's principal has.
func sessionCount(t *testing.T, ctx context.Context, c *checkedClient) int {
	t.Helper()
	var res msp.SessionListResult
	if err := c.Call(ctx, msp.MethodSessionList, msp.SessionListParams{}, &res); err != nil {
		t.Fatal(err)
	}
	return len(res.Sessions)
}

// toolTurn runs a scripted turn whose first step answers the names of the
// tools it was offered and makes calls, and returns its answer's first
// text and its toolCall items as completed.
func toolTurn(t *testing.T, ctx context.Context, c *checkedClient, sid string, calls ...scripted.Call) (offered string, items []msp.Item, done msp.TurnCompletedParams) {
	t.Helper()
	ack, err := c.StartTurn(ctx, sid, scripted.Script(scripted.Step{Text: "offered: ", ToolNames: true, Calls: calls}, scripted.Step{Text: "done"}))
	if err != nil {
		t.Fatal(err)
	}
	events, err := c.WaitTurn(ctx, ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Method != msp.NotifyItemCompleted {
			continue
		}
		it := decode[msp.ItemParams](t, e).Item
		switch {
		case it.Kind == msp.ItemToolCall:
			items = append(items, it)
		case it.Kind == msp.ItemAgentMessage && offered == "" && it.Text != nil:
			offered = *it.Text
		}
	}
	return offered, items, decode[msp.TurnCompletedParams](t, events[len(events)-1])
}

// TestSessionMCPOffByDefault: a server that takes no MCP servers from
// clients grants no sessionMcp, and a session/start naming one is refused
// capabilityRequired without making the session; one naming none (an
// empty map) starts as any.
func TestSessionMCPOffByDefault(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{Capabilities: []string{msp.CapabilitySessionMCP}})
	if slices.Contains(c.Init.GrantedCapabilities, msp.CapabilitySessionMCP) {
		t.Fatalf("granted %v", c.Init.GrantedCapabilities)
	}
	_, err := startWithServers(ctx, c, map[string]msp.SessionMCPServerConfig{"web": {Transport: msp.MCPTransportStreamableHTTP, URL: "http://127.0.0.1:1/mcp"}})
	me := wantRefused(t, "off", err, msp.KindCapabilityRequired, "", "")
	if me.Code != msp.CodeCapabilityRequired || me.Data.Capability != msp.CapabilitySessionMCP {
		t.Fatalf("refusal %+v", me)
	}
	if n := sessionCount(t, ctx, c); n != 0 {
		t.Fatalf("%d sessions after a refused start", n)
	}
	if _, err := startWithServers(ctx, c, map[string]msp.SessionMCPServerConfig{}); err != nil {
		t.Fatalf("no servers: %v", err)
	}
}

// TestSessionMCPOverHTTP, end to end over WebSocket, on a multi-user
// server taking streamable HTTP servers on one listed host: sessionMcp is
// granted to a connection that asks (and the servers refused to one that
// did not); alice's session names a real go-sdk server with a header, and
// a turn is offered its tools beside the operator's and calls one — the
// item names the server, the header reached it. Servers on another host,
// stdio servers and unknown transports are refused, typed, naming the
// field, and make no session. Bob's session is never offered alice's
// server's tools, nor is alice's other session, and a call of one by name
// does not reach it. After a restart over the same data directory alice's
// session calls its server again. The header value is in no frame either
// client received and in no log line.
func TestSessionMCPOverHTTP(t *testing.T) {
	ts, endpoint, authorized := mcpServer(t)
	var logs testlog.Buffer
	dir := t.TempDir()
	cfg := daemon.Config{
		DataDir:    dir,
		Auth:       auth.Config{TokensFile: tokensFile(t, "alice "+aliceToken, "bob "+bobToken)},
		SessionMCP: sessionmcp.Policy{Mode: sessionmcp.HTTP, Hosts: []string{hostOf(t, endpoint)}},
		Logger:     slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	d := startDaemon(t, cfg)
	ctx := testCtx(t)
	var aliceWire, bobWire wireLog
	alice := dial(t, d.URL(), aliceWire.options(client.Options{Token: aliceToken, Capabilities: []string{msp.CapabilitySessionMCP}}))
	if !slices.Contains(alice.Init.GrantedCapabilities, msp.CapabilitySessionMCP) {
		t.Fatalf("granted %v", alice.Init.GrantedCapabilities)
	}
	web := msp.SessionMCPServerConfig{Transport: msp.MCPTransportStreamableHTTP, URL: endpoint, Headers: map[string]string{"Authorization": headerSecret}}

	// Refusals: no capability asked, another host, stdio, an unknown
	// transport, an operator's name.
	plain := dial(t, d.URL(), client.Options{Token: aliceToken})
	_, err := startWithServers(ctx, plain, map[string]msp.SessionMCPServerConfig{"web": web})
	wantRefused(t, "without the capability", err, msp.KindCapabilityRequired, "", "")
	elsewhere := web
	elsewhere.URL = "http://" + strings.Replace(hostOf(t, endpoint), "127.0.0.1", "127.0.0.2", 1) + "/mcp"
	_, err = startWithServers(ctx, alice, map[string]msp.SessionMCPServerConfig{"web": elsewhere})
	wantRefused(t, "another host", err, msp.KindInvalidParams, "config.mcpServers.web.url", msp.ReasonHostNotAllowed)
	_, err = startWithServers(ctx, alice, map[string]msp.SessionMCPServerConfig{"kid": {Transport: msp.MCPTransportStdio, Command: "/bin/true"}})
	wantRefused(t, "stdio under http", err, msp.KindInvalidParams, "config.mcpServers.kid.transport", msp.ReasonTransportNotAllowed)
	// A frame the schema refuses, sent unchecked.
	raw, err := client.Dial(ctx, d.URL(), client.Options{Token: aliceToken, Capabilities: []string{msp.CapabilitySessionMCP}})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	err = raw.Call(ctx, msp.MethodSessionStart, msp.SessionStartParams{CommandID: client.NewCommandID(),
		Config: &msp.SessionConfig{MCPServers: map[string]msp.SessionMCPServerConfig{"x": {Transport: "websocket", URL: endpoint}}}}, nil)
	wantRefused(t, "unknown transport", err, msp.KindInvalidParams, "config.mcpServers.x.transport", "")
	_, err = startWithServers(ctx, alice, map[string]msp.SessionMCPServerConfig{"builtin": web})
	wantRefused(t, "an operator's name", err, msp.KindInvalidParams, "config.mcpServers.builtin", msp.ReasonNameTaken)
	if n := sessionCount(t, ctx, alice); n != 0 {
		t.Fatalf("%d sessions after refused starts", n)
	}

	// Alice's session calls its own server.
	start, err := startWithServers(ctx, alice, map[string]msp.SessionMCPServerConfig{"web": web})
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID
	lookup := scripted.Call{ID: "c1", Name: "web__lookup", Args: `{"key":"k"}`}
	offered, items, done := toolTurn(t, ctx, alice, sid, lookup)
	if !strings.Contains(offered, "builtin__calculator") || !strings.Contains(offered, "web__lookup") {
		t.Fatalf("alice's turn was offered %q", offered)
	}
	if len(items) != 1 || items[0].Server != "web" || items[0].Tool != tooltest.Lookup || items[0].Status != msp.ItemCompleted ||
		items[0].VisibleOutput == nil || *items[0].VisibleOutput != "value of k" || done.Terminal != msp.TerminalCompleted {
		t.Fatalf("items %+v, terminal %+v", items, done)
	}
	if ts.Count(tooltest.Lookup) != 1 || authorized() == 0 {
		t.Fatalf("lookup ran %d times, %d requests carried the header", ts.Count(tooltest.Lookup), authorized())
	}
	var read msp.SessionSnapshot
	if err := alice.Call(ctx, msp.MethodSessionRead, msp.SessionReadParams{SessionID: sid, ExcludeItems: new(false)}, &read); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Resume(ctx, sid, nil); err != nil {
		t.Fatal(err)
	}
	var resumeCfg msp.SessionSnapshot
	err = alice.Call(ctx, msp.MethodSessionResume, msp.SessionResumeParams{CommandID: client.NewCommandID(), SessionID: sid,
		Config: &msp.SessionConfig{MCPServers: map[string]msp.SessionMCPServerConfig{"web": web}}}, &resumeCfg)
	wantRefused(t, "servers on resume", err, msp.KindInvalidParams, "config.mcpServers", "")

	// Alice's other session has no servers of its own.
	other, err := alice.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if offered, _, _ := toolTurn(t, ctx, alice, other.Session.SessionID); strings.Contains(offered, "web__") {
		t.Fatalf("alice's other session was offered %q", offered)
	}

	// Bob's session: never offered alice's server's tools; calling one by
	// name reaches nothing.
	bob := dial(t, d.URL(), bobWire.options(client.Options{Token: bobToken, Capabilities: []string{msp.CapabilitySessionMCP}}))
	bs, err := bob.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	offered, items, _ = toolTurn(t, ctx, bob, bs.Session.SessionID, lookup)
	if strings.Contains(offered, "web__") || !strings.Contains(offered, "builtin__calculator") || len(items) != 0 {
		t.Fatalf("bob's turn was offered %q and made calls %+v", offered, items)
	}
	if ts.Count(tooltest.Lookup) != 1 {
		t.Fatalf("bob's call reached alice's server")
	}
	_, err = bob.ReadOutput(ctx, msp.ItemReadOutputParams{SessionID: sid, ItemID: "x", OutputRef: "y"})
	wantNotFound(t, "bob reading alice's output", err)

	// A restart over the same data directory reconnects alice's server.
	d.Close(context.Background())
	d = startDaemon(t, cfg)
	alice = dial(t, d.URL(), aliceWire.options(client.Options{Token: aliceToken, Capabilities: []string{msp.CapabilitySessionMCP}}))
	if _, err := alice.Resume(ctx, sid, nil); err != nil {
		t.Fatal(err)
	}
	_, items, done = toolTurn(t, ctx, alice, sid, lookup)
	if len(items) != 1 || items[0].Status != msp.ItemCompleted || done.Terminal != msp.TerminalCompleted || ts.Count(tooltest.Lookup) != 2 {
		t.Fatalf("after a restart: items %+v, terminal %+v, lookups %d", items, done, ts.Count(tooltest.Lookup))
	}

	for what, found := range map[string]bool{
		"alice's wire": aliceWire.holds("session-mcp-secret"), "bob's wire": bobWire.holds("session-mcp-secret"),
		"the log": strings.Contains(logs.String(), "session-mcp-secret"),
	} {
		if found {
			t.Errorf("the header value is in %s", what)
		}
	}
	if !strings.Contains(logs.String(), `"mcp_server":"web"`) {
		t.Errorf("the log says nothing of alice's server:\n%s", logs.String())
	}
}

// TestSessionMCPRequiredAndOptional: a required server that cannot be
// reached fails the turn, environmentError, naming it; an optional one is
// left out and the turn runs with the rest.
func TestSessionMCPRequiredAndOptional(t *testing.T) {
	_, endpoint, _ := mcpServer(t)
	var logs testlog.Buffer
	// Listed by name: localhost resolves to loopback, which the guard
	// never dials for a name.
	byName := "http://" + strings.Replace(hostOf(t, endpoint), "127.0.0.1", "localhost", 1) + "/mcp"
	d := startDaemon(t, daemon.Config{
		SessionMCP: sessionmcp.Policy{Mode: sessionmcp.HTTP, Hosts: []string{hostOf(t, endpoint), hostOf(t, byName)}},
		Logger:     slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{Capabilities: []string{msp.CapabilitySessionMCP}})
	up := msp.SessionMCPServerConfig{Transport: msp.MCPTransportStreamableHTTP, URL: endpoint}
	down := msp.SessionMCPServerConfig{Transport: msp.MCPTransportStreamableHTTP, URL: byName}

	start, err := startWithServers(ctx, c, map[string]msp.SessionMCPServerConfig{"up": up, "down": down})
	if err != nil {
		t.Fatal(err)
	}
	_, items, done := toolTurn(t, ctx, c, start.Session.SessionID)
	if done.Terminal != msp.TerminalFailed || done.Error == nil || done.Error.Kind != msp.TurnErrorEnvironment ||
		!done.Error.Retryable || !strings.Contains(done.Error.Message, `"down"`) || len(items) != 0 {
		t.Fatalf("a required server down: terminal %+v, error %+v", done, done.Error)
	}

	down.Mode = msp.MCPModeOptional
	start, err = startWithServers(ctx, c, map[string]msp.SessionMCPServerConfig{"up": up, "down": down})
	if err != nil {
		t.Fatal(err)
	}
	offered, _, done := toolTurn(t, ctx, c, start.Session.SessionID)
	if done.Terminal != msp.TerminalCompleted || !strings.Contains(offered, "up__lookup") || strings.Contains(offered, "down__") {
		t.Fatalf("an optional server down: terminal %+v, offered %q", done, offered)
	}
	if !strings.Contains(logs.String(), "left out") {
		t.Errorf("no log line says the optional server was left out")
	}
}

// TestSessionMCPStdio: a stdio server is refused under http and runs
// under all — this test binary, re-executed as tooltest's stdio server,
// with the client's env.
func TestSessionMCPStdio(t *testing.T) {
	journal := filepath.Join(t.TempDir(), "journal")
	command, args, env := tooltest.Command(journal)
	kid := msp.SessionMCPServerConfig{Transport: msp.MCPTransportStdio, Command: command, Args: args, Env: env}
	ctx := testCtx(t)

	d := startDaemon(t, daemon.Config{SessionMCP: sessionmcp.Policy{Mode: sessionmcp.HTTP}})
	c := dial(t, d.URL(), client.Options{Capabilities: []string{msp.CapabilitySessionMCP}})
	_, err := startWithServers(ctx, c, map[string]msp.SessionMCPServerConfig{"kid": kid})
	wantRefused(t, "stdio under http", err, msp.KindInvalidParams, "config.mcpServers.kid.transport", msp.ReasonTransportNotAllowed)

	d = startDaemon(t, daemon.Config{SessionMCP: sessionmcp.Policy{Mode: sessionmcp.All}})
	c = dial(t, d.URL(), client.Options{Capabilities: []string{msp.CapabilitySessionMCP}})
	start, err := startWithServers(ctx, c, map[string]msp.SessionMCPServerConfig{"kid": kid})
	if err != nil {
		t.Fatal(err)
	}
	_, items, done := toolTurn(t, ctx, c, start.Session.SessionID, scripted.Call{ID: "a", Name: "kid__append", Args: `{"text":"x"}`})
	if done.Terminal != msp.TerminalCompleted || len(items) != 1 || items[0].Server != "kid" || items[0].VisibleOutput == nil || *items[0].VisibleOutput != "appended 1" {
		t.Fatalf("terminal %+v, items %+v", done, items)
	}
	if n, err := tooltest.Count(journal, tooltest.Append); err != nil || n != 1 {
		t.Fatalf("append ran %d times (%v)", n, err)
	}
}

// TestSessionMCPAllNeedsLoopback: --session-mcp all on a listener beyond
// loopback is refused at start, saying why.
func TestSessionMCPAllNeedsLoopback(t *testing.T) {
	d, err := daemon.New(context.Background(), daemon.Config{DataDir: t.TempDir(), Listen: "0.0.0.0:0", Provider: "scripted",
		Auth: auth.Config{Token: aliceToken + aliceToken}, SessionMCP: sessionmcp.Policy{Mode: sessionmcp.All}, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.Background())
	if err := d.Start(); err == nil || !strings.Contains(err.Error(), "--session-mcp all") {
		t.Fatalf("started: %v", err)
	}
}

// TestToolOutputOverTheWire: a tool answering 100 KiB leaves an item cut
// at 32 KiB with an outputRef; item/readOutput pages through the whole
// output exactly, each range ending on a character boundary (the output
// alternates "é" and "x"), after a restart too; another principal is
// answered as for a session that does not exist.
func TestToolOutputOverTheWire(t *testing.T) {
	_, endpoint, _ := mcpServer(t)
	dir := t.TempDir()
	cfg := daemon.Config{
		DataDir:    dir,
		Auth:       auth.Config{TokensFile: tokensFile(t, "alice "+aliceToken, "bob "+bobToken)},
		SessionMCP: sessionmcp.Policy{Mode: sessionmcp.HTTP, Hosts: []string{hostOf(t, endpoint)}},
	}
	d := startDaemon(t, cfg)
	ctx := testCtx(t)
	alice := dial(t, d.URL(), client.Options{Token: aliceToken, Capabilities: []string{msp.CapabilitySessionMCP}})
	start, err := startWithServers(ctx, alice, map[string]msp.SessionMCPServerConfig{"t": {Transport: msp.MCPTransportStreamableHTTP, URL: endpoint}})
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID
	_, items, done := toolTurn(t, ctx, alice, sid, scripted.Call{ID: "b", Name: "t__big", Args: `{"bytes":102400}`})
	if done.Terminal != msp.TerminalCompleted || len(items) != 1 {
		t.Fatalf("terminal %+v, items %+v", done, items)
	}
	it := items[0]
	if !it.Truncated || it.OutputRef == nil || it.OutputRef.ByteLen != 102400 || len(*it.VisibleOutput) > 32<<10 || len(*it.VisibleOutput) < 32<<10-1 {
		t.Fatalf("item truncated %v, visible %d bytes, outputRef %+v", it.Truncated, len(*it.VisibleOutput), it.OutputRef)
	}
	var want strings.Builder
	for want.Len()+3 <= 102400 {
		want.WriteString("éx")
	}
	for want.Len() < 102400 {
		want.WriteByte('x')
	}
	readAll := func(c *checkedClient, length int64) string {
		var b strings.Builder
		for offset := int64(0); ; {
			res, err := c.ReadOutput(ctx, msp.ItemReadOutputParams{SessionID: sid, ItemID: it.ItemID, OutputRef: it.OutputRef.ID, OffsetBytes: &offset, LengthBytes: &length})
			if err != nil {
				t.Fatalf("at %d: %v", offset, err)
			}
			if res.OffsetBytes != offset || res.Encoding != msp.EncodingUTF8 || res.ByteLen != int64(len(res.Content)) {
				t.Fatalf("at %d: %+v", offset, res)
			}
			b.WriteString(res.Content)
			offset += res.ByteLen
			if res.EOF {
				return b.String()
			}
		}
	}
	if got := readAll(alice, 10001); got != want.String() {
		t.Fatalf("paged in 10001 bytes: %d bytes, not the output", len(got))
	}

	d.Close(context.Background())
	d = startDaemon(t, cfg)
	alice = dial(t, d.URL(), client.Options{Token: aliceToken})
	if got := readAll(alice, msp.MaxReadOutputBytes); got != want.String() {
		t.Fatalf("after a restart: %d bytes, not the output", len(got))
	}
	bob := dial(t, d.URL(), client.Options{Token: bobToken})
	_, err = bob.ReadOutput(ctx, msp.ItemReadOutputParams{SessionID: sid, ItemID: it.ItemID, OutputRef: it.OutputRef.ID})
	wantNotFound(t, "bob", err)
}
