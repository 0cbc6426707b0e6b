package session

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/store"
)

// TestFoldTagsCallsWithTheProviderThatMadeThem: a turn that fell back
// mid-way (a turn/modelRetryScheduled with nextProviderId, a
// turn/providerSkipped) made its later tool calls through the fallback;
// the fold tags them so, and the next turn starts from the session's
// provider again.
func TestFoldTagsCallsWithTheProviderThatMadeThem(t *testing.T) {
	st := openStore(t)
	sid := "s-fold"
	turnID := "t1"
	call := func(id string) json.RawMessage {
		args := "{}"
		b, _ := json.Marshal(msp.ItemParams{Item: msp.Item{ItemID: id, Kind: msp.ItemToolCall, Revision: 1,
			Status: msp.ItemInProgress, TurnID: &turnID, Tool: "echo", Server: "srv", CallID: id, Args: &args}})
		return b
	}
	params := func(v any) json.RawMessage {
		b, _ := json.Marshal(v)
		return b
	}
	recs := []store.Record{
		{Method: msp.NotifyTurnStarted, Params: params(msp.TurnStartedParams{CommandID: turnID, TurnID: turnID})},
		{Method: msp.NotifyItemStarted, Params: call("c1")},
		{Method: msp.NotifyTurnModelRetryScheduled, Params: params(msp.TurnModelRetryScheduledParams{TurnID: turnID, Attempt: 2,
			NextAttempt: 3, MaxAttempts: 10, Fallback: true, NextProviderID: "claude", NextModelID: "claude-x"})},
		{Method: msp.NotifyItemStarted, Params: call("c2")},
		{Method: msp.NotifyTurnStarted, Params: params(msp.TurnStartedParams{CommandID: "t2", TurnID: "t2"})},
		{Method: msp.NotifyItemStarted, Params: call("c3")},
		{Method: msp.NotifyTurnProviderSkipped, Params: params(msp.TurnProviderSkippedParams{TurnID: "t2", ProviderID: "oa",
			Breaker: "open", NextProviderID: "local"})},
		{Method: msp.NotifyItemStarted, Params: call("c4")},
	}
	for i := range recs {
		recs[i].Seq = int64(i + 1)
	}
	now := time.Now()
	if err := st.Commit(context.Background(), store.Batch{SessionID: sid, Records: recs,
		Session: &store.Session{ID: sid, CreatedAt: now, UpdatedAt: now, State: []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	f, err := fold(context.Background(), st, sid, foldSpec{provider: "oa"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"c1": "oa", "c2": "claude", "c3": "oa", "c4": "local"}
	for _, m := range f.history {
		for _, c := range m.ToolCalls {
			if m.Provider != want[c.ID] {
				t.Errorf("call %s tagged %q, want %q", c.ID, m.Provider, want[c.ID])
			}
			delete(want, c.ID)
		}
	}
	if len(want) != 0 {
		t.Errorf("calls missing from the history: %v", want)
	}
}
