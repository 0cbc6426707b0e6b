package session

// Tests of the turn commands (turns.go): admission, replay and refusal.

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"mspd/schema/msp"
)

// TestReplayedTurnStartLaunchesAnAdmittedTurn: §4.6/§4.9 — a turn/start
// that was admitted must run and settle. StartTurn admits the turn durably
// and leaves the launch (kick) to the caller, to run after the ack is
// queued; the server skips it when the reply cannot be queued (handler.go:
// Reply fails on a connection that shut during the request — write
// timeout, dead peer, ping). The client then does what MSP tells it to do
// and re-sends the same command after reconnecting (web/js/rpc.js `outbox`),
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
