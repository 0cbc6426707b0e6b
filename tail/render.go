// Package tail follows a session's view — or every session's — for a
// person at a terminal or for a script: the engine of `mspd tail` and
// `mspd sessions`. It renders notifications as text (streaming deltas
// inline, retry notices as "openai · rate limited · retrying in 3s ·
// attempt 2/5", counting down in place on a terminal, a fallback to
// another provider as "↪ openai rate limited (HTTP 429) · answering with
// claude-sonnet-4-5", images in user messages as "[image: image/png
// 800×600, 120 KB]", tool calls as
// "→ calculator (builtin) {…}" and "✓ calculator 12 ms: 20", approvals as
// "? append (notes) needs approval {…}" and how they were resolved, a
// model's reasoning on lines of its own, "thinking: …" (dim in colour),
// a compaction as "⇣ context compacted 130k → 2.1k tokens (auto)", and
// the context window's pressure when it changes), as JSON lines, or as
// the raw answer text. On a terminal it can decide approvals by key
// press (Options.Keys).
package tail

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
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
	// deltas (a discarded attempt's text never mixes in), no tool calls,
	// no reasoning, no compaction summaries, nothing else.
	Raw = "raw"
)

// renderer writes one session's notifications in one format, through the
// screen it shares with the other sessions a run shows. It remembers what
// each item streamed, so that item/completed can add what the deltas
// missed (a gap, a reconnect) and an item seen only as item/completed
// still prints its whole text once.
type renderer struct {
	s        *screen
	format   string
	color    bool
	label    string               // prefixes each line when several sessions share the screen
	inline   bool                 // deltas stream on the current line (one session only)
	streamed map[string]string    // itemId (a reasoning part's thinkingKey) → the delta text printed
	thought  map[string]int       // a reasoning itemId → how many of its parts streamed
	wait     *retryWait           // the retry wait counting down on a terminal
	calls    map[string]callNames // itemId → a tool call's names, for its approval
	asked    map[string]bool      // approvalId → shown
	pressure string               // the context pressure last told ("" before any)
	versions map[string]int       // turnId → which version of its answer it is, for a turn that has been regenerated
}

// newRenderer renders one session to w, which is not a terminal.
func newRenderer(w io.Writer, format string, color bool) *renderer {
	return newScreen(w, false, nil).renderer(format, color, "")
}

// renderer returns a renderer writing through s; a label prefixes its
// lines, and a labelled renderer prints each answer whole, one line per
// event, rather than streaming its deltas.
func (s *screen) renderer(format string, color bool, label string) *renderer {
	return &renderer{s: s, format: format, color: color, label: label, inline: label == "", streamed: map[string]string{},
		thought: map[string]int{}, calls: map[string]callNames{}, asked: map[string]bool{}, versions: map[string]int{}}
}

// event renders one notification.
func (r *renderer) event(method string, params json.RawMessage) { r.eventAt(method, params, 0) }

// eventAt renders one notification the server emitted at emittedAtMs (0:
// unknown, as for an event read from the log).
func (r *renderer) eventAt(method string, params json.RawMessage, emittedAtMs int64) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if method == msp.NotifyApprovalRequested {
		var p msp.ApprovalRequestParams
		json.Unmarshal(params, &p)
		if r.asked[p.ApprovalID] {
			return // shown from the request already
		}
		r.asked[p.ApprovalID] = true
	}
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
		r.s.println(string(line))
	case Raw:
		r.raw(method, params)
	default:
		r.pretty(method, params, emittedAtMs)
	}
}

// prefixed puts the renderer's label before each line of text.
func (r *renderer) prefixed(text string) string {
	if r.label == "" {
		return text
	}
	p := "[" + r.label + "] "
	return p + strings.ReplaceAll(text, "\n", "\n"+p)
}

func (r *renderer) println(line string) { r.s.println(r.prefixed(line)) }

func (r *renderer) raw(method string, params json.RawMessage) {
	if method != msp.NotifyItemCompleted {
		return
	}
	var p msp.ItemParams
	json.Unmarshal(params, &p)
	if p.Item.Kind == msp.ItemAgentMessage && p.Item.Status == msp.ItemCompleted && p.Item.Text != nil {
		r.println(*p.Item.Text)
	}
}

func (r *renderer) pretty(method string, params json.RawMessage, emittedAtMs int64) {
	if r.wait != nil {
		r.settleOnEvidence(method, params)
	}
	switch method {
	case msp.NotifyItemDelta:
		if r.inline {
			var p msp.ItemDeltaParams
			json.Unmarshal(params, &p)
			r.delta(p)
		}
		return
	case msp.NotifyItemStarted:
		// An answer's deltas say it all; a tool call gets its line as it
		// starts, since it may run a while — or, when it waits for a
		// person, as approval/requested asks for it.
		var p msp.ItemParams
		json.Unmarshal(params, &p)
		r.noteCall(p.Item)
		if p.Item.Kind != msp.ItemToolCall || p.Item.ApprovalID != "" {
			return
		}
	case msp.NotifyItemUpdated, msp.NotifySessionTokenUsage:
		// The deltas and the terminal say it all; a saved text
		// (item/updated) must not end a streaming answer's line.
		return
	case msp.NotifySessionContextUsage:
		// A line only when the pressure changes, not at every request.
		var p msp.SessionContextUsageParams
		json.Unmarshal(params, &p)
		if line := r.pressureLine(p.ContextUsage); line != "" {
			r.s.endLine()
			r.println(line)
		}
		return
	case msp.NotifyItemCompleted:
		var p msp.ItemParams
		json.Unmarshal(params, &p)
		r.noteCall(p.Item)
		if p.Item.Kind == msp.ItemReasoning {
			r.thoughtDone(p.Item)
			return
		}
		if r.finishStreamed(p.Item) {
			return
		}
	}
	r.s.endLine()
	switch method {
	case msp.NotifyTurnStarted:
		var p msp.TurnStartedParams
		json.Unmarshal(params, &p)
		r.println(r.paint(dim, "── turn "+short(p.TurnID)+" ──"))
	case msp.NotifyItemStarted:
		var p msp.ItemParams
		json.Unmarshal(params, &p)
		r.println(r.callStarted(p.Item))
	case msp.NotifyItemCompleted:
		var p msp.ItemParams
		json.Unmarshal(params, &p)
		r.item(p.Item)
	case msp.NotifyTurnModelRetryScheduled:
		var p msp.TurnModelRetryScheduledParams
		json.Unmarshal(params, &p)
		if p.Fallback {
			r.fallback(p)
			break
		}
		r.retry(modelNotice(p), emittedAtMs)
	case msp.NotifyTurnProviderSkipped:
		var p msp.TurnProviderSkippedParams
		json.Unmarshal(params, &p)
		r.println(r.paint(yellow, skippedLine(p)))
	case msp.NotifyTurnRetryScheduled:
		var p msp.TurnRetryScheduledParams
		json.Unmarshal(params, &p)
		r.retry(notice{turnID: p.TurnID, attempt: p.Attempt, next: p.NextAttempt, max: p.MaxAttempts,
			delayMs: p.RetryDelayMs, what: sanitize(p.Reason)}, emittedAtMs)
	case msp.NotifyTurnCompleted:
		var p msp.TurnCompletedParams
		json.Unmarshal(params, &p)
		r.println(r.terminal(p))
	case msp.NotifyTurnUnqueued:
		var p msp.TurnUnqueuedParams
		json.Unmarshal(params, &p)
		r.println(r.paint(dim, "↶ turn "+short(p.TurnID)+" withdrawn before it ran"))
	case msp.NotifyViewGap:
		r.println(r.paint(dim, "… fell behind; catching up from the log"))
	case msp.NotifyApprovalRequested:
		var p msp.ApprovalRequestParams
		json.Unmarshal(params, &p)
		r.println(r.approvalAsked(p))
	case msp.NotifyApprovalResolved:
		var p msp.ApprovalResolvedParams
		json.Unmarshal(params, &p)
		r.println(r.approvalResolved(p))
	}
}

// delta streams an answer on the current line, and a reasoning part on a
// line of its own (thinking). A line a status line cut short starts again
// with all the item streamed so far. Deltas of other fields (a tool's
// output, which its result line shows) are not streamed.
func (r *renderer) delta(p msp.ItemDeltaParams) {
	part, err := msp.ParseField(p.Field)
	switch {
	case err != nil:
		return
	case part >= 0:
		r.thinking(p.ItemID, part, p.Delta)
		return
	}
	if r.s.open != p.ItemID {
		r.s.startLine(p.ItemID)
		r.s.write(r.paint(bold, "agent: "))
		if r.s.broken == p.ItemID {
			r.s.write(sanitize(r.streamed[p.ItemID]))
		}
		r.s.broken = ""
	}
	r.streamed[p.ItemID] += p.Delta
	r.s.write(sanitize(p.Delta))
}

// thinkingPrefix begins each line of a model's reasoning.
const thinkingPrefix = "thinking: "

// thinkingKey names the line of part n of reasoning item id.
func thinkingKey(id string, n int) string { return id + "#summary." + strconv.Itoa(n) }

// thinking streams part n of a reasoning item on a line of its own,
// "thinking: …", dim in colour: never on an answer's line.
func (r *renderer) thinking(id string, n int, delta string) {
	key := thinkingKey(id, n)
	if r.s.open != key {
		r.s.startLine(key)
		r.s.write(r.paint(dim, thinkingPrefix))
		if r.s.broken == key {
			r.s.write(r.paint(dim, sanitize(r.streamed[key])))
		}
		r.s.broken = ""
	}
	r.streamed[key] += delta
	r.thought[id] = max(r.thought[id], n+1)
	r.s.write(r.paint(dim, sanitize(delta)))
}

// thoughtDone ends a reasoning item: the parts whose deltas streamed get
// what the deltas missed; parts that did not stream (read from the log,
// where deltas are not kept, or on a labelled screen) print whole. A
// completed reasoning the provider showed nothing of says so.
func (r *renderer) thoughtDone(it msp.Item) {
	streamed := r.thought[it.ItemID]
	delete(r.thought, it.ItemID)
	shown := false
	for i := 0; i < len(it.Summary) || i < streamed; i++ {
		key := thinkingKey(it.ItemID, i)
		printed, was := r.streamed[key]
		delete(r.streamed, key)
		want := ""
		if i < len(it.Summary) {
			want = it.Summary[i]
		}
		shown = shown || strings.TrimSpace(want) != "" || strings.TrimSpace(printed) != ""
		rest, extends := strings.CutPrefix(want, printed)
		switch {
		case was && extends && r.s.open == key:
			if rest != "" {
				r.s.write(r.paint(dim, sanitize(rest)))
			}
			r.s.endLine()
		case was && ((extends && rest == "") || want == ""):
			// On screen whole already, or the item keeps nothing of it.
			if r.s.open == key {
				r.s.endLine()
			}
		case strings.TrimSpace(want) != "":
			r.s.endLine()
			r.println(r.paint(dim, thinkingPrefix+sanitize(want)))
		}
	}
	if !shown && it.Status == msp.ItemCompleted {
		r.s.endLine()
		r.println(r.paint(dim, thinkingPrefix+"(hidden by the provider)"))
	}
}

// compactionLine words a compaction item's end: "⇣ context compacted
// 130k → 2.1k tokens (auto)", or why it did not.
func (r *renderer) compactionLine(it msp.Item) string {
	trigger := ""
	if it.Trigger != "" {
		trigger = " (" + oneLine(it.Trigger) + ")"
	}
	outcome := it.Outcome
	if outcome == "" {
		outcome = it.Status
	}
	switch outcome {
	case msp.CompactionCompacted:
		sizes := ""
		if it.TokensBefore != nil && it.TokensAfter != nil {
			sizes = " " + tokenWords(*it.TokensBefore) + " → " + tokenWords(*it.TokensAfter) + " tokens"
		}
		return r.paint(cyan, "⇣ context compacted"+sizes+trigger)
	case msp.CompactionNoop:
		return r.paint(dim, "⇣ nothing to compact"+trigger)
	case msp.CompactionCancelled:
		return r.paint(dim, "⇣ context compaction cancelled"+trigger)
	case msp.CompactionFailed:
		why := ""
		if it.FailureReason != "" {
			why = ": " + oneLine(it.FailureReason)
		}
		return r.paint(red, "⇣ context compaction failed"+why+trigger)
	}
	return r.paint(dim, "⇣ context compaction "+oneLine(outcome)+trigger)
}

// pressureLine tells a change of the context window's pressure: nothing
// while it stays the same, nor for the first normal one; "◔ context
// nearly full · 1.7k / 2.0k tokens" and so on otherwise.
func (r *renderer) pressureLine(u msp.ContextUsage) string {
	before := r.pressure
	r.pressure = u.Pressure
	if u.Pressure == before || before == "" && u.Pressure == msp.PressureNormal {
		return ""
	}
	size := tokenWords(u.UsedTokens)
	if u.WindowTokens != nil {
		size += " / " + tokenWords(*u.WindowTokens)
	}
	size += " tokens"
	switch u.Pressure {
	case msp.PressureWarning:
		return r.paint(yellow, "◔ context nearly full · "+size+" · compacts before the next request")
	case msp.PressureBlocked:
		return r.paint(red, "● context full · "+size+" · compacts before the next request")
	case msp.PressureNormal:
		return r.paint(dim, "○ context back to normal · "+size)
	}
	return r.paint(dim, "○ context "+oneLine(u.Pressure)+" · "+size)
}

// tokenWords words a token count as mspd does: "850", "2.1k", "130k",
// and "1.2M" from a million.
func tokenWords(n int64) string {
	switch {
	case n < 1000:
		return strconv.FormatInt(n, 10)
	case n < 10000:
		return strconv.FormatFloat(float64(n)/1000, 'f', 1, 64) + "k"
	case n < 1000000:
		return strconv.FormatInt((n+500)/1000, 10) + "k"
	}
	return strconv.FormatFloat(float64(n)/1000000, 'f', 1, 64) + "M"
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
	if rest, ok := strings.CutPrefix(*it.Text, printed); ok && r.s.open == it.ItemID {
		r.s.write(sanitize(rest))
		r.s.endLine()
		return true
	}
	// The deltas seen are not the start of the text: show it whole.
	r.s.endLine()
	r.println(r.paint(bold, "agent: ") + sanitize(*it.Text))
	return true
}

func (r *renderer) item(it msp.Item) {
	text := ""
	if it.Text != nil {
		text = *it.Text
	}
	switch {
	case it.Kind == msp.ItemUserMessage && it.Regenerates != "":
		r.println(r.paint(dim, r.versionLine(it)))
	case it.Kind == msp.ItemUserMessage:
		you := sanitize(text)
		if tags := imageTags(it.Attachments); tags != "" {
			if you != "" {
				you += " "
			}
			you += r.paint(dim, tags)
		}
		r.println(r.paint(bold, "you: ") + you)
	case it.Kind == msp.ItemToolCall:
		r.println(r.callEnded(it))
	case it.Kind == msp.ItemCompaction:
		r.println(r.compactionLine(it))
	case it.Kind != msp.ItemAgentMessage:
		return
	case it.Status == msp.ItemCompleted:
		r.println(r.paint(bold, "agent: ") + sanitize(text))
	case it.Status == msp.ItemFailed:
		_, shown := r.streamed[it.ItemID]
		delete(r.streamed, it.ItemID)
		switch {
		case shown:
			// Its text is on screen already, streamed.
			r.println(r.paint(red, "  ✗ this attempt's answer was discarded"))
		case text == "":
			r.println(r.paint(red, "  ✗ a discarded attempt, cut off before any text was saved"))
		default:
			r.println(r.paint(bold, "agent: ") + r.paint(strike, sanitize(text)) + r.paint(red, " ✗ discarded attempt"))
		}
	case it.Status == msp.ItemCancelled:
		r.println(r.paint(red, "  ■ stopped"))
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

// oneLine is sanitize for text that must stay on one line (a name in a
// table or a status line): newlines and tabs become spaces too.
func oneLine(s string) string {
	return sanitize(strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return ' '
		}
		return r
	}, s))
}

// clip cuts s to at most n runes, marking a cut with "…".
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
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
	cyan   = "36"
)

func (r *renderer) paint(style, s string) string {
	if !r.color {
		return s
	}
	return "\x1b[" + style + "m" + s + "\x1b[0m"
}

// versionLine introduces a regenerated answer: the message it answers is
// the one already shown, so it is not repeated; the line counts the
// versions of that answer ("↻ version 2") that this tail has seen: one
// that began after the earlier versions counts from 2.
func (r *renderer) versionLine(it msp.Item) string {
	n := max(r.versions[it.Regenerates], 1) + 1
	if it.TurnID != nil {
		r.versions[*it.TurnID] = n
	}
	return fmt.Sprintf("↻ version %d", n)
}
