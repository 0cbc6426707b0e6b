package server

// Regression tests: each pins a defect a code review found, now fixed.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/session"
	"mspd/store"
	"mspd/store/sqlite"
)

// TestPageResponseStaysUnderTheFrameCap: §5 item 2 — "never emit a frame
// over the cap". view/page bounds a page by the byte size of the stored
// params (withinBudget, ~10 MiB - 64 KiB), and events are stored without
// HTML escaping. But responses are encoded by jsonrpc2 (Response.SetResult
// and MarshalJSON use json.Marshal), which HTML-escapes every '<', '>' and
// '&' inside the json.RawMessage params: one byte becomes six. A session
// whose user message is 1.9 MiB of '<' (a legal turn/start, a fifth of the
// inbound cap) makes every view/page that reaches that event an ~11.4 MiB
// frame: an SDK client with the standard 10 MiB read limit (and `mspd
// tail`'s client after a few such events) drops the connection, reconnects,
// pages again and drops again — the gap fill and the web page's history
// load can never finish.
func TestPageResponseStaysUnderTheFrameCap(t *testing.T) {
	m, head := reviewManager(t)
	sid := startWithTurnsText(t, m, head, nopSub{}, 1, strings.Repeat("<", 19<<20/10))

	srv, err := New(m, Config{PingInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.ServeStdio(ctx, inR, outW)
	go func() {
		for _, f := range []string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"initialized"}`,
			`{"jsonrpc":"2.0","id":2,"method":"view/page","params":{"sessionId":"` + sid + `","limit":10}}`,
		} {
			io.WriteString(inW, f+"\n")
		}
	}()
	br := bufio.NewReaderSize(outR, 1<<20)
	got := make(chan []byte, 1)
	go func() {
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				close(got)
				return
			}
			var f struct {
				ID json.RawMessage `json:"id"`
			}
			json.Unmarshal(line, &f)
			if string(f.ID) == "2" {
				got <- line
				return
			}
		}
	}()
	select {
	case line := <-got:
		const frameCap = 10 << 20
		if len(line) > frameCap {
			t.Fatalf("view/page response is %d bytes, over the %d-byte frame cap (escaped '<': %d)",
				len(line), frameCap, bytes.Count(line, []byte(`\u003c`)))
		}
	case <-time.After(90 * time.Second):
		t.Fatal("no view/page response")
	}
}

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
	raw, _, err := m.StartSession(context.Background(), nopSub{}, mustMarshal(msp.SessionStartParams{CommandID: reviewCmd()}))
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
	cmdID := reviewCmd()
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
