package openai_test

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"mspd/provider"
	"mspd/provider/openai"
	"mspd/provider/openai/openaitest"
	"mspd/schema/msp"
	"mspd/turn"
	"mspd/turn/turntest"
)

// withReasoning records req's reasoning deltas into got.
func withReasoning(req provider.Request, got *[]provider.ReasoningDelta) provider.Request {
	req.OnReasoning = func(d provider.ReasoningDelta) { *got = append(*got, d) }
	return req
}

// TestChatReasoningStreams: a compatible server's delta.reasoning_content
// and delta.reasoning stream as reasoning (part 0), apart from the
// answer's content; the reasoning tokens of usage reach Usage; the
// reasoning is returned as a text block, which nothing sends back.
func TestChatReasoningStreams(t *testing.T) {
	srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Role(), openaitest.ReasoningContent("Two and two"),
		openaitest.ReasoningField(" make four."), openaitest.Delta("Four."), openaitest.Finish("stop"),
		openaitest.Usage(12, 9, 0, 6), openaitest.Done))
	var got []provider.ReasoningDelta
	text, resp, err := stream(t, newModel(t, srv, nil), withReasoning(hello, &got))
	if err != nil || text != "Four." {
		t.Fatalf("text %q, %v", text, err)
	}
	if want := []provider.ReasoningDelta{{Part: 0, Text: "Two and two"}, {Part: 0, Text: " make four."}}; !slices.Equal(got, want) {
		t.Errorf("reasoning %+v, want %+v", got, want)
	}
	if want := []provider.Reasoning{{Kind: provider.ReasoningText, Text: "Two and two make four."}}; !reflect.DeepEqual(resp.Reasoning, want) {
		t.Errorf("Response.Reasoning %+v", resp.Reasoning)
	}
	if u := resp.Usage; u == nil || u.ReasoningTokens != 6 || u.OutputTokens != 9 {
		t.Errorf("usage %+v", u)
	}
	if provider.SentBack(resp.Reasoning) != nil {
		t.Error("a compatible server's reasoning is to be sent back")
	}
}

// TestChatReasoningNotSentBack runs a tool step through the runner on a
// server that reasons: the reasoning streams into a reasoning item, and
// the next request's assistant message carries the calls and no
// reasoning member.
func TestChatReasoningNotSentBack(t *testing.T) {
	call := openaitest.Call{ID: "call_abc", Name: "get_weather", Args: `{"city":"Paris"}`}
	step := append([]string{openaitest.Role(), openaitest.ReasoningContent("I should look it up.")}, openaitest.ToolCalls(4, call)...)
	srv := openaitest.New(t, "/v1", openaitest.Stream(step...),
		openaitest.Stream(openaitest.Reasoning([]string{"Got it."}, "18 °C.")...))
	spec := turn.Spec{TurnID: "t1", History: hello.Messages, Tools: weatherBox{}, ReasoningEffort: msp.EffortLow}
	r := runTurn(t, newModel(t, srv, nil), spec, time.Now(), nil)
	if r.out.Completed.Terminal != msp.TerminalCompleted || r.out.Answer != "18 °C." {
		t.Fatalf("terminal %+v answer %q; %s", r.out.Completed, r.out.Answer, r.sink.Methods())
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	sameJSON(t, "the step sent back", reqs[1].Body["messages"].([]any)[1],
		`{"role": "assistant", "content": null, "tool_calls": [{"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}`)
	for _, q := range reqs {
		if q.Body["reasoning_effort"] != "low" {
			t.Errorf("reasoning_effort %v", q.Body["reasoning_effort"])
		}
	}
	var summaries [][]string
	for _, p := range turntest.Of[*msp.ItemParams](r.sink, msp.NotifyItemCompleted) {
		if p.Item.Kind == msp.ItemReasoning {
			summaries = append(summaries, p.Item.Summary)
		}
	}
	if !reflect.DeepEqual(summaries, [][]string{{"I should look it up."}, {"Got it."}}) {
		t.Errorf("reasoning items' summaries %q", summaries)
	}
	if n := len(turntest.Of[*turn.ReasoningRecord](r.sink, turn.MethodReasoning)); n != 0 {
		t.Errorf("%d reasoning records for reasoning nothing takes back", n)
	}
}

// TestResponsesReasoningStreams: a reasoning item's summary parts stream
// as reasoning parts (the item's id with them; its start reported before
// any text), apart from the answer; the item done is returned whole, with
// its encrypted content; reasoning tokens reach Usage.
func TestResponsesReasoningStreams(t *testing.T) {
	rs, seq := openaitest.RReasoning(1, 0, 6, "rs_1", "gAAAA-encrypted", "First, add.", "Then, check.")
	item := openaitest.RReasoningItem("rs_1", "gAAAA-encrypted", []string{"First, add.", "Then, check."}, true)
	events := append([]string{openaitest.RCreated()}, rs...)
	events = append(events, openaitest.RTextDelta(seq, "Four."), openaitest.RCompleted(seq+1, 12, 30, 0, 22, item))
	srv := openaitest.New(t, "/v1", openaitest.Stream(events...))
	var got []provider.ReasoningDelta
	req := hello
	req.ReasoningEffort = msp.EffortHigh
	text, resp, err := stream(t, responsesModel(t, srv), withReasoning(req, &got))
	if err != nil || text != "Four." {
		t.Fatalf("text %q, %v", text, err)
	}
	want := []provider.ReasoningDelta{{Part: -1, ItemID: "rs_1"},
		{Part: 0, Text: "First,", ItemID: "rs_1"}, {Part: 0, Text: " add.", ItemID: "rs_1"},
		{Part: 1, Text: "Then, ", ItemID: "rs_1"}, {Part: 1, Text: "check.", ItemID: "rs_1"}}
	if !slices.Equal(got, want) {
		t.Errorf("reasoning\n got %+v\nwant %+v", got, want)
	}
	block := provider.Reasoning{Kind: provider.ReasoningItem, ID: "rs_1", Summary: []string{"First, add.", "Then, check."}, Data: "gAAAA-encrypted"}
	if !reflect.DeepEqual(resp.Reasoning, []provider.Reasoning{block}) {
		t.Errorf("Response.Reasoning %+v", resp.Reasoning)
	}
	if u := resp.Usage; u == nil || u.ReasoningTokens != 22 {
		t.Errorf("usage %+v", u)
	}
}

// TestResponsesReasoningGoesBack runs a tool step through the runner: the
// request asks for the effort, a summary and encrypted content; the next
// request sends the step's reasoning item back (id, summary, encrypted
// content) before its function call; the reasoning item of the view
// carries the provider's id.
func TestResponsesReasoningGoesBack(t *testing.T) {
	call := openaitest.Call{ID: "call_abc", Name: "get_weather", Args: `{"city":"Paris"}`}
	rs, seq := openaitest.RReasoning(1, 0, 100, "rs_1", "gAAAA-1", "I need the weather.")
	fc, seq := openaitest.RFunctionCall(seq, 1, 100, call)
	step := append(append([]string{openaitest.RCreated()}, rs...), fc...)
	step = append(step, openaitest.RCompleted(seq, 80, 18, 0, 10,
		openaitest.RReasoningItem("rs_1", "gAAAA-1", []string{"I need the weather."}, true), openaitest.RFunctionCallItem(call, true)))
	srv := openaitest.New(t, "/v1", openaitest.Stream(step...),
		openaitest.Stream(openaitest.RCreated(), openaitest.RTextDelta(1, "18 °C."), openaitest.RCompleted(2, 90, 3, 0, 0)))
	spec := turn.Spec{TurnID: "t1", History: hello.Messages, Tools: weatherBox{}, ReasoningEffort: msp.EffortUltra}
	m := newModel(t, srv, func(c *openai.Config) { c.API = openai.APIResponses })
	r := runTurn(t, m, spec, time.Now(), nil)
	if r.out.Completed.Terminal != msp.TerminalCompleted || r.out.Answer != "18 °C." {
		t.Fatalf("terminal %+v answer %q; %s", r.out.Completed, r.out.Answer, r.sink.Methods())
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	for _, q := range reqs {
		sameJSON(t, "reasoning", q.Body["reasoning"], `{"effort": "max", "summary": "auto"}`)
		sameJSON(t, "include", q.Body["include"], `["reasoning.encrypted_content"]`)
	}
	sameJSON(t, "the second request's input", reqs[1].Body["input"], `[
		{"role": "user", "content": "Hi"},
		{"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "I need the weather."}], "encrypted_content": "gAAAA-1"},
		{"type": "function_call", "call_id": "call_abc", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
		{"type": "function_call_output", "call_id": "call_abc", "output": "18 °C in Paris"}]`)
	var reasoning []msp.Item
	for _, p := range turntest.Of[*msp.ItemParams](r.sink, msp.NotifyItemStarted) {
		if p.Item.Kind == msp.ItemReasoning {
			reasoning = append(reasoning, p.Item)
		}
	}
	if len(reasoning) != 1 || reasoning[0].ProviderItemID != "rs_1" {
		t.Errorf("reasoning items started %+v; want one carrying rs_1", reasoning)
	}
}

// TestEffortMapping: each tier as each API takes it — OpenAI's tiers
// verbatim, ultra as max; none asks for no reasoning (and, on the
// Responses API, for no summary or encrypted content); no effort sends
// no member.
func TestEffortMapping(t *testing.T) {
	for _, tc := range []struct {
		tier, chat, responses string
	}{
		{"", ``, ``},
		{msp.EffortNone, `"none"`, `{"effort": "none"}`},
		{msp.EffortMinimal, `"minimal"`, `{"effort": "minimal", "summary": "auto"}`},
		{msp.EffortLow, `"low"`, `{"effort": "low", "summary": "auto"}`},
		{msp.EffortMedium, `"medium"`, `{"effort": "medium", "summary": "auto"}`},
		{msp.EffortHigh, `"high"`, `{"effort": "high", "summary": "auto"}`},
		{msp.EffortXHigh, `"xhigh"`, `{"effort": "xhigh", "summary": "auto"}`},
		{msp.EffortMax, `"max"`, `{"effort": "max", "summary": "auto"}`},
		{msp.EffortUltra, `"max"`, `{"effort": "max", "summary": "auto"}`},
	} {
		srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Answer("ok")...),
			openaitest.Stream(openaitest.RCreated(), openaitest.RTextDelta(1, "ok"), openaitest.RCompleted(2, 1, 1, 0, 0)))
		req := hello
		req.ReasoningEffort = tc.tier
		if _, _, err := stream(t, newModel(t, srv, nil), req); err != nil {
			t.Fatal(err)
		}
		if _, _, err := stream(t, responsesModel(t, srv), req); err != nil {
			t.Fatal(err)
		}
		chat, responses := srv.Requests()[0].Body, srv.Requests()[1].Body
		for _, c := range []struct {
			what string
			body map[string]any
			key  string
			want string
		}{{"chat", chat, "reasoning_effort", tc.chat}, {"responses", responses, "reasoning", tc.responses}} {
			got, ok := c.body[c.key]
			switch {
			case c.want == "" && ok:
				t.Errorf("%q on %s: %s %v sent, want none", tc.tier, c.what, c.key, got)
			case c.want != "":
				sameJSON(t, tc.tier+" on "+c.what, got, c.want)
			}
		}
		_, include := responses["include"]
		if want := tc.tier != "" && tc.tier != msp.EffortNone; include != want {
			t.Errorf("%q: include sent %v, want %v", tc.tier, include, want)
		}
	}
}

// weatherBox is a turn.Toolbox of get_weather alone, which answers.
type weatherBox struct{}

func (weatherBox) Specs() []provider.ToolSpec { return []provider.ToolSpec{weatherTool} }

func (weatherBox) Lookup(name string) (turn.ToolInfo, bool) {
	return turn.ToolInfo{Server: "weather", Tool: name}, name == weatherTool.Name
}

func (weatherBox) Check(string, string) error { return nil }

func (weatherBox) Call(_ context.Context, _, args string) (turn.ToolOutput, error) {
	var a struct{ City string }
	json.Unmarshal([]byte(args), &a)
	return turn.ToolOutput{Text: "18 °C in " + a.City}, nil
}

// TestResponsesReasoningHistory: a step's reasoning items go back before
// its calls — one without a summary with "summary": [] (the API requires
// the member), one without encrypted content not at all (with store false
// its id names nothing) — and no other kind of reasoning goes back.
func TestResponsesReasoningHistory(t *testing.T) {
	srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.RCreated(), openaitest.RTextDelta(1, "ok"), openaitest.RCompleted(2, 1, 1, 0, 0)))
	req := hello
	req.Messages = []provider.Message{{Role: provider.RoleUser, Text: "Hi"},
		{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{{ID: "call_1", Name: "get_weather", Args: `{}`}}, Reasoning: []provider.Reasoning{
			{Kind: provider.ReasoningItem, ID: "rs_a", Data: "enc-a"},
			{Kind: provider.ReasoningItem, ID: "rs_b", Summary: []string{"no content"}},
			{Kind: provider.ReasoningThinking, Text: "Claude's", Signature: "sig"},
		}},
		{Role: provider.RoleTool, ToolResults: []provider.ToolResult{{CallID: "call_1", Text: "18 °C"}}}}
	if _, _, err := stream(t, responsesModel(t, srv), req); err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "input", srv.Requests()[0].Body["input"], `[
		{"role": "user", "content": "Hi"},
		{"type": "reasoning", "id": "rs_a", "summary": [], "encrypted_content": "enc-a"},
		{"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
		{"type": "function_call_output", "call_id": "call_1", "output": "18 °C"}]`)
}
