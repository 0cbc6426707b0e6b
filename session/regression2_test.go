package session

// Regression tests: each pins a defect a code review found, now fixed.

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/store"
)

// TestReplayedTurnStartLaunchesAnAdmittedTurn: §4.6/§4.9 — a turn/start
// that was admitted must run and settle. StartTurn admits the turn durably
// and leaves the launch (kick) to the caller, to run after the ack is
// queued; the server skips it when the reply cannot be queued (handler.go:
// Reply fails on a connection that shut during the request — write
// timeout, dead peer, ping). The client then does what MSP tells it to do
// and re-sends the same command after reconnecting (web/app.js `unsent`),
// but a replay returns a no-op launch (turns.go: launch only when
// !replayed). Nobody ever kicks the queue: the admitted turn never gets
// turn/started or a terminal, its turn-wait hangs, and the session stays
// busy (never unloaded) until some other turn/start happens to kick it.
func TestReplayedTurnStartLaunchesAnAdmittedTurn(t *testing.T) {
	m := newManager(t, openStore(t), newHistModel(), mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)

	p := textTurn(sid, "hello")
	p.CommandID = cmdID()
	raw := mustJSON(p)
	if _, _, err := m.StartTurn(context.Background(), nil, raw); err != nil {
		t.Fatal(err)
	}
	// The ack could not be sent (the connection shut), so the handler never
	// called launch. The client reconnects and replays the command.
	resp, launch, err := m.StartTurn(context.Background(), nil, raw)
	if err != nil {
		t.Fatal(err)
	}
	launch()
	var ack msp.TurnStartResult
	json.Unmarshal(resp, &ack)

	deadline := time.After(2 * time.Second)
	for {
		for _, n := range sub.all() {
			if n.Method == msp.NotifyTurnCompleted {
				return
			}
		}
		select {
		case <-sub.signal:
		case <-deadline:
			t.Fatalf("turn %s was admitted (ack %s) and its command replayed, but it never started: no turn/started, no terminal", ack.TurnID, resp)
		}
	}
}

// failTerminalOnce fails the first commit that carries a turn/completed.
type failTerminalOnce struct {
	store.Store
	failed atomic.Bool
}

func (f *failTerminalOnce) Commit(ctx context.Context, b store.Batch) error {
	for _, r := range b.Records {
		if r.Method == msp.NotifyTurnCompleted && f.failed.CompareAndSwap(false, true) {
			return errors.New("disk full (once)")
		}
	}
	return f.Store.Commit(ctx, b)
}

// TestTurnWhoseTerminalFailedStillSettles: §4.9 "the server must always
// produce a terminal". When finish cannot append a turn's terminal it
// retires the turn in memory only (turns.go: `s.st = st // the next restart
// settles it from the log`), leaving the store's row busy with the turn
// active. But the next state commit — any later turn/start admission or
// launch — writes the in-memory state (Active nil, Busy false) over that
// row. From then on neither this process nor a restart (BusySessions no
// longer lists the session) ever writes a terminal for the first turn:
// every turn-wait on it hangs forever.
func TestTurnWhoseTerminalFailedStillSettles(t *testing.T) {
	st := openStore(t)
	fs := &failTerminalOnce{Store: st}
	model := newHistModel()
	m1 := newManager(t, fs, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m1, sub)

	first := startTurn(t, m1, textTurn(sid, "one"))
	// The session's worker is done with the first turn once none runs.
	wait, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m1.WaitIdle(wait); err != nil || !fs.failed.Load() {
		t.Fatalf("the first turn never tried to write its terminal (WaitIdle: %v)", err)
	}
	second := startTurn(t, m1, textTurn(sid, "two")) // the store works again
	sub.waitTerminal(t, second.TurnID)
	m1.Close()

	newManager(t, st, model, mgrOpts{}) // restart: recovery settles what it can
	for _, r := range records(t, st, sid) {
		if r.Method == msp.NotifyTurnCompleted && recordParams[msp.TurnCompletedParams](t, r).TurnID == first.TurnID {
			return
		}
	}
	t.Fatalf("turn %s never got a terminal, not even after a restart", first.TurnID)
}

// TestRefusedResumeKeepsTheSubscription: a request that is refused has no
// effect. ResumeSession detaches the caller from the session before it
// asks the ledger (manager.go: `s.detach(sub)` ahead of ledger.run), so a
// resume refused as command_id_conflict (or failing to record) silently
// ends the connection's existing subscription: the error tells the client
// nothing about it, and the session's later events never reach it.
func TestRefusedResumeKeepsTheSubscription(t *testing.T) {
	m := newManager(t, openStore(t), newHistModel(), mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub) // auto-subscribed

	// A resume refused for its cursor (one from another session).
	bad := durableCursor(newID(), newEpoch(), 1)
	_, _, err := m.ResumeSession(context.Background(), sub, mustJSON(msp.SessionResumeParams{CommandID: cmdID(), SessionID: sid, Cursor: &bad}))
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Reason != msp.ReasonMissingAnchor {
		t.Fatalf("resume with a foreign cursor: %v", err)
	}
	startTurn(t, m, textTurn(sid, "x"))
	deadline := time.After(2 * time.Second)
	for {
		for _, n := range sub.all() {
			if n.Method == msp.NotifyTurnCompleted {
				return
			}
		}
		select {
		case <-sub.signal:
		case <-deadline:
			t.Fatal("after a refused session/resume the connection no longer receives the session's events")
		}
	}
}
