package anthropic_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"mspd/modelretry"
	"mspd/provider"
	"mspd/provider/anthropic"
	"mspd/provider/anthropic/anthropictest"
	"mspd/schema/msp"
	"mspd/turn"
	"mspd/turn/turntest"
)

// reasoningPart is one OnReasoning call.
type reasoningPart struct {
	part int
	text string
}

// streamReasoning streams req, recording its reasoning parts.
func streamReasoning(t *testing.T, m *anthropic.Model, req provider.Request) (string, []reasoningPart, provider.Response, error) {
	t.Helper()
	var parts []reasoningPart
	req.OnReasoning = func(d provider.ReasoningDelta) { parts = append(parts, reasoningPart{d.Part, d.Text}) }
	text, resp, err := stream(t, m, req)
	return text, parts, resp, err
}

// TestThinkingStreamsApartFromTheAnswer: thinking blocks stream through
// OnReasoning, a part each (deltas as they come), apart from the text,
// and come back in Response.Reasoning with their signatures; a
// redacted_thinking block is kept verbatim and reported as reasoning that
// shows nothing (part -1); the thinking tokens reach Usage; the request
// asked for the tier's budget with max_tokens raised by it.
func TestThinkingStreamsApartFromTheAnswer(t *testing.T) {
	t.Parallel()
	frames := []string{anthropictest.MsgStart(25)}
	frames = append(frames, anthropictest.ThinkingBlock(0, "EqQBCgIYAh-sig-1", "The user wants", " a greeting.")...)
	frames = append(frames, anthropictest.RedactedThinkingAt(1, "EmwKAhgBEgy-redacted"), anthropictest.BlockStopAt(1))
	frames = append(frames, anthropictest.ThinkingBlock(2, "sig-2", "Short.")...)
	frames = append(frames, anthropictest.TextStartAt(3), anthropictest.TextDeltaAt(3, "Hello"), anthropictest.TextDeltaAt(3, "!"),
		anthropictest.BlockStopAt(3), anthropictest.MsgDeltaThinking("end_turn", 40, 31), anthropictest.MsgStop)
	f := anthropictest.New(t, anthropictest.Frames(frames...))
	text, parts, resp, err := streamReasoning(t, newModel(t, f), provider.Request{MaxTokens: 1000, ReasoningEffort: msp.EffortMedium})
	if err != nil {
		t.Fatal(err)
	}
	if text != "Hello!" || resp.FinishReason != provider.FinishStop {
		t.Errorf("text %q finish %q", text, resp.FinishReason)
	}
	if want := []reasoningPart{{0, "The user wants"}, {0, " a greeting."}, {-1, ""}, {1, "Short."}}; !slices.Equal(parts, want) {
		t.Errorf("reasoning parts %v, want %v", parts, want)
	}
	want := []provider.Reasoning{
		{Kind: provider.ReasoningThinking, Text: "The user wants a greeting.", Signature: "EqQBCgIYAh-sig-1"},
		{Kind: provider.ReasoningRedacted, Data: "EmwKAhgBEgy-redacted"},
		{Kind: provider.ReasoningThinking, Text: "Short.", Signature: "sig-2"},
	}
	if !reflect.DeepEqual(resp.Reasoning, want) {
		t.Errorf("reasoning\n got %+v\nwant %+v", resp.Reasoning, want)
	}
	if u := resp.Usage; u == nil || u.OutputTokens != 40 || u.ReasoningTokens != 31 {
		t.Errorf("usage %+v; want 40 output tokens, 31 of them thinking", u)
	}
	body := f.Requests()[0].Body
	wantJSON(t, "thinking", body["thinking"], `{"type":"enabled","budget_tokens":8192}`)
	if body["max_tokens"] != float64(1000+8192) {
		t.Errorf("max_tokens %v; want the answer's 1000 plus the budget", body["max_tokens"])
	}
}

// TestThinkingEffortMapping: each tier's request body — none disables
// thinking, no effort sends no thinking member, the others their budget
// with max_tokens raised by it; a configured output limit shrinks the
// budget to fit (never below 1024), and one that cannot hold 1024 is
// refused before any request, naming the tier.
func TestThinkingEffortMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		effort    string
		limit     int // Config.MaxOutputTokens
		thinking  string
		maxTokens float64
	}{
		{"", 0, ``, 500},
		{msp.EffortNone, 0, `{"type":"disabled"}`, 500},
		{msp.EffortMinimal, 0, `{"type":"enabled","budget_tokens":1024}`, 1524},
		{msp.EffortLow, 0, `{"type":"enabled","budget_tokens":2048}`, 2548},
		{msp.EffortMedium, 0, `{"type":"enabled","budget_tokens":8192}`, 8692},
		{msp.EffortHigh, 0, `{"type":"enabled","budget_tokens":16384}`, 16884},
		{msp.EffortXHigh, 0, `{"type":"enabled","budget_tokens":24576}`, 25076},
		{msp.EffortMax, 0, `{"type":"enabled","budget_tokens":32000}`, 32500},
		{msp.EffortUltra, 0, `{"type":"enabled","budget_tokens":63000}`, 63500},
		{msp.EffortUltra, 32000, `{"type":"enabled","budget_tokens":31500}`, 32000},
		{msp.EffortHigh, 1200, `{"type":"enabled","budget_tokens":1024}`, 1200},
	} {
		f := anthropictest.New(t, anthropictest.Answer("end_turn", 1, "ok"))
		m := newModel(t, f, func(c *anthropic.Config) { c.MaxOutputTokens = tc.limit })
		if _, _, err := stream(t, m, provider.Request{MaxTokens: 500, ReasoningEffort: tc.effort}); err != nil {
			t.Fatalf("%q: %v", tc.effort, err)
		}
		body := f.Requests()[0].Body
		got, ok := body["thinking"]
		switch {
		case tc.thinking == "" && ok:
			t.Errorf("%q: thinking %v sent; want none", tc.effort, got)
		case tc.thinking != "":
			wantJSON(t, "thinking for "+tc.effort, got, tc.thinking)
		}
		if body["max_tokens"] != tc.maxTokens {
			t.Errorf("%q (limit %d): max_tokens %v, want %v", tc.effort, tc.limit, body["max_tokens"], tc.maxTokens)
		}
	}
	m := newModel(t, anthropictest.New(t), func(c *anthropic.Config) { c.MaxOutputTokens = 1024 })
	_, _, err := stream(t, m, provider.Request{MaxTokens: 500, ReasoningEffort: msp.EffortLow})
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Kind != modelretry.KindInvalidRequest || !strings.Contains(pe.Message, "low") {
		t.Errorf("a limit of 1024 with thinking: %v; want invalidRequest naming the tier", err)
	}
}

// TestThinkingAsksForStructuredOutputInThePrompt: thinking forbids a
// forced tool, so a response schema goes in the system prompt.
func TestThinkingAsksForStructuredOutputInThePrompt(t *testing.T) {
	t.Parallel()
	f := anthropictest.New(t, anthropictest.Answer("end_turn", 1, `{"a":1}`))
	_, resp, err := stream(t, newModel(t, f), provider.Request{ReasoningEffort: msp.EffortLow, ResponseSchema: []byte(`{"type":"object"}`)})
	if err != nil || resp.StructuredOutput != provider.StructuredPrompt {
		t.Fatalf("structured %q, %v; want prompt mode", resp.StructuredOutput, err)
	}
	body := f.Requests()[0].Body
	if _, forced := body["tool_choice"]; forced || body["system"] == nil {
		t.Errorf("tool_choice %v system %v; want no forced tool and the schema in the system prompt", body["tool_choice"], body["system"])
	}
}

// TestThinkingGoesBackBeforeToolUse runs a two-step turn through the real
// runner with thinking on: the first response thinks (one block signed,
// one redacted) and calls a tool; the second request sends the step back
// with both blocks, unchanged and in order, before its text and tool_use
// block. The reasoning item streamed apart from the answer and completed
// before the call was recorded.
func TestThinkingGoesBackBeforeToolUse(t *testing.T) {
	t.Parallel()
	step := []string{anthropictest.MsgStart(25)}
	step = append(step, anthropictest.ThinkingBlock(0, "EqQBsig", "I need ", "the weather.")...)
	step = append(step, anthropictest.RedactedThinkingAt(1, "EmwKredacted"), anthropictest.BlockStopAt(1))
	step = append(step, anthropictest.TextStartAt(2), anthropictest.TextDeltaAt(2, "Checking."), anthropictest.BlockStopAt(2),
		anthropictest.ToolUseStart(3, "toolu_01", weather.Name), anthropictest.JSONDeltaAt(3, `{"city":"Paris"}`), anthropictest.BlockStopAt(3),
		anthropictest.MsgDeltaThinking("tool_use", 60, 20), anthropictest.MsgStop)
	answer := append([]string{anthropictest.MsgStart(40)}, anthropictest.ThinkingBlock(0, "sig-b", "Now answer.")...)
	answer = append(answer, anthropictest.TextStartAt(1), anthropictest.TextDeltaAt(1, "18 °C."), anthropictest.BlockStopAt(1),
		anthropictest.MsgDeltaThinking("end_turn", 9, 3), anthropictest.MsgStop)
	f := anthropictest.New(t, anthropictest.Frames(step...), anthropictest.Frames(answer...))
	res := runTurn(t, newClock(), newModel(t, f), turn.Spec{Tools: testToolbox{}, ReasoningEffort: msp.EffortLow})
	if c := res.out.Completed; c.Terminal != msp.TerminalCompleted || res.out.Answer != "18 °C." {
		t.Fatalf("terminal %+v answer %q; events %s", c, res.out.Answer, res.sink.Methods())
	}
	if u := res.out.Completed.Usage; u == nil || u.ReasoningTokens != 23 {
		t.Errorf("turn usage %+v; want 23 reasoning tokens", u)
	}
	reqs := f.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	wantJSON(t, "second request's messages", reqs[1].Body["messages"], `[
		{"role":"user","content":[{"type":"text","text":"Hi"}]},
		{"role":"assistant","content":[
			{"type":"thinking","signature":"EqQBsig","thinking":"I need the weather."},
			{"type":"redacted_thinking","data":"EmwKredacted"},
			{"type":"text","text":"Checking."},
			{"type":"tool_use","id":"toolu_01","name":"weather__get","input":{"city":"Paris"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":[{"type":"text","text":"18 °C in {\"city\":\"Paris\"}"}]}]}]`)
	for _, r := range reqs {
		wantJSON(t, "thinking", r.Body["thinking"], `{"type":"enabled","budget_tokens":2048}`)
	}

	var order []string
	for _, e := range res.sink.Events() {
		if p, ok := e.Params.(*msp.ItemParams); ok {
			order = append(order, e.Method+" "+p.Item.Kind)
		}
	}
	want := []string{"item/started reasoning", "item/completed reasoning", "item/started agentMessage", "item/completed agentMessage",
		"item/started toolCall", "item/completed toolCall",
		"item/started reasoning", "item/completed reasoning", "item/started agentMessage", "item/completed agentMessage"}
	if !slices.Equal(order, want) {
		t.Errorf("items\n got %q\nwant %q", order, want)
	}
	done := turntest.Of[*msp.ItemParams](res.sink, msp.NotifyItemCompleted)
	if r := done[0].Item; r.Kind != msp.ItemReasoning || !slices.Equal(r.Summary, []string{"I need the weather."}) {
		t.Errorf("first reasoning item %+v", r)
	}
	if got := res.sink.Text(turn.ReasoningItemID("turn_1", 1, 0)); got != "I need the weather." {
		t.Errorf("reasoning deltas %q", got)
	}
	recs := turntest.Of[*turn.ReasoningRecord](res.sink, turn.MethodReasoning)
	if len(recs) != 1 || len(recs[0].Blocks) != 2 || recs[0].Blocks[1].Data != "EmwKredacted" {
		t.Errorf("reasoning records %+v", recs)
	}
}

// TestAdaptiveThinking: with Config.Thinking adaptive, a tier asks for
// adaptive thinking at the nearest output_config.effort (minimal as low,
// ultra as max) with the same room for it in max_tokens; none still
// disables thinking; the mode is checked by New.
func TestAdaptiveThinking(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		effort, thinking, output string
		maxTokens                float64
	}{
		{msp.EffortNone, `{"type":"disabled"}`, ``, 500},
		{msp.EffortMinimal, `{"type":"adaptive"}`, `{"effort":"low"}`, 1524},
		{msp.EffortMedium, `{"type":"adaptive"}`, `{"effort":"medium"}`, 8692},
		{msp.EffortXHigh, `{"type":"adaptive"}`, `{"effort":"xhigh"}`, 25076},
		{msp.EffortUltra, `{"type":"adaptive"}`, `{"effort":"max"}`, 63500},
	} {
		f := anthropictest.New(t, anthropictest.Answer("end_turn", 1, "ok"))
		m := newModel(t, f, func(c *anthropic.Config) { c.Thinking = anthropic.ThinkingAdaptive })
		if _, _, err := stream(t, m, provider.Request{MaxTokens: 500, ReasoningEffort: tc.effort}); err != nil {
			t.Fatalf("%s: %v", tc.effort, err)
		}
		body := f.Requests()[0].Body
		wantJSON(t, "thinking for "+tc.effort, body["thinking"], tc.thinking)
		if got, ok := body["output_config"]; tc.output == "" && ok {
			t.Errorf("%s: output_config %v sent", tc.effort, got)
		} else if tc.output != "" {
			wantJSON(t, "output_config for "+tc.effort, got, tc.output)
		}
		if body["max_tokens"] != tc.maxTokens {
			t.Errorf("%s: max_tokens %v, want %v", tc.effort, body["max_tokens"], tc.maxTokens)
		}
	}
	if _, err := anthropic.New(anthropic.Config{Endpoint: provider.Endpoint{APIKey: "k"}, Thinking: "sometimes"}); err == nil {
		t.Error("New accepted thinking mode \"sometimes\"")
	}
}
