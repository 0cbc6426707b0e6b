package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/session"
	"mspd/store"
	"mspd/store/sqlite"
)

// hookStore calls onCommit after each commit.
type hookStore struct {
	store.Store
	onCommit atomic.Pointer[func(store.Batch)]
}

func (h *hookStore) Commit(ctx context.Context, b store.Batch) error {
	err := h.Store.Commit(ctx, b)
	if f := h.onCommit.Load(); f != nil {
		(*f)(b)
	}
	return err
}

// TestTurnAdmittedOnAClosingConnectionRuns: handler.Handle runs `after`
// (turn/start's launch) only when rpc.Reply succeeded. When the connection
// shuts while turn/start is being admitted (its write timed out, a ping
// went unanswered, the peer vanished), the admission commits, the reply
// fails with errClosed, and the queue is never kicked. The client, as MSP
// says, re-sends the same command on its next connection — and
// Manager.StartTurn returns a no-op launch for a replay. The admitted turn
// never runs: no turn/started, no terminal, its turn-wait hangs and the
// session stays busy until some unrelated turn/start kicks the queue.
func TestTurnAdmittedOnAClosingConnectionRuns(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mspd.db"))
	if err != nil {
		t.Fatal(err)
	}
	hs := &hookStore{Store: st}
	m, err := session.New(context.Background(), session.Config{Store: hs, Runner: instantRunner{},
		LogPath: "x.db", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); st.Close() })
	raw, _, err := m.StartSession(context.Background(), nopSub{}, mustMarshal(msp.SessionStartParams{CommandID: newCommandID()}))
	if err != nil {
		t.Fatal(err)
	}
	var res msp.SessionStartResult
	json.Unmarshal(raw, &res)
	sid := res.Session.SessionID

	srv, err := New(m, Config{PingInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cmdID := newCommandID()
	params := `{"commandId":"` + cmdID + `","sessionId":"` + sid + `","input":[{"type":"text","text":"hi"}]}`
	tr := newWedged(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"turn/start","params":`+params+`}`,
	)
	c := newConn(srv, tr, slog.New(slog.DiscardHandler))
	ran := make(chan struct{}) // closed when the turn's terminal is written
	var terminal sync.Once
	hook := func(b store.Batch) {
		// The connection dies while the admission is being written (after
		// the write began: Commit then waits for it and reports success).
		for _, cmd := range b.Commands {
			if cmd.ID == cmdID {
				c.shut("write timed out", true)
			}
		}
		for _, r := range b.Records {
			if r.Method == msp.NotifyTurnCompleted {
				terminal.Do(func() { close(ran) })
			}
		}
	}
	hs.onCommit.Store(&hook)
	served := make(chan struct{})
	go func() { c.serve(context.Background()); close(served) }()
	<-served

	// The client reconnects and re-sends the same command; the handler runs
	// StartTurn, replies, then calls launch.
	if _, launch, err := m.StartTurn(context.Background(), nil, json.RawMessage(params)); err != nil {
		t.Fatal(err)
	} else {
		launch()
	}
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		h, _ := st.Head(context.Background(), sid)
		t.Fatalf("turn %s was admitted (ledger has it) but never ran: session log head %d, no turn/started, no terminal", cmdID, h)
	}
}
