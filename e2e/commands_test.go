package e2e

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

func TestCommandReplayIsExactlyOnce(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})

	startParams := msp.SessionStartParams{CommandID: client.NewCommandID()}
	first, err := c.CallRaw(ctx, msp.MethodSessionStart, startParams)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.CallRaw(ctx, msp.MethodSessionStart, startParams)
	if err != nil {
		t.Fatal(err)
	}
	if string(first) != string(again) {
		t.Fatalf("replayed session/start differs:\n%s\n%s", first, again)
	}
	var res msp.SessionStartResult
	json.Unmarshal(first, &res)
	sid := res.Session.SessionID

	conflict := startParams
	conflict.WorkspaceRoot = "/elsewhere"
	_, err = c.CallRaw(ctx, msp.MethodSessionStart, conflict)
	var me *msp.Error
	if !errors.As(err, &me) || me.Code != msp.CodeCommandRejected || me.Data.Reason != msp.ReasonCommandIDConflict || me.Data.CommandID != startParams.CommandID {
		t.Fatalf("conflicting replay: %v", err)
	}

	// A given sessionId that exists is a durable rejection, replayed as such.
	dup := msp.SessionStartParams{CommandID: client.NewCommandID(), SessionID: sid}
	for range 2 {
		_, err = c.CallRaw(ctx, msp.MethodSessionStart, dup)
		if !errors.As(err, &me) || me.Data.Reason != msp.ReasonSessionIDConflict {
			t.Fatalf("existing sessionId: %v", err)
		}
	}

	turn := msp.TurnStartParams{CommandID: client.NewCommandID(), SessionID: sid,
		Input: []msp.TurnInputPart{{Type: "text", Text: scripted.Script(scripted.Step{Text: "once"})}}}
	ack1, err := c.CallRaw(ctx, msp.MethodTurnStart, turn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTurn(ctx, turn.CommandID); err != nil {
		t.Fatal(err)
	}
	ack2, err := c.CallRaw(ctx, msp.MethodTurnStart, turn)
	if err != nil {
		t.Fatal(err)
	}
	if string(ack1) != string(ack2) {
		t.Fatalf("replayed turn/start ack differs:\n%s\n%s", ack1, ack2)
	}
	var page msp.ViewPageResult
	if err := c.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Limit: 100}, &page); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(jsonText(page), `"method":"turn/started"`); n != 1 {
		t.Fatalf("the turn ran %d times", n)
	}
}

func TestQueueUnqueueAndInterrupt(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})
	sid := newSession(t, c)
	c.Next(ctx) // session/started

	slow := scripted.Script(scripted.Step{Text: strings.Repeat("slow ", 200), Chunks: 200, ChunkDelayMs: 20})
	running, err := c.StartTurn(ctx, sid, slow)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.StartTurn(ctx, sid, "second")
	if err != nil {
		t.Fatal(err)
	}
	third, err := c.StartTurn(ctx, sid, "third")
	if err != nil {
		t.Fatal(err)
	}
	if running.Disposition != msp.DispositionStarted || second.Disposition != msp.DispositionQueued || second.StartedNewTurn || third.Disposition != msp.DispositionQueued {
		t.Fatalf("dispositions: %+v %+v %+v", running, second, third)
	}

	var unq msp.CommandAck
	if err := c.Call(ctx, msp.MethodTurnUnqueue, msp.TurnStopParams{CommandID: client.NewCommandID(), SessionID: sid, TurnID: third.TurnID}, &unq); err != nil {
		t.Fatal(err)
	}
	// Wait for output, then interrupt the running turn (naming none).
	for {
		n, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Method == msp.NotifyItemDelta {
			break
		}
	}
	var stop msp.CommandAck
	if err := c.Call(ctx, msp.MethodTurnInterrupt, msp.TurnStopParams{CommandID: client.NewCommandID(), SessionID: sid}, &stop); err != nil {
		t.Fatal(err)
	}
	if stop.TurnID != running.TurnID || stop.Status != msp.StatusAccepted {
		t.Fatalf("interrupt ack: %+v", stop)
	}
	events, err := c.WaitTurn(ctx, second.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, n := range events {
		switch n.Method {
		case msp.NotifyTurnStarted, msp.NotifyTurnCompleted, msp.NotifyTurnUnqueued:
			var p struct {
				TurnID   string `json:"turnId"`
				Terminal string `json:"terminal"`
			}
			json.Unmarshal(n.Params, &p)
			who := map[string]string{running.TurnID: "running", second.TurnID: "second", third.TurnID: "third"}[p.TurnID]
			order = append(order, n.Method+" "+who+" "+p.Terminal)
		}
	}
	want := "turn/unqueued third , turn/completed running cancelled, turn/started second , turn/completed second completed"
	if got := strings.Join(order, ", "); got != want {
		t.Fatalf("order:\n got %s\nwant %s", got, want)
	}
	// The cancelled turn's item closed as cancelled.
	for _, n := range events {
		if n.Method == msp.NotifyItemCompleted {
			it := decode[msp.ItemParams](t, n).Item
			if it.Kind == msp.ItemAgentMessage && *it.TurnID == running.TurnID && it.Status != msp.ItemCancelled {
				t.Errorf("interrupted item status %s", it.Status)
			}
		}
	}
	// Nothing left to stop.
	err = c.Call(ctx, msp.MethodTurnCancel, msp.TurnStopParams{CommandID: client.NewCommandID(), SessionID: sid}, nil)
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Reason != msp.ReasonMissingRun {
		t.Fatalf("cancel with nothing running: %v", err)
	}
}
