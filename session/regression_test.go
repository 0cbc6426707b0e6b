package session

// Review tests: each one pins a defect found in review. They are expected to
// FAIL on the reviewed code and pass once the defect is fixed.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
// truncated is set. The answer opens on an ephemeral item/started, so a
// crash mid-stream before its text was first saved leaves no record of
// it; recovery closes it as failed, truncated, by the id its attempt
// gives it (turn.AnswerItemID), before the retry notice: a reader that
// saw it open is not left with an open item for ever. A reader resuming
// from its last delta's cursor is told of the hole (view/gap after that
// cursor), then gets the closed answer, the retry notice and the next
// attempt's answer, at cursors after its own: none handed out before the
// crash comes again.
func TestRecoveredItemMatchesItsDeltas(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	cs := &crashStore{Store: st}
	model := newHistModel()
	frozen := func() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) } // no text checkpoint falls due
	m1 := newManager(t, cs, model, mgrOpts{now: frozen})
	sub := newRecSub()
	sid := startSession(t, m1, sub)
	ack := startTurn(t, m1, textTurn(sid, "crash")) // streams "working", then hangs
	model.waitStarted(t, "crash")
	var last, cut string
	for _, n := range sub.all() {
		switch n.Method {
		case msp.NotifyItemDelta:
			last = n.Cursor
		case msp.NotifyItemStarted:
			cut = params[msp.ItemParams](t, n.Frame).Item.ItemID
		}
	}
	if last == "" || cut == "" {
		t.Fatal("no answer streamed")
	}
	cs.dead.Store(true) // the process dies
	m1.Close()

	m2 := newManager(t, st, model, mgrOpts{now: frozen})
	sub2 := newRecSub()
	if err := m2.attach(ctx, sub2, sid, last); err != nil {
		t.Fatalf("resuming from the last delta's cursor %s: %v", last, err)
	}
	done := sub2.waitTerminal(t, ack.TurnID)
	if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 2 {
		t.Fatalf("resumed turn: %+v", done)
	}
	got := sub2.all()
	want := []string{msp.NotifyViewGap, msp.NotifyItemCompleted, msp.NotifyTurnRetryScheduled}
	if len(got) < 3 || !slices.Equal(methodsOf(got[:3]), want) {
		t.Fatalf("after the crash the reader got %v, want %v first", methodsOf(got), want)
	}
	if g := params[msp.ViewGapParams](t, got[0].Frame); g.After != last || g.Next != got[1].Cursor {
		t.Fatalf("gap %+v, want after %s, next %s", g, last, got[1].Cursor)
	}
	if it := params[msp.ItemParams](t, got[1].Frame).Item; it.ItemID != cut || it.Status != msp.ItemFailed || !it.Truncated || it.Kind != msp.ItemAgentMessage {
		t.Fatalf("the cut answer closed as %+v, want %s failed and truncated", it, cut)
	}
	prev, _ := parseCursor(last)
	for _, n := range got[1:] {
		c, err := parseCursor(n.Cursor)
		if err != nil || !prev.before(c) {
			t.Fatalf("%s at %s after %s; all: %v %v", n.Method, n.Cursor, prev, methodsOf(got), cursorsOf(got))
		}
		prev = c
	}
	for _, r := range records(t, st, sid) {
		switch r.Method {
		case msp.NotifyItemStarted, msp.NotifyItemUpdated:
			t.Fatalf("the log holds a %s of an answer", r.Method)
		case msp.NotifyItemCompleted:
			it := recordParams[msp.ItemParams](t, r).Item
			if it.Kind == msp.ItemAgentMessage && it.ItemID != cut && deref(it.Text) != "re: crash" {
				t.Fatalf("an answer %q (%s) in the log; only the cut one, closed, and the second attempt's should be", deref(it.Text), it.Status)
			}
		}
	}
}

func methodsOf(ns []Notification) []string {
	ms := make([]string, len(ns))
	for i, n := range ns {
		ms[i] = n.Method
	}
	return ms
}

func cursorsOf(ns []Notification) []string {
	cs := make([]string, len(ns))
	for i, n := range ns {
		cs[i] = n.Cursor
	}
	return cs
}
