package turn_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"mspd/modelretry"
	"mspd/provider"
	"mspd/schema/msp"
	"mspd/turn"
	"mspd/turn/turntest"
)

// windowHarness is a harness whose model has a context window of window
// tokens (0: unknown).
func windowHarness(t *testing.T, window int, replies ...reply) *harness {
	t.Helper()
	h := newHarness(t, nil, replies...)
	h.runner = turn.NewRunner(turn.Config{
		Model: h.model, Engine: h.engine(), Policy: h.opts.policy, DefaultMaxTokens: 1000, ModelMaxTokens: 4000,
		Models: func(string) provider.ModelInfo {
			return provider.ModelInfo{Capabilities: provider.Capabilities{Tools: true, ContextWindow: window}}
		},
	})
	return h
}

// chatSpec is a turn after one completed turn t0 of two messages: the cut
// falls after them.
func chatSpec(used int64, window int) turn.Spec {
	sp := spec()
	sp.History = []provider.Message{
		{Role: provider.RoleUser, Text: "What is the capital of France?"},
		{Role: provider.RoleAssistant, Text: "Paris."},
		{Role: provider.RoleUser, Text: "hello"},
	}
	sp.Context = turn.Context{Cut: &turn.Cut{At: 2, Through: "t0"}}
	if used > 0 {
		w := int64(window)
		sp.Context.Usage = &msp.ContextUsage{Pressure: turn.Pressure(used, window), UsedTokens: used, WindowTokens: &w}
	}
	return sp
}

func compactions(h *harness) []msp.Item {
	var out []msp.Item
	for _, it := range completedItems(h) {
		if it.Kind == msp.ItemCompaction {
			out = append(out, it)
		}
	}
	return out
}

func contextUsages(h *harness) []msp.ContextUsage {
	var out []msp.ContextUsage
	for _, p := range turntest.Of[*msp.SessionContextUsageParams](h.sink, msp.NotifySessionContextUsage) {
		out = append(out, p.ContextUsage)
	}
	return out
}

// TestPressure: the thresholds, inclusive, and an unknown window.
func TestPressure(t *testing.T) {
	for _, c := range []struct {
		used   int64
		window int
		want   string
	}{
		{0, 1000, msp.PressureNormal}, {799, 1000, msp.PressureNormal}, {800, 1000, msp.PressureWarning},
		{949, 1000, msp.PressureWarning}, {950, 1000, msp.PressureBlocked}, {5000, 1000, msp.PressureBlocked},
		{1 << 40, 0, msp.PressureNormal},
	} {
		if got := turn.Pressure(c.used, c.window); got != c.want {
			t.Errorf("Pressure(%d, %d) = %s, want %s", c.used, c.window, got, c.want)
		}
	}
}

// TestCompactsBeforeARequestAtWarning: a session whose last request filled
// 85% of the window compacts before the turn's request: one summarising
// request (mspd's instructions, the earlier turn quoted, not this turn's
// message), then the turn's request with the summary and this turn only.
// The compaction item carries its sizes, boundary and summary; the context
// shrinks (session/contextUsage); both requests count.
func TestCompactsBeforeARequestAtWarning(t *testing.T) {
	h := windowHarness(t, 1000, ok("The user asked for France's capital: Paris."), answer("Hi!", provider.FinishStop, usage(60, 3)))
	o := h.run(t, context.Background(), chatSpec(850, 1000), nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 2)
	reqs := h.model.requests()
	sum := reqs[0]
	if sum.Instructions != turn.SummaryInstructions || len(sum.Messages) != 1 || len(sum.Tools) != 0 || sum.MaxTokens != 256 {
		t.Fatalf("summary request %s", js(sum))
	}
	q := sum.Messages[0].Text
	if !strings.Contains(q, "<conversation>\nUser: What is the capital of France?\nAssistant: Paris.\n</conversation>") || strings.Contains(q, "hello") {
		t.Fatalf("summary request quotes\n%s", q)
	}
	want := []provider.Message{turn.SummaryMessage("The user asked for France's capital: Paris."), {Role: provider.RoleUser, Text: "hello"}}
	if !reflect.DeepEqual(reqs[1].Messages, want) {
		t.Fatalf("the turn's request sent %s, want %s", js(reqs[1].Messages), js(want))
	}
	items := compactions(h)
	if len(items) != 1 {
		t.Fatalf("compaction items %s", js(items))
	}
	it := items[0]
	if it.Outcome != msp.CompactionCompacted || it.Trigger != msp.CompactionAuto || it.SummarizedThrough != "t0" ||
		*it.Text != "The user asked for France's capital: Paris." || *it.TokensBefore != 850 || *it.TokensAfter >= 850 || it.Status != msp.ItemCompleted {
		t.Fatalf("compaction item %s", js(it))
	}
	if got := h.sink.Methods(); !strings.HasPrefix(got, "item/started, session/tokenUsage, item/completed, session/contextUsage, item/started") {
		t.Fatalf("events %s", got)
	}
	cu := contextUsages(h)
	if len(cu) != 2 || cu[0].UsedTokens != *it.TokensAfter || cu[1].UsedTokens != 63 || cu[1].Pressure != msp.PressureNormal || *cu[1].WindowTokens != 1000 {
		t.Fatalf("context usages %s", js(cu))
	}
	if len(o.Messages) != 1 || o.Messages[0].Text != "Hi!" {
		t.Fatalf("the turn adds %s", js(o.Messages))
	}
}

// TestNoCompactionBelowWarning: under 80% nothing is compacted, and a
// triple that did not change is not told again.
func TestNoCompactionBelowWarning(t *testing.T) {
	h := windowHarness(t, 1000, ok("Hi!"))
	sp := chatSpec(15, 1000)
	o := h.run(t, context.Background(), sp, nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 1)
	if len(compactions(h)) != 0 || len(h.model.requests()[0].Messages) != 3 {
		t.Fatalf("compacted below the warning level: %s", h.sink.Methods())
	}
	if cu := contextUsages(h); len(cu) != 0 {
		t.Fatalf("an unchanged triple was told again: %s", js(cu))
	}
}

// tooLong is OpenAI's refusal of a prompt that does not fit.
var tooLong = &provider.Error{Kind: modelretry.KindContextLengthExceeded, HTTPStatus: 400,
	Message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens."}

// TestCompactsWhenThePromptIsTooLong: the provider refuses the request as
// too long; the context is compacted and the refused attempt re-runs as a
// turn-layer retry whose reason names the compaction; every request
// counts: 3.
func TestCompactsWhenThePromptIsTooLong(t *testing.T) {
	h := windowHarness(t, 0, fail(tooLong, nil), ok("Summary."), ok("Hi!"))
	o := h.run(t, context.Background(), chatSpec(0, 0), nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 3)
	notices := turnNotices(h)
	if len(notices) != 1 || notices[0].Attempt != 1 || notices[0].NextAttempt != 2 || !strings.HasPrefix(notices[0].Reason, "context compacted: 130k → ") {
		t.Fatalf("notices %s", js(notices))
	}
	it := compactions(h)[0]
	if *it.TokensBefore != 130000 || it.Outcome != msp.CompactionCompacted {
		t.Fatalf("compaction item %s", js(it))
	}
	reqs := h.model.requests()
	if len(reqs[2].Messages) != 2 || reqs[2].Messages[0].Text != turn.SummaryPreamble+"Summary." || reqs[2].Attempt != 3 {
		t.Fatalf("re-run sent %s", js(reqs[2]))
	}
	if got := h.sink.Methods(); got != "item/started, session/tokenUsage, item/completed, turn/retryScheduled, item/started, item/delta, item/completed, session/tokenUsage" {
		t.Fatalf("events %s", got)
	}
}

// TestTooLongWithNothingToCompact: the turn's own messages alone are too
// long: no compaction, and the turn fails with the provider's error,
// typed.
func TestTooLongWithNothingToCompact(t *testing.T) {
	h := windowHarness(t, 0, fail(tooLong, nil))
	sp := chatSpec(0, 0)
	sp.Context.Cut = nil
	o := h.run(t, context.Background(), sp, nil)
	wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorModel, 1)
	if e := o.Completed.Error; e.ErrorKind != modelretry.KindContextLengthExceeded || e.HTTPStatus != 400 {
		t.Fatalf("error %s", js(e))
	}
	if len(startedItems(h)) != 0 {
		t.Fatalf("events %s", h.sink.Methods())
	}
}

// TestFailedCompactionFailsWithTheOriginalError: the summarising call
// fails once (a 500, retried with its notice) and then for good (a 400):
// the compaction ends failed, and the turn fails with the provider's
// contextLengthExceeded, never trying again. Every request counts: 3.
func TestFailedCompactionFailsWithTheOriginalError(t *testing.T) {
	h := windowHarness(t, 0, fail(tooLong, nil), fail(status(500), nil), fail(status(400), nil))
	o := h.run(t, context.Background(), chatSpec(0, 0), nil)
	wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorModel, 3)
	if e := o.Completed.Error; e.ErrorKind != modelretry.KindContextLengthExceeded {
		t.Fatalf("error %s", js(e))
	}
	it := compactions(h)[0]
	if it.Outcome != msp.CompactionFailed || it.Status != msp.ItemFailed || it.Text != nil || it.FailureReason == "" {
		t.Fatalf("compaction item %s", js(it))
	}
	if n := modelNotices(h); len(n) != 1 || n[0].HTTPStatus != 500 || n[0].Attempt != 1 {
		t.Fatalf("the summarising call's notices %s", js(n))
	}
	if len(h.model.requests()) != 3 {
		t.Fatalf("%d requests", len(h.model.requests()))
	}
}

// TestCompactTurn: session/compact's turn is the compaction alone: one
// request, completed, the item compacted and nothing added to the
// history; with nothing to compact it completes noop with no request.
func TestCompactTurn(t *testing.T) {
	h := windowHarness(t, 1000, ok("Summary."))
	sp := chatSpec(0, 1000)
	sp.History, sp.Compact = sp.History[:2], msp.CompactionManual
	o := h.run(t, context.Background(), sp, nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 1)
	it := compactions(h)[0]
	if it.Trigger != msp.CompactionManual || it.Outcome != msp.CompactionCompacted || len(o.Messages) != 0 {
		t.Fatalf("compaction item %s, messages %s", js(it), js(o.Messages))
	}

	h = windowHarness(t, 1000)
	sp.Context.Cut = nil
	o = h.run(t, context.Background(), sp, nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 0)
	if it := compactions(h)[0]; it.Outcome != msp.CompactionNoop || it.Status != msp.ItemCompleted {
		t.Fatalf("compaction item %s", js(it))
	}
}

// TestCompactTurnOnATextModel: a compaction's turn has no message of its
// own: a text-only model compacts a history whose last message had
// images, quoting them as a count.
func TestCompactTurnOnATextModel(t *testing.T) {
	h := windowHarness(t, 1000, ok("Summary."))
	h.runner = turn.NewRunner(turn.Config{Model: h.model, Engine: h.engine(), Policy: h.opts.policy,
		Models: func(string) provider.ModelInfo {
			return provider.ModelInfo{Capabilities: provider.Capabilities{ContextWindow: 1000}}
		}})
	sp := chatSpec(0, 1000)
	sp.History = []provider.Message{{Role: provider.RoleUser, Text: "What is this?", Images: []provider.Image{{MediaType: "image/png", Ref: "r1", Size: 10}}},
		{Role: provider.RoleAssistant, Text: "A square."}}
	sp.Compact = msp.CompactionManual
	o := h.run(t, context.Background(), sp, nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 1)
	if q := h.model.requests()[0].Messages[0].Text; !strings.Contains(q, "User: What is this? [1 image(s)]\nAssistant: A square.") {
		t.Fatalf("summary request quotes\n%s", q)
	}
}

// TestCompactTurnCancelled: a user's stop during the summarising request
// ends the compaction and its turn cancelled.
func TestCompactTurnCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h := windowHarness(t, 1000, func(ctx context.Context, _ provider.Request, _ func(string)) (provider.Response, error) {
		cancel()
		<-ctx.Done()
		return provider.Response{}, ctx.Err()
	})
	sp := chatSpec(0, 1000)
	sp.Compact = msp.CompactionManual
	o := h.run(t, ctx, sp, nil)
	wantTerminal(t, o, msp.TerminalCancelled, "", 1)
	if it := compactions(h)[0]; it.Outcome != msp.CompactionCancelled || it.Status != msp.ItemCancelled {
		t.Fatalf("compaction item %s", js(it))
	}
}

// TestSummaryQuotesToolCalls: the summarising request quotes a turn's
// tool calls and results as lines (no tool blocks, so any model takes
// it), and the request after it keeps the turn under way whole.
func TestSummaryQuotesToolCalls(t *testing.T) {
	h := windowHarness(t, 1000, ok("Summary."), ok("Hi!"))
	sp := chatSpec(900, 1000)
	sp.History = []provider.Message{
		{Role: provider.RoleUser, Text: "What is 2+2?"},
		{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{{ID: "call_1", Name: "builtin__calculator", Args: `{"expression":"2+2"}`}}},
		{Role: provider.RoleTool, ToolResults: []provider.ToolResult{{CallID: "call_1", Name: "builtin__calculator", Text: "4"}}},
		{Role: provider.RoleAssistant, Text: "4."},
		{Role: provider.RoleUser, Text: "hello"},
	}
	sp.Context.Cut = &turn.Cut{At: 4, Through: "t0"}
	o := h.run(t, context.Background(), sp, nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 2)
	reqs := h.model.requests()
	want := "<conversation>\nUser: What is 2+2?\nAssistant called tool builtin__calculator with {\"expression\":\"2+2\"}\nTool builtin__calculator returned: 4\nAssistant: 4.\n</conversation>"
	if q := reqs[0].Messages[0].Text; !strings.HasSuffix(q, want) {
		t.Fatalf("summary request quotes\n%s", q)
	}
	if got := reqs[1].Messages; len(got) != 2 || got[1].Text != "hello" || len(got[0].ToolCalls) != 0 {
		t.Fatalf("the turn's request %s", js(got))
	}
}
