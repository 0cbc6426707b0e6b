package session

// Review tests: each one pins a defect found in review. They are expected to
// FAIL on the reviewed code and pass once the defect is fixed.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"mspd/schema/msp"
)

// TestRejectedStopReplaysItsRejection: §5 item 9 — "replaying a
// rejected command returns the same rejection". A turn/interrupt admitted
// while nothing runs is refused missing_run, but the refusal is not written
// to the ledger (StopTurn returns the error without a.reject). When the
// client retries the same command (same commandId, same payload) after a
// turn has started, the replay is accepted and cancels that later turn.
func TestRejectedStopReplaysItsRejection(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	m := newManager(t, st, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)

	stop := mustJSON(msp.TurnStopParams{CommandID: cmdID(), SessionID: sid})
	_, err := m.StopTurn(context.Background(), msp.MethodTurnInterrupt, stop)
	var first *msp.Error
	if !errors.As(err, &first) || first.Data.Reason != msp.ReasonMissingRun {
		t.Fatalf("interrupt while idle: %v, want commandRejected missing_run", err)
	}

	ack := startTurn(t, m, textTurn(sid, "block"))
	model.waitStarted(t, "block")

	resp, err := m.StopTurn(context.Background(), msp.MethodTurnInterrupt, stop) // the same command again
	if err == nil {
		interrupt(t, m, sid) // let the test end either way
		sub.waitTerminal(t, ack.TurnID)
		t.Fatalf("replayed rejected interrupt was accepted (%s): it cancelled a turn that started after the original command", resp)
	}
	var again *msp.Error
	if !errors.As(err, &again) || again.Data.Reason != first.Data.Reason || again.Code != first.Code {
		t.Fatalf("replay got %v, want the first rejection %v", err, first)
	}
	interrupt(t, m, sid)
	sub.waitTerminal(t, ack.TurnID)
}

// TestSessionIDConflictUnderConcurrency: §5 item 10 — a session/start
// naming an existing sessionId is refused session_id_conflict. The check
// (store.Session) and the write (an upsert) are not atomic and hold no
// lock keyed by sessionId, so concurrent starts of one id with different
// commandIds all succeed: each is acked, each broadcasts session/started,
// and the last upsert silently overwrites the others' session row.
func TestSessionIDConflictUnderConcurrency(t *testing.T) {
	st := openStore(t)
	m := newManager(t, st, newHistModel(), mgrOpts{})
	for round := 0; round < 10; round++ {
		sid := uuid.Must(uuid.NewV7()).String()
		const n = 8
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := 0
		start := make(chan struct{})
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				raw := mustJSON(msp.SessionStartParams{CommandID: uuid.Must(uuid.NewV7()).String(), SessionID: sid})
				if _, _, err := m.StartSession(context.Background(), newRecSub(), raw); err == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		if ok != 1 {
			t.Fatalf("round %d: %d concurrent session/start calls for sessionId %s succeeded, want exactly 1 (the rest session_id_conflict)", round, ok, sid)
		}
	}
}

// TestOutboundFramesStayUnderTheFrameCap: §1.2/§5 item 2 — "never
// emit a frame over the cap (10 MiB)". Events are encoded with
// json.Marshal, which HTML-escapes '<', '>' and '&' to six bytes each, and
// nothing bounds the size of an event. A turn/start whose input is 2 MiB of
// '<' (a 2 MiB inbound frame, a fifth of the cap) produces a ~12 MiB
// userMessage item/completed frame (and the echoed answer another), which
// a client with the standard 10 MiB read limit cannot receive: it drops the
// connection, reconnects, replays the same frame, and drops again.
func TestOutboundFramesStayUnderTheFrameCap(t *testing.T) {
	st := openStore(t)
	m := newManager(t, st, newHistModel(), mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	ack := startTurn(t, m, textTurn(sid, strings.Repeat("<", 2<<20)))
	sub.waitTerminal(t, ack.TurnID)
	const frameCap = 10 << 20
	for _, n := range sub.all() {
		if len(n.Frame) > frameCap {
			t.Fatalf("%s frame of %d bytes exceeds the %d-byte frame cap (input was %d bytes)", n.Method, len(n.Frame), frameCap, 2<<20)
		}
	}
}

// TestRecoveredItemMatchesItsDeltas: §5 item 15 — an item/completed
// carries the full text, equal to the concatenated deltas unless
// truncated is set. After a crash mid-stream, recovery closes the open
// agentMessage as failed with the text of its item/started ("") — the
// deltas were never durable — and without truncated, so a client that saw
// "working" streamed is told authoritatively that the item's text is "".
func TestRecoveredItemMatchesItsDeltas(t *testing.T) {
	st := openStore(t)
	cs := &crashStore{Store: st}
	model := newHistModel()
	m1 := newManager(t, cs, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m1, sub)
	startTurn(t, m1, textTurn(sid, "block")) // streams "working", then waits
	model.waitStarted(t, "block")
	streamed := ""
	for _, n := range sub.all() {
		if n.Method == msp.NotifyItemDelta {
			streamed += params[msp.ItemDeltaParams](t, n.Frame).Delta
		}
	}
	cs.dead.Store(true) // the process dies
	m1.Close()

	newManager(t, st, model, mgrOpts{})
	for _, r := range records(t, st, sid) {
		if r.Method != msp.NotifyItemCompleted {
			continue
		}
		it := recordParams[msp.ItemParams](t, r).Item
		if it.Kind != msp.ItemAgentMessage {
			continue
		}
		if it.Text == nil || (*it.Text != streamed && !it.Truncated) {
			t.Fatalf("recovered item text %q, truncated %v; the client saw %q streamed", deref(it.Text), it.Truncated, streamed)
		}
		return
	}
	t.Fatal("recovery closed no agentMessage")
}
