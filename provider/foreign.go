package provider

import (
	"strings"
)

// ForeignToolsAsText rewrites the tool calls of another family's model as
// plain text: each step whose assistant message names a Provider that
// native refuses becomes one assistant message holding its text and, for
// each call, the tool, its arguments and what it returned — so that a
// session that switched from, say, an OpenAI model to an Anthropic one
// keeps what its tools told it, without sending one API's call ids and
// shapes to the other. msgs are grouped as Steps returns them; calls of
// an unknown Provider ("") and of a native one stay as they are. A nil
// native keeps every call.
func ForeignToolsAsText(msgs []Message, native func(providerID string) bool) []Message {
	if native == nil || !hasForeign(msgs, native) {
		return msgs
	}
	out := make([]Message, 0, len(msgs))
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if !foreign(m, native) {
			out = append(out, m)
			continue
		}
		var results []ToolResult
		if i+1 < len(msgs) && msgs[i+1].Role == RoleTool {
			results = msgs[i+1].ToolResults
			i++
		}
		out = append(out, Message{Role: RoleAssistant, Text: callsText(m, results), Provider: m.Provider})
	}
	return out
}

// foreign tells whether m is an assistant message whose calls native
// refuses.
func foreign(m Message, native func(string) bool) bool {
	return m.Role == RoleAssistant && len(m.ToolCalls) > 0 && m.Provider != "" && !native(m.Provider)
}

func hasForeign(msgs []Message, native func(string) bool) bool {
	for _, m := range msgs {
		if foreign(m, native) {
			return true
		}
	}
	return false
}

// callsText is a step's text, then a line for each of its calls and
// what it returned.
func callsText(m Message, results []ToolResult) string {
	byID := make(map[string]ToolResult, len(results))
	for _, r := range results {
		byID[r.CallID] = r
	}
	var b strings.Builder
	b.WriteString(m.Text)
	for _, c := range m.ToolCalls {
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString("[I called the tool " + c.Name + " with the arguments " + c.Args)
		switch r, ok := byID[c.ID]; {
		case !ok:
			b.WriteString("; no result was recorded]")
		case r.IsError:
			b.WriteString("; it failed: " + r.Text + "]")
		default:
			b.WriteString("; it returned: " + r.Text + "]")
		}
	}
	return b.String()
}
