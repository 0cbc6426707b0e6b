package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"mspd/modelretry"
	"mspd/provider"
	"mspd/provider/openai"
	"mspd/provider/openai/openaitest"
	"mspd/schema/msp"
	"mspd/tool"
	"mspd/tool/builtin"
	"mspd/turn"
	"mspd/turn/turntest"
)

// The tools the tests offer: one with a description and a schema (with a
// number that must go out as a number), one with neither.
var (
	weatherTool = provider.ToolSpec{Name: "get_weather", Description: "The weather in a city.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","maximum":1e1}},"required":["city"]}`)}
	clockTool = provider.ToolSpec{Name: "clock"}
)

// The calls the scripted model makes.
var (
	paris = openaitest.Call{ID: "call_abc", Name: "get_weather", Args: `{"city":"Paris"}`}
	tokyo = openaitest.Call{ID: "call_def", Name: "get_weather", Args: `{"city":"Tokyo","days":3}`}
	now   = openaitest.Call{ID: "call_ghi", Name: "clock", Args: `{}`}
	later = openaitest.Call{ID: "call_jkl", Name: "clock", Args: `{}`}
	// broken's arguments are cut short: not JSON.
	broken = openaitest.Call{ID: "call_mno", Name: "get_weather", Args: `{"city": "Par`}
)

// toolUsage is what ToolCalls and RToolCalls report.
var toolUsage = &provider.Usage{InputTokens: openaitest.ToolCallPromptTokens, OutputTokens: openaitest.ToolCallCompletionTokens}

// asked is the calls as Response.ToolCalls carries them.
func asked(calls ...openaitest.Call) []provider.ToolCall {
	out := make([]provider.ToolCall, len(calls))
	for i, c := range calls {
		out[i] = provider.ToolCall{ID: c.ID, Name: c.Name, Args: c.Args}
	}
	return out
}

// toolRequest is hello offering both tools.
func toolRequest() provider.Request {
	req := hello
	req.Tools = []provider.ToolSpec{weatherTool, clockTool}
	return req
}

// sameJSON fails the test unless got, a member of a decoded request body,
// is the JSON want.
func sameJSON(t *testing.T, what string, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: the wanted JSON does not parse: %v", what, err)
	}
	if !reflect.DeepEqual(got, w) {
		g, _ := json.Marshal(got)
		var c bytes.Buffer
		_ = json.Compact(&c, []byte(want))
		t.Errorf("%s\n got %s\nwant %s", what, g, c.String())
	}
}

// frames joins frame lists.
func frames(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestChatToolCallStreams: how streamed delta.tool_calls become
// Response.ToolCalls.
func TestChatToolCallStreams(t *testing.T) {
	tail := func(finish string) []string {
		return []string{openaitest.Finish(finish), openaitest.Usage(80, 18, 0, 0), openaitest.Done}
	}
	for _, tc := range []struct {
		name   string
		reply  openaitest.Reply
		text   string
		finish string
		calls  []provider.ToolCall
		usage  *provider.Usage
	}{
		{"one call, its arguments a byte a chunk", openaitest.Stream(openaitest.ToolCalls(1, paris)...),
			"", provider.FinishToolCalls, asked(paris), toolUsage},
		{"three calls in one step, in index order", openaitest.Stream(openaitest.ToolCalls(5, paris, tokyo, now)...),
			"", provider.FinishToolCalls, asked(paris, tokyo, now), toolUsage},
		{"text, then calls", openaitest.Stream(frames([]string{openaitest.Role(), openaitest.Delta("Let me "), openaitest.Delta("check.")},
			openaitest.ToolCallFrames(4, paris, tokyo), tail("tool_calls"))...),
			"Let me check.", provider.FinishToolCalls, asked(paris, tokyo), toolUsage},
		{"arguments that are not JSON pass verbatim", openaitest.Stream(openaitest.ToolCalls(3, broken)...),
			"", provider.FinishToolCalls, asked(broken), toolUsage},
		{"calls finished with stop, as some compatible servers do", openaitest.Stream(frames([]string{openaitest.Role()},
			openaitest.ToolCallFrames(4, paris), tail("stop"))...),
			"", provider.FinishToolCalls, asked(paris), toolUsage},
		{"calls all numbered 0, told apart by their ids", openaitest.Stream(openaitest.Role(),
			openaitest.ToolCallStart(0, paris.ID, paris.Name), openaitest.ToolCallArgs(0, paris.Args),
			openaitest.ToolCallStart(0, tokyo.ID, tokyo.Name), openaitest.ToolCallArgs(0, tokyo.Args),
			openaitest.Finish("tool_calls"), openaitest.Usage(80, 18, 0, 0), openaitest.Done),
			"", provider.FinishToolCalls, asked(paris, tokyo), toolUsage},
		{"truncated: the calls are dropped", openaitest.Stream(frames([]string{openaitest.Role()},
			openaitest.ToolCallFrames(4, broken), tail("length"))...),
			"", provider.FinishLength, nil, toolUsage},
		{"finished, then the connection drops: the calls are whole", openaitest.StreamAbort(frames([]string{openaitest.Role()},
			openaitest.ToolCallFrames(2, paris, now), []string{openaitest.Finish("tool_calls")})...),
			"", provider.FinishToolCalls, asked(paris, now), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := openaitest.New(t, "/v1", tc.reply)
			text, resp, err := stream(t, newModel(t, srv, nil), toolRequest())
			want := provider.Response{FinishReason: tc.finish, Model: openaitest.Model, ToolCalls: tc.calls, Usage: tc.usage}
			if err != nil || text != tc.text || !reflect.DeepEqual(resp, want) {
				t.Errorf("got %q %+v (usage %+v) %v\nwant %q %+v (usage %+v)", text, resp, resp.Usage, err, tc.text, want, want.Usage)
			}
		})
	}
}

// TestResponsesToolCallStreams: how a Responses stream's function_call
// items become Response.ToolCalls.
func TestResponsesToolCallStreams(t *testing.T) {
	// text and calls: text, a call, more text, another call.
	var textAndCalls []string
	{
		first, seq := openaitest.RFunctionCall(2, 1, 4, paris)
		second, seq2 := openaitest.RFunctionCall(seq+1, 3, 4, tokyo)
		textAndCalls = frames([]string{openaitest.RCreated(), openaitest.RTextDelta(1, "Let me check. ")}, first,
			[]string{openaitest.RTextDelta(seq, "And Tokyo: ")}, second,
			[]string{openaitest.RCompleted(seq2, 80, 18, 0, 0, openaitest.RFunctionCallItem(paris, true), openaitest.RFunctionCallItem(tokyo, true))})
	}
	// emptyOutput streams its calls, but its response.completed lists none.
	emptyOutput := openaitest.RToolCalls(3, paris, now)
	emptyOutput[len(emptyOutput)-1] = openaitest.RCompleted(99, 80, 18, 0, 0)
	// incomplete stops for max_output_tokens in the middle of a call.
	added, _ := openaitest.RFunctionCall(1, 0, 4, broken)
	incomplete := frames([]string{openaitest.RCreated()}, added[:3], []string{openaitest.RIncomplete(4, "max_output_tokens", 80, 64)})

	for _, tc := range []struct {
		name   string
		frames []string
		text   string
		finish string
		calls  []provider.ToolCall
		usage  *provider.Usage
	}{
		{"three calls in one response, arguments in pieces", openaitest.RToolCalls(3, paris, tokyo, now),
			"", provider.FinishToolCalls, asked(paris, tokyo, now), toolUsage},
		{"text before and between calls", textAndCalls,
			"Let me check. And Tokyo: ", provider.FinishToolCalls, asked(paris, tokyo), toolUsage},
		{"arguments that are not JSON pass verbatim", openaitest.RToolCalls(2, broken),
			"", provider.FinishToolCalls, asked(broken), toolUsage},
		{"output left empty: the streamed calls", emptyOutput,
			"", provider.FinishToolCalls, asked(paris, now), toolUsage},
		{"incomplete: the calls are dropped", incomplete,
			"", provider.FinishLength, nil, &provider.Usage{InputTokens: 80, OutputTokens: 64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := openaitest.New(t, "/v1", openaitest.Stream(tc.frames...))
			text, resp, err := stream(t, responsesModel(t, srv), toolRequest())
			want := provider.Response{FinishReason: tc.finish, Model: openaitest.Model, ToolCalls: tc.calls, Usage: tc.usage}
			if err != nil || text != tc.text || !reflect.DeepEqual(resp, want) {
				t.Errorf("got %q %+v (usage %+v) %v\nwant %q %+v (usage %+v)", text, resp, resp.Usage, err, tc.text, want, want.Usage)
			}
		})
	}
}

// TestToolCallStreamBroken: a stream that breaks in the middle of a tool
// call fails the attempt as a retryable error, and no call of it reaches
// the caller.
func TestToolCallStreamBroken(t *testing.T) {
	chatCut := []string{openaitest.Role(), openaitest.ToolCallStart(0, paris.ID, paris.Name),
		openaitest.ToolCallArgs(0, `{"ci`), openaitest.ToolCallStart(1, tokyo.ID, tokyo.Name)}
	first, _ := openaitest.RFunctionCall(1, 0, 4, paris)
	second, _ := openaitest.RFunctionCall(len(first)+1, 1, 4, tokyo)
	// The first call is whole, the second begun: no terminal event.
	respCut := frames([]string{openaitest.RCreated()}, first, second[:2])
	for _, tc := range []struct {
		name  string
		api   string
		reply openaitest.Reply
		kind  string
	}{
		{"chat, the connection drops", openai.APIChatCompletions, openaitest.StreamAbort(chatCut...), modelretry.KindStreamInterrupted},
		{"chat, the body ends", openai.APIChatCompletions, openaitest.Stream(chatCut...), modelretry.KindStreamInterrupted},
		{"chat, the server goes quiet", openai.APIChatCompletions, openaitest.StreamStall(chatCut...), modelretry.KindTimeout},
		{"responses, the connection drops", openai.APIResponses, openaitest.StreamAbort(respCut...), modelretry.KindStreamInterrupted},
		{"responses, the body ends", openai.APIResponses, openaitest.Stream(respCut...), modelretry.KindStreamInterrupted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := openaitest.New(t, "/v1", tc.reply)
			m := newModel(t, srv, func(c *openai.Config) { c.API = tc.api; c.IdleTimeout = 40 * time.Millisecond })
			_, resp, err := stream(t, m, toolRequest())
			pe := providerError(t, err)
			if pe.Kind != tc.kind || resp.ToolCalls != nil || resp.FinishReason != "" {
				t.Errorf("got %+v, calls %+v, finish %q; want %s and no calls", pe, resp.ToolCalls, resp.FinishReason, tc.kind)
			}
			if f := modelretry.Classify(modelretry.Signal{Kind: pe.Kind, HTTPStatus: pe.HTTPStatus}, time.Now()); !f.Retryable {
				t.Errorf("%s is not retryable: %+v", pe.Kind, f)
			}
		})
	}
}

// history is a session's history as the turn layer hands it over: one
// assistant message per call and one tool message per result, each as
// recorded (the results in the order they came). The first step's calls
// follow text; one result is an error; the third step's result is an
// error with no text; the fourth step's call has no recorded result.
func history() []provider.Message {
	call := func(c openaitest.Call) provider.Message {
		return provider.Message{Role: provider.RoleAssistant, ToolCalls: asked(c)}
	}
	result := func(c openaitest.Call, text string, isError bool) provider.Message {
		return provider.Message{Role: provider.RoleTool, ToolResults: []provider.ToolResult{{CallID: c.ID, Name: c.Name, Text: text, IsError: isError}}}
	}
	return []provider.Message{
		{Role: provider.RoleUser, Text: "Weather in Paris and Tokyo?"},
		{Role: provider.RoleAssistant, Text: "Let me check."},
		call(paris),
		call(tokyo),
		result(tokyo, "25 °C, sunny", false),
		result(paris, "the weather service is down", true),
		{Role: provider.RoleAssistant, Text: "Tokyo: 25 °C. Paris: unknown."},
		{Role: provider.RoleUser, Text: "What time is it?"},
		call(now),
		result(now, "", true),
		call(later),
		{Role: provider.RoleUser, Text: "Still there?"},
	}
}

// TestChatToolRequest: the exact chat/completions body for tools and a
// history of calls and results.
func TestChatToolRequest(t *testing.T) {
	srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Answer("ok")...))
	req := toolRequest()
	req.Messages = history()
	if _, _, err := stream(t, newModel(t, srv, nil), req); err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	sameJSON(t, "tools", r.Body["tools"], `[
		{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
			"parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "maximum": 10}}, "required": ["city"]}}},
		{"type": "function", "function": {"name": "clock", "parameters": {"type": "object", "properties": {}}}}]`)
	// Error results are told by their text: Chat has no error flag.
	sameJSON(t, "messages", r.Body["messages"], `[
		{"role": "user", "content": "Weather in Paris and Tokyo?"},
		{"role": "assistant", "content": "Let me check.", "tool_calls": [
			{"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
			{"id": "call_def", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Tokyo\",\"days\":3}"}}]},
		{"role": "tool", "tool_call_id": "call_abc", "content": "the weather service is down"},
		{"role": "tool", "tool_call_id": "call_def", "content": "25 °C, sunny"},
		{"role": "assistant", "content": "Tokyo: 25 °C. Paris: unknown."},
		{"role": "user", "content": "What time is it?"},
		{"role": "assistant", "content": null, "tool_calls": [
			{"id": "call_ghi", "type": "function", "function": {"name": "clock", "arguments": "{}"}}]},
		{"role": "tool", "tool_call_id": "call_ghi", "content": "the tool call failed without saying why"},
		{"role": "assistant", "content": null, "tool_calls": [
			{"id": "call_jkl", "type": "function", "function": {"name": "clock", "arguments": "{}"}}]},
		{"role": "tool", "tool_call_id": "call_jkl", "content": "no result was recorded for this call"},
		{"role": "user", "content": "Still there?"}]`)
	checkRest(t, r, "messages", `{"model": "gpt-4o-mini", "stream": true, "stream_options": {"include_usage": true}, "max_completion_tokens": 64}`)
}

// TestResponsesToolRequest: the exact responses body for tools and a
// history of calls and results.
func TestResponsesToolRequest(t *testing.T) {
	srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.RCreated(), openaitest.RTextDelta(1, "ok"), openaitest.RCompleted(2, 1, 1, 0, 0)))
	req := toolRequest()
	req.Messages = history()
	if _, _, err := stream(t, responsesModel(t, srv), req); err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	sameJSON(t, "tools", r.Body["tools"], `[
		{"type": "function", "name": "get_weather", "description": "The weather in a city.", "strict": false,
			"parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "maximum": 10}}, "required": ["city"]}},
		{"type": "function", "name": "clock", "strict": false, "parameters": {"type": "object", "properties": {}}}]`)
	sameJSON(t, "input", r.Body["input"], `[
		{"role": "user", "content": "Weather in Paris and Tokyo?"},
		{"role": "assistant", "content": "Let me check."},
		{"type": "function_call", "call_id": "call_abc", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
		{"type": "function_call", "call_id": "call_def", "name": "get_weather", "arguments": "{\"city\":\"Tokyo\",\"days\":3}"},
		{"type": "function_call_output", "call_id": "call_abc", "output": "the weather service is down"},
		{"type": "function_call_output", "call_id": "call_def", "output": "25 °C, sunny"},
		{"role": "assistant", "content": "Tokyo: 25 °C. Paris: unknown."},
		{"role": "user", "content": "What time is it?"},
		{"type": "function_call", "call_id": "call_ghi", "name": "clock", "arguments": "{}"},
		{"type": "function_call_output", "call_id": "call_ghi", "output": "the tool call failed without saying why"},
		{"type": "function_call", "call_id": "call_jkl", "name": "clock", "arguments": "{}"},
		{"type": "function_call_output", "call_id": "call_jkl", "output": "no result was recorded for this call"},
		{"role": "user", "content": "Still there?"}]`)
	checkRest(t, r, "input", `{"model": "gpt-4o-mini", "stream": true, "store": false, "max_output_tokens": 64}`)
}

// checkRest checks the body's members other than tools and history: the
// request carries nothing else (no tool_choice, no parallel_tool_calls),
// and the schema's number went out as a number.
func checkRest(t *testing.T, r openaitest.Request, historyKey, want string) {
	t.Helper()
	rest := map[string]any{}
	for k, v := range r.Body {
		if k != "tools" && k != historyKey {
			rest[k] = v
		}
	}
	sameJSON(t, "the rest of the body", rest, want)
	if !strings.Contains(string(r.Raw), `"maximum":10`) {
		t.Errorf("the schema's 1e1 did not go out as the number 10: %s", r.Raw)
	}
}

// TestToolSchemaRefused: a tool whose schema is not a JSON object fails
// the request before it is sent, on both APIs.
func TestToolSchemaRefused(t *testing.T) {
	for _, api := range []string{openai.APIChatCompletions, openai.APIResponses} {
		for _, schema := range []string{`[1]`, `{"type":`, `"object"`} {
			t.Run(api+" "+schema, func(t *testing.T) {
				srv := openaitest.New(t, "/v1")
				req := hello
				req.Tools = []provider.ToolSpec{{Name: "bad", InputSchema: json.RawMessage(schema)}}
				_, _, err := stream(t, newModel(t, srv, func(c *openai.Config) { c.API = api }), req)
				if pe := providerError(t, err); pe.Kind != modelretry.KindInvalidRequest || !strings.Contains(pe.Message, `"bad"`) || srv.Count() != 0 {
					t.Errorf("got %+v after %d requests", pe, srv.Count())
				}
			})
		}
	}
}

// --- a turn that calls tools, through the runner ---

// builtinTools is a turn's toolbox of mspd's built-in server (clock and
// calculator, in process), its clock stopped at clockNow.
func builtinTools(t *testing.T) turn.Toolbox {
	t.Helper()
	c, err := builtin.Start(func() time.Time { return clockNow }, tool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry(c)
	if err != nil {
		t.Fatal(err)
	}
	return turn.Registry(reg)
}

var clockNow = time.Date(2024, 1, 2, 15, 4, 5, 0, time.UTC)

// The built-in calls the model makes in the first step, and what the
// tools answer.
var (
	product  = openaitest.Call{ID: "call_1", Name: "builtin__calculator", Args: `{"expression":"6*7"}`}
	quotient = openaitest.Call{ID: "call_2", Name: "builtin__calculator", Args: `{"expression":"1/0"}`}
	clock    = openaitest.Call{ID: "call_3", Name: "builtin__clock", Args: `{"zone":"UTC"}`}
)

// TestToolTurn runs a two-step turn through the runner, on each API: the
// model calls three tools at once (one of which fails), the runner calls
// them, and the second request carries the calls and their results. In
// the second case the first attempt's stream breaks in the middle of a
// call: it is retried, and none of its calls is made.
func TestToolTurn(t *testing.T) {
	type api struct {
		name    string
		cfg     func(*openai.Config)
		calls   openaitest.Reply
		broken  openaitest.Reply
		answer  openaitest.Reply
		history string // the body member holding the history
		want    string // the history of the second step's request
	}
	first, _ := openaitest.RFunctionCall(1, 0, 5, product)
	apis := []api{{
		name:    "chat",
		calls:   openaitest.Stream(openaitest.ToolCalls(5, product, quotient, clock)...),
		broken:  openaitest.StreamAbort(frames([]string{openaitest.Role()}, openaitest.ToolCallFrames(5, product)[:3])...),
		answer:  openaitest.Stream(openaitest.Answer("6*7 is ", "42.")...),
		history: "messages",
		want: `[
			{"role": "user", "content": "What is 6*7, 1/0, and the time?"},
			{"role": "assistant", "content": null, "tool_calls": [
				{"id": "call_1", "type": "function", "function": {"name": "builtin__calculator", "arguments": "{\"expression\":\"6*7\"}"}},
				{"id": "call_2", "type": "function", "function": {"name": "builtin__calculator", "arguments": "{\"expression\":\"1/0\"}"}},
				{"id": "call_3", "type": "function", "function": {"name": "builtin__clock", "arguments": "{\"zone\":\"UTC\"}"}}]},
			{"role": "tool", "tool_call_id": "call_1", "content": "42"},
			{"role": "tool", "tool_call_id": "call_2", "content": "at character 2: division by zero"},
			{"role": "tool", "tool_call_id": "call_3", "content": "Tuesday, 2 January 2024 15:04:05 UTC (UTC)"}]`,
	}, {
		name:    "responses",
		cfg:     func(c *openai.Config) { c.API = openai.APIResponses },
		calls:   openaitest.Stream(openaitest.RToolCalls(5, product, quotient, clock)...),
		broken:  openaitest.StreamAbort(frames([]string{openaitest.RCreated()}, first[:2])...),
		answer:  openaitest.Stream(openaitest.RCreated(), openaitest.RTextDelta(1, "6*7 is "), openaitest.RTextDelta(2, "42."), openaitest.RCompleted(3, 120, 2, 0, 0)),
		history: "input",
		want: `[
			{"role": "user", "content": "What is 6*7, 1/0, and the time?"},
			{"type": "function_call", "call_id": "call_1", "name": "builtin__calculator", "arguments": "{\"expression\":\"6*7\"}"},
			{"type": "function_call", "call_id": "call_2", "name": "builtin__calculator", "arguments": "{\"expression\":\"1/0\"}"},
			{"type": "function_call", "call_id": "call_3", "name": "builtin__clock", "arguments": "{\"zone\":\"UTC\"}"},
			{"type": "function_call_output", "call_id": "call_1", "output": "42"},
			{"type": "function_call_output", "call_id": "call_2", "output": "at character 2: division by zero"},
			{"type": "function_call_output", "call_id": "call_3", "output": "Tuesday, 2 January 2024 15:04:05 UTC (UTC)"}]`,
	}}
	for _, a := range apis {
		for _, broken := range []bool{false, true} {
			name := a.name
			replies := []openaitest.Reply{a.calls, a.answer}
			if broken {
				name += ", first stream broken mid-call"
				replies = append([]openaitest.Reply{a.broken}, replies...)
			}
			t.Run(name, func(t *testing.T) {
				srv := openaitest.New(t, "/v1", replies...)
				spec := turn.Spec{SessionID: "session-1", TurnID: "turn-1", Tools: builtinTools(t),
					History: []provider.Message{{Role: provider.RoleUser, Text: "What is 6*7, 1/0, and the time?"}}}
				r := runTurn(t, newModel(t, srv, a.cfg), spec, time.Now(), nil)
				checkToolTurn(t, srv, r, len(replies), broken)
				reqs := srv.Requests()
				sameJSON(t, "the first request's history", reqs[0].Body[a.history], `[{"role": "user", "content": "What is 6*7, 1/0, and the time?"}]`)
				sameJSON(t, "the last request's history", reqs[len(reqs)-1].Body[a.history], a.want)
				for i, q := range reqs {
					if names := toolNames(q.Body["tools"]); names != "builtin__calculator builtin__clock" {
						t.Errorf("request %d offers %q", i+1, names)
					}
				}
			})
		}
	}
}

// checkToolTurn checks what the runner made of the turn: each call made
// once, as its own item, the failed one failed; the answer; every request
// an attempt; the tool-call step's usage counted.
func checkToolTurn(t *testing.T, srv *openaitest.Server, r turnRun, requests int, broken bool) {
	t.Helper()
	c := r.out.Completed
	if c.Terminal != msp.TerminalCompleted || r.out.Answer != "6*7 is 42." {
		t.Fatalf("terminal %q answer %q error %+v; events %s", c.Terminal, r.out.Answer, c.Error, r.sink.Methods())
	}
	if srv.Count() != requests || c.Attempts.Count != requests {
		t.Errorf("%d requests, attempts %+v; want %d", srv.Count(), c.Attempts, requests)
	}
	if c.Attempts.OutputTokens != openaitest.ToolCallCompletionTokens+2 {
		t.Errorf("output tokens %d, want the tool-call step's %d and the answer's 2", c.Attempts.OutputTokens, openaitest.ToolCallCompletionTokens)
	}
	// The calls run at once and close in any order; the history above
	// holds their results in the order of the calls.
	var got []string
	for _, it := range turntest.Of[*msp.ItemParams](r.sink, msp.NotifyItemCompleted) {
		if it.Item.Kind == msp.ItemToolCall {
			got = append(got, it.Item.CallID+" "+it.Item.Tool+" "+it.Item.Status+" "+*it.Item.VisibleOutput)
		}
	}
	slices.Sort(got)
	want := []string{"call_1 calculator completed 42", "call_2 calculator failed at character 2: division by zero",
		"call_3 clock completed Tuesday, 2 January 2024 15:04:05 UTC (UTC)"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("toolCall items\n got %q\nwant %q", got, want)
	}
	var retries []notice
	if broken {
		retries = []notice{turntest.NewModelRetry(1, 5, 250, "openai", modelretry.KindStreamInterrupted, 0)}
	}
	if got := turntest.ModelRetries(r.sink); !reflect.DeepEqual(got, retries) {
		t.Errorf("model retries %+v, want %+v", got, retries)
	}
}

// toolNames lists the names of a request body's tools, either API's.
func toolNames(tools any) string {
	var names []string
	list, _ := tools.([]any)
	for _, x := range list {
		tl, _ := x.(map[string]any)
		if f, ok := tl["function"].(map[string]any); ok {
			tl = f
		}
		names = append(names, tl["name"].(string))
	}
	return strings.Join(names, " ")
}
