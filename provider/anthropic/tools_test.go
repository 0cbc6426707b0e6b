package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"mspd/modelretry"
	"mspd/provider"
	"mspd/provider/anthropic"
	"mspd/provider/anthropic/anthropictest"
	"mspd/schema/msp"
	"mspd/turn"
	"mspd/turn/turntest"
)

// wantJSON fails the test unless got, a decoded request body member,
// is the JSON want.
func wantJSON(t *testing.T, what string, got any, want string) {
	t.Helper()
	raw, err := json.Marshal(got)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !jsonEqual(raw, []byte(want)) {
		t.Errorf("%s sent\n%s\nwant\n%s", what, raw, schemaCompact(json.RawMessage(want)))
	}
}

// weather and clock are the tools the tests offer.
var (
	weather = provider.ToolSpec{Name: "weather__get", Description: "The weather in a city.",
		InputSchema: json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string", "minLength": 1}}, "required": ["city"], "additionalProperties": false}`)}
	clock = provider.ToolSpec{Name: "clock__now"}
)

const (
	weatherJSON = `{"name":"weather__get","description":"The weather in a city.","input_schema":{"type":"object","properties":{"city":{"type":"string","minLength":1}},"required":["city"],"additionalProperties":false}}`
	clockJSON   = `{"name":"clock__now","input_schema":{"type":"object"}}`
)

// TestToolSpecsOnTheWire: Request.Tools are sent as custom tools, their
// schemas verbatim (keywords the SDK's typed schema lacks included), with
// tool_choice left to the model; a schema the API would refuse fails
// before any request.
func TestToolSpecsOnTheWire(t *testing.T) {
	t.Parallel()
	untyped := provider.ToolSpec{Name: "files__list", InputSchema: json.RawMessage(`{"properties":{"dir":{"type":"string"}}}`)}
	f := anthropictest.New(t, anthropictest.Answer("end_turn", 1, "ok"))
	if _, _, err := stream(t, newModel(t, f), provider.Request{Tools: []provider.ToolSpec{weather, clock, untyped}}); err != nil {
		t.Fatal(err)
	}
	body := f.Requests()[0].Body
	wantJSON(t, "tools", body["tools"], `[`+weatherJSON+`,`+clockJSON+
		`,{"name":"files__list","input_schema":{"type":"object","properties":{"dir":{"type":"string"}}}}]`)
	for _, k := range []string{"tool_choice", "system"} {
		if v, ok := body[k]; ok {
			t.Errorf("%s %v sent; want none", k, v)
		}
	}

	for _, schema := range []string{`{"type":"array"}`, `[1]`, `{"type":`, `null`} {
		m := newModel(t, anthropictest.New(t))
		_, _, err := stream(t, m, provider.Request{Tools: []provider.ToolSpec{{Name: "bad", InputSchema: json.RawMessage(schema)}}})
		var pe *provider.Error
		if !errors.As(err, &pe) || pe.Kind != modelretry.KindInvalidRequest || !strings.Contains(pe.Message, `"bad"`) {
			t.Errorf("schema %s: error %v; want invalidRequest naming the tool", schema, err)
		}
	}
}

// TestHistoryOnTheWire checks the exact messages the SDK sends for
// histories with tool steps.
func TestHistoryOnTheWire(t *testing.T) {
	t.Parallel()
	user := func(text string) provider.Message { return provider.Message{Role: provider.RoleUser, Text: text} }
	asst := func(text string, calls ...provider.ToolCall) provider.Message {
		return provider.Message{Role: provider.RoleAssistant, Text: text, ToolCalls: calls}
	}
	results := func(rs ...provider.ToolResult) provider.Message {
		return provider.Message{Role: provider.RoleTool, ToolResults: rs}
	}
	paris := provider.ToolCall{ID: "toolu_01", Name: "weather__get", Args: `{"city": "Paris"}`}
	now := provider.ToolCall{ID: "toolu_02", Name: "clock__now", Args: `{}`}
	parisOK := provider.ToolResult{CallID: "toolu_01", Name: "weather__get", Text: "18 °C, cloudy"}
	nowFailed := provider.ToolResult{CallID: "toolu_02", Name: "clock__now", Text: "the clock server is down", IsError: true}
	const (
		hi        = `{"role":"user","content":[{"type":"text","text":"Weather and time?"}]}`
		parisUse  = `{"type":"tool_use","id":"toolu_01","name":"weather__get","input":{"city":"Paris"}}`
		nowUse    = `{"type":"tool_use","id":"toolu_02","name":"clock__now","input":{}}`
		parisRes  = `{"type":"tool_result","tool_use_id":"toolu_01","content":[{"type":"text","text":"18 °C, cloudy"}]}`
		nowErrRes = `{"type":"tool_result","tool_use_id":"toolu_02","is_error":true,"content":[{"type":"text","text":"the clock server is down"}]}`
	)

	for _, tc := range []struct {
		name    string
		history []provider.Message
		want    string
	}{
		{
			name:    "text and parallel calls, then their results, one an error",
			history: []provider.Message{user("Weather and time?"), asst("Checking.", paris, now), results(parisOK, nowFailed)},
			want: `[` + hi + `,{"role":"assistant","content":[{"type":"text","text":"Checking."},` + parisUse + `,` + nowUse + `]},` +
				`{"role":"user","content":[` + parisRes + `,` + nowErrRes + `]}]`,
		},
		{
			name: "the session's shape: a message per call and per result, results out of order",
			history: []provider.Message{user("Weather and time?"), asst("Checking."), asst("", paris), asst("", now),
				results(nowFailed), results(parisOK)},
			want: `[` + hi + `,{"role":"assistant","content":[{"type":"text","text":"Checking."},` + parisUse + `,` + nowUse + `]},` +
				`{"role":"user","content":[` + parisRes + `,` + nowErrRes + `]}]`,
		},
		{
			name:    "a call without a recorded result is answered as failed",
			history: []provider.Message{user("Weather and time?"), asst("", paris, now), results(parisOK)},
			want: `[` + hi + `,{"role":"assistant","content":[` + parisUse + `,` + nowUse + `]},{"role":"user","content":[` + parisRes +
				`,{"type":"tool_result","tool_use_id":"toolu_02","is_error":true,"content":[{"type":"text","text":"no result was recorded for this call"}]}]}]`,
		},
		{
			name: "an earlier turn's steps, then its answer and a new question",
			history: []provider.Message{user("Weather and time?"), asst("", paris), results(parisOK), asst("", now), results(nowFailed),
				asst("18 °C; the time is unknown."), user("Thanks. And Rome?")},
			want: `[` + hi + `,{"role":"assistant","content":[` + parisUse + `]},{"role":"user","content":[` + parisRes + `]},` +
				`{"role":"assistant","content":[` + nowUse + `]},{"role":"user","content":[` + nowErrRes + `]},` +
				`{"role":"assistant","content":[{"type":"text","text":"18 °C; the time is unknown."}]},` +
				`{"role":"user","content":[{"type":"text","text":"Thanks. And Rome?"}]}]`,
		},
		{
			// A turn that ended after its tools ran (stopped, failed) leaves
			// results last; the next turn's text joins their user turn,
			// after them.
			name:    "results followed by the next turn's user message share one user turn",
			history: []provider.Message{user("Weather and time?"), asst("", paris), results(parisOK), user("Never mind.")},
			want: `[` + hi + `,{"role":"assistant","content":[` + parisUse + `]},` +
				`{"role":"user","content":[` + parisRes + `,{"type":"text","text":"Never mind."}]}]`,
		},
		{
			name: "arguments that are not a JSON object, and ids the API would refuse",
			history: []provider.Message{user("Weather and time?"),
				asst("", provider.ToolCall{ID: "call.1:a", Name: "weather__get", Args: `{"city": "Par`},
					provider.ToolCall{ID: "call_2", Name: "weather__get", Args: `["Paris"]`},
					provider.ToolCall{ID: "call_3", Name: "clock__now", Args: ""},
					provider.ToolCall{ID: "call_4", Name: "clock__now", Args: "null"}),
				results(provider.ToolResult{CallID: "call.1:a", Text: "bad"}, provider.ToolResult{CallID: "call_2", Text: "bad"},
					provider.ToolResult{CallID: "call_3", Text: "12:00"}, provider.ToolResult{CallID: "call_4", Text: ""})},
			want: `[` + hi + `,{"role":"assistant","content":[` +
				`{"type":"tool_use","id":"call_1_a","name":"weather__get","input":{"unparsed_arguments":"{\"city\": \"Par"}},` +
				`{"type":"tool_use","id":"call_2","name":"weather__get","input":{"unparsed_arguments":"[\"Paris\"]"}},` +
				`{"type":"tool_use","id":"call_3","name":"clock__now","input":{}},` +
				`{"type":"tool_use","id":"call_4","name":"clock__now","input":{"unparsed_arguments":"null"}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1_a","content":[{"type":"text","text":"bad"}]},` +
				`{"type":"tool_result","tool_use_id":"call_2","content":[{"type":"text","text":"bad"}]},` +
				`{"type":"tool_result","tool_use_id":"call_3","content":[{"type":"text","text":"12:00"}]},` +
				`{"type":"tool_result","tool_use_id":"call_4"}]}]`,
		},
		{
			name:    "calls and results before the first user message are dropped with it",
			history: []provider.Message{asst("", paris), results(parisOK), user("Weather and time?")},
			want:    `[` + hi + `]`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := anthropictest.New(t, anthropictest.Answer("end_turn", 1, "ok"))
			_, _, err := stream(t, newModel(t, f), provider.Request{Messages: tc.history, Tools: []provider.ToolSpec{weather, clock}})
			if err != nil {
				t.Fatal(err)
			}
			wantJSON(t, "messages", f.Requests()[0].Body["messages"], tc.want)
		})
	}
}

// TestStreamedToolCalls reads responses that call tools, as the API
// streams them.
func TestStreamedToolCalls(t *testing.T) {
	t.Parallel()
	type call = anthropictest.Call
	split := anthropictest.Split
	for _, tc := range []struct {
		name  string
		reply anthropictest.Reply
		text  string
		calls []provider.ToolCall
		usage provider.Usage
	}{
		{
			name: "parallel calls keep block order",
			reply: anthropictest.ToolUse(40, "",
				call{ID: "toolu_01", Name: "weather__get", Fragments: []string{`{"city": "Pa`, `ris"}`}},
				call{ID: "toolu_02", Name: "weather__get", Fragments: []string{`{"city": "Rome"}`}},
				call{ID: "toolu_03", Name: "clock__now"}),
			calls: []provider.ToolCall{
				{ID: "toolu_01", Name: "weather__get", Args: `{"city": "Paris"}`},
				{ID: "toolu_02", Name: "weather__get", Args: `{"city": "Rome"}`},
				{ID: "toolu_03", Name: "clock__now", Args: `{}`},
			},
			usage: provider.Usage{InputTokens: 25, OutputTokens: 40},
		},
		{
			name: "arguments split across many deltas, mid-token",
			reply: anthropictest.ToolUse(30, "", call{ID: "toolu_01", Name: "weather__get",
				Fragments: split(`{"city": "São Paulo", "units": ["metric", "kelvin"], "days": 3}`, 2)}),
			calls: []provider.ToolCall{{ID: "toolu_01", Name: "weather__get",
				Args: `{"city": "São Paulo", "units": ["metric", "kelvin"], "days": 3}`}},
			usage: provider.Usage{InputTokens: 25, OutputTokens: 30},
		},
		{
			name: "text, then calls",
			reply: anthropictest.ToolUse(12, "Let me check both.",
				call{ID: "toolu_01", Name: "weather__get", Fragments: split(`{"city":"Paris"}`, 5)},
				call{ID: "toolu_02", Name: "clock__now", Fragments: []string{"{}"}}),
			text: "Let me check both.",
			calls: []provider.ToolCall{
				{ID: "toolu_01", Name: "weather__get", Args: `{"city":"Paris"}`},
				{ID: "toolu_02", Name: "clock__now", Args: `{}`},
			},
			usage: provider.Usage{InputTokens: 25, OutputTokens: 12},
		},
		{
			name: "text between tool_use blocks, cached prompt",
			reply: anthropictest.Frames(anthropictest.MsgStartCached(5, 100, 20),
				anthropictest.ToolUseStart(0, "toolu_01", "clock__now"), anthropictest.BlockStopAt(0),
				anthropictest.Ping,
				anthropictest.TextStartAt(1), anthropictest.TextDeltaAt(1, "And "), anthropictest.TextDeltaAt(1, "the weather:"), anthropictest.BlockStopAt(1),
				anthropictest.ToolUseStart(2, "toolu_02", "weather__get"), anthropictest.JSONDeltaAt(2, `{"city"`),
				anthropictest.JSONDeltaAt(2, `:"Oslo"}`), anthropictest.BlockStopAt(2),
				anthropictest.MsgDelta("tool_use", 21), anthropictest.MsgStop),
			text: "And the weather:",
			calls: []provider.ToolCall{
				{ID: "toolu_01", Name: "clock__now", Args: `{}`},
				{ID: "toolu_02", Name: "weather__get", Args: `{"city":"Oslo"}`},
			},
			usage: provider.Usage{InputTokens: 125, OutputTokens: 21, CachedTokens: 100},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := anthropictest.New(t, tc.reply)
			text, resp, err := stream(t, newModel(t, f), provider.Request{Tools: []provider.ToolSpec{weather, clock}})
			if err != nil {
				t.Fatal(err)
			}
			if text != tc.text || resp.FinishReason != provider.FinishToolCalls || !slices.Equal(resp.ToolCalls, tc.calls) {
				t.Errorf("text %q finish %q calls %+v\nwant text %q finish toolCalls calls %+v", text, resp.FinishReason, resp.ToolCalls, tc.text, tc.calls)
			}
			if resp.Usage == nil || *resp.Usage != tc.usage {
				t.Errorf("usage %+v; want %+v", resp.Usage, tc.usage)
			}
		})
	}
}

// TestToolUseFailures: a response that fails once a tool_use block began
// returns no calls, and the failure is one the retry layer retries.
func TestToolUseFailures(t *testing.T) {
	t.Parallel()
	started := []string{anthropictest.MsgStart(25), anthropictest.TextStartAt(0), anthropictest.TextDeltaAt(0, "Checking."),
		anthropictest.BlockStopAt(0), anthropictest.ToolUseStart(1, "toolu_01", "weather__get"), anthropictest.JSONDeltaAt(1, `{"ci`)}
	then := func(more ...string) []string { return append(slices.Clone(started), more...) }
	for _, tc := range []struct {
		name     string
		reply    anthropictest.Reply
		kind     string
		status   int
		accepted bool
	}{
		{name: "connection drops mid-tool_use", reply: anthropictest.Broken(started...), kind: modelretry.KindStreamInterrupted},
		{name: "stream ends mid-tool_use", reply: anthropictest.Frames(started...), kind: modelretry.KindStreamInterrupted},
		{name: "overloaded_error after a tool_use block started", status: 529, accepted: true, kind: modelretry.KindOverloaded,
			reply: anthropictest.Frames(then(anthropictest.ErrEvent("overloaded_error", "Overloaded"))...)},
		{name: "stop_reason tool_use with the block unended", kind: modelretry.KindStreamInterrupted, accepted: true,
			reply: anthropictest.Frames(then(anthropictest.MsgDelta("tool_use", 9), anthropictest.MsgStop)...)},
		{name: "stop_reason tool_use without a tool_use block", kind: modelretry.KindStreamInterrupted, accepted: true,
			reply: anthropictest.Answer("tool_use", 3, "Checking.")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := anthropictest.New(t, tc.reply)
			text, resp, err := stream(t, newModel(t, f), provider.Request{Tools: []provider.ToolSpec{weather}})
			var pe *provider.Error
			if !errors.As(err, &pe) || pe.Kind != tc.kind || pe.HTTPStatus != tc.status || pe.Accepted != tc.accepted {
				t.Fatalf("error %v (%+v); want kind %q status %d accepted %v", err, pe, tc.kind, tc.status, tc.accepted)
			}
			if resp.ToolCalls != nil || resp.FinishReason == provider.FinishToolCalls {
				t.Errorf("calls %+v finish %q from a failed response", resp.ToolCalls, resp.FinishReason)
			}
			if text != "Checking." {
				t.Errorf("text %q; want the text streamed before the failure", text)
			}
			fl := modelretry.Classify(modelretry.Signal{Kind: pe.Kind, HTTPStatus: pe.HTTPStatus, Header: pe.Header, Message: pe.Message}, time.Now())
			if !fl.Retryable {
				t.Errorf("classified %q not retryable", fl.Kind)
			}
		})
	}

	// Truncated mid-call: no calls, a length finish the turn retries
	// with more room.
	f := anthropictest.New(t, anthropictest.Frames(then(anthropictest.MsgDelta("max_tokens", 100), anthropictest.MsgStop)...))
	_, resp, err := stream(t, newModel(t, f), provider.Request{Tools: []provider.ToolSpec{weather}})
	if err != nil || resp.FinishReason != provider.FinishLength || resp.ToolCalls != nil || resp.Usage == nil {
		t.Errorf("max_tokens mid-call: resp %+v err %v; want finish length, usage, no calls", resp, err)
	}
}

// TestStructuredOutputWithTools: a response schema in tool mode with
// tools to offer goes in the prompt, and the model's tool calls are calls;
// without tools the forced tool stays.
func TestStructuredOutputWithTools(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"}}}`)
	for _, mode := range []string{anthropic.StructuredTool, anthropic.StructuredPromptMode} {
		f := anthropictest.New(t, anthropictest.ToolUse(7, "", anthropictest.Call{ID: "toolu_01", Name: "clock__now"}))
		m := newModel(t, f, func(c *anthropic.Config) { c.StructuredMode = mode })
		text, resp, err := stream(t, m, provider.Request{ResponseSchema: schema, Tools: []provider.ToolSpec{clock}})
		want := []provider.ToolCall{{ID: "toolu_01", Name: "clock__now", Args: "{}"}}
		if err != nil || text != "" || resp.StructuredOutput != provider.StructuredPrompt || !slices.Equal(resp.ToolCalls, want) {
			t.Errorf("%s mode: text %q resp %+v err %v; want prompt mode and the call", mode, text, resp, err)
		}
		body := f.Requests()[0].Body
		wantJSON(t, mode+" mode tools", body["tools"], `[`+clockJSON+`]`)
		if _, ok := body["tool_choice"]; ok {
			t.Errorf("%s mode: tool_choice %v sent with real tools", mode, body["tool_choice"])
		}
		sys, _ := body["system"].([]any)
		if len(sys) != 1 {
			t.Fatalf("%s mode: system %v; want one text block", mode, body["system"])
		}
		if text, _ := sys[0].(map[string]any)["text"].(string); !strings.Contains(text, string(schemaCompact(schema))) {
			t.Errorf("%s mode: system prompt %q does not carry the schema", mode, text)
		}
	}

	// A real tool named like the forced one, with no schema, is a call.
	f := anthropictest.New(t, anthropictest.ToolUse(3, "", anthropictest.Call{ID: "toolu_01", Name: anthropic.ToolName, Fragments: []string{`{"a":1}`}}))
	text, resp, err := stream(t, newModel(t, f), provider.Request{Tools: []provider.ToolSpec{{Name: anthropic.ToolName}}})
	if err != nil || text != "" || resp.FinishReason != provider.FinishToolCalls || len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Args != `{"a":1}` {
		t.Errorf("a tool named %s: text %q resp %+v err %v; want its call", anthropic.ToolName, text, resp, err)
	}
}

// testToolbox is a turn.Toolbox of two tools: weather__get answers, and
// clock__now reports a tool error.
type testToolbox struct{}

func (testToolbox) Specs() []provider.ToolSpec { return []provider.ToolSpec{weather, clock} }

func (testToolbox) Lookup(name string) (turn.ToolInfo, bool) {
	server, tool, ok := strings.Cut(name, "__")
	return turn.ToolInfo{Server: server, Tool: tool}, ok && (name == weather.Name || name == clock.Name)
}

func (testToolbox) Check(string, string) error { return nil }

func (testToolbox) Call(_ context.Context, name, args string) (turn.ToolOutput, error) {
	if name == clock.Name {
		return turn.ToolOutput{Text: "the clock server is down", IsError: true}, nil
	}
	return turn.ToolOutput{Text: "18 °C in " + args}, nil
}

// TestTurnCallsToolsThroughTheRunner runs a two-step turn through the real
// runner: the model calls two tools, the runner runs them, and the second
// request carries their results before the model answers.
func TestTurnCallsToolsThroughTheRunner(t *testing.T) {
	t.Parallel()
	f := anthropictest.New(t,
		anthropictest.ToolUse(12, "Checking.",
			anthropictest.Call{ID: "toolu_01", Name: weather.Name, Fragments: anthropictest.Split(`{"city":"Paris"}`, 4)},
			anthropictest.Call{ID: "toolu_02", Name: clock.Name}),
		anthropictest.Answer("end_turn", 5, "18 °C; ", "the time is unknown."))
	res := runTurn(t, newClock(), newModel(t, f), turn.Spec{Tools: testToolbox{}})

	c := res.out.Completed
	if c.Terminal != msp.TerminalCompleted || res.out.Answer != "18 °C; the time is unknown." {
		t.Fatalf("terminal %s answer %q; events %s", c.Terminal, res.out.Answer, res.sink.Methods())
	}
	if a := c.Attempts; a == nil || a.Count != 2 || a.OutputTokens != 17 || !a.UsageComplete {
		t.Errorf("attempts %+v; want 2 requests, 17 output tokens, usage complete", a)
	}
	var calls []string
	for _, p := range turntest.Of[*msp.ItemParams](res.sink, msp.NotifyItemCompleted) {
		if p.Item.Kind == msp.ItemToolCall {
			calls = append(calls, p.Item.CallID+":"+p.Item.Status+":"+*p.Item.Args)
		}
	}
	slices.Sort(calls) // they run in parallel and close in any order
	if want := []string{"toolu_01:completed:{\"city\":\"Paris\"}", "toolu_02:failed:{}"}; !slices.Equal(calls, want) {
		t.Errorf("toolCall items %q; want %q", calls, want)
	}

	reqs := f.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests; want 2", len(reqs))
	}
	for i, r := range reqs {
		wantJSON(t, "tools", r.Body["tools"], `[`+weatherJSON+`,`+clockJSON+`]`)
		if i == 0 {
			wantJSON(t, "first request's messages", r.Body["messages"], `[{"role":"user","content":[{"type":"text","text":"Hi"}]}]`)
		}
	}
	wantJSON(t, "second request's messages", reqs[1].Body["messages"], `[
		{"role":"user","content":[{"type":"text","text":"Hi"}]},
		{"role":"assistant","content":[{"type":"text","text":"Checking."},
			{"type":"tool_use","id":"toolu_01","name":"weather__get","input":{"city":"Paris"}},
			{"type":"tool_use","id":"toolu_02","name":"clock__now","input":{}}]},
		{"role":"user","content":[
			{"type":"tool_result","tool_use_id":"toolu_01","content":[{"type":"text","text":"18 °C in {\"city\":\"Paris\"}"}]},
			{"type":"tool_result","tool_use_id":"toolu_02","is_error":true,"content":[{"type":"text","text":"the clock server is down"}]}]}]`)
}

// TestTurnRetriesAToolUseCutShort: a stream that breaks inside a tool_use
// block is retried by the runner, and only the retry's call is made.
func TestTurnRetriesAToolUseCutShort(t *testing.T) {
	t.Parallel()
	f := anthropictest.New(t,
		anthropictest.Broken(anthropictest.MsgStart(25), anthropictest.ToolUseStart(0, "toolu_01", weather.Name),
			anthropictest.JSONDeltaAt(0, `{"city":"Pa`)),
		anthropictest.ToolUse(6, "", anthropictest.Call{ID: "toolu_02", Name: weather.Name, Fragments: []string{`{"city":"Paris"}`}}),
		anthropictest.Answer("end_turn", 4, "18 °C."))
	res := runTurn(t, newClock(), newModel(t, f), turn.Spec{Tools: testToolbox{}})

	if res.out.Completed.Terminal != msp.TerminalCompleted || res.out.Answer != "18 °C." || f.Count() != 3 {
		t.Fatalf("terminal %s answer %q after %d requests; events %s", res.out.Completed.Terminal, res.out.Answer, f.Count(), res.sink.Methods())
	}
	n := turntest.Of[*msp.TurnModelRetryScheduledParams](res.sink, msp.NotifyTurnModelRetryScheduled)
	if len(n) != 1 || n[0].ErrorKind != modelretry.KindStreamInterrupted {
		t.Errorf("model retry notices %+v; want one for the interrupted stream", n)
	}
	var ids []string
	for _, p := range turntest.Of[*msp.ItemParams](res.sink, msp.NotifyItemStarted) {
		if p.Item.Kind == msp.ItemToolCall {
			ids = append(ids, p.Item.CallID)
		}
	}
	if !slices.Equal(ids, []string{"toolu_02"}) {
		t.Errorf("toolCall items for calls %q; want only toolu_02", ids)
	}
}
