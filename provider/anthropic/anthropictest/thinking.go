package anthropictest

import "fmt"

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
