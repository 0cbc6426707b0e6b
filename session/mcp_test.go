package session

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/turn"
)

// fakeServers is a SessionServers that records what it is asked and
// refuses the servers named "refused"; a session's servers named "down"
// are not connected.
type fakeServers struct {
	mu     sync.Mutex
	opened map[string]int // by session
	closed map[string]int
	tools  turn.Toolbox
	// changed is closed and replaced on every Close, waking waitClosed.
	changed chan struct{}
}

func newFakeServers(tools turn.Toolbox) *fakeServers {
	return &fakeServers{opened: map[string]int{}, closed: map[string]int{}, tools: tools, changed: make(chan struct{})}
}

func (f *fakeServers) Check(servers map[string]msp.SessionMCPServerConfig) error {
	if _, ok := servers["refused"]; ok {
		return msp.ErrInvalidParams("config.mcpServers.refused.url", "refused")
	}
	return nil
}

func (f *fakeServers) Open(sessionID string, servers map[string]msp.SessionMCPServerConfig) OpenServers {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opened[sessionID]++
	return &fakeOpen{f: f, session: sessionID, servers: servers}
}

func (f *fakeServers) counts(sid string) (opened, closed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opened[sid], f.closed[sid]
}

type fakeOpen struct {
	f       *fakeServers
	session string
	servers map[string]msp.SessionMCPServerConfig
}

func (o *fakeOpen) Ready(context.Context) (turn.Toolbox, error) {
	if c, ok := o.servers["down"]; ok && c.Required() {
		return nil, errors.New(`the session's MCP server "down" (required) is not connected`)
	}
	return o.f.tools, nil
}

func (o *fakeOpen) Close() {
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	o.f.closed[o.session]++
	close(o.f.changed)
	o.f.changed = make(chan struct{})
}

// waitClosed waits until session sid's servers were closed n times.
func (f *fakeServers) waitClosed(t *testing.T, sid string, n int) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		f.mu.Lock()
		closed, changed := f.closed[sid], f.changed
		f.mu.Unlock()
		if closed == n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("closed %d times, want %d", closed, n)
		}
	}
}

const mcpSecret = "header-value-never-returned"

func mcpStart(t *testing.T, m *Manager, sub Subscriber, servers map[string]msp.SessionMCPServerConfig) (string, error) {
	t.Helper()
	raw, attach, err := m.StartSession(context.Background(), sub, mustJSON(msp.SessionStartParams{CommandID: cmdID(), Config: &msp.SessionConfig{MCPServers: servers}}))
	if err != nil {
		return "", err
	}
	var res msp.SessionStartResult
	json.Unmarshal(raw, &res)
	attach(context.Background())
	if strings.Contains(string(raw), mcpSecret) {
		t.Errorf("session/start's result holds the header value: %s", raw)
	}
	return res.Session.SessionID, nil
}

// TestSessionServersAreTheSessions: a session's servers are checked at
// session/start (refused with no session made, as are repeated names and
// any on a manager that takes none), kept with the session and returned
// by no read; they open at its first turn (not before, and once while it
// stays loaded), join its turns' tools, are kept by a fork and close when
// the session unloads, is deleted, or the manager closes. A required
// server down fails the turn, environmentError; session/resume naming
// servers is refused.
func TestSessionServersAreTheSessions(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	web := msp.SessionMCPServerConfig{Transport: msp.MCPTransportStreamableHTTP, URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": mcpSecret}}

	off := newOutputManager(t, st, nil, 0)
	_, err := mcpStart(t, off, newRecSub(), map[string]msp.SessionMCPServerConfig{"web": web})
	if errKind(err) != msp.KindCapabilityRequired {
		t.Fatalf("a manager taking none: %v", err)
	}

	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	fake := newFakeServers(outputsToolbox{"web__lookup": "looked up"})
	m, err := New(ctx, Config{Store: st, Runner: newTestRunner(callingModel{}), SessionServers: fake, Now: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			m.Close()
		}
	})
	if _, err := mcpStart(t, m, newRecSub(), map[string]msp.SessionMCPServerConfig{"refused": web}); errKind(err) != msp.KindInvalidParams {
		t.Fatalf("refused by the check: %v", err)
	}
	twice := `{"commandId":"` + cmdID() + `","config":{"mcpServers":{"web":{"transport":"stdio","command":"a"},"web":{"transport":"stdio","command":"b"}}}}`
	if _, _, err := m.StartSession(ctx, newRecSub(), json.RawMessage(twice)); errKind(err) != msp.KindInvalidParams || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("a name given twice: %v", err)
	}
	if rows, _ := st.Sessions(ctx, "", nil, 10); len(rows) != 0 {
		t.Fatalf("%d sessions after refused starts", len(rows))
	}

	sub := newRecSub()
	sid, err := mcpStart(t, m, sub, map[string]msp.SessionMCPServerConfig{"web": web})
	if err != nil {
		t.Fatal(err)
	}
	if opened, _ := fake.counts(sid); opened != 0 {
		t.Fatal("servers opened before the first turn")
	}
	it := callTurn(t, ctx, m, sub, sid, "web__lookup")
	if it.Status != msp.ItemCompleted || *it.VisibleOutput != "looked up" {
		t.Fatalf("item %+v", it)
	}
	callTurn(t, ctx, m, sub, sid, "web__lookup")
	if opened, _ := fake.counts(sid); opened != 1 {
		t.Fatalf("opened %d times over two turns", opened)
	}
	read, err := m.ReadSession(ctx, mustJSON(msp.SessionReadParams{SessionID: sid}))
	list, err2 := m.ListSessions(ctx, nil)
	if err != nil || err2 != nil || strings.Contains(string(mustJSON(read)), mcpSecret) || strings.Contains(string(mustJSON(list)), mcpSecret) {
		t.Fatalf("read %v, list %v: the header value is returned, or they failed", err, err2)
	}
	if _, _, err := m.ResumeSession(ctx, newRecSub(), mustJSON(msp.SessionResumeParams{CommandID: cmdID(), SessionID: sid,
		Config: &msp.SessionConfig{MCPServers: map[string]msp.SessionMCPServerConfig{"web": web}}})); errKind(err) != msp.KindInvalidParams {
		t.Fatalf("resume naming servers: %v", err)
	}

	// Unloaded: closed; loaded again by the next turn: opened again.
	if err := m.Unsubscribe(ctx, sub, sid); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(m.cfg.IdleUnload + time.Second)
	mu.Unlock()
	m.WaitIdle(ctx)
	if n := m.sweep(); n != 1 {
		t.Fatalf("unloaded %d", n)
	}
	fake.waitClosed(t, sid, 1)
	subscribe(t, m, sub, sid)
	callTurn(t, ctx, m, sub, sid, "web__lookup")
	if opened, _ := fake.counts(sid); opened != 2 {
		t.Fatalf("opened %d times after a reload", opened)
	}

	// A fork keeps them.
	raw, _, err := m.ForkSession(ctx, nil, mustJSON(msp.SessionForkParams{CommandID: cmdID(), SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	var fork msp.SessionSnapshot
	json.Unmarshal(raw, &fork)
	forkSub := newRecSub()
	subscribe(t, m, forkSub, fork.Session.SessionID)
	if it := callTurn(t, ctx, m, forkSub, fork.Session.SessionID, "web__lookup"); it.Status != msp.ItemCompleted {
		t.Fatalf("the fork's call: %+v", it)
	}

	// Deleted: closed.
	_, erase, err := m.DeleteSession(ctx, nil, mustJSON(msp.SessionDeleteParams{CommandID: cmdID(), SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	erase(ctx)
	fake.waitClosed(t, sid, 2)

	// A required server down fails the turn, typed and retryable.
	down := newRecSub()
	did, err := mcpStart(t, m, down, map[string]msp.SessionMCPServerConfig{"down": web})
	if err != nil {
		t.Fatal(err)
	}
	done := runTurn(t, m, down, textTurn(did, "call down__lookup"))
	if done.Terminal != msp.TerminalFailed || done.Error == nil || done.Error.Kind != msp.TurnErrorEnvironment || !done.Error.Retryable || !strings.Contains(done.Error.Message, `"down"`) {
		t.Fatalf("terminal %+v error %+v", done, done.Error)
	}

	// The manager closing closes what is open.
	m.Close()
	closed = true
	if _, c := fake.counts(fork.Session.SessionID); c != 1 {
		t.Fatalf("the fork's servers closed %d times at the manager's close", c)
	}
}
