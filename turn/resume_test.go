package turn_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"mspd/modelretry"
	"mspd/provider"
	"mspd/schema/msp"
	"mspd/turn"
	"mspd/turn/turntest"
)

// TestResumedTurnContinuesItsCount: a turn resumed after its process
// stopped announces why with turn/retryScheduled before its backoff, runs
// the next attempt under the same counter and output bound, and reports
// the lost attempt in attempts.count with usage unknown; its duration runs
// from the first start.
func TestResumedTurnContinuesItsCount(t *testing.T) {
	h := newHarness(t, nil, ok("back again"))
	sp := spec()
	sp.Resume = &turn.Resumption{Attempts: 2, Delay: 750 * time.Millisecond, MaxTokens: 2000,
		Reason: "the server restarted during attempt 2", StartedAt: t0.Add(-5 * time.Second),
		Usage: &msp.TokenUsage{InputTokens: 10, OutputTokens: 3}}
	o := h.run(t, context.Background(), sp, nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 3)
	notices := turnNotices(h)
	if len(notices) != 1 {
		t.Fatalf("%d turn/retryScheduled, want 1", len(notices))
	}
	if n := notices[0]; n.Attempt != 2 || n.NextAttempt != 3 || n.MaxAttempts != 5 || n.RetryDelayMs != 750 ||
		n.Reason != "the server restarted during attempt 2" {
		t.Fatalf("notice %s", js(n))
	}
	if got := h.sink.Methods(); !strings.HasPrefix(got, "turn/retryScheduled, item/started") {
		t.Fatalf("events %s: the notice must come first", got)
	}
	if reqs := h.model.requests(); len(reqs) != 1 || reqs[0].Attempt != 3 || reqs[0].MaxTokens != 2000 {
		t.Fatalf("requests %s, want one: attempt 3 with maxTokens 2000", js(reqs))
	}
	a := o.Completed.Attempts
	if a.UsageComplete || a.OutputTokens != 3+5 {
		t.Fatalf("attempts %s: want usage incomplete, 8 output tokens", js(a))
	}
	if u := o.Completed.Usage; u == nil || u.InputTokens != 20 || u.OutputTokens != 8 {
		t.Fatalf("usage %s", js(u))
	}
	if d := *o.Completed.DurationMs; d != 5750 {
		t.Fatalf("durationMs %d, want 5750 (from the first start)", d)
	}
}

// TestResumedBackoffIsBoundedByThePolicy: a backoff's rest longer than
// any the policy grants (the node resuming it has a clock behind the one
// that wrote the checkpoint) is cut to the policy's longest.
func TestResumedBackoffIsBoundedByThePolicy(t *testing.T) {
	h := newHarness(t, nil, ok("back again"))
	sp := spec()
	sp.Resume = &turn.Resumption{Attempts: 1, Delay: time.Hour, Reason: "node a stopped during the backoff before attempt 2", StartedAt: t0}
	o := h.run(t, context.Background(), sp, nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 2)
	p := modelretry.DefaultPolicy()
	longest := max(p.MaxBackoff, p.MaxServerDelay)
	if s := h.clock.Sleeps(); len(s) != 1 || s[0] != longest {
		t.Fatalf("slept %v, want once for %v", s, longest)
	}
}

// TestResumedTurnWithNoAttemptLeftFails: a turn whose lost attempt was
// its last fails at once, never looping across restarts.
func TestResumedTurnWithNoAttemptLeftFails(t *testing.T) {
	h := newHarness(t, nil, ok("never asked"))
	sp := spec()
	one := 2
	sp.Retry = &msp.RetryPolicy{MaxAttempts: &one}
	sp.Resume = &turn.Resumption{Attempts: 2, Reason: "the server restarted during attempt 2", StartedAt: t0}
	o := h.run(t, context.Background(), sp, nil)
	wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorHostRestarted, 2)
	if !o.Completed.Error.Retryable || !strings.Contains(o.Completed.Error.Message, "restarted during attempt 2") {
		t.Fatalf("error %s", js(o.Completed.Error))
	}
	if n := len(h.model.requests()); n != 0 {
		t.Fatalf("%d requests after the attempts ran out", n)
	}
	if o.Completed.Attempts.UsageComplete {
		t.Fatal("usageComplete true although the lost attempt's usage is unknown")
	}
}

// TestRetryNoticesCarryTheirCheckpoint: every retry notice is written
// with where a later process resumes: requests made, when the next is due
// and its (grown) output bound, the next request not begun. Before that
// request is sent, the same checkpoint is written again, marked begun.
func TestRetryNoticesCarryTheirCheckpoint(t *testing.T) {
	h := newHarness(t, nil,
		fail(status(503), nil),
		answer("cut short", provider.FinishLength, usage(10, 1000)),
		ok("done"))
	var sentAtBegin []int
	h.sink.Fail = func(method string) error {
		if method == turntest.BeginAttempt {
			sentAtBegin = append(sentAtBegin, len(h.model.requests()))
		}
		return nil
	}
	o := h.run(t, context.Background(), spec(), nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 3)
	var cps, begins []turn.Checkpoint
	for _, e := range h.sink.Events() {
		switch {
		case e.Method == turntest.BeginAttempt:
			begins = append(begins, *e.Checkpoint)
		case e.Checkpoint != nil:
			cps = append(cps, *e.Checkpoint)
		case strings.Contains(e.Method, "etryScheduled"):
			t.Fatalf("%s written without a checkpoint", e.Method)
		}
	}
	if len(cps) != 2 || len(begins) != 2 {
		t.Fatalf("%d checkpoints and %d begun, want 2 of each", len(cps), len(begins))
	}
	for i, c := range cps {
		b := begins[i]
		if c.Begun == nil || *c.Begun || b.Begun == nil || !*b.Begun || b.Attempts != c.Attempts || !b.NextAt.Equal(c.NextAt) || b.MaxTokens != c.MaxTokens {
			t.Fatalf("notice %d's checkpoint %s, then %s; want begun false, then the same marked begun", i+1, js(c), js(b))
		}
	}
	if !slices.Equal(sentAtBegin, []int{1, 2}) {
		t.Fatalf("requests sent when each retried one was marked begun: %v, want [1 2]", sentAtBegin)
	}
	// Rand 0.5: the first retry waits 250ms, the second 500ms.
	if c := cps[0]; c.Attempts != 1 || !c.NextAt.Equal(t0.Add(250*time.Millisecond)) || c.MaxTokens != 1000 {
		t.Fatalf("first checkpoint %+v", c)
	}
	if c := cps[1]; c.Attempts != 2 || !c.NextAt.Equal(t0.Add(750*time.Millisecond)) || c.MaxTokens != 2000 {
		t.Fatalf("second checkpoint %+v", c)
	}
}

// TestResumedFirstRequestIsMarkedBegun: a turn a host stopped before its
// first request resumes by sending it, marked begun first: a process that
// dies sending it leaves a checkpoint that counts it, so a request that
// keeps crashing the server runs the turn out of attempts.
func TestResumedFirstRequestIsMarkedBegun(t *testing.T) {
	h := newHarness(t, nil, ok("at last"))
	var sentAtBegin []int
	h.sink.Fail = func(method string) error {
		if method == turntest.BeginAttempt {
			sentAtBegin = append(sentAtBegin, len(h.model.requests()))
		}
		return nil
	}
	sp := spec()
	sp.Resume = &turn.Resumption{StartedAt: t0}
	o := h.run(t, context.Background(), sp, nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 1)
	var begins []turn.Checkpoint
	for _, e := range h.sink.Events() {
		if e.Method == turntest.BeginAttempt {
			begins = append(begins, *e.Checkpoint)
		}
	}
	if len(begins) != 1 || begins[0].Attempts != 0 || begins[0].Begun == nil || !*begins[0].Begun || begins[0].Stopped {
		t.Fatalf("begun marks %s; want one, of request 1 (0 made before it)", js(begins))
	}
	if !slices.Equal(sentAtBegin, []int{0}) {
		t.Fatalf("requests sent when request 1 was marked begun: %v, want [0]", sentAtBegin)
	}
}

// TestUsageIncompleteWhenTheLogRefusesMidAttempt: issue 7 defect 7 — when
// the session log refuses an event in the middle of an attempt, the
// attempt's usage is still accounted when the provider reported it, and
// usageComplete is false when it did not.
func TestUsageIncompleteWhenTheLogRefusesMidAttempt(t *testing.T) {
	for _, tt := range []struct {
		name     string
		u        *provider.Usage
		complete bool
		out      int64
	}{
		{"usage reported", usage(10, 5), true, 5},
		{"no usage", nil, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil, answer("some text", provider.FinishStop, tt.u))
			h.sink.Fail = func(method string) error {
				if method == msp.NotifyItemStarted {
					return errors.New("disk full")
				}
				return nil
			}
			o := h.run(t, context.Background(), spec(), nil)
			wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorLog, 1)
			if a := o.Completed.Attempts; a.UsageComplete != tt.complete || a.OutputTokens != tt.out {
				t.Fatalf("attempts %s, want usageComplete %v with %d output tokens", js(a), tt.complete, tt.out)
			}
		})
	}
}

// TestStoppingHostLeavesTheTurnToResume: a host that stops a turn with
// ErrHostStopping gets no terminal but a checkpoint: during an attempt the
// attempt counts as lost and its item fails with its text kept; during a
// backoff nothing is lost and the checkpoint keeps the announced time.
func TestStoppingHostLeavesTheTurnToResume(t *testing.T) {
	t.Run("during an attempt", func(t *testing.T) {
		streaming := make(chan struct{})
		h := newHarness(t, nil, fail(status(503), nil), func(ctx context.Context, _ provider.Request, onText func(string)) (provider.Response, error) {
			onText("half an ")
			onText("answer")
			close(streaming)
			<-ctx.Done()
			return provider.Response{}, ctx.Err()
		})
		ctx, cancel := context.WithCancelCause(context.Background())
		go func() { <-streaming; cancel(turn.ErrHostStopping) }()
		o := h.run(t, ctx, spec(), nil)
		if o.Stopped == nil || o.Completed.Terminal != "" {
			t.Fatalf("outcome %s: want stopped, no terminal", js(o))
		}
		if cp := *o.Stopped; cp.Attempts != 2 || !cp.Lost || !cp.Stopped || cp.MaxTokens != 1000 {
			t.Fatalf("checkpoint %+v: want 2 attempts, the last lost", cp)
		}
		items := completedItems(h)
		if len(items) != 1 || items[0].Status != msp.ItemFailed || *items[0].Text != "half an answer" {
			t.Fatalf("items %s: want the cut attempt failed with its text", js(items))
		}
		if strings.Contains(h.sink.Methods(), msp.NotifyTurnCompleted) {
			t.Fatal("a stopped turn wrote a terminal")
		}
	})
	t.Run("during a backoff", func(t *testing.T) {
		h := newHarness(t, nil, fail(status(429), nil), ok("never"))
		ctx, cancel := context.WithCancelCause(context.Background())
		o := h.run(t, ctx, spec(), func() { cancel(turn.ErrHostStopping) })
		if o.Stopped == nil {
			t.Fatalf("outcome %s: want stopped", js(o))
		}
		// Rand 0.5: the first retry was announced for 250ms on.
		if cp := *o.Stopped; cp.Attempts != 1 || cp.Lost || !cp.NextAt.Equal(t0.Add(250*time.Millisecond)) {
			t.Fatalf("checkpoint %+v: want 1 attempt, none lost, next due at +250ms", cp)
		}
	})
	t.Run("a user's stop still cancels", func(t *testing.T) {
		h := newHarness(t, nil, fail(status(429), nil), ok("never"))
		ctx, cancel := context.WithCancel(context.Background())
		o := h.run(t, ctx, spec(), cancel)
		wantTerminal(t, o, msp.TerminalCancelled, "", 1)
	})
}

// TestFailureCarriesItsCause: a turn that fails on the provider names the
// cause in structured members — the errorKind, HTTP status and system of
// the last failure and why it was not retried — so that a UI can say it in
// its own words without parsing the message.
func TestFailureCarriesItsCause(t *testing.T) {
	two := 2
	h := newHarness(t, nil, fail(status(429), nil))
	sp := spec()
	sp.Retry = &msp.RetryPolicy{MaxAttempts: &two}
	o := h.run(t, context.Background(), sp, nil)
	wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorModel, 2)
	if e := o.Completed.Error; e.ErrorKind != "rateLimited" || e.HTTPStatus != 429 || e.System != "fake" || e.StopReason != "attemptsExhausted" {
		t.Fatalf("error %s", js(e))
	}
	h = newHarness(t, nil, fail(status(401), nil))
	o = h.run(t, context.Background(), spec(), nil)
	if e := o.Completed.Error; e.ErrorKind != "auth" || e.HTTPStatus != 401 || e.StopReason != "notRetryable" {
		t.Fatalf("error %s", js(e))
	}
}
