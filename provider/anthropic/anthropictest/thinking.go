package anthropictest

import (
	"fmt"
	"testing"
)

// Extended thinking's events, byte for byte as the API sends them: a
// thinking block opens empty, streams thinking_delta events, then one
// signature_delta, and stops; a redacted_thinking block opens whole.

// ThinkingStartAt is content_block_start of thinking block i.
func ThinkingStartAt(i int) string {
	return fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"thinking","thinking":"","signature":""}}`, i)
}

// ThinkingDeltaAt is a thinking_delta adding text to block i.
func ThinkingDeltaAt(i int, text string) string {
	return fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"thinking_delta","thinking":%s}}`, i, quote(text))
}

// SignatureDeltaAt is the signature_delta of thinking block i.
func SignatureDeltaAt(i int, signature string) string {
	return fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"signature_delta","signature":%s}}`, i, quote(signature))
}

// RedactedThinkingAt is content_block_start of redacted_thinking block i
// holding data.
func RedactedThinkingAt(i int, data string) string {
	return fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"redacted_thinking","data":%s}}`, i, quote(data))
}

// ThinkingBlock is thinking block i: its start, a thinking_delta per
// chunk, its signature_delta and its stop.
func ThinkingBlock(i int, signature string, chunks ...string) []string {
	out := []string{ThinkingStartAt(i)}
	for _, c := range chunks {
		out = append(out, ThinkingDeltaAt(i, c))
	}
	return append(out, SignatureDeltaAt(i, signature), BlockStopAt(i))
}

// MsgDeltaThinking is message_delta with stop_reason stop, out output
// tokens of which thinking were thinking (output_tokens_details).
func MsgDeltaThinking(stop string, out, thinking int) string {
	return fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d,"output_tokens_details":{"thinking_tokens":%d}}}`, stop, out, thinking)
}

// checkThinking fails the test for what the API refuses of a request
// with thinking on: budget_tokens below 1024 or not below max_tokens, a
// forced tool, and, in a tool loop, a last assistant message that calls
// tools without starting with a thinking or redacted_thinking block.
func checkThinking(t testing.TB, r Request) {
	th, _ := r.Body["thinking"].(map[string]any)
	if th == nil || th["type"] == "disabled" {
		return
	}
	if th["type"] == "enabled" {
		budget, _ := th["budget_tokens"].(float64)
		if max, _ := r.Body["max_tokens"].(float64); budget < 1024 || budget >= max {
			t.Errorf("anthropictest: thinking.budget_tokens %v; must be at least 1024 and below max_tokens %v", th["budget_tokens"], r.Body["max_tokens"])
		}
	}
	if tc, _ := r.Body["tool_choice"].(map[string]any); tc["type"] == "tool" || tc["type"] == "any" {
		t.Errorf("anthropictest: tool_choice %v with thinking on; thinking only allows auto or none", tc)
	}
	msgs, _ := r.Body["messages"].([]any)
	for i := len(msgs) - 1; i >= 0; i-- {
		m, _ := msgs[i].(map[string]any)
		if m["role"] != "assistant" {
			continue
		}
		blocks, _ := m["content"].([]any)
		calls := false
		for _, b := range blocks {
			calls = calls || blockType(b) == "tool_use"
		}
		if first := blockType(firstOf(blocks)); calls && first != "thinking" && first != "redacted_thinking" {
			t.Errorf("anthropictest: messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. "+
				"When `thinking` is enabled, a final `assistant` message must start with a thinking block", i, first)
		}
		return
	}
}

func blockType(b any) string {
	m, _ := b.(map[string]any)
	s, _ := m["type"].(string)
	return s
}

func firstOf(blocks []any) any {
	if len(blocks) == 0 {
		return nil
	}
	return blocks[0]
}
