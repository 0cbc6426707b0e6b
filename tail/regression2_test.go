package tail

// Regression tests: each pins a defect a code review found, now fixed.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/server"
	"mspd/session"
	"mspd/store/sqlite"
	"mspd/turn"
)

// instantRunner ends every turn at once (three durable records a turn).
type instantRunner struct{}

func (instantRunner) Run(context.Context, turn.Spec, turn.Sink) turn.Outcome {
	return turn.Outcome{Completed: msp.TurnCompletedParams{Terminal: msp.TerminalCompleted}}
}

type nopSub struct{}

func (nopSub) Deliver(session.Notification)                       {}
func (nopSub) Replay(context.Context, session.Notification) error { return nil }
func (nopSub) Subscribed(string, string)                          {}
func (nopSub) Broadcasts() bool                                   { return false }

var seq int

func cmd() string {
	seq++
	return fmt.Sprintf("0198f0aa-0000-7000-8000-%012d", seq)
}

// serve runs a manager and an MSP server on a loopback port.
func serve(t *testing.T) (*session.Manager, *httptest.Server) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mspd.db"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := session.New(context.Background(), session.Config{Store: st, Runner: instantRunner{}, LogPath: "x.db",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(m, server.Config{PingInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); m.Close(); st.Close() })
	return m, hs
}

func newSession(t *testing.T, m *session.Manager) string {
	t.Helper()
	raw, _, err := m.StartSession(context.Background(), nopSub{}, mustJSON(msp.SessionStartParams{CommandID: cmd()}))
	if err != nil {
		t.Fatal(err)
	}
	var res msp.SessionStartResult
	json.Unmarshal(raw, &res)
	return res.Session.SessionID
}

func runTurn(t *testing.T, m *session.Manager, sid, text string) string {
	t.Helper()
	id := cmd()
	_, launch, err := m.StartTurn(context.Background(), mustJSON(msp.TurnStartParams{CommandID: id, SessionID: sid,
		Input: []msp.TurnInputPart{{Type: "text", Text: text}}}))
	if err != nil {
		t.Fatal(err)
	}
	launch()
	return id
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// syncBuf is a goroutine-safe buffer.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// proxy forwards TCP to target; cut severs every connection so far.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) url() string { return "ws://" + p.ln.Addr().String() + "/msp" }

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestCancelWhileReconnectingIsClean: Run documents ctx ending as a clean
// end (nil). While reconnecting, a failed dial leaves c nil (tail.go: `if
// c, err = t.dial(ctx); err == nil`), and the deferred `c.Close()` then
// dereferences it: Ctrl-C on `mspd tail --follow` while the server is down
// panics with a nil pointer dereference instead of exiting.
func TestCancelWhileReconnectingIsClean(t *testing.T) {
	m, hs := serve(t)
	sid := newSession(t, m)
	px := newProxy(t, hs.Listener.Addr().String())
	url := px.url()
	status := &syncBuf{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		if err := Run(ctx, Options{URL: url, SessionID: sid, Follow: true, Status: status}, &syncBuf{}); err != nil {
			panic(fmt.Sprintf("Run returned %v", err))
		}
	}()
	time.Sleep(200 * time.Millisecond) // subscribed
	px.ln.Close()                      // the server is down: redials fail
	px.cut()
	waitFor(t, "a failed reconnect", func() bool { return strings.Contains(status.String(), "reconnect failed") })
	cancel() // Ctrl-C
	select {
	case p := <-done:
		if p != nil {
			t.Fatalf("Run did not end cleanly when its context ended while reconnecting: %v", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run still running 5s after cancel")
	}
}

// TestFollowReconnectMissesNothing: `mspd tail SESSION` (no --from, so
// live only) reconnects and resumes "by cursor" — but only once it has
// shown an event: with t.last empty the re-subscription is live only
// again, and the view/subscribe result (the head it attached after) is
// ignored. Everything the session did while the connection was down is
// silently skipped: here a whole turn.
func TestFollowReconnectMissesNothing(t *testing.T) {
	m, hs := serve(t)
	sid := newSession(t, m)
	px := newProxy(t, hs.Listener.Addr().String())
	url := px.url()
	out, status := &syncBuf{}, &syncBuf{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Run(ctx, Options{URL: url, SessionID: sid, Follow: true, Format: JSON, Status: status}, out)
	time.Sleep(300 * time.Millisecond) // subscribed, live only

	px.cut() // the connection drops …
	waitFor(t, "the drop to be noticed", func() bool { return strings.Contains(status.String(), "connection lost") })
	missed := runTurn(t, m, sid, "while you were away") // … and the session moves on (tail redials after 250 ms)

	time.Sleep(800 * time.Millisecond) // reconnected and re-subscribed
	later := runTurn(t, m, sid, "after the reconnect")
	waitFor(t, "the later turn", func() bool { return strings.Contains(out.String(), later) })
	if !strings.Contains(out.String(), missed) {
		t.Fatalf("tail never showed turn %s, which ran while it was reconnecting:\n%s", missed, out.String())
	}
}

// TestStreamedItemCompletesItsText: the renderer prints an agent message's
// text from its deltas and, when it saw any delta of the item, prints
// nothing of its item/completed. Deltas are ephemeral: the ones lost in a
// view/gap hole or while reconnecting are never replayed, and the item's
// authoritative text arrives only in item/completed (§4.3). So an answer
// that streamed partly before a reconnect is shown — in pretty and in raw
// output, which scripts pipe — with its middle missing, silently.
func TestStreamedItemCompletesItsText(t *testing.T) {
	for _, format := range []string{Pretty, Raw} {
		var out bytes.Buffer
		r := newRenderer(&out, format, false)
		r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{SessionID: "s", ViewCursor: "v:s:2.1", ItemID: "a", Delta: "Hello "}))
		// connection lost; deltas "big " and "world" went by; resumed after v:s:2.1
		text := "Hello big world"
		r.event(msp.NotifyItemCompleted, mustJSON(msp.ItemParams{
			Item: msp.Item{ItemID: "a", Kind: msp.ItemAgentMessage, Revision: 2, Status: msp.ItemCompleted, Text: &text}}))
		if !strings.Contains(out.String(), "world") {
			t.Errorf("%s output %q: the answer %q lost the text whose deltas it missed", format, out.String(), text)
		}
	}
}

// TestRawOutputHoldsOnlyTheAnswer: `-o raw` is documented as "the agent's
// streamed text only" and is what scripts pipe. A turn-layer retry (stream
// cut after output began, truncation, schema rejection) streams a first
// attempt that is then discarded (item/completed status failed) and a new
// item with the real answer. raw() writes every delta as it comes and, for
// the failed item, not even a newline: the output is the discarded text
// glued to the answer ("partialHello there").
func TestRawOutputHoldsOnlyTheAnswer(t *testing.T) {
	var out bytes.Buffer
	r := newRenderer(&out, Raw, false)
	failed, answer := "partial", "Hello there"
	r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "a", Delta: "partial"}))
	r.event(msp.NotifyItemCompleted, mustJSON(msp.ItemParams{Item: msp.Item{ItemID: "a", Kind: msp.ItemAgentMessage, Revision: 2, Status: msp.ItemFailed, Text: &failed}}))
	r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "b", Delta: "Hello there"}))
	r.event(msp.NotifyItemCompleted, mustJSON(msp.ItemParams{Item: msp.Item{ItemID: "b", Kind: msp.ItemAgentMessage, Revision: 2, Status: msp.ItemCompleted, Text: &answer}}))
	if out.String() != "Hello there\n" {
		t.Fatalf("raw output %q, want only the kept answer %q", out.String(), answer+"\n")
	}
}

// TestPrettyOutputNeutralisesControlCharacters: model output is untrusted
// (the web page only ever uses textContent). Pretty output is for a
// terminal, and renders deltas, item texts, retry reasons and error
// messages verbatim, so a model (or a prompt-injected document it quotes)
// can emit escape sequences that the operator's terminal executes: set the
// title, rewrite or hide earlier lines, or write the clipboard (OSC 52).
func TestPrettyOutputNeutralisesControlCharacters(t *testing.T) {
	var out bytes.Buffer
	r := newRenderer(&out, Pretty, false)
	evil := "fine\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2K\rall good"
	r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "a", Delta: evil}))
	r.event(msp.NotifyItemCompleted, mustJSON(msp.ItemParams{Item: msp.Item{ItemID: "b", Kind: msp.ItemAgentMessage, Revision: 2, Status: msp.ItemCompleted, Text: &evil}}))
	if strings.ContainsAny(out.String(), "\x1b\x07\r") {
		t.Fatalf("pretty output passes terminal control characters from model text through: %q", out.String())
	}
}
