// Package tail follows a session's view for a person at a terminal or for
// a script: the engine of `mspd tail`. It renders notifications as text
// (streaming deltas inline, retry notices as "openai · rate limited ·
// retrying in 3s · attempt 2/5"), as JSON lines, or as the raw answer text.
package tail

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"mspd/schema/msp"
)

// Output formats.
const (
	// Pretty is text for people.
	Pretty = "pretty"
	// JSON is one object per notification: {"cursor", "method", "params"}.
	JSON = "json"
	// Raw is the text of the agent's kept answers only, one per line: no
	// deltas (a discarded attempt's text never mixes in), nothing else.
	Raw = "raw"
)

// renderer writes notifications in one format. It remembers what each
// item streamed, so that item/completed can add what the deltas missed (a
// gap, a reconnect) and an item seen only as item/completed still prints
// its whole text once.
type renderer struct {
	w        io.Writer
	format   string
	color    bool
	streamed map[string]string // itemId → the delta text printed
	open     string            // the item whose deltas are on the current line
	broken   string            // the item whose line a status line cut short
}

func newRenderer(w io.Writer, format string, color bool) *renderer {
	return &renderer{w: w, format: format, color: color, streamed: map[string]string{}}
}

// event renders one notification.
func (r *renderer) event(method string, params json.RawMessage) {
	switch r.format {
	case JSON:
		var h struct {
			ViewCursor string `json:"viewCursor"`
		}
		json.Unmarshal(params, &h)
		line, _ := json.Marshal(struct {
			Cursor string          `json:"cursor,omitempty"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}{h.ViewCursor, method, params})
		fmt.Fprintf(r.w, "%s\n", line)
	case Raw:
		r.raw(method, params)
	default:
		r.pretty(method, params)
	}
}

func (r *renderer) raw(method string, params json.RawMessage) {
	if method != msp.NotifyItemCompleted {
		return
	}
	var p msp.ItemParams
	json.Unmarshal(params, &p)
	if p.Item.Kind == msp.ItemAgentMessage && p.Item.Status == msp.ItemCompleted && p.Item.Text != nil {
		io.WriteString(r.w, *p.Item.Text+"\n")
	}
}

// interrupt ends a line of streamed deltas before a status line; the
// item's next delta starts a new line with all it streamed so far, so the
// answer still reads whole.
func (r *renderer) interrupt() {
	if r.open != "" {
		r.broken = r.open
		r.endLine()
	}
}

// endLine finishes a line of streamed deltas before other output.
func (r *renderer) endLine() {
	if r.open != "" {
		io.WriteString(r.w, "\n")
		r.open = ""
	}
}

func (r *renderer) pretty(method string, params json.RawMessage) {
	switch method {
	case msp.NotifyItemDelta:
		var p msp.ItemDeltaParams
		json.Unmarshal(params, &p)
		if r.open != p.ItemID {
			r.endLine()
			fmt.Fprint(r.w, r.paint(bold, "agent: "))
			if r.broken == p.ItemID {
				io.WriteString(r.w, sanitize(r.streamed[p.ItemID]))
			}
			r.open, r.broken = p.ItemID, ""
		}
		r.streamed[p.ItemID] += p.Delta
		io.WriteString(r.w, sanitize(p.Delta))
		return
	case msp.NotifyItemStarted, msp.NotifySessionTokenUsage:
		return // the deltas and the terminal say it all
	case msp.NotifyItemCompleted:
		var p msp.ItemParams
		json.Unmarshal(params, &p)
		if r.finishStreamed(p.Item) {
			return
		}
	}
	r.endLine()
	switch method {
	case msp.NotifyTurnStarted:
		var p msp.TurnStartedParams
		json.Unmarshal(params, &p)
		fmt.Fprintln(r.w, r.paint(dim, "── turn "+short(p.TurnID)+" ──"))
	case msp.NotifyItemCompleted:
		var p msp.ItemParams
		json.Unmarshal(params, &p)
		r.item(p.Item)
	case msp.NotifyTurnModelRetryScheduled:
		var p msp.TurnModelRetryScheduledParams
		json.Unmarshal(params, &p)
		words := msp.ErrorKindWords(p.ErrorKind)
		if p.HTTPStatus != 0 {
			words += fmt.Sprintf(" (%d)", p.HTTPStatus)
		}
		parts := []string{words, retryIn(p.RetryDelayMs), fmt.Sprintf("attempt %d/%d", p.NextAttempt, p.MaxAttempts)}
		if p.System != "" {
			parts = append([]string{p.System}, parts...)
		}
		fmt.Fprintln(r.w, r.paint(yellow, "⟳ "+strings.Join(parts, " · ")))
	case msp.NotifyTurnRetryScheduled:
		var p msp.TurnRetryScheduledParams
		json.Unmarshal(params, &p)
		fmt.Fprintln(r.w, r.paint(yellow, fmt.Sprintf("⟳ %s · %s · attempt %d/%d", sanitize(p.Reason), retryIn(p.RetryDelayMs), p.NextAttempt, p.MaxAttempts)))
	case msp.NotifyTurnCompleted:
		var p msp.TurnCompletedParams
		json.Unmarshal(params, &p)
		fmt.Fprintln(r.w, r.terminal(p))
	case msp.NotifyTurnUnqueued:
		var p msp.TurnUnqueuedParams
		json.Unmarshal(params, &p)
		fmt.Fprintln(r.w, r.paint(dim, "↶ turn "+short(p.TurnID)+" withdrawn before it ran"))
	case msp.NotifyViewGap:
		fmt.Fprintln(r.w, r.paint(dim, "… fell behind; catching up from the log"))
	}
}

// finishStreamed completes the line of an agent item whose deltas were
// printed: the text they missed (lost in a gap or a reconnect) is added,
// then the line ends. It reports whether it handled the item.
func (r *renderer) finishStreamed(it msp.Item) bool {
	printed, ok := r.streamed[it.ItemID]
	if !ok || it.Kind != msp.ItemAgentMessage || it.Status != msp.ItemCompleted || it.Text == nil {
		return false
	}
	delete(r.streamed, it.ItemID)
	if rest, ok := strings.CutPrefix(*it.Text, printed); ok && r.open == it.ItemID {
		io.WriteString(r.w, sanitize(rest))
		r.endLine()
		return true
	}
	// The deltas seen are not the start of the text: show it whole.
	r.endLine()
	fmt.Fprintln(r.w, r.paint(bold, "agent: ")+sanitize(*it.Text))
	return true
}

func (r *renderer) item(it msp.Item) {
	text := ""
	if it.Text != nil {
		text = *it.Text
	}
	switch {
	case it.Kind == msp.ItemUserMessage:
		fmt.Fprintln(r.w, r.paint(bold, "you: ")+sanitize(text))
	case it.Kind != msp.ItemAgentMessage:
		return
	case it.Status == msp.ItemCompleted:
		fmt.Fprintln(r.w, r.paint(bold, "agent: ")+sanitize(text))
	case it.Status == msp.ItemFailed:
		_, shown := r.streamed[it.ItemID]
		delete(r.streamed, it.ItemID)
		switch {
		case shown:
			// Its text is on screen already, streamed.
			fmt.Fprintln(r.w, r.paint(red, "  ✗ this attempt's answer was discarded"))
		case text == "":
			fmt.Fprintln(r.w, r.paint(red, "  ✗ a discarded attempt, cut off before any text was saved"))
		default:
			fmt.Fprintln(r.w, r.paint(bold, "agent: ")+r.paint(strike, sanitize(text))+r.paint(red, " ✗ discarded attempt"))
		}
	case it.Status == msp.ItemCancelled:
		fmt.Fprintln(r.w, r.paint(red, "  ■ stopped"))
	}
}

func (r *renderer) terminal(p msp.TurnCompletedParams) string {
	var parts []string
	if p.DurationMs != nil {
		parts = append(parts, (time.Duration(*p.DurationMs) * time.Millisecond).Round(100*time.Millisecond).String())
	}
	if a := p.Attempts; a != nil {
		word := "attempts"
		if a.Count == 1 {
			word = "attempt"
		}
		tokens := fmt.Sprintf("%d output tokens", a.OutputTokens)
		if !a.UsageComplete {
			tokens = "≥" + tokens
		}
		parts = append(parts, fmt.Sprintf("%d %s", a.Count, word), tokens)
	}
	switch p.Terminal {
	case msp.TerminalCompleted:
		return r.paint(green, "✓ completed · "+strings.Join(parts, " · "))
	case msp.TerminalFailed:
		msg := "failed"
		if p.Error != nil {
			msg += ": " + sanitize(p.Error.Message)
		}
		return r.paint(red, "✗ "+msg)
	}
	return r.paint(dim, "■ "+p.Terminal)
}

// sanitize keeps model and provider text from driving the terminal: every
// control character but newline and tab (ESC, BEL, CR, C1) becomes U+FFFD.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return '\uFFFD'
		}
		return r
	}, s)
}

// retryIn words a backoff: "retrying in 3s", "retrying in 250ms".
func retryIn(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d >= time.Second {
		d = d.Round(100 * time.Millisecond)
	}
	return "retrying in " + d.String()
}

func short(id string) string {
	if len(id) > 8 {
		return id[len(id)-8:]
	}
	return id
}

// ANSI styles.
const (
	bold   = "1"
	dim    = "2"
	strike = "9"
	red    = "31"
	green  = "32"
	yellow = "33"
)

func (r *renderer) paint(style, s string) string {
	if !r.color {
		return s
	}
	return "\x1b[" + style + "m" + s + "\x1b[0m"
}
