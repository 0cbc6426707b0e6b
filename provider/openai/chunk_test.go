package openai

import "testing"

// TestChatChunkDecoding: the members streamChat reads come out of real
// chunk shapes, usage only when present and not null, and a member of an
// unexpected type is skipped (as the SDK's decoder does) rather than
// failing the stream.
func TestChatChunkDecoding(t *testing.T) {
	cases := []struct {
		name, in                      string
		content, reasoning, finish    string
		usage                         bool
		input, output, cached, reason int64
		calls                         int
	}{
		{name: "content", in: `{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}`,
			content: "Hi"},
		{name: "usage null", in: `{"model":"m","choices":[{"index":0,"delta":{"content":"x"}}],"usage":null}`, content: "x"},
		{name: "usage", in: `{"model":"m","choices":[],"usage":{"prompt_tokens":8,"completion_tokens":3,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":1}}}`,
			usage: true, input: 8, output: 3, cached: 2, reason: 1},
		{name: "finish", in: `{"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, finish: "stop"},
		{name: "reasoning_content", in: `{"model":"m","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"hmm"}}]}`, reasoning: "hmm"},
		{name: "reasoning", in: `{"model":"m","choices":[{"index":0,"delta":{"reasoning":"so"}}]}`, reasoning: "so"},
		{name: "reasoning not text", in: `{"model":"m","choices":[{"index":0,"delta":{"reasoning":{"effort":"low"},"content":"a"}}]}`, content: "a"},
		{name: "tool call", in: `{"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{"}}]}}]}`, calls: 1},
		{name: "wrong type skipped", in: `{"model":"m","choices":[{"index":0,"delta":{"content":"b","refusal":7}}]}`, content: "b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c chatChunk
			if err := decodeChunk([]byte(tc.in), &c); err != nil {
				t.Fatal(err)
			}
			if c.Model != "m" {
				t.Errorf("model %q", c.Model)
			}
			var content, reasoning, finish string
			calls := 0
			for _, ch := range c.Choices {
				content += ch.Delta.Content
				reasoning += chatReasoning(ch.Delta)
				finish += ch.FinishReason
				calls += len(ch.Delta.ToolCalls)
			}
			if content != tc.content || reasoning != tc.reasoning || finish != tc.finish || calls != tc.calls {
				t.Errorf("content %q reasoning %q finish %q calls %d; want %q %q %q %d",
					content, reasoning, finish, calls, tc.content, tc.reasoning, tc.finish, tc.calls)
			}
			if (c.Usage != nil) != tc.usage {
				t.Fatalf("usage %+v, want present: %v", c.Usage, tc.usage)
			}
			if u := c.Usage; u != nil && (u.PromptTokens != tc.input || u.CompletionTokens != tc.output ||
				u.PromptTokensDetails.CachedTokens != tc.cached || u.CompletionTokensDetails.ReasoningTokens != tc.reason) {
				t.Errorf("usage %+v", *u)
			}
		})
	}
	var c chatChunk
	if err := decodeChunk([]byte(`{"choices":[`), &c); err == nil {
		t.Error("a truncated chunk decoded")
	}
}
