package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/session"
	"mspd/store"
	"mspd/store/sqlite"
	"mspd/turn"
)

// instantRunner ends every turn at once: turn/started, the userMessage
// item and turn/completed are three durable records per turn.
type instantRunner struct{}

func (instantRunner) Run(context.Context, turn.Spec, turn.Sink) turn.Outcome {
	return turn.Outcome{Completed: msp.TurnCompletedParams{Terminal: msp.TerminalCompleted}}
}

// testManager is a session manager on a fresh SQLite store whose turns
// end at once, and a reader of a session's log head.
func testManager(t *testing.T) (*session.Manager, func(sid string) int64) {
	t.Helper()
	return testManagerOver(t, func(st store.Store) store.Store { return st })
}

// testManagerOver is testManager on what wrap makes of its store.
func testManagerOver(t *testing.T, wrap func(store.Store) store.Store) (*session.Manager, func(sid string) int64) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mspd.db"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := session.New(context.Background(), session.Config{Store: wrap(st), Runner: instantRunner{},
		LogPath: "x.db", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); st.Close() })
	head := func(sid string) int64 {
		h, err := st.Head(context.Background(), sid)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	return m, head
}

var commandSeq int

// newCommandID is a new command id, a UUID of its own.
func newCommandID() string {
	commandSeq++
	return "0198f0aa-0000-7000-8000-" + strings.Repeat("0", 12-len(itoa(commandSeq))) + itoa(commandSeq)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// nopSub is a Subscriber that ignores everything.
type nopSub struct{}

func (nopSub) Deliver(session.Notification)                       {}
func (nopSub) Replay(context.Context, session.Notification) error { return nil }
func (nopSub) Subscribed(string, string)                          {}
func (nopSub) Broadcasts() bool                                   { return false }

// startWithTurns starts a session and runs n instant turns in it, waiting
// until each has settled, its 3 records in the log.
func startWithTurns(t *testing.T, m *session.Manager, head func(string) int64, sub session.Subscriber, n int) string {
	return startWithTurnsText(t, m, head, sub, n, "hi")
}

// startWithTurnsText is startWithTurns with text as every turn's input.
func startWithTurnsText(t *testing.T, m *session.Manager, head func(string) int64, sub session.Subscriber, n int, text string) string {
	t.Helper()
	ctx := context.Background()
	raw, attach, err := m.StartSession(ctx, sub, mustMarshal(msp.SessionStartParams{CommandID: newCommandID()}))
	if err != nil {
		t.Fatal(err)
	}
	var res msp.SessionStartResult
	json.Unmarshal(raw, &res)
	attach(ctx)
	sid := res.Session.SessionID
	for i := 0; i < n; i++ {
		_, launch, err := m.StartTurn(ctx, nil, mustMarshal(msp.TurnStartParams{CommandID: newCommandID(), SessionID: sid,
			Input: []msp.TurnInputPart{{Type: "text", Text: text}}}))
		if err != nil {
			t.Fatal(err)
		}
		launch()
		waitIdle(t, m)
		if h := head(sid); h < int64(3*(i+1)) {
			t.Fatalf("turn %d settled with the log at %d records, want at least %d", i+1, h, 3*(i+1))
		}
	}
	return sid
}

// cursorAt is the cursor of durable record seq of session sid: its head's,
// of the same incarnation, at seq.
func cursorAt(t *testing.T, m *session.Manager, sid string, seq int64) string {
	t.Helper()
	head, err := m.Head(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndexByte(head, ':')
	epoch, _, ok := strings.Cut(head[i+1:], "-")
	if ok {
		return head[:i+1] + epoch + "-" + strconv.FormatInt(seq, 10)
	}
	return head[:i+1] + strconv.FormatInt(seq, 10)
}

// waitIdle waits until no turn of m runs: the turns launched so far have
// settled.
func waitIdle(t *testing.T, m *session.Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.WaitIdle(ctx); err != nil {
		t.Fatalf("turns still running: %v", err)
	}
}

func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// wedgedTransport reads the given frames, then blocks until closed; every
// write blocks until its context ends (a peer that stopped reading).
type wedgedTransport struct {
	in     chan []byte
	closed chan struct{}
	once   sync.Once
}

func newWedged(frames ...string) *wedgedTransport {
	t := &wedgedTransport{in: make(chan []byte, len(frames)), closed: make(chan struct{})}
	for _, f := range frames {
		t.in <- []byte(f)
	}
	return t
}

func (t *wedgedTransport) ReadFrame(ctx context.Context, _ admitter) ([]byte, error) {
	select {
	case f := <-t.in:
		return f, nil
	case <-t.closed:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (t *wedgedTransport) WriteFrame(ctx context.Context, _ []byte) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.closed:
		return errors.New("closed")
	}
}

func (t *wedgedTransport) Close(string, bool) error {
	t.once.Do(func() { close(t.closed) })
	return nil
}

// short is a cursor's position: what follows its session and epoch.
func short(cursor string) string {
	if i := strings.LastIndexByte(cursor, ':'); i >= 0 {
		cursor = cursor[i+1:]
	}
	if _, pos, ok := strings.Cut(cursor, "-"); ok {
		return pos
	}
	return cursor
}
