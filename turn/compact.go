package turn

// Compaction: a conversation longer than its model's context window goes
// on with a summary of its older turns. One model call — through the
// retry engine, with the same notices, counted in the turn's attempts —
// summarises every turn that completed before the one under way (the
// previous summary first, when there is one) into a compaction item;
// later requests send that summary, then the turns after it as recorded.
// The session's log keeps every turn: only what is sent shrinks. A cut
// falls between two turns, never inside one, so a tool call and its
// result are never parted.
//
// A turn compacts automatically (trigger auto) before a request once the
// context's pressure reaches the warning level, and when the provider
// refuses a request as too long (contextLengthExceeded): then the refused
// attempt re-runs, shorter, as a turn-layer retry whose notice names the
// compaction. A compaction that fails lets the request go as it is (the
// first case) or the turn fail with the provider's error (the second),
// and the turn does not try again. session/compact runs one as a turn of
// its own (Spec.Compact, trigger manual).

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"mspd/modelretry"
	"mspd/observe"
	"mspd/provider"
	"mspd/schema/msp"
)

// Pressure thresholds, in percent of the model's context window: both
// inclusive, the higher first.
const (
	WarningPercent = 80
	BlockedPercent = 95
)

// Pressure is the pressure level of used tokens in a window of window
// tokens: blocked at BlockedPercent or more, warning at WarningPercent or
// more, else normal; normal when the window is unknown (0).
func Pressure(used int64, window int) string {
	switch w := int64(window); {
	case w <= 0:
		return msp.PressureNormal
	case used*100 >= w*BlockedPercent:
		return msp.PressureBlocked
	case used*100 >= w*WarningPercent:
		return msp.PressureWarning
	}
	return msp.PressureNormal
}

// Context is what a turn knows of its session's context window.
type Context struct {
	// Usage is the session's latest session/contextUsage; nil before any.
	Usage *msp.ContextUsage
	// Cut is where History may be cut; nil when there is nothing to
	// compact (no turn completed since the session began or since its
	// latest compaction).
	Cut *Cut
}

// Cut is a boundary between two turns of a session's history.
type Cut struct {
	// At is the number of History's messages before the boundary: every
	// turn that completed since the latest compaction, after that
	// compaction's summary.
	At int
	// Through is the id of the last turn before the boundary: a
	// compaction item's summarizedThrough.
	Through string
}

// SummaryPreamble begins the message that carries a compaction's summary
// in every later request, as the user's, before the turns kept.
const SummaryPreamble = "[The conversation before this point was compacted to fit the model's context window. This is a summary of it.]\n\n"

// SummaryMessage is the message later requests send in place of the
// turns a compaction summarised: the session's fold and a running turn
// build it alike.
func SummaryMessage(summary string) provider.Message {
	return provider.Message{Role: provider.RoleUser, Text: SummaryPreamble + summary}
}

// SummaryInstructions is the system prompt of a summarising request.
const SummaryInstructions = "You compact conversations between a user and an AI assistant. Your summary replaces the conversation: " +
	"the assistant will see only it, then the messages that follow, so it must carry everything the assistant needs to go on."

// summaryTask asks for the summary; %d is the words it may take.
const summaryTask = `Summarise the conversation below so that the assistant can continue it. Keep the user's goals, requests and preferences (in their words where the wording matters); decisions made and why; facts, names, numbers, file paths, code and commands later messages may need; what each tool call found; and what was still open or unanswered at the end. Leave out greetings and repetition. Write plain notes in the conversation's language, in at most about %d words. Do not answer or continue the conversation.`

// Bounds of a summarising request: each line of the conversation it
// quotes, and the summary's output tokens.
const (
	maxQuotedLine      = 32 << 10
	maxQuotedCall      = 1 << 10
	maxQuotedResult    = 2 << 10
	minSummaryTokens   = 256
	maxSummaryTokens   = 4096
	unknownWindowQuote = 100_000 // tokens of conversation quoted for a model of unknown window
)

// windowState is what a running turn knows of its context window.
type windowState struct {
	size   int               // the model's window in tokens; 0 unknown
	used   int64             // the latest usedTokens
	last   *msp.ContextUsage // the latest triple the session was told
	cut    *Cut              // where the history may be cut; nil: nothing to compact
	failed bool              // an automatic compaction failed: the turn tries no other
}

// initWindow takes the session's context as the turn starts.
func (t *run) initWindow() {
	t.window = windowState{size: t.model().ContextWindow, cut: t.spec.Context.Cut}
	if u := t.spec.Context.Usage; u != nil {
		last := *u
		t.window.last, t.window.used = &last, u.UsedTokens
	}
}

// noteContext holds a session/contextUsage for a conversation request's
// reported usage when the triple changed: prompt plus output tokens.
func (t *run) noteContext(u *provider.Usage) {
	if u != nil {
		t.setContext(u.InputTokens + u.OutputTokens)
	}
}

// setContext takes used as the context's size and holds its
// session/contextUsage when the triple changed. A model whose window is
// unknown has no pressure to tell: mspd does not invent a window.
func (t *run) setContext(used int64) {
	w := &t.window
	w.used = used
	if w.size <= 0 {
		return
	}
	cu := msp.ContextUsage{Pressure: Pressure(used, w.size), UsedTokens: used, WindowTokens: new(int64(w.size))}
	if l := w.last; l != nil && l.Pressure == cu.Pressure && l.UsedTokens == cu.UsedTokens &&
		l.WindowTokens != nil && *l.WindowTokens == *cu.WindowTokens {
		return
	}
	w.last = &cu
	t.hold(msp.NotifySessionContextUsage, &msp.SessionContextUsageParams{ContextUsage: cu})
}

// compactBefore compacts, before a conversation request, a context whose
// pressure reached the warning level, when there is something to compact.
// It returns the turn's end when the turn cannot go on (stopped, or the
// log refused its events).
func (t *run) compactBefore(ctx context.Context, policy modelretry.Policy, maxTokens int) *Outcome {
	w := &t.window
	if w.cut == nil || w.failed || Pressure(w.used, w.size) == msp.PressureNormal {
		return nil
	}
	return t.compact(ctx, nil, policy, msp.CompactionAuto, maxTokens).stop
}

// compactOnOverflow compacts after the provider refused a request as too
// long (f). reason, when set, is the re-run's notice reason: the context
// was compacted. It returns the turn's end when the turn cannot go on.
func (t *run) compactOnOverflow(ctx context.Context, f modelretry.Failure, policy modelretry.Policy, maxTokens int) (reason string, stop *Outcome) {
	w := &t.window
	if f.Kind != modelretry.KindContextLengthExceeded || w.cut == nil || w.failed {
		return "", nil
	}
	w.used = max(w.used, reportedTokens(f.Message))
	t.obs.endAttempt(observe.OutcomeFailed, f.Kind) // the refused request's, before the compaction's
	c := t.compact(ctx, nil, policy, msp.CompactionAuto, maxTokens)
	if c.stop != nil || c.outcome != msp.CompactionCompacted {
		return "", c.stop
	}
	return fmt.Sprintf("context compacted: %s → %s tokens", tokenWords(c.before), tokenWords(c.after)), nil
}

// compactTurn runs a turn of session/compact: the compaction alone. It
// completes compacted or noop, fails with the summarising call's failure,
// or ends as any turn is stopped.
func (t *run) compactTurn(ctx context.Context, call *modelretry.Call, policy modelretry.Policy, maxTokens int) Outcome {
	c := t.compact(ctx, call, policy, msp.CompactionManual, maxTokens)
	switch {
	case c.stop != nil:
		return *c.stop
	case c.decision != nil:
		return t.failDecision(*c.decision)
	case c.outcome == msp.CompactionFailed:
		return t.fail(msp.TurnErrorModel, c.reason, false)
	}
	return t.terminal(msp.TerminalCompleted)
}

// compaction is how one went.
type compaction struct {
	outcome       string
	before, after int64
	// stop is the turn's end when the compaction was cut off (a stop, the
	// host's or the user's) or the log refused its events.
	stop *Outcome
	// decision ended a failed compaction's call; nil when it failed
	// otherwise (reason says why).
	decision *modelretry.Decision
	reason   string
}

// compact summarises the history before the cut, in one model call (call,
// or a new one under policy when nil), and records the compaction item:
// opened, then closed with its outcome. Its requests count in the turn's
// attempts, as a step's do. Once compacted, the turn's own view of the
// history is the summary and what followed the cut.
func (t *run) compact(ctx context.Context, call *modelretry.Call, policy modelretry.Policy, trigger string, maxTokens int) compaction {
	cut := t.window.cut
	turnID := t.spec.TurnID
	c := compaction{before: max(t.window.used, estimateTokens(t.spec.History)+estimateTokens(t.messages))}
	it := msp.Item{ItemID: uuid.Must(uuid.NewV7()).String(), Kind: msp.ItemCompaction, Revision: 1, Status: msp.ItemInProgress,
		TurnID: &turnID, Trigger: trigger, TokensBefore: new(c.before)}
	// What the turn holds of an attempt before (its usage) goes first.
	for _, ev := range append(t.takeHeld(), Event{Method: msp.NotifyItemStarted, Params: &msp.ItemParams{Item: it}}) {
		if err := t.sink.Emit(t.emitCtx, ev.Method, ev.Params); err != nil {
			return t.compactionLost(err)
		}
	}
	closing := func(status, outcome string) {
		it.Revision, it.Status, it.Outcome, it.RecordedAt = 2, status, outcome, t.r.clock.Now().UTC().Format("2006-01-02T15:04:05.000Z")
		t.hold(msp.NotifyItemCompleted, &msp.ItemParams{Item: it})
	}
	if cut == nil || cut.At <= 0 {
		c.outcome = msp.CompactionNoop
		closing(msp.ItemCompleted, c.outcome)
		return t.compactionSettled(c, maxTokens)
	}
	var err error
	if call == nil {
		if call, err = t.hop.cfg.Engine.Start(policy); err != nil {
			c.outcome, c.reason = msp.CompactionFailed, fmt.Sprintf("retry policy: %v", err)
			it.FailureReason = c.reason
			closing(msp.ItemFailed, c.outcome)
			return t.compactionSettled(c, maxTokens)
		}
	}
	// The compaction's requests are numbered on from the turn's; its
	// notices' checkpoints count them as the steps before.
	base, stepBase, hopBase := t.attempts, t.stepBase, t.hop.base
	t.stepBase, t.hop.base = base, base
	settle := func() {
		// The step's own requests count on from the compaction's, on
		// whichever entry of the chain it is.
		t.stepBase, t.hop.base = stepBase+(t.attempts-base), hopBase+(t.attempts-base)
	}
	words := t.summaryTokens()
	req := provider.Request{Model: t.hop.model, MaxTokens: words, Instructions: SummaryInstructions,
		Messages: []provider.Message{{Role: provider.RoleUser, Text: t.summaryPrompt(t.spec.History[:cut.At], words)}}}
	for {
		if err := t.beginRetry(); err != nil {
			settle()
			return t.compactionLost(err)
		}
		a, err := call.Begin(ctx)
		if err != nil {
			settle()
			if ctx.Err() != nil {
				return t.compactionStopped(ctx, c, it, false, maxTokens)
			}
			c.outcome, c.reason = msp.CompactionFailed, fmt.Sprintf("no attempt left: %v", err)
			it.FailureReason = c.reason
			closing(msp.ItemFailed, c.outcome)
			return t.compactionSettled(c, maxTokens)
		}
		t.attempts = base + a.N()
		req.Attempt = t.attempts
		var text strings.Builder
		began := t.r.clock.Now()
		resp, err := t.hop.cfg.Model.Stream(t.obs.startAttempt(ctx, t.attempts, words), req, func(d string) { text.WriteString(d) })
		t.obs.response(resp, err)
		summary := strings.TrimSpace(text.String())
		t.account(resp, t.r.clock.Now().Sub(began), refusedBeforeOutput(attemptResult{text: text.String(), err: err}))
		if ctx.Err() != nil {
			a.Fail(ctx, modelretry.Failure{Kind: modelretry.KindCancelled})
			settle()
			return t.compactionStopped(ctx, c, it, true, maxTokens)
		}
		var d modelretry.Decision
		reason := ""
		switch {
		case err != nil && text.Len() == 0:
			d = a.Fail(ctx, t.hop.cfg.Engine.Classify(signal(err)))
		case err != nil:
			f := t.hop.cfg.Engine.Classify(signal(err))
			f.Retryable = f.Retryable || f.Kind == modelretry.KindStreamInterrupted
			reason = "provider stream failed while compacting the context: " + msp.FailureWords(f.Kind, f.HTTPStatus)
			d = a.Rerun(ctx, f)
		case resp.FinishReason == provider.FinishContentFilter:
			d = a.Fail(ctx, modelretry.Failure{Kind: modelretry.KindContentFilter, Message: "the provider filtered the summary"})
		case summary == "":
			d = a.Fail(ctx, modelretry.Failure{Kind: modelretry.KindUnknown, Message: "the model wrote an empty summary"})
		default:
			// A summary cut at its bound is kept: it is shorter, not wrong.
			a.Succeed()
			t.obs.endAttempt(observe.OutcomeSuccess, "")
			settle()
			return t.compacted(c, it, cut, summary, resp.Usage, maxTokens)
		}
		t.obs.decided(d)
		if !d.Retry {
			settle()
			if d.Stop == modelretry.StopCancelled {
				return t.compactionStopped(ctx, c, it, true, maxTokens)
			}
			c.outcome, c.decision = msp.CompactionFailed, &d
			it.FailureReason = clip(msp.FailureWords(d.Failure.Kind, d.Failure.HTTPStatus)+suffix(d.Failure.Message), msp.MaxReason)
			closing(msp.ItemFailed, c.outcome)
			return t.compactionSettled(c, maxTokens)
		}
		if err := call.Backoff(ctx, t.notice(reason, maxTokens)); err != nil {
			settle()
			if ctx.Err() != nil {
				return t.compactionStopped(ctx, c, it, false, maxTokens)
			}
			return t.compactionLost(err)
		}
	}
}

// compacted closes a compaction that got its summary: the item completed
// (the summary its text), the context's new size told, both durable at
// once; the turn's view of the history becomes the summary and the turns
// after the cut.
func (t *run) compacted(c compaction, it msp.Item, cut *Cut, summary string, u *provider.Usage, maxTokens int) compaction {
	out := int64(len(summary)/4 + 1)
	if u != nil && u.OutputTokens > 0 {
		out = u.OutputTokens
	}
	kept := t.spec.History[cut.At:]
	c.outcome, c.after = msp.CompactionCompacted, out+estimateTokens([]provider.Message{{Text: SummaryPreamble}})+estimateTokens(kept)+estimateTokens(t.messages)
	it.Revision, it.Status, it.Outcome, it.RecordedAt = 2, msp.ItemCompleted, c.outcome, t.r.clock.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	it.Text, it.SummarizedThrough, it.TokensAfter = &summary, cut.Through, new(c.after)
	t.hold(msp.NotifyItemCompleted, &msp.ItemParams{Item: it})
	t.setContext(c.after)
	t.spec.History = append([]provider.Message{SummaryMessage(summary)}, kept...)
	t.window.cut = nil
	return t.compactionSettled(c, maxTokens)
}

// compactionSettled writes a compaction's closing events, with the
// checkpoint of the request that follows it (not yet begun). A failed
// automatic one keeps the turn from trying again.
func (t *run) compactionSettled(c compaction, maxTokens int) compaction {
	if c.outcome == msp.CompactionFailed {
		t.window.failed = true
	}
	cp := t.checkpointAt(t.attempts, t.r.clock.Now(), maxTokens)
	cp.Begun = new(false)
	if err := t.sink.EmitRetry(t.emitCtx, cp, t.takeHeld()); err != nil {
		return t.compactionLost(err)
	}
	t.checkpoint = cp
	return c
}

// compactionStopped closes a compaction the turn's stop cut off
// (cancelled by the user; failed when the host stopped, whose next
// process runs the turn on) and ends the turn as the stop says; lost says
// a request was in flight.
func (t *run) compactionStopped(ctx context.Context, c compaction, it msp.Item, lost bool, maxTokens int) compaction {
	it.Revision, it.Outcome, it.RecordedAt = 2, msp.CompactionCancelled, t.r.clock.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	it.Status = msp.ItemCancelled
	if stopping(ctx) {
		it.Status, it.FailureReason = msp.ItemFailed, "the server stopped during the compaction"
	}
	t.hold(msp.NotifyItemCompleted, &msp.ItemParams{Item: it})
	c.outcome = msp.CompactionCancelled
	o := t.interrupted(ctx, lost, maxTokens)
	c.stop = &o
	return c
}

// compactionLost ends the turn whose log refused a compaction's events.
func (t *run) compactionLost(err error) compaction {
	o := t.fail(msp.TurnErrorLog, fmt.Sprintf("writing the session log: %v", err), true)
	return compaction{outcome: msp.CompactionFailed, stop: &o}
}

// summaryTokens bounds a summary: an eighth of the model's window, within
// 256 and 4096 tokens (2048 for a window unknown), and within what the
// model can write.
func (t *run) summaryTokens() int {
	n := 2048
	if t.window.size > 0 {
		n = min(max(t.window.size/8, minSummaryTokens), maxSummaryTokens)
	}
	return min(n, t.hop.cfg.ModelMaxTokens)
}

// summaryPrompt is the summarising request's one message: the task, then
// the conversation quoted as a transcript — the previous summary first,
// tool calls and results as lines, images named — so that any model
// takes it whatever its tools and images. Quoted lines are bounded, and
// the oldest are left out (saying how many) where the whole would not fit
// the model's window beside the summary.
func (t *run) summaryPrompt(msgs []provider.Message, maxTokens int) string {
	var lines []string
	for i, m := range msgs {
		switch {
		case i == 0 && m.Role == provider.RoleUser && strings.HasPrefix(m.Text, SummaryPreamble):
			lines = append(lines, "Summary of the conversation before: "+strings.TrimPrefix(m.Text, SummaryPreamble))
		case m.Role == provider.RoleUser:
			line := "User: " + m.Text
			if n := len(m.Images); n > 0 {
				line += fmt.Sprintf(" [%d image(s)]", n)
			}
			lines = append(lines, line)
		case m.Role == provider.RoleTool:
			for _, r := range m.ToolResults {
				how := "returned"
				if r.IsError {
					how = "failed"
				}
				lines = append(lines, fmt.Sprintf("Tool %s %s: %s", r.Name, how, clipBytes(r.Text, maxQuotedResult)))
			}
		default:
			if m.Text != "" {
				lines = append(lines, "Assistant: "+m.Text)
			}
			for _, c := range m.ToolCalls {
				lines = append(lines, fmt.Sprintf("Assistant called tool %s with %s", c.Name, clipBytes(c.Args, maxQuotedCall)))
			}
		}
	}
	budget := unknownWindowQuote * 4
	if t.window.size > 0 {
		budget = max(t.window.size-maxTokens-len(summaryTask)/4-len(SummaryInstructions)/4-64, t.window.size/4) * 4
	}
	total := 0
	for i := range lines {
		lines[i] = clipBytes(lines[i], maxQuotedLine)
		total += len(lines[i]) + 1
	}
	first := 0
	if len(lines) > 0 && strings.HasPrefix(lines[0], "Summary of the conversation before: ") {
		first = 1 // the previous summary is kept whole
	}
	dropped := 0
	for total > budget && first+dropped < len(lines)-1 {
		total -= len(lines[first+dropped]) + 1
		dropped++
	}
	if dropped > 0 {
		kept := append(lines[:first:first], fmt.Sprintf("[%d earlier lines left out: they do not fit the model's context window]", dropped))
		lines = append(kept, lines[first+dropped:]...)
	}
	return fmt.Sprintf(summaryTask, maxTokens*3/4) + "\n\n<conversation>\n" + strings.Join(lines, "\n") + "\n</conversation>"
}

// estimateTokens is mspd's estimate of what msgs take of a context
// window, where no provider measured it: a token per 4 bytes of text,
// tool arguments and results, and 4 a message.
func estimateTokens(msgs []provider.Message) int64 {
	n := 0
	for _, m := range msgs {
		n += 16 + len(m.Text)
		for _, c := range m.ToolCalls {
			n += len(c.Name) + len(c.Args)
		}
		for _, r := range m.ToolResults {
			n += len(r.Text)
		}
	}
	return int64(n / 4)
}

// tooLong finds the prompt's size in a provider's refusal: OpenAI's "your
// messages resulted in 130000 tokens", Anthropic's "prompt is too long:
// 208310 tokens > 200000 maximum".
var tooLong = regexp.MustCompile(`(?:resulted in|too long:) (\d+) tokens`)

// reportedTokens is the prompt's size a refusal names, 0 when none.
func reportedTokens(msg string) int64 {
	m := tooLong.FindStringSubmatch(msg)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// tokenWords writes a token count as a reason does: 950, 1.9k, 131k.
func tokenWords(n int64) string {
	switch {
	case n < 1000:
		return strconv.FormatInt(n, 10)
	case n < 10000:
		return strconv.FormatFloat(float64(n)/1000, 'f', 1, 64) + "k"
	}
	return strconv.FormatInt((n+500)/1000, 10) + "k"
}

// clipBytes bounds s to about n bytes, on a rune boundary, marking a cut.
func clipBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + " […]"
}

// suffix is ": "+s, or "" for an empty s.
func suffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}
