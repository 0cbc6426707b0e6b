package openaitest

// Reasoning as OpenAI-compatible servers stream it on Chat Completions
// (delta.reasoning_content, or delta.reasoning), and as the Responses API
// streams a reasoning output item: response.output_item.added (summary
// empty), per summary part reasoning_summary_part.added, its
// reasoning_summary_text.delta events, reasoning_summary_text.done and
// reasoning_summary_part.done, then response.output_item.done with the
// summary and the encrypted_content asked for.

// ReasoningContent is a chunk streaming reasoning as
// delta.reasoning_content (DeepSeek, vLLM, llama.cpp).
func ReasoningContent(text string) string {
	return render(chunk{Choices: []choice{{Delta: delta{ReasoningContent: &text}}}})
}

// ReasoningField is a chunk streaming reasoning as delta.reasoning
// (Ollama, some vLLM versions).
func ReasoningField(text string) string {
	return render(chunk{Choices: []choice{{Delta: delta{Reasoning: &text}}}})
}

// Reasoning is a whole Chat Completions stream that reasons (one chunk
// per part, as reasoning_content) and then answers (one delta per part),
// finishing stop with usage: 12 prompt tokens, reasoning tokens as many
// as the reasoning parts, completion tokens those plus the answer's.
func Reasoning(reasoning []string, answer ...string) []string {
	frames := []string{Role()}
	for _, r := range reasoning {
		frames = append(frames, ReasoningContent(r))
	}
	for _, a := range answer {
		frames = append(frames, Delta(a))
	}
	n := int64(len(reasoning))
	return append(frames, Finish("stop"), Usage(12, n+int64(len(answer)), 0, n), Done)
}

// RReasoningItem is a reasoning output item: id rs_…, its summary parts
// and encrypted content ("" leaves the member out), in_progress with an
// empty summary while it streams (done false).
func RReasoningItem(id string, encrypted string, summary []string, done bool) map[string]any {
	parts := []any{}
	item := map[string]any{"type": "reasoning", "id": id, "summary": parts}
	if !done {
		return item
	}
	for _, s := range summary {
		parts = append(parts, map[string]any{"type": "summary_text", "text": s})
	}
	item["summary"] = parts
	if encrypted != "" {
		item["encrypted_content"] = encrypted
	}
	return item
}

// RReasoning is the events of reasoning item id as output item
// outputIndex, numbered from seq: each summary part streamed in deltas of
// split bytes, then the item done with its encrypted content. It returns
// them and the next sequence number.
func RReasoning(seq, outputIndex, split int, id, encrypted string, summary ...string) ([]string, int) {
	at := func(fields map[string]any) map[string]any {
		fields["output_index"], fields["item_id"] = outputIndex, id
		return fields
	}
	events := []string{event("response.output_item.added", seq, map[string]any{"output_index": outputIndex,
		"item": RReasoningItem(id, "", nil, false)})}
	seq++
	for i, s := range summary {
		events = append(events, event("response.reasoning_summary_part.added", seq,
			at(map[string]any{"summary_index": i, "part": map[string]any{"type": "summary_text", "text": ""}})))
		seq++
		for _, f := range fragments(s, split) {
			events = append(events, event("response.reasoning_summary_text.delta", seq, at(map[string]any{"summary_index": i, "delta": f})))
			seq++
		}
		events = append(events,
			event("response.reasoning_summary_text.done", seq, at(map[string]any{"summary_index": i, "text": s})),
			event("response.reasoning_summary_part.done", seq+1,
				at(map[string]any{"summary_index": i, "part": map[string]any{"type": "summary_text", "text": s}})))
		seq += 2
	}
	events = append(events, event("response.output_item.done", seq, map[string]any{"output_index": outputIndex,
		"item": RReasoningItem(id, encrypted, summary, true)}))
	return events, seq + 1
}
