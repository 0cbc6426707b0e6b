package e2e

import (
	"strings"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/demo"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// TestDemoCallsTheBuiltInCalculator: `go run ./cmd/mspd` shows a tool
// call with no network — the demo model asks mspd's built-in calculator,
// the call is a toolCall item recorded before it runs, and the answer
// comes from its result in a second step, both requests counted.
func TestDemoCallsTheBuiltInCalculator(t *testing.T) {
	d := startDaemon(t, daemon.Config{Provider: "demo", Demo: demo.Config{WordDelay: demo.NoDelay, Seed: 3}})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})
	start, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID
	ack, err := c.StartTurn(ctx, sid, "What is (2+3)*4?")
	if err != nil {
		t.Fatal(err)
	}
	events, err := c.WaitTurn(ctx, ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	var started, completed []msp.Item
	at := map[string]int{}
	for i, e := range events {
		if e.Method != msp.NotifyItemStarted && e.Method != msp.NotifyItemCompleted {
			continue
		}
		it := decode[msp.ItemParams](t, e).Item
		if it.Kind != msp.ItemToolCall {
			continue
		}
		at[e.Method] = i
		if e.Method == msp.NotifyItemStarted {
			started = append(started, it)
		} else {
			completed = append(completed, it)
		}
	}
	if len(started) != 1 || len(completed) != 1 {
		t.Fatalf("%d toolCall items started, %d completed: %s", len(started), len(completed), compact(methods(events)))
	}
	s, c1 := started[0], completed[0]
	if s.Tool != "calculator" || s.Server != "builtin" || s.Args == nil || *s.Args != `{"expression":"(2+3)*4"}` || s.Status != msp.ItemInProgress {
		t.Errorf("started %+v", s)
	}
	if c1.ItemID != s.ItemID || c1.Status != msp.ItemCompleted || c1.VisibleOutput == nil || strings.TrimSpace(*c1.VisibleOutput) != "20" {
		t.Errorf("completed %+v", c1)
	}
	done := decode[msp.TurnCompletedParams](t, events[len(events)-1])
	if done.Terminal != msp.TerminalCompleted || done.Attempts == nil || done.Attempts.Count != 2 {
		t.Fatalf("terminal %s", events[len(events)-1].Params)
	}

	// A reader that comes later reads the same call back from the log.
	snap, err := dial(t, d.URL(), client.Options{}).Resume(ctx, sid, nil)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var answer string
	for _, it := range snap.History.Items {
		kinds = append(kinds, it.Kind)
		if it.Kind == msp.ItemAgentMessage && it.Status == msp.ItemCompleted && it.Text != nil {
			answer = *it.Text
		}
	}
	if strings.Join(kinds, ",") != "userMessage,agentMessage,toolCall,agentMessage" || answer != "The calculator says 20." {
		t.Errorf("items %v, answer %q", kinds, answer)
	}
}

// TestStepLimit: a model that keeps calling tools ends the turn at the
// step limit, typed stepLimit — the server's --max-steps, or lower where
// the turn asks (maxSteps on turn/start, never higher); every request of
// every step counted.
func TestStepLimit(t *testing.T) {
	d := startDaemon(t, daemon.Config{Provider: "scripted", Tools: daemon.Tools{MaxSteps: 3}})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})
	sid := newSession(t, c)
	call := scripted.Step{Calls: []scripted.Call{{Name: "builtin__calculator", Args: `{"expression":"1+1"}`}}}
	script := scripted.Script(call, call, call, call, scripted.Step{Text: "never reached"})
	for _, c1 := range []struct {
		maxSteps *int
		want     int
	}{{nil, 3}, {ptr(2), 2}, {ptr(9), 3}} {
		ack, err := c.StartTurnWith(ctx, msp.TurnStartParams{SessionID: sid, MaxSteps: c1.maxSteps,
			Input: []msp.TurnInputPart{{Type: "text", Text: script}}})
		if err != nil {
			t.Fatal(err)
		}
		events, err := c.WaitTurn(ctx, ack.TurnID)
		if err != nil {
			t.Fatal(err)
		}
		done := decode[msp.TurnCompletedParams](t, events[len(events)-1])
		calls := 0
		for _, n := range only(events, msp.NotifyItemCompleted) {
			if decode[msp.ItemParams](t, n).Item.Kind == msp.ItemToolCall {
				calls++
			}
		}
		if done.Terminal != msp.TerminalFailed || done.Error == nil || done.Error.Kind != msp.TurnErrorStepLimit ||
			done.Attempts.Count != c1.want || calls != c1.want-1 {
			t.Errorf("maxSteps %v: %s after %d calls; want stepLimit after %d requests", c1.maxSteps, events[len(events)-1].Params, calls, c1.want)
		}
	}
}
