package openaitest_test

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	"mspd/provider/openai/openaitest"
)

var weather = openaitest.Call{ID: "call_abc", Name: "get_weather", Args: `{"city":"Paris"}`}

// post sends one request to path under srv.URL() and returns the body's SSE lines.
func post(t *testing.T, srv *openaitest.Server, path string) []string {
	t.Helper()
	res, err := srv.Client().Post(srv.URL()+path, "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n")
}

// data decodes a data: line's JSON.
func data(t *testing.T, line string) any {
	t.Helper()
	payload, ok := strings.CutPrefix(line, "data: ")
	if !ok {
		t.Fatalf("%q is not a data line", line)
	}
	var v any
	if err := json.Unmarshal([]byte(payload), &v); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return v
}

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

// TestChatToolCallWire: a streamed Chat tool call as OpenAI sends it:
// data: lines only; the role, content null and the call's id, type and
// name in the first chunk; then argument fragments under the same index;
// finish_reason tool_calls; the usage chunk; [DONE].
func TestChatToolCallWire(t *testing.T) {
	srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.ToolCalls(6, weather)...))
	lines := post(t, srv, "/chat/completions")
	var chunks []string
	for _, l := range lines {
		if l != "" {
			chunks = append(chunks, l)
		}
	}
	if len(chunks) != 7 || chunks[6] != "data: [DONE]" {
		t.Fatalf("chunks %q", chunks)
	}
	choices := func(i int) any { return data(t, chunks[i]).(map[string]any)["choices"] }
	sameJSON(t, "first chunk", choices(0), `[{"index": 0, "logprobs": null, "finish_reason": null, "delta": {"role": "assistant", "content": null,
		"tool_calls": [{"index": 0, "id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}}]`)
	// {"city":"Paris"} in fragments of 6 bytes, as JSON strings.
	for i, frag := range []string{`"{\"city"`, `"\":\"Par"`, `"is\"}"`} {
		sameJSON(t, "fragment", choices(1+i), `[{"index": 0, "logprobs": null, "finish_reason": null,
			"delta": {"tool_calls": [{"index": 0, "function": {"arguments": `+frag+`}}]}}]`)
	}
	sameJSON(t, "finish", choices(4), `[{"index": 0, "logprobs": null, "finish_reason": "tool_calls", "delta": {}}]`)
	usage := data(t, chunks[5]).(map[string]any)
	if u := usage["usage"].(map[string]any); u["prompt_tokens"] != float64(80) || u["completion_tokens"] != float64(18) || len(usage["choices"].([]any)) != 0 {
		t.Errorf("usage chunk %s", chunks[5])
	}
}

// TestResponsesToolCallWire: a streamed Responses function call as OpenAI
// sends it: each event an event: line and a data: line of the same type.
func TestResponsesToolCallWire(t *testing.T) {
	srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.RToolCalls(8, weather)...))
	lines := post(t, srv, "/responses")
	var types []string
	var events []map[string]any
	for i := 0; i+1 < len(lines); i += 3 {
		name, ok := strings.CutPrefix(lines[i], "event: ")
		ev, _ := data(t, lines[i+1]).(map[string]any)
		if !ok || ev["type"] != name {
			t.Fatalf("lines %d-%d: %q %q", i, i+1, lines[i], lines[i+1])
		}
		types = append(types, name)
		events = append(events, ev)
	}
	want := []string{"response.created", "response.output_item.added", "response.function_call_arguments.delta",
		"response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done", "response.completed"}
	if !reflect.DeepEqual(types, want) {
		t.Fatalf("events %q", types)
	}
	sameJSON(t, "added", events[1], `{"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
		"item": {"type": "function_call", "id": "fc_abc", "call_id": "call_abc", "name": "get_weather", "arguments": "", "status": "in_progress"}}`)
	sameJSON(t, "delta", events[2], `{"type": "response.function_call_arguments.delta", "sequence_number": 2, "output_index": 0,
		"item_id": "fc_abc", "delta": "{\"city\":"}`)
	sameJSON(t, "done", events[4], `{"type": "response.function_call_arguments.done", "sequence_number": 4, "output_index": 0,
		"item_id": "fc_abc", "arguments": "{\"city\":\"Paris\"}"}`)
	item := `{"type": "function_call", "id": "fc_abc", "call_id": "call_abc", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}", "status": "completed"}`
	sameJSON(t, "item done", events[5], `{"type": "response.output_item.done", "sequence_number": 5, "output_index": 0, "item": `+item+`}`)
	r := events[6]["response"].(map[string]any)
	sameJSON(t, "completed output", r["output"], `[`+item+`]`)
	if u := r["usage"].(map[string]any); u["input_tokens"] != float64(80) || u["output_tokens"] != float64(18) {
		t.Errorf("usage %v", u)
	}
}
