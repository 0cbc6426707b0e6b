package e2e

import (
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/demo"
	"mspd/schema/msp"
)

// TestDemoShowsRetries: the offline default model with injected faults
// goes through the same retry layer, so `go run ./cmd/mspd --demo-faults`
// shows retry notices before the answer.
func TestDemoShowsRetries(t *testing.T) {
	d := startDaemon(t, daemon.Config{Provider: "demo", Demo: demo.Config{FaultRate: 1, Seed: 7, WordDelay: demo.NoDelay}})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})
	start, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := c.StartTurn(ctx, start.Session.SessionID, "Tell me about retry budgets")
	if err != nil {
		t.Fatal(err)
	}
	events, err := c.WaitTurn(ctx, ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	notices := only(events, msp.NotifyTurnModelRetryScheduled)
	if len(notices) != demo.DefaultMaxFaultAttempt {
		t.Fatalf("%d retry notices: %s", len(notices), compact(methods(events)))
	}
	for i, n := range notices {
		r := decode[msp.TurnModelRetryScheduledParams](t, n)
		if r.Attempt != i+1 || r.System != demo.System || r.ErrorKind == "" {
			t.Errorf("notice %d: %s", i, n.Params)
		}
	}
	done := decode[msp.TurnCompletedParams](t, events[len(events)-1])
	if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 3 || len(only(events, msp.NotifyItemDelta)) < 10 {
		t.Fatalf("terminal: %s", events[len(events)-1].Params)
	}
}
