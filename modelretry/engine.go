package modelretry

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Errors returned by Call.Begin and Call.Backoff when the caller's steps are
// out of order or the call is over.
var (
	// ErrCallEnded: the call succeeded, failed for good, was withdrawn, or
	// was cancelled; it makes no more requests.
	ErrCallEnded = errors.New("modelretry: call has ended")
	// ErrAttemptInFlight: Begin while the previous attempt is unresolved.
	ErrAttemptInFlight = errors.New("modelretry: previous attempt not resolved")
	// ErrBackoffPending: Begin after a granted retry whose Backoff has not
	// completed (the notice and the sleep come first).
	ErrBackoffPending = errors.New("modelretry: retry granted but Backoff not completed")
	// ErrAttemptsExhausted: another request would exceed MaxAttempts.
	ErrAttemptsExhausted = errors.New("modelretry: maxAttempts reached")
	// ErrNoRetryScheduled: Backoff without a retry granted by Fail or Rerun.
	ErrNoRetryScheduled = errors.New("modelretry: no retry scheduled")
)

// Layer says which retry layer decided a retry, and so which notice the
// caller emits.
type Layer int

const (
	// LayerModel is a failure before any output was committed:
	// turn/modelRetryScheduled.
	LayerModel Layer = iota + 1
	// LayerTurn is an attempt whose output was rejected (truncated, schema
	// violation, stream cut after output began): turn/retryScheduled.
	LayerTurn
)

// String returns "model" or "turn".
func (l Layer) String() string {
	switch l {
	case LayerModel:
		return "model"
	case LayerTurn:
		return "turn"
	}
	return "unknown"
}

// StopReason says why a failure is not retried.
type StopReason string

// Stop reasons; StopNone accompanies a granted retry.
const (
	StopNone StopReason = ""
	// StopNotRetryable: the failure's kind or x-should-retry says no.
	StopNotRetryable StopReason = "notRetryable"
	// StopAttemptsExhausted: the failed attempt was the MaxAttempts-th.
	StopAttemptsExhausted StopReason = "attemptsExhausted"
	// StopRetryAfterTooLong: the server asked for more than MaxServerDelay;
	// Decision.Delay holds the real delay.
	StopRetryAfterTooLong StopReason = "retryAfterTooLong"
	// StopDeadline: the context's deadline passes before the retry could
	// start; Decision.Delay holds the delay that was needed (0 when the
	// deadline had already passed).
	StopDeadline StopReason = "deadline"
	// StopBudgetExhausted: the provider key's shared retry budget refused;
	// Failure.Kind is KindBudgetExhausted and OriginalKind the real kind.
	StopBudgetExhausted StopReason = "budgetExhausted"
	// StopCancelled: the context was cancelled; Failure.Kind is
	// KindCancelled. Nothing is retried after cancellation.
	StopCancelled StopReason = "cancelled"
	// StopResolved: the attempt had already been resolved (by Succeed or
	// Withdraw); a caller bug, reported rather than panicking.
	StopResolved StopReason = "resolved"
)

// Decision is the engine's verdict on a failed attempt. When Retry is true
// it is also the retry notice's content: attempt, nextAttempt, maxAttempts,
// retryDelayMs (Delay.Milliseconds(), exact: delays are whole
// milliseconds), errorKind and httpStatus (from Failure).
type Decision struct {
	// Retry says another attempt is granted, after Call.Backoff.
	Retry bool
	// Layer is the retry layer: which notice to emit.
	Layer Layer
	// Attempt is the 1-based number of the failed request.
	Attempt int
	// NextAttempt is Attempt+1 when Retry, else 0.
	NextAttempt int
	// MaxAttempts is the call's bound, the first request included.
	MaxAttempts int
	// Delay is the exact backoff Call.Backoff will sleep. On a stop it is 0,
	// except for StopRetryAfterTooLong and StopDeadline (see there).
	Delay time.Duration
	// ServerDirected says Delay came from Retry-After (or the message)
	// rather than the computed backoff.
	ServerDirected bool
	// Failure is the failure as reported: its Kind may have been replaced
	// (budgetExhausted, cancelled), with OriginalKind keeping the class.
	Failure Failure
	// Stop says why Retry is false.
	Stop StopReason
}

// Engine makes retry decisions for one provider key. It is safe for
// concurrent use by any number of calls, provided Rand is. The zero value
// works: system clock, no budget, math/rand/v2.
type Engine struct {
	// Clock paces backoffs and dates Retry-After; nil means SystemClock().
	// Context deadlines are compared with its Now, so a fake clock should
	// start near real time when deadlines matter.
	Clock Clock
	// Budget is shared by every call to the provider key; nil means
	// unthrottled.
	Budget *Budget
	// Rand returns values in [0, 1) for jitter; nil means math/rand/v2.
	// It must be safe for concurrent use if calls run concurrently.
	Rand func() float64
}

func (e *Engine) clock() Clock {
	if e.Clock == nil {
		return SystemClock()
	}
	return e.Clock
}

// Classify is the package Classify with the engine clock's Now.
func (e *Engine) Classify(sig Signal) Failure {
	return Classify(sig, e.clock().Now())
}

// Start begins one model call under p: typically a host policy narrowed by
// the call's own WithMaxAttempts / WithGrowMaxTokens. It returns p's
// Validate error, if any.
func (e *Engine) Start(p Policy) (*Call, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Call{policy: p, clock: e.clock(), budget: e.Budget, rand: e.Rand}, nil
}

// Resume continues a call that another process began and lost: made
// requests are already counted (the lost one included). When another is
// allowed, the call starts with a granted turn-layer retry of kind
// KindHostRestarted that waits delay before request made+1, so the
// caller goes on with Backoff (notice, then sleep) as after any re-run;
// otherwise the returned decision says why not and the call has ended.
// A negative delay takes the policy's backoff for the lost request. The
// retry budget is not charged: a restart says nothing of the provider.
func (e *Engine) Resume(p Policy, made int, delay time.Duration) (*Call, Decision, error) {
	c, err := e.Start(p)
	if err != nil {
		return nil, Decision{}, err
	}
	made = max(made, 0)
	d := Decision{Layer: LayerTurn, Attempt: made, MaxAttempts: p.MaxAttempts,
		Failure: Failure{Kind: KindHostRestarted, Retryable: true}}
	c.attempts = made
	if made >= p.MaxAttempts {
		d.Stop = StopAttemptsExhausted
		c.state = stateEnded
		return c, d, nil
	}
	if delay < 0 {
		delay = p.Delay(made-1, e.Rand)
	}
	d.Retry, d.NextAttempt, d.Delay = true, made+1, delay
	c.state, c.pending = stateRetryGranted, d
	return c, d, nil
}

type callState int

const (
	stateReady        callState = iota // Begin may start the next attempt
	stateInFlight                      // an attempt is unresolved
	stateRetryGranted                  // Fail/Rerun granted a retry; Backoff next
	stateBackingOff                    // Backoff is notifying or sleeping
	stateEnded                         // no more requests
)

// Call drives the attempts of one model call: one counter and one
// MaxAttempts bound shared by model-layer and turn-layer retries (RFC 0248
// §A.1, msp-protocol §6.1). The caller's loop is
//
//	a, err := call.Begin(ctx) → send request a.N() → a.Succeed(), or
//	d := a.Fail(ctx, f) / a.Rerun(ctx, f) → if d.Retry: call.Backoff(ctx, notify)
//
// Begin refuses a request that would exceed MaxAttempts, one not preceded
// by a completed Backoff, and any after cancellation; Backoff calls notify
// before it sleeps. Methods are safe for concurrent use, though one
// goroutine normally drives a call.
type Call struct {
	policy Policy
	clock  Clock
	budget *Budget
	rand   func() float64

	mu       sync.Mutex
	state    callState
	attempts int
	pending  Decision
}

// Attempt is one provider request of a call. Resolve it exactly once with
// Succeed, Fail, Rerun or Withdraw; later resolutions are ignored (Fail and
// Rerun return the first decision again).
type Attempt struct {
	call     *Call
	n        int
	resolved bool     // guarded by call.mu
	decision Decision // guarded by call.mu
}

// Policy returns the call's policy.
func (c *Call) Policy() Policy { return c.policy }

// MaxAttempts returns the call's bound on provider requests.
func (c *Call) MaxAttempts() int { return c.policy.MaxAttempts }

// Attempts returns the provider requests made so far: RFC 0248 attempts.count.
func (c *Call) Attempts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attempts
}

// Begin counts and returns the next attempt; call it just before sending
// the request. It fails with ctx.Err() (ending the call) once ctx is done,
// with ErrAttemptsExhausted past MaxAttempts, and with ErrAttemptInFlight,
// ErrBackoffPending or ErrCallEnded when out of order.
func (c *Call) Begin(ctx context.Context) (*Attempt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case stateEnded:
		return nil, ErrCallEnded
	case stateInFlight:
		return nil, ErrAttemptInFlight
	case stateRetryGranted, stateBackingOff:
		return nil, ErrBackoffPending
	}
	if err := ctx.Err(); err != nil {
		c.state = stateEnded
		return nil, err
	}
	if c.attempts >= c.policy.MaxAttempts {
		c.state = stateEnded
		return nil, ErrAttemptsExhausted
	}
	c.attempts++
	c.state = stateInFlight
	return &Attempt{call: c, n: c.attempts}, nil
}

// Backoff carries out a granted retry: it calls notify with the decision
// (the caller appends the durable retry notice there), then sleeps exactly
// Decision.Delay on the clock. It returns ctx.Err() at once, without
// notifying, if ctx is already done, and promptly if ctx ends while it
// sleeps; a notify error is returned as is. Any error ends the call, so no
// further request is made. notify may be nil to skip the notice.
func (c *Call) Backoff(ctx context.Context, notify func(Decision) error) error {
	c.mu.Lock()
	switch c.state {
	case stateRetryGranted:
	case stateEnded:
		c.mu.Unlock()
		return ErrCallEnded
	default:
		c.mu.Unlock()
		return ErrNoRetryScheduled
	}
	c.state = stateBackingOff
	d := c.pending
	c.mu.Unlock()

	if err := ctx.Err(); err != nil {
		return c.end(err)
	}
	if notify != nil {
		if err := notify(d); err != nil {
			return c.end(err)
		}
	}
	if err := c.clock.Sleep(ctx, d.Delay); err != nil {
		return c.end(err)
	}
	if err := ctx.Err(); err != nil { // cancelled as the sleep ended
		return c.end(err)
	}
	c.mu.Lock()
	c.state = stateReady
	c.mu.Unlock()
	return nil
}

func (c *Call) end(err error) error {
	c.mu.Lock()
	c.state = stateEnded
	c.mu.Unlock()
	return err
}

// N returns the attempt's 1-based number (provider.Request.Attempt).
func (a *Attempt) N() int { return a.n }

// Succeed records a successful request, refilling the retry budget, and
// ends the call.
func (a *Attempt) Succeed() { a.end(true) }

// Withdraw records that the request never reached the provider (refused
// locally, RFC 0248 §A.1): it is not counted, and the call ends, since a
// refusal is not retried.
func (a *Attempt) Withdraw() { a.end(false) }

// end resolves the attempt without a failure: sent and answered, or never
// sent at all.
func (a *Attempt) end(sent bool) {
	c := a.call
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.resolved {
		return
	}
	a.resolved = true
	a.decision = Decision{Attempt: a.n, MaxAttempts: c.policy.MaxAttempts, Stop: StopResolved}
	c.state = stateEnded
	if sent {
		c.budget.OnSuccess()
	} else {
		c.attempts--
	}
}

// Fail decides on a model-layer failure (before any output was committed):
// whether to retry and after which delay. ctx is the call's context: once
// it is done nothing is retried, and a retry that could not start before
// its deadline is refused.
func (a *Attempt) Fail(ctx context.Context, f Failure) Decision {
	return a.resolve(ctx, f, LayerModel)
}

// Rerun decides on a turn-layer re-run: the attempt produced output the
// caller rejected (truncated, schema violation, stream cut after output).
// It shares the attempt counter, bound and delay computation with Fail;
// f.Retryable still applies (Classify gives truncated, schemaViolation and
// streamInterrupted as retryable), so the caller can veto by setting it
// false, e.g. when NextMaxTokens cannot grow.
func (a *Attempt) Rerun(ctx context.Context, f Failure) Decision {
	return a.resolve(ctx, f, LayerTurn)
}

func (a *Attempt) resolve(ctx context.Context, f Failure, layer Layer) Decision {
	c := a.call
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.resolved {
		return a.decision
	}
	a.resolved = true
	d := c.decide(ctx, a.n, f, layer)
	a.decision = d
	if d.Retry {
		c.state, c.pending = stateRetryGranted, d
	} else {
		c.state = stateEnded
	}
	return d
}

// decide applies the policy to a failure of attempt n. c.mu is held.
func (c *Call) decide(ctx context.Context, n int, f Failure, layer Layer) Decision {
	p := c.policy
	d := Decision{Layer: layer, Attempt: n, MaxAttempts: p.MaxAttempts, Failure: f}
	if err := ctx.Err(); err != nil {
		// The failure is most likely the cancellation itself; it never
		// drains the budget, and nothing is retried after it.
		if errors.Is(err, context.Canceled) {
			d.Stop = StopCancelled
			d.Failure = replaceKind(f, KindCancelled)
		} else {
			d.Stop = StopDeadline
		}
		return d
	}
	// Every retryable provider failure drains the shared budget, even the
	// last attempt's (gRPC A6: each failed RPC counts).
	budgetOK := true
	if f.Retryable && !outputRejected(f.Kind) {
		budgetOK = c.budget.OnFailure()
	}
	switch {
	case !f.Retryable:
		d.Stop = StopNotRetryable
		return d
	case n >= p.MaxAttempts:
		d.Stop = StopAttemptsExhausted
		return d
	}
	if f.HasRetryAfter && f.RetryAfter > 0 {
		d.Delay, d.ServerDirected = f.RetryAfter, true
		if f.RetryAfter > p.MaxServerDelay {
			d.Stop = StopRetryAfterTooLong
			return d
		}
	} else {
		d.Delay = p.Delay(n-1, c.rand)
	}
	if dl, ok := ctx.Deadline(); ok && !c.clock.Now().Add(d.Delay).Before(dl) {
		d.Stop = StopDeadline
		return d
	}
	if !budgetOK {
		d.Delay, d.ServerDirected = 0, false
		d.Stop = StopBudgetExhausted
		d.Failure = replaceKind(f, KindBudgetExhausted)
		return d
	}
	d.Retry, d.NextAttempt = true, n+1
	return d
}

func replaceKind(f Failure, kind string) Failure {
	if f.Kind != kind {
		f.OriginalKind, f.Kind = f.Kind, kind
	}
	f.Retryable = false
	return f
}
