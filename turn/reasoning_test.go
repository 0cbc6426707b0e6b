package turn_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/turn"
	"mspd/turn/turntest"
)

// reasons streams parts as the response's reasoning (each a part, in
// order), then answers with text (none: calls cs), returning blocks as
// its reasoning.
func reasons(parts []string, blocks []provider.Reasoning, text string, cs ...provider.ToolCall) reply {
	return func(_ context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
		rp := provider.NewReasoningParts(req)
		for i, p := range parts {
			for _, w := range strings.SplitAfter(p, " ") {
				rp.Add(string(rune('a'+i)), w)
			}
		}
		if text != "" {
			onText(text)
		}
		resp := provider.Response{FinishReason: provider.FinishStop, Usage: &provider.Usage{InputTokens: 10, OutputTokens: 9, ReasoningTokens: 6},
			Reasoning: blocks}
		if len(cs) > 0 {
			resp.FinishReason, resp.ToolCalls = provider.FinishToolCalls, cs
		}
		return resp, nil
	}
}

// itemsOf are the items of kind in the events of method, in order.
func itemsOf(h *harness, method, kind string) []msp.Item {
	var out []msp.Item
	for _, p := range turntest.Of[*msp.ItemParams](h.sink, method) {
		if p.Item.Kind == kind {
			out = append(out, p.Item)
		}
	}
	return out
}

// TestReasoningStreamsIntoItsOwnItem: reasoning opens a reasoning item
// (durable) before the answer's, streams into its summary parts
// (item/delta fields summary.0, summary.1), and completes — durably — as
// the answer begins, before the answer item opens; the answer's text is
// the answer alone; the turn's effort reaches the request; reasoning
// tokens reach session/tokenUsage and turn/completed's usage.
func TestReasoningStreamsIntoItsOwnItem(t *testing.T) {
	h := newHarness(t, nil, reasons([]string{"First I add.", "Then I check."}, nil, "Four."))
	sp := spec()
	sp.ReasoningEffort = msp.EffortHigh
	o := h.run(t, context.Background(), sp, nil)
	if o.Completed.Terminal != msp.TerminalCompleted || o.Answer != "Four." {
		t.Fatalf("terminal %+v answer %q", o.Completed, o.Answer)
	}
	if got := h.model.requests()[0].ReasoningEffort; got != msp.EffortHigh {
		t.Errorf("request effort %q", got)
	}
	if got, want := h.sink.Methods(), "item/started, item/delta, item/completed, item/started, item/delta, item/completed, session/tokenUsage"; got != want {
		t.Errorf("events\n got %s\nwant %s", got, want)
	}
	id := turn.ReasoningItemID("t1", 1, 0)
	var fields []string
	var summary [2]strings.Builder
	for _, e := range h.sink.Events() {
		if e.Method == msp.NotifyItemDelta && e.ItemID == id {
			fields = append(fields, e.Field)
			n, err := msp.ParseField(e.Field)
			if err != nil || n < 0 || n > 1 {
				t.Fatalf("delta field %q", e.Field)
			}
			summary[n].WriteString(e.Delta)
		}
	}
	if !slices.Equal(slices.Compact(fields), []string{"summary.0", "summary.1"}) {
		t.Errorf("reasoning delta fields %q", fields)
	}
	started, done := itemsOf(h, msp.NotifyItemStarted, msp.ItemReasoning), itemsOf(h, msp.NotifyItemCompleted, msp.ItemReasoning)
	if len(started) != 1 || len(done) != 1 || started[0].ItemID != id || started[0].Status != msp.ItemInProgress || started[0].RecordedAt == "" {
		t.Fatalf("reasoning items: started %+v completed %+v", started, done)
	}
	d := done[0]
	if d.Status != msp.ItemCompleted || !slices.Equal(d.Summary, []string{"First I add.", "Then I check."}) || d.Text != nil || d.Revision != 2 {
		t.Errorf("completed reasoning item %+v", d)
	}
	if summary[0].String() != d.Summary[0] || summary[1].String() != d.Summary[1] {
		t.Errorf("deltas %q %q do not concatenate to the summary %q", summary[0].String(), summary[1].String(), d.Summary)
	}
	answers := itemsOf(h, msp.NotifyItemCompleted, msp.ItemAgentMessage)
	if len(answers) != 1 || *answers[0].Text != "Four." || h.sink.Text(turn.AnswerItemID("t1", 1)) != "Four." {
		t.Errorf("answer items %+v", answers)
	}
	if u := o.Completed.Usage; u == nil || u.ReasoningTokens != 6 {
		t.Errorf("turn usage %+v", u)
	}
	if u := turntest.Of[*msp.SessionTokenUsageParams](h.sink, msp.NotifySessionTokenUsage); len(u) != 1 || u[0].Usage.ReasoningTokens != 6 {
		t.Errorf("session/tokenUsage %+v", u)
	}
	if o.Completed.TimeToFirstTokenMs == nil {
		t.Error("no time to first token: reasoning is the first output")
	}
}

// TestReasoningOfAToolStepGoesBack: a step that reasons and calls tools
// completes its reasoning item before its calls are recorded, writes what
// the provider needs back (the signed block, not the unsigned one) as a
// hidden turn.MethodReasoning record in the same write as the calls, and
// sends it back in the next step's request, in the step's assistant
// message; the turn's messages keep it for the session, which drops it at
// the turn's end.
func TestReasoningOfAToolStepGoesBack(t *testing.T) {
	signed := provider.Reasoning{Kind: provider.ReasoningThinking, Text: "I need the file.", Signature: "sig-1"}
	shown := provider.Reasoning{Kind: provider.ReasoningText, Text: "only shown"}
	h := newHarness(t, nil,
		reasons([]string{"I need the file."}, []provider.Reasoning{signed, shown}, "", call("c1", "files", "read", `{"path":"a"}`)),
		ok("Done."))
	sp := spec()
	sp.Tools = newToolbox(h.sink, echoTool("files", "read", true))
	o := h.run(t, context.Background(), sp, nil)
	if o.Completed.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %+v; events %s", o.Completed, h.sink.Methods())
	}
	var order []string
	var record *turn.ReasoningRecord
	for _, e := range h.sink.Events() {
		switch p := e.Params.(type) {
		case *msp.ItemParams:
			order = append(order, e.Method+" "+p.Item.Kind)
		case *turn.ReasoningRecord:
			order, record = append(order, e.Method), p
		}
	}
	want := []string{"item/started reasoning", "item/completed reasoning", turn.MethodReasoning, "item/started toolCall", "item/completed toolCall",
		"item/started agentMessage", "item/completed agentMessage"}
	if !slices.Equal(order, want) {
		t.Fatalf("events\n got %q\nwant %q", order, want)
	}
	if record == nil || record.ItemID != turn.ReasoningItemID("t1", 1, 0) || !reflect.DeepEqual(record.Blocks, []provider.Reasoning{signed}) {
		t.Fatalf("reasoning record %+v", record)
	}
	// The record is in the write that records the calls, with the
	// next step's checkpoint.
	for _, e := range h.sink.Events() {
		if e.Method == msp.NotifyItemStarted && e.Checkpoint != nil {
			break
		}
		if e.Method == turn.MethodReasoning && e.Checkpoint != nil {
			t.Error("the reasoning record ends a write of its own")
		}
	}
	reqs := h.model.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	step := reqs[1].Messages[1]
	if step.Role != provider.RoleAssistant || len(step.ToolCalls) != 1 || !reflect.DeepEqual(step.Reasoning, []provider.Reasoning{signed}) {
		t.Errorf("the step as sent back: %+v", step)
	}
	if len(reqs[0].Messages) != 1 || reqs[0].Messages[0].Reasoning != nil {
		t.Errorf("first request %+v", reqs[0].Messages)
	}
	if m := o.Messages[0]; !reflect.DeepEqual(m.Reasoning, []provider.Reasoning{signed}) {
		t.Errorf("outcome's step message %+v", m)
	}
}

// TestReasoningUnseenStillGetsItsItem: a response whose reasoning the
// provider returned only redacted gets an empty, completed reasoning
// item, and a failed attempt's reasoning item closes failed.
func TestReasoningUnseenStillGetsItsItem(t *testing.T) {
	redacted := provider.Reasoning{Kind: provider.ReasoningRedacted, Data: "opaque"}
	h := newHarness(t, nil,
		func(_ context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
			provider.NewReasoningParts(req).Add("x", "thinking… ")
			return provider.Response{}, status(503)
		},
		reasons(nil, []provider.Reasoning{redacted}, "Answer."))
	o := h.run(t, context.Background(), spec(), nil)
	if o.Completed.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %+v", o.Completed)
	}
	done := itemsOf(h, msp.NotifyItemCompleted, msp.ItemReasoning)
	if len(done) != 2 {
		t.Fatalf("reasoning items completed: %+v", done)
	}
	if done[0].ItemID != turn.ReasoningItemID("t1", 1, 0) || done[0].Status != msp.ItemFailed || !slices.Equal(done[0].Summary, []string{"thinking… "}) {
		t.Errorf("the failed attempt's reasoning %+v", done[0])
	}
	if done[1].ItemID != turn.ReasoningItemID("t1", 2, 0) || done[1].Status != msp.ItemCompleted || len(done[1].Summary) != 0 {
		t.Errorf("the unseen reasoning's item %+v", done[1])
	}
}

// TestHiddenReasoningOpensBeforeTheAnswer: a provider that reports
// reasoning showing no text (ReasoningParts.Hidden) gets its empty
// reasoning item opened then, so that it comes before the answer, and
// completed as the answer begins.
func TestHiddenReasoningOpensBeforeTheAnswer(t *testing.T) {
	redacted := provider.Reasoning{Kind: provider.ReasoningRedacted, Data: "opaque"}
	h := newHarness(t, nil, func(_ context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
		provider.NewReasoningParts(req).Hidden("")
		onText("Answer.")
		return provider.Response{FinishReason: provider.FinishStop, Usage: usage(1, 1), Reasoning: []provider.Reasoning{redacted}}, nil
	})
	h.run(t, context.Background(), spec(), nil)
	var got []string
	for _, e := range h.sink.Events() {
		if p, ok := e.Params.(*msp.ItemParams); ok {
			got = append(got, e.Method+" "+p.Item.Kind)
		}
	}
	want := []string{"item/started reasoning", "item/completed reasoning", "item/started agentMessage", "item/completed agentMessage"}
	if !slices.Equal(got, want) {
		t.Errorf("items\n got %q\nwant %q", got, want)
	}
	if done := itemsOf(h, msp.NotifyItemCompleted, msp.ItemReasoning); len(done) != 1 || len(done[0].Summary) != 0 || done[0].Status != msp.ItemCompleted {
		t.Errorf("reasoning item %+v", done)
	}
}
