package demo

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"mspd/provider"
)

// The demo model calls a tool when the request offers one whose name ends
// so (mspd's built-in server names them builtin__clock and
// builtin__calculator) and the user's message asks for it.
const (
	clockSuffix      = "__clock"
	calculatorSuffix = "__calculator"
)

// arithmetic finds an expression in a message: numbers joined by
// operators, with parentheses, at least one operator.
var arithmetic = regexp.MustCompile(`[-(]*\d+(?:\.\d+)?\)*(?:\s*[-+*/^x×÷]\s*[-(]*\d+(?:\.\d+)?\)*)+`)

// asksTime tells whether a message asks for the time or the date.
var asksTime = regexp.MustCompile(`(?i)\b(what time|the time|time is it|what day|today's date|the date|clock)\b`)

// toolPlan is what the demo model does with a request that may use
// tools: call one (call set, with a line saying so), or answer from the
// results the history ends with (answer set).
type toolPlan struct {
	lead   string
	call   *provider.ToolCall
	answer string
}

// planTools decides whether req is a tool step. The user's message asks
// for at most one call; once its result is in, the model answers from it.
func planTools(req provider.Request) (toolPlan, bool) {
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == provider.RoleTool {
		return toolPlan{answer: answerFrom(req.Messages[n-1].ToolResults)}, true
	}
	if len(req.Tools) == 0 {
		return toolPlan{}, false
	}
	prompt := provider.LastUserText(req.Messages)
	if expr := arithmetic.FindString(prompt); expr != "" {
		if name, ok := offered(req.Tools, calculatorSuffix); ok {
			expr = strings.NewReplacer("x", "*", "×", "*", "÷", "/").Replace(expr)
			return toolPlan{lead: "Let me work that out.", call: newCall(req, name, map[string]string{"expression": expr})}, true
		}
	}
	if asksTime.MatchString(prompt) {
		if name, ok := offered(req.Tools, clockSuffix); ok {
			return toolPlan{lead: "Let me check the clock.", call: newCall(req, name, map[string]string{})}, true
		}
	}
	return toolPlan{}, false
}

// offered finds the offered tool whose name ends with suffix.
func offered(tools []provider.ToolSpec, suffix string) (string, bool) {
	for _, t := range tools {
		if strings.HasSuffix(t.Name, suffix) {
			return t.Name, true
		}
	}
	return "", false
}

// newCall is a call of name with args, its id unique to the request.
func newCall(req provider.Request, name string, args map[string]string) *provider.ToolCall {
	b, _ := json.Marshal(args) // a map of strings always marshals
	return &provider.ToolCall{ID: "demo_call_" + strconv.Itoa(max(req.Attempt, 1)), Name: name, Args: string(b)}
}

// answerFrom words the results of the calls just made.
func answerFrom(results []provider.ToolResult) string {
	var b strings.Builder
	for i, r := range results {
		if i > 0 {
			b.WriteString(" ")
		}
		text := strings.TrimSpace(r.Text)
		switch {
		case r.IsError:
			b.WriteString("The tool could not help: " + text + ".")
		case strings.HasSuffix(r.Name, calculatorSuffix):
			b.WriteString("The calculator says " + text + ".")
		case strings.HasSuffix(r.Name, clockSuffix):
			b.WriteString("The clock says " + text + ".")
		default:
			b.WriteString("The tool answered: " + text)
		}
	}
	return b.String()
}
