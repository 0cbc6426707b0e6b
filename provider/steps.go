package provider

// Steps groups a history's tool calls and results into the shape every
// provider's API accepts: each assistant message that calls tools is
// followed by exactly one RoleTool message answering all of its calls, in
// the order they were made.
//
// A session keeps its history as items, so a step arrives as its text,
// then the reasoning its provider needs back (a message of Reasoning
// alone), then one assistant message per call (as each call was recorded,
// all before any was made), then one tool message per result (as each
// came). Steps merges the reasoning and the calls into the assistant
// message that began the step: an assistant message with no text joins
// the message before as long as no result has come since; text, or an
// assistant message after results, begins a new step.
// Results are put in the order of the calls. A call without a recorded
// result is answered with an error result, because every provider refuses
// a call left unanswered; a result without its call is dropped.
func Steps(msgs []Message) []Message {
	if !hasTools(msgs) {
		return msgs
	}
	out := make([]Message, 0, len(msgs))
	var step *Message // the assistant message collecting the current run's calls
	var results []ToolResult
	flush := func() {
		if step == nil {
			results = nil // strays with no step to answer: dropped
			return
		}
		if len(step.ToolCalls) > 0 {
			out = append(out, *step, Message{Role: RoleTool, ToolResults: answer(step.ToolCalls, results)})
		} else {
			out = append(out, *step)
		}
		step, results = nil, nil
	}
	for _, m := range msgs {
		switch {
		case m.Role == RoleTool:
			results = append(results, m.ToolResults...)
		case m.Role == RoleAssistant && m.Text == "" && step != nil && results == nil:
			step.ToolCalls = append(step.ToolCalls, m.ToolCalls...)
			step.Reasoning = append(step.Reasoning, m.Reasoning...)
		case m.Role == RoleAssistant:
			flush()
			s := m
			s.ToolCalls = append([]ToolCall(nil), m.ToolCalls...)
			s.Reasoning = append([]Reasoning(nil), m.Reasoning...)
			step = &s
		default:
			flush()
			out = append(out, m)
		}
	}
	flush()
	return out
}

// hasTools tells whether any message calls or answers a tool.
func hasTools(msgs []Message) bool {
	for _, m := range msgs {
		if len(m.ToolCalls) > 0 || m.Role == RoleTool {
			return true
		}
	}
	return false
}

// answer orders results as calls were made, one per call.
func answer(calls []ToolCall, results []ToolResult) []ToolResult {
	byID := make(map[string]ToolResult, len(results))
	for _, r := range results {
		if _, dup := byID[r.CallID]; !dup {
			byID[r.CallID] = r
		}
	}
	out := make([]ToolResult, len(calls))
	for i, c := range calls {
		r, ok := byID[c.ID]
		if !ok {
			r = ToolResult{CallID: c.ID, Name: c.Name, IsError: true, Text: "no result was recorded for this call"}
		}
		out[i] = r
	}
	return out
}
