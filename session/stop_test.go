package session

import (
	"context"
	"encoding/json"
	"testing"

	"mspd/schema/msp"
)

// TestStopBeforeTheWorkerTakesTheTurn: a turn stopped after its admission
// but before its worker takes it (turn/interrupt from another connection
// while the caller's ack is on its way) starts stopped: it ends
// cancelled, and the model is never asked.
func TestStopBeforeTheWorkerTakesTheTurn(t *testing.T) {
	model := newHistModel()
	m := newManager(t, openStore(t), model, mgrOpts{})
	watcher := newRecSub()
	sid := startSession(t, m, watcher)
	raw, launch, err := m.StartTurn(context.Background(), nil, mustJSON(msp.TurnStartParams{CommandID: cmdID(), SessionID: sid,
		Input: []msp.TurnInputPart{{Type: "text", Text: "block me"}}}))
	if err != nil {
		t.Fatal(err)
	}
	var ack msp.TurnStartResult
	if err := json.Unmarshal(raw, &ack); err != nil {
		t.Fatal(err)
	}
	if _, err := m.StopTurn(context.Background(), msp.MethodTurnInterrupt, mustJSON(msp.TurnStopParams{CommandID: cmdID(), SessionID: sid})); err != nil {
		t.Fatalf("turn/interrupt before the worker: %v", err)
	}
	launch()
	if end := watcher.waitTerminal(t, ack.TurnID); end.Terminal != msp.TerminalCancelled {
		t.Fatalf("a turn stopped before it ran ended %q, want %q", end.Terminal, msp.TerminalCancelled)
	}
	select {
	case text := <-model.started:
		t.Fatalf("the model was asked %q for a turn stopped before it ran", text)
	default:
	}
}
