package modelretry_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"mspd/modelretry"
	"mspd/modelretry/retrytest"
)

var _ modelretry.Clock = (*retrytest.Clock)(nil)

// start is a fake-clock origin near real time, so real context deadlines
// derived from it are meaningful.
func start() time.Time { return time.Now().Truncate(time.Second) }

func newEngine(clock *retrytest.Clock, budget *modelretry.Budget, rnd func() float64) *modelretry.Engine {
	return &modelretry.Engine{Clock: clock, Budget: budget, Rand: rnd}
}

func mustStart(t *testing.T, e *modelretry.Engine, p modelretry.Policy) *modelretry.Call {
	t.Helper()
	c, err := e.Start(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func withAttempts(n int) modelretry.Policy {
	return modelretry.DefaultPolicy().WithMaxAttempts(n, modelretry.MaxAttemptsLimit)
}

var overloaded = modelretry.Failure{Kind: modelretry.KindOverloaded, HTTPStatus: 503, Retryable: true}

// runFailing drives a call whose every request fails with f, with zero
// delays (rand 0, full jitter), and returns the requests made, the notices
// and the final decision.
func runFailing(t *testing.T, c *modelretry.Call, f modelretry.Failure) (int, []modelretry.Decision, modelretry.Decision) {
	t.Helper()
	ctx := context.Background()
	requests := 0
	var notices []modelretry.Decision
	for {
		a, err := c.Begin(ctx)
		if err != nil {
			t.Fatalf("Begin after %d requests: %v", requests, err)
		}
		requests++
		if a.N() != requests {
			t.Fatalf("attempt number %d, want %d", a.N(), requests)
		}
		d := a.Fail(ctx, f)
		if !d.Retry {
			return requests, notices, d
		}
		if err := c.Backoff(ctx, func(d modelretry.Decision) error {
			notices = append(notices, d)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAttemptBound(t *testing.T) {
	for _, max := range []int{1, 2, 3, 5, 16} {
		t.Run("", func(t *testing.T) {
			e := newEngine(retrytest.NewClock(start()), nil, retrytest.Fixed(0))
			c := mustStart(t, e, withAttempts(max))
			requests, notices, last := runFailing(t, c, overloaded)
			if requests != max || c.Attempts() != max {
				t.Fatalf("made %d requests (counted %d), want %d", requests, c.Attempts(), max)
			}
			if last.Stop != modelretry.StopAttemptsExhausted || last.Attempt != max || last.NextAttempt != 0 {
				t.Fatalf("last decision %+v", last)
			}
			if len(notices) != max-1 {
				t.Fatalf("%d notices, want %d", len(notices), max-1)
			}
			for i, n := range notices {
				if n.Attempt != i+1 || n.NextAttempt != i+2 || n.MaxAttempts != max ||
					!(n.Attempt < n.NextAttempt && n.NextAttempt <= n.MaxAttempts) || n.Layer != modelretry.LayerModel {
					t.Fatalf("notice %d: %+v", i, n)
				}
			}
			if _, err := c.Begin(context.Background()); !errors.Is(err, modelretry.ErrCallEnded) {
				t.Fatalf("Begin after the last attempt: %v", err)
			}
		})
	}
}

func TestMaxAttemptsOneNeverRetries(t *testing.T) {
	clock := retrytest.NewClock(start())
	e := newEngine(clock, nil, nil)
	c := mustStart(t, e, withAttempts(1))
	a, err := c.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d := a.Fail(context.Background(), overloaded)
	if d.Retry || d.Stop != modelretry.StopAttemptsExhausted || d.Delay != 0 {
		t.Fatalf("decision %+v", d)
	}
	if err := c.Backoff(context.Background(), nil); !errors.Is(err, modelretry.ErrCallEnded) {
		t.Fatalf("Backoff: %v", err)
	}
	if len(clock.Sleeps()) != 0 || c.Attempts() != 1 {
		t.Fatal("no sleep and one request expected")
	}
}

func TestNoticeBeforeSleep(t *testing.T) {
	t0 := start()
	clock := retrytest.NewClock(t0)
	e := newEngine(clock, nil, retrytest.Fixed(0.5))
	c := mustStart(t, e, modelretry.DefaultPolicy())
	ctx := context.Background()
	a, _ := c.Begin(ctx)
	d := a.Fail(ctx, e.Classify(modelretry.Signal{HTTPStatus: 500}))
	if !d.Retry || d.Delay != 250*time.Millisecond || d.ServerDirected || d.Failure.Kind != modelretry.KindServerError {
		t.Fatalf("decision %+v", d)
	}
	if _, err := c.Begin(ctx); !errors.Is(err, modelretry.ErrBackoffPending) {
		t.Fatalf("Begin before Backoff: %v", err)
	}

	notified := make(chan modelretry.Decision, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.Backoff(ctx, func(n modelretry.Decision) error {
			// Nothing has slept yet, and no time has passed.
			if clock.Sleepers() != 0 || len(clock.Sleeps()) != 0 || !clock.Now().Equal(t0) {
				return errors.New("notify ran after the sleep began")
			}
			notified <- n
			return nil
		})
	}()
	if err := clock.WaitForSleepers(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	n := <-notified
	if n != d {
		t.Fatalf("notified %+v, decided %+v", n, d)
	}
	if got := clock.Sleeps(); len(got) != 1 || got[0] != d.Delay {
		t.Fatalf("slept %v, announced %v", got, d.Delay)
	}
	clock.Advance(d.Delay - time.Millisecond)
	if clock.Sleepers() != 1 {
		t.Fatal("woke before the announced delay")
	}
	clock.Advance(time.Millisecond)
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
	a2, err := c.Begin(ctx)
	if err != nil || a2.N() != 2 {
		t.Fatalf("Begin after Backoff: %v", err)
	}
	a2.Succeed()
}

func TestCancelDuringBackoff(t *testing.T) {
	t0 := start()
	clock := retrytest.NewClock(t0)
	e := newEngine(clock, nil, retrytest.Fixed(0.9))
	c := mustStart(t, e, modelretry.DefaultPolicy())
	ctx, cancel := context.WithCancel(context.Background())
	a, _ := c.Begin(ctx)
	d := a.Fail(ctx, overloaded)
	if !d.Retry {
		t.Fatalf("decision %+v", d)
	}
	notices := 0
	done := make(chan error, 1)
	go func() {
		done <- c.Backoff(ctx, func(modelretry.Decision) error { notices++; return nil })
	}()
	if err := clock.WaitForSleepers(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := wait(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Backoff returned %v, want context.Canceled", err)
	}
	if !clock.Now().Equal(t0) || clock.Sleepers() != 0 || notices != 1 {
		t.Fatalf("clock moved or sleeper left or notices %d", notices)
	}
	// No request after cancellation, whatever context the caller passes.
	for _, ctx := range []context.Context{ctx, context.Background()} {
		if _, err := c.Begin(ctx); err == nil {
			t.Fatal("Begin after a cancelled backoff succeeded")
		}
	}
	if c.Attempts() != 1 {
		t.Fatalf("attempts %d", c.Attempts())
	}
}

func TestCancelBeforeBackoff(t *testing.T) {
	clock := retrytest.NewClock(start())
	e := newEngine(clock, nil, retrytest.Fixed(0.5))
	c := mustStart(t, e, modelretry.DefaultPolicy())
	ctx, cancel := context.WithCancel(context.Background())
	a, _ := c.Begin(ctx)
	if d := a.Fail(ctx, overloaded); !d.Retry {
		t.Fatalf("decision %+v", d)
	}
	cancel()
	notified := false
	err := c.Backoff(ctx, func(modelretry.Decision) error { notified = true; return nil })
	if !errors.Is(err, context.Canceled) || notified || len(clock.Sleeps()) != 0 {
		t.Fatalf("err %v, notified %v, sleeps %v", err, notified, clock.Sleeps())
	}
	if _, err := c.Begin(context.Background()); !errors.Is(err, modelretry.ErrCallEnded) {
		t.Fatalf("Begin: %v", err)
	}
}

func TestFailAfterCancellation(t *testing.T) {
	budget := modelretry.DefaultBudget()
	e := newEngine(retrytest.NewClock(start()), budget, nil)
	c := mustStart(t, e, modelretry.DefaultPolicy())
	ctx, cancel := context.WithCancel(context.Background())
	a, _ := c.Begin(ctx)
	cancel()
	d := a.Fail(ctx, overloaded)
	if d.Retry || d.Stop != modelretry.StopCancelled || d.Failure.Kind != modelretry.KindCancelled ||
		d.Failure.OriginalKind != modelretry.KindOverloaded || d.Failure.Retryable {
		t.Fatalf("decision %+v", d)
	}
	if budget.Tokens() != 10 {
		t.Fatalf("cancellation drained the budget: %v", budget.Tokens())
	}
	if _, err := c.Begin(context.Background()); !errors.Is(err, modelretry.ErrCallEnded) {
		t.Fatalf("Begin: %v", err)
	}

	// Begin itself refuses a done context and ends the call.
	c = mustStart(t, e, modelretry.DefaultPolicy())
	if _, err := c.Begin(ctx); !errors.Is(err, context.Canceled) || c.Attempts() != 0 {
		t.Fatalf("Begin on a cancelled context: %v", err)
	}
	if _, err := c.Begin(context.Background()); !errors.Is(err, modelretry.ErrCallEnded) {
		t.Fatalf("Begin: %v", err)
	}
}

func TestNotifyErrorStops(t *testing.T) {
	clock := retrytest.NewClock(start())
	e := newEngine(clock, nil, retrytest.Fixed(0.5))
	c := mustStart(t, e, modelretry.DefaultPolicy())
	a, _ := c.Begin(context.Background())
	a.Fail(context.Background(), overloaded)
	boom := errors.New("append failed")
	if err := c.Backoff(context.Background(), func(modelretry.Decision) error { return boom }); err != boom {
		t.Fatalf("Backoff: %v", err)
	}
	if len(clock.Sleeps()) != 0 {
		t.Fatal("slept after a failed notice")
	}
	if _, err := c.Begin(context.Background()); !errors.Is(err, modelretry.ErrCallEnded) {
		t.Fatalf("Begin: %v", err)
	}
}

func TestServerDirectedDelay(t *testing.T) {
	t0 := start()
	tests := []struct {
		name   string
		header http.Header
		retry  bool
		stop   modelretry.StopReason
		delay  time.Duration
		server bool
	}{
		{"seconds", http.Header{"Retry-After": {"2"}}, true, "", 2 * time.Second, true},
		{"ms", http.Header{"Retry-After-Ms": {"1500"}}, true, "", 1500 * time.Millisecond, true},
		{"date future", http.Header{"Retry-After": {t0.Add(10 * time.Second).UTC().Format(http.TimeFormat)}}, true, "", 10 * time.Second, true},
		{"date past uses backoff", http.Header{"Retry-After": {t0.Add(-time.Minute).UTC().Format(http.TimeFormat)}}, true, "", 250 * time.Millisecond, false},
		{"garbage uses backoff", http.Header{"Retry-After": {"soon"}}, true, "", 250 * time.Millisecond, false},
		{"exactly the cap", http.Header{"Retry-After": {"60"}}, true, "", time.Minute, true},
		{"above the cap fails now", http.Header{"Retry-After": {"600"}}, false, modelretry.StopRetryAfterTooLong, 10 * time.Minute, true},
		{"beyond MaxBackoff is honoured", http.Header{"Retry-After": {"30"}}, true, "", 30 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(retrytest.NewClock(t0), nil, retrytest.Fixed(0.5))
			c := mustStart(t, e, modelretry.DefaultPolicy())
			a, _ := c.Begin(context.Background())
			f := e.Classify(modelretry.Signal{HTTPStatus: 429, Header: tt.header})
			d := a.Fail(context.Background(), f)
			if d.Retry != tt.retry || d.Stop != tt.stop || d.Delay != tt.delay || d.ServerDirected != tt.server {
				t.Fatalf("decision %+v", d)
			}
			if d.Failure.Kind != modelretry.KindRateLimited {
				t.Fatalf("kind %q", d.Failure.Kind)
			}
		})
	}
}

func TestDeadline(t *testing.T) {
	t0 := start()
	ctx, cancel := context.WithDeadline(context.Background(), t0.Add(time.Hour))
	defer cancel()
	e := newEngine(retrytest.NewClock(t0), nil, retrytest.Fixed(0.5))
	p := modelretry.DefaultPolicy()
	p.MaxServerDelay = 2 * time.Hour
	for _, tc := range []struct {
		after string
		retry bool
	}{{"30", true}, {"3600", false}, {"5400", false}} {
		c := mustStart(t, e, p)
		a, _ := c.Begin(ctx)
		d := a.Fail(ctx, e.Classify(modelretry.Signal{HTTPStatus: 503, Header: http.Header{"Retry-After": {tc.after}}}))
		if d.Retry != tc.retry || (!tc.retry && (d.Stop != modelretry.StopDeadline || d.Delay == 0)) {
			t.Fatalf("retry-after %s: decision %+v", tc.after, d)
		}
	}
}

func TestNotRetryable(t *testing.T) {
	budget := modelretry.DefaultBudget()
	e := newEngine(retrytest.NewClock(start()), budget, nil)
	for _, sig := range []modelretry.Signal{
		{HTTPStatus: 400},
		{HTTPStatus: 429, Kind: modelretry.KindQuotaExhausted},
		{HTTPStatus: 500, Header: http.Header{"X-Should-Retry": {"false"}}},
		{Kind: modelretry.KindContextLengthExceeded},
	} {
		c := mustStart(t, e, modelretry.DefaultPolicy())
		a, _ := c.Begin(context.Background())
		d := a.Fail(context.Background(), e.Classify(sig))
		if d.Retry || d.Stop != modelretry.StopNotRetryable || d.Delay != 0 {
			t.Fatalf("%+v: decision %+v", sig, d)
		}
	}
	if budget.Tokens() != 10 {
		t.Fatalf("non-retryable failures drained the budget: %v", budget.Tokens())
	}
}

func TestBudgetExhausted(t *testing.T) {
	budget := modelretry.DefaultBudget()
	e := newEngine(retrytest.NewClock(start()), budget, retrytest.Fixed(0))
	c := mustStart(t, e, withAttempts(16))
	requests, notices, last := runFailing(t, c, overloaded)
	if requests != 5 || len(notices) != 4 {
		t.Fatalf("requests %d, notices %d; want 5 and 4", requests, len(notices))
	}
	if last.Stop != modelretry.StopBudgetExhausted || last.Failure.Kind != modelretry.KindBudgetExhausted ||
		last.Failure.OriginalKind != modelretry.KindOverloaded || last.Failure.Retryable || last.Failure.HTTPStatus != 503 {
		t.Fatalf("last decision %+v", last)
	}
	// Another call on the same key is refused at once.
	c2 := mustStart(t, e, withAttempts(16))
	if requests, _, last := runFailing(t, c2, overloaded); requests != 1 || last.Stop != modelretry.StopBudgetExhausted {
		t.Fatalf("second call: %d requests, %+v", requests, last)
	}
	// Successes on the key refill it: 4 tokens + 21×0.1 = 6.1, so one
	// failure leaves 5.1 and is retried.
	for range 21 {
		c := mustStart(t, e, modelretry.DefaultPolicy())
		a, _ := c.Begin(context.Background())
		a.Succeed()
	}
	c3 := mustStart(t, e, withAttempts(2))
	if requests, notices, last := runFailing(t, c3, overloaded); requests != 2 || len(notices) != 1 || last.Stop != modelretry.StopAttemptsExhausted {
		t.Fatalf("after refill: %d requests, %d notices, %+v", requests, len(notices), last)
	}
}

func TestBudgetChargedForRetryableProviderFailures(t *testing.T) {
	tests := []struct {
		name   string
		sig    modelretry.Signal
		charge bool
	}{
		{"overloaded", modelretry.Signal{HTTPStatus: 529}, true},
		{"unknown hint with 503", modelretry.Signal{HTTPStatus: 503, Kind: "upstreamHiccup"}, true},
		{"400 forced retryable", modelretry.Signal{HTTPStatus: 400, Header: http.Header{"X-Should-Retry": {"true"}}}, true},
		{"500 forced not retryable", modelretry.Signal{HTTPStatus: 500, Header: http.Header{"X-Should-Retry": {"false"}}}, false},
		{"auth", modelretry.Signal{HTTPStatus: 401}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			budget := modelretry.DefaultBudget()
			e := newEngine(retrytest.NewClock(start()), budget, retrytest.Fixed(0))
			c := mustStart(t, e, modelretry.DefaultPolicy())
			a, _ := c.Begin(context.Background())
			a.Fail(context.Background(), e.Classify(tt.sig))
			if charged := budget.Tokens() == 9; charged != tt.charge {
				t.Fatalf("tokens %v, charge expected %v", budget.Tokens(), tt.charge)
			}
		})
	}
}

func TestLayerString(t *testing.T) {
	if modelretry.LayerModel.String() != "model" || modelretry.LayerTurn.String() != "turn" || modelretry.Layer(0).String() != "unknown" {
		t.Fatal("Layer.String")
	}
}

func TestTurnLayerSharesCounter(t *testing.T) {
	// msp-protocol §6.1: request 1 fails before output (model layer),
	// request 2 is cut after output (turn layer), request 3 succeeds.
	budget := modelretry.DefaultBudget()
	e := newEngine(retrytest.NewClock(start()), budget, retrytest.Fixed(0))
	c := mustStart(t, e, withAttempts(3))
	ctx := context.Background()
	var notices []modelretry.Decision
	notify := func(d modelretry.Decision) error { notices = append(notices, d); return nil }

	a1, _ := c.Begin(ctx)
	d1 := a1.Fail(ctx, e.Classify(modelretry.Signal{HTTPStatus: 500}))
	if err := c.Backoff(ctx, notify); err != nil {
		t.Fatal(err)
	}
	a2, _ := c.Begin(ctx)
	d2 := a2.Rerun(ctx, e.Classify(modelretry.Signal{Kind: modelretry.KindStreamInterrupted}))
	if err := c.Backoff(ctx, notify); err != nil {
		t.Fatal(err)
	}
	a3, _ := c.Begin(ctx)
	a3.Succeed()
	if d1.Layer != modelretry.LayerModel || d1.NextAttempt != 2 || d2.Layer != modelretry.LayerTurn || d2.Attempt != 2 || d2.NextAttempt != 3 || d2.MaxAttempts != 3 {
		t.Fatalf("decisions %+v / %+v", d1, d2)
	}
	if len(notices) != 2 || c.Attempts() != 3 || a3.N() != 3 {
		t.Fatalf("notices %d, attempts %d", len(notices), c.Attempts())
	}

	// Truncation and schema re-runs share the bound and do not drain the
	// provider budget; the caller can veto with Retryable=false.
	before := budget.Tokens()
	c = mustStart(t, e, withAttempts(2))
	a, _ := c.Begin(ctx)
	if d := a.Rerun(ctx, e.Classify(modelretry.Signal{Kind: modelretry.KindTruncated})); !d.Retry || d.Layer != modelretry.LayerTurn {
		t.Fatalf("truncated: %+v", d)
	}
	c.Backoff(ctx, nil)
	a, _ = c.Begin(ctx)
	if d := a.Rerun(ctx, e.Classify(modelretry.Signal{Kind: modelretry.KindSchemaViolation})); d.Retry || d.Stop != modelretry.StopAttemptsExhausted {
		t.Fatalf("schema: %+v", d)
	}
	if budget.Tokens() != before {
		t.Fatalf("turn-layer re-runs drained the budget: %v → %v", before, budget.Tokens())
	}
	c = mustStart(t, e, withAttempts(5))
	a, _ = c.Begin(ctx)
	veto := e.Classify(modelretry.Signal{Kind: modelretry.KindTruncated})
	veto.Retryable = false // NextMaxTokens said it cannot grow
	if d := a.Rerun(ctx, veto); d.Retry || d.Stop != modelretry.StopNotRetryable {
		t.Fatalf("veto: %+v", d)
	}
}

func TestMisuse(t *testing.T) {
	e := newEngine(retrytest.NewClock(start()), modelretry.DefaultBudget(), retrytest.Fixed(0))
	ctx := context.Background()

	if _, err := e.Start(withAttempts(0)); err == nil {
		t.Fatal("Start accepted maxAttempts 0")
	} else if pe := (*modelretry.PolicyError)(nil); !errors.As(err, &pe) || pe.Field != "maxAttempts" {
		t.Fatalf("Start: %v", err)
	}

	c := mustStart(t, e, modelretry.DefaultPolicy())
	if err := c.Backoff(ctx, nil); !errors.Is(err, modelretry.ErrNoRetryScheduled) {
		t.Fatalf("Backoff before any attempt: %v", err)
	}
	a, _ := c.Begin(ctx)
	if _, err := c.Begin(ctx); !errors.Is(err, modelretry.ErrAttemptInFlight) {
		t.Fatalf("Begin twice: %v", err)
	}
	if err := c.Backoff(ctx, nil); !errors.Is(err, modelretry.ErrNoRetryScheduled) {
		t.Fatalf("Backoff in flight: %v", err)
	}
	d := a.Fail(ctx, overloaded)
	tokens := e.Budget.Tokens()
	if again := a.Fail(ctx, overloaded); again != d || e.Budget.Tokens() != tokens {
		t.Fatal("a second Fail must return the first decision without charging again")
	}
	a.Succeed() // ignored: already resolved
	if err := c.Backoff(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Backoff(ctx, nil); !errors.Is(err, modelretry.ErrNoRetryScheduled) {
		t.Fatalf("Backoff twice: %v", err)
	}
	a2, _ := c.Begin(ctx)
	a2.Succeed()
	if d := a2.Fail(ctx, overloaded); d.Retry || d.Stop != modelretry.StopResolved {
		t.Fatalf("Fail after Succeed: %+v", d)
	}
	if _, err := c.Begin(ctx); !errors.Is(err, modelretry.ErrCallEnded) {
		t.Fatalf("Begin after success: %v", err)
	}
	if c.Attempts() != 2 || c.MaxAttempts() != 5 || c.Policy() != modelretry.DefaultPolicy() {
		t.Fatal("accessors")
	}
}

func TestWithdraw(t *testing.T) {
	e := newEngine(retrytest.NewClock(start()), nil, retrytest.Fixed(0))
	c := mustStart(t, e, modelretry.DefaultPolicy())
	ctx := context.Background()
	a, _ := c.Begin(ctx)
	a.Fail(ctx, overloaded)
	c.Backoff(ctx, nil)
	a, _ = c.Begin(ctx)
	a.Withdraw() // refused before reaching the provider: not an attempt
	a.Withdraw()
	if c.Attempts() != 1 {
		t.Fatalf("attempts %d, want 1", c.Attempts())
	}
	if _, err := c.Begin(ctx); !errors.Is(err, modelretry.ErrCallEnded) {
		t.Fatalf("Begin after Withdraw: %v", err)
	}
}

func TestConcurrentCalls(t *testing.T) {
	budget := modelretry.DefaultBudget()
	e := newEngine(retrytest.NewClock(start()), budget, retrytest.Fixed(0))
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for i := range 32 {
		wg.Go(func() {
			c, _ := e.Start(withAttempts(4))
			ctx := context.Background()
			for {
				a, err := c.Begin(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				total++
				mu.Unlock()
				if i%3 == 0 {
					a.Succeed()
					return
				}
				if d := a.Fail(ctx, overloaded); !d.Retry {
					return
				}
				if c.Backoff(ctx, nil) != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if total > 32*4 || budget.Tokens() < 0 || budget.Tokens() > 10 {
		t.Fatalf("total %d, tokens %v", total, budget.Tokens())
	}
}

func TestSystemClock(t *testing.T) {
	c := modelretry.SystemClock()
	if d := time.Since(c.Now()); d < 0 || d > time.Minute {
		t.Fatalf("Now is off by %v", d)
	}
	if err := c.Sleep(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Sleep(context.Background(), -time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A cancelled context returns at once instead of sleeping an hour.
	if err := c.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// The zero Engine uses the system clock.
	var e modelretry.Engine
	if f := e.Classify(modelretry.Signal{HTTPStatus: 503}); f.Kind != modelretry.KindOverloaded {
		t.Fatal(f)
	}
}

// testCtx bounds a wait on another goroutine, so a bug fails the test
// instead of hanging it; nothing waits on it in a passing run.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wait(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-testCtx(t).Done():
		t.Fatal("timed out waiting for Backoff")
		return nil
	}
}
