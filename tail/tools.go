package tail

import (
	"fmt"
	"strings"
	"time"

	"mspd/schema/msp"
)

// Tool-call lines: what a call's output shows of itself. Its text is the
// tool's, untrusted like a model's: it is sanitized, kept to a line or
// two, and never drives the terminal.
const (
	// callLines is how many lines of a call's output its end line shows.
	callLines = 2
	// callLineRunes bounds each of them, and the arguments shown.
	callLineRunes = 100
)

// callStarted words a tool call as it starts:
// `→ calculator (builtin) {"expression":"(2+3)*4"}`.
func (r *renderer) callStarted(it msp.Item) string {
	line := r.paint(cyan, "→ "+callName(it)) + " (" + oneLine(it.Server) + ")"
	if it.Args != nil && *it.Args != "" {
		line += " " + clip(oneLine(*it.Args), callLineRunes)
	}
	return line
}

// callEnded words how a tool call ended: "✓ calculator 12 ms: 20", "✗
// calculator failed after 3 ms: the tool reported an error: …", "✗ deploy
// rejected: …", "■ slow cancelled after 1.2 s: …".
func (r *renderer) callEnded(it msp.Item) string {
	name := callName(it)
	output := ""
	if it.VisibleOutput != nil {
		output = *it.VisibleOutput
	}
	after := ""
	if it.DurationMs != nil {
		after = " after " + callTime(*it.DurationMs)
	}
	why := oneLine(it.FailureReason)
	switch it.Status {
	case msp.ItemCompleted:
		head := "✓ " + name
		if it.DurationMs != nil {
			head += " " + callTime(*it.DurationMs)
		}
		return r.paint(green, head) + outputLines(output, it.Truncated)
	case msp.ItemFailed, msp.ItemTimedOut:
		words := "failed"
		if it.Status == msp.ItemTimedOut {
			words = "timed out"
		}
		line := r.paint(red, "✗ "+name+" "+words+after)
		if why != "" {
			line += ": " + why
		}
		// A tool's own error is in its output: that says what went wrong.
		return line + outputLines(output, it.Truncated)
	case msp.ItemRejected:
		line := r.paint(red, "✗ "+name+" rejected")
		if why != "" {
			line += ": " + why
		}
		return line
	case msp.ItemCancelled:
		line := r.paint(dim, "■ "+name+" cancelled"+after)
		if why != "" {
			line += ": " + why
		}
		return line
	}
	return r.paint(dim, "? "+name+" "+oneLine(it.Status))
}

// callName is the tool's name as a line shows it.
func callName(it msp.Item) string {
	if it.Tool == "" {
		return "tool"
	}
	return clip(oneLine(it.Tool), 60)
}

// outputLines is a call's output as its end line shows it: ": " and its
// first line, a second one indented below, each cut to callLineRunes; "…"
// marks what is left out (more lines, a longer line, or output the server
// truncated). Empty output adds nothing.
func outputLines(output string, truncated bool) string {
	var lines []string
	for l := range strings.Lines(output) {
		l = strings.TrimRight(l, " \t\r\n")
		if l == "" && len(lines) == 0 {
			continue // leading blank lines
		}
		lines = append(lines, l)
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) == 0 {
		return ""
	}
	more := truncated || len(lines) > callLines
	lines = lines[:min(len(lines), callLines)]
	for i, l := range lines {
		lines[i] = clip(oneLine(l), callLineRunes)
	}
	last := &lines[len(lines)-1]
	if more && !strings.HasSuffix(*last, "…") {
		*last += " …"
	}
	return ": " + strings.Join(lines, "\n    ")
}

// callTime words a call's duration: "12 ms", "1.4 s", "2m5s".
func callTime(ms int64) string {
	switch {
	case ms < 1000:
		return fmt.Sprintf("%d ms", max(ms, 0))
	case ms < 60000:
		return fmt.Sprintf("%.1f s", float64(ms)/1000)
	}
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
}
