package tail

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"mspd/schema/msp"
)

// notice is a retry notice of either layer: turn/modelRetryScheduled or
// turn/retryScheduled.
type notice struct {
	turnID        string
	attempt, next int // the attempt that failed, the one announced
	max           int
	delayMs       int64
	what          string // why: "openai · rate limited (429)", or the turn layer's reason
}

func modelNotice(p msp.TurnModelRetryScheduledParams) notice {
	what := msp.ErrorKindWords(p.ErrorKind)
	if p.HTTPStatus != 0 {
		what += fmt.Sprintf(" (%d)", p.HTTPStatus)
	}
	if p.System != "" {
		what = p.System + " · " + what
	}
	return notice{turnID: p.TurnID, attempt: p.Attempt, next: p.NextAttempt, max: p.MaxAttempts,
		delayMs: p.RetryDelayMs, what: sanitize(what)}
}

// line words the notice with when in the middle: "⟳ openai · rate limited
// (429) · retrying in 3s · attempt 2/5".
func (n notice) line(when string) string {
	return fmt.Sprintf("⟳ %s · %s · attempt %d/%d", n.what, when, n.next, n.max)
}

// retryWait is a retry notice on a terminal: its line counts down in place
// until the attempt it announced starts ("retried") or the turn ends during
// the wait ("cancelled" when stopped).
type retryWait struct {
	r        *renderer
	n        notice
	deadline time.Time
}

// text implements liveLine: whole seconds left, rounded up, then
// "retrying now" once the wait is over and the attempt has not shown yet.
func (w *retryWait) text(now time.Time) (string, bool) {
	left := w.deadline.Sub(now)
	if left <= 0 {
		return w.fit("retrying now"), false
	}
	secs := (left + time.Second - 1) / time.Second
	return w.fit(fmt.Sprintf("retrying in %ds", secs)), true
}

// final is the settled line, whole.
func (w *retryWait) final(when string) string {
	return w.r.prefixed(w.r.paint(yellow, w.n.line(when)))
}

// fit is the live line cut to the terminal's width: a line that wraps
// cannot be redrawn in place. The reason gives way first; how long the
// wait has left and the attempt stay.
func (w *retryWait) fit(when string) string {
	n := w.n
	room := w.r.s.width - 1 - utf8.RuneCountInString(w.r.prefixed("")) // after the label
	if over := utf8.RuneCountInString(n.line(when)) - room; over > 0 {
		n.what = clip(n.what, max(utf8.RuneCountInString(n.what)-over, 1))
	}
	return w.r.prefixed(w.r.paint(yellow, clip(n.line(when), max(room, 1))))
}

// retry shows a retry notice: once, as it came, unless on a terminal,
// where it counts down until the evidence settles it.
func (r *renderer) retry(n notice, emittedAtMs int64) {
	if !r.s.term {
		r.println(r.paint(yellow, n.line(retryIn(n.delayMs))))
		return
	}
	now := r.s.clock.Now()
	delay := time.Duration(n.delayMs) * time.Millisecond
	deadline := now.Add(delay)
	if emittedAtMs > 0 {
		// The server said when it scheduled the wait; a clock that
		// disagrees never makes the wait longer, or end before now.
		if d := time.UnixMilli(emittedAtMs).Add(delay); d.Before(deadline) {
			deadline = d // a wait that ends before now is due at once
		}
	}
	if w := r.wait; w != nil {
		if n.turnID != w.n.turnID || n.attempt < w.n.next {
			// Not the attempt it announced (a restarted server announces
			// the same wait again): the line goes on with the new notice.
			w.n, w.deadline = n, deadline
			r.s.redraw()
			r.s.startTicking()
			return
		}
		r.settle("retried") // the attempt it announced ran, and failed too
	}
	r.wait = &retryWait{r: r, n: n, deadline: deadline}
	r.s.addLive(r.wait)
}

// settle ends the countdown with when in place of the time left.
func (r *renderer) settle(when string) {
	w := r.wait
	r.wait = nil
	r.s.settleLive(w, w.final(when))
}

// settleOnEvidence settles the countdown on what proves how the wait
// ended: the next attempt's answer (its item or a delta: the attempt that
// failed closed its item before the notice), or the turn's terminal.
func (r *renderer) settleOnEvidence(method string, params json.RawMessage) {
	switch method {
	case msp.NotifyItemDelta:
		r.settle("retried")
	case msp.NotifyItemStarted, msp.NotifyItemUpdated, msp.NotifyItemCompleted:
		var p msp.ItemParams
		json.Unmarshal(params, &p)
		if p.Item.Kind != msp.ItemUserMessage {
			r.settle("retried")
		}
	case msp.NotifyTurnCompleted:
		var p msp.TurnCompletedParams
		json.Unmarshal(params, &p)
		r.settle(waitOutcome(p, r.wait.n.next))
	}
}

// waitOutcome words how a wait for attempt next ended, by the turn's
// terminal: the attempt ran (the count of attempts made says so; without
// one, a completed turn did), the turn was stopped during the wait, or it
// ended otherwise before the attempt.
func waitOutcome(p msp.TurnCompletedParams, next int) string {
	switch {
	case p.Attempts != nil && p.Attempts.Count >= next,
		p.Attempts == nil && p.Terminal == msp.TerminalCompleted:
		return "retried"
	case p.Terminal == msp.TerminalCancelled:
		return "cancelled"
	}
	return "not retried"
}
