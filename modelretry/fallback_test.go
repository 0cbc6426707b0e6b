package modelretry_test

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mspd/modelretry"
	"mspd/modelretry/retrytest"
)

// TestFailsOver: the chain moves on when the provider cannot answer —
// attempts or budget spent on its service's failures, a Retry-After too
// long, or a failure another provider would not have — and never on the
// request's own failures, a rejected answer, a deadline or a cancel.
func TestFailsOver(t *testing.T) {
	now := time.Now()
	classify := func(kind string, status int) modelretry.Failure {
		return modelretry.Classify(modelretry.Signal{Kind: kind, HTTPStatus: status}, now)
	}
	for _, tc := range []struct {
		name string
		d    modelretry.Decision
		want bool
	}{
		{"429 exhausted", modelretry.Decision{Stop: modelretry.StopAttemptsExhausted, Failure: classify("", 429)}, true},
		{"503 exhausted", modelretry.Decision{Stop: modelretry.StopAttemptsExhausted, Failure: classify("", 503)}, true},
		{"timeout exhausted", modelretry.Decision{Stop: modelretry.StopAttemptsExhausted, Failure: classify(modelretry.KindTimeout, 0)}, true},
		{"stream cut exhausted", modelretry.Decision{Stop: modelretry.StopAttemptsExhausted, Failure: classify(modelretry.KindStreamInterrupted, 0)}, true},
		{"budget spent", modelretry.Decision{Stop: modelretry.StopBudgetExhausted,
			Failure: modelretry.Failure{Kind: modelretry.KindBudgetExhausted, OriginalKind: modelretry.KindRateLimited, HTTPStatus: 429}}, true},
		{"retry-after too long", modelretry.Decision{Stop: modelretry.StopRetryAfterTooLong, Failure: classify("", 429)}, true},
		{"quota", modelretry.Decision{Stop: modelretry.StopNotRetryable, Failure: classify(modelretry.KindQuotaExhausted, 429)}, true},
		{"billing 402", modelretry.Decision{Stop: modelretry.StopNotRetryable, Failure: classify("", http.StatusPaymentRequired)}, true},
		{"auth 401", modelretry.Decision{Stop: modelretry.StopNotRetryable, Failure: classify("", 401)}, true},
		{"overloaded, x-should-retry false", modelretry.Decision{Stop: modelretry.StopNotRetryable, Failure: classify("", 503)}, true},
		{"model not found", modelretry.Decision{Stop: modelretry.StopNotRetryable, Failure: classify(modelretry.KindNotFound, 404)}, true},
		{"made-up kind, 500", modelretry.Decision{Stop: modelretry.StopAttemptsExhausted, Failure: classify("weird", 500)}, true},

		{"invalid request 400", modelretry.Decision{Stop: modelretry.StopNotRetryable, Failure: classify("", 400)}, false},
		{"context too long", modelretry.Decision{Stop: modelretry.StopNotRetryable, Failure: classify(modelretry.KindContextLengthExceeded, 400)}, false},
		{"content filter", modelretry.Decision{Stop: modelretry.StopNotRetryable, Failure: classify(modelretry.KindContentFilter, 0)}, false},
		{"schema violations exhausted", modelretry.Decision{Stop: modelretry.StopAttemptsExhausted, Failure: classify(modelretry.KindSchemaViolation, 0)}, false},
		{"truncated exhausted", modelretry.Decision{Stop: modelretry.StopAttemptsExhausted, Failure: classify(modelretry.KindTruncated, 0)}, false},
		{"unknown", modelretry.Decision{Stop: modelretry.StopNotRetryable, Failure: classify("", 0)}, false},
		{"made-up kind, no status", modelretry.Decision{Stop: modelretry.StopNotRetryable, Failure: classify("weird", 0)}, false},
		{"deadline", modelretry.Decision{Stop: modelretry.StopDeadline, Failure: classify("", 503)}, false},
		{"cancelled", modelretry.Decision{Stop: modelretry.StopCancelled, Failure: modelretry.Failure{Kind: modelretry.KindCancelled}}, false},
		{"retry granted", modelretry.Decision{Retry: true, Failure: classify("", 503)}, false},
	} {
		if got := modelretry.FailsOver(tc.d); got != tc.want {
			t.Errorf("%s: FailsOver = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestHealthOf: the breaker counts what every request to the provider
// would meet (its service, its account), takes an answer the caller
// rejected as a sign of life, and learns nothing from the request's own
// failures or a missing model.
func TestHealthOf(t *testing.T) {
	for kind, want := range map[string]modelretry.Health{
		modelretry.KindRateLimited: modelretry.Failing, modelretry.KindOverloaded: modelretry.Failing,
		modelretry.KindServerError: modelretry.Failing, modelretry.KindTimeout: modelretry.Failing,
		modelretry.KindConnectionError: modelretry.Failing, modelretry.KindQuotaExhausted: modelretry.Failing,
		modelretry.KindAuth: modelretry.Failing, modelretry.KindStreamInterrupted: modelretry.Failing,
		modelretry.KindTruncated: modelretry.Healthy, modelretry.KindSchemaViolation: modelretry.Healthy,
		modelretry.KindInvalidRequest: modelretry.HealthUnknown, modelretry.KindContentFilter: modelretry.HealthUnknown,
		modelretry.KindContextLengthExceeded: modelretry.HealthUnknown, modelretry.KindNotFound: modelretry.HealthUnknown,
		modelretry.KindCancelled: modelretry.HealthUnknown, modelretry.KindHostRestarted: modelretry.HealthUnknown,
	} {
		if got := modelretry.HealthOf(modelretry.Failure{Kind: kind}); got != want {
			t.Errorf("%s: %v, want %v", kind, got, want)
		}
	}
	budget := modelretry.Failure{Kind: modelretry.KindBudgetExhausted, OriginalKind: modelretry.KindOverloaded}
	if got := modelretry.HealthOf(budget); got != modelretry.Failing {
		t.Errorf("budgetExhausted on overloaded: %v", got)
	}
}

// TestChainAllowance: each entry gets its own attempts, the call at most
// Total in all; an entry leaves one for each entry after it when it can,
// and a Total of 1 still makes its one request.
func TestChainAllowance(t *testing.T) {
	type step struct{ entry, used, want int }
	for _, tc := range []struct {
		name  string
		chain modelretry.Chain
		steps []step
	}{
		{"one entry is a plain call", modelretry.NewChain(1, 5), []step{{0, 0, 5}, {0, 3, 2}, {1, 5, 0}}},
		{"two entries, 5 each", modelretry.NewChain(2, 5), []step{{0, 0, 5}, {1, 5, 5}, {1, 1, 5}, {1, 10, 0}}},
		{"four entries capped at 16", modelretry.NewChain(4, 5), []step{{0, 0, 5}, {1, 5, 5}, {2, 10, 5}, {3, 15, 1}}},
		{"a turn's maxAttempts 3 over two", modelretry.Chain{Entries: 2, PerEntry: 5, Total: 3}, []step{{0, 0, 2}, {1, 2, 1}, {1, 1, 2}}},
		{"maxAttempts 1", modelretry.Chain{Entries: 3, PerEntry: 5, Total: 1}, []step{{0, 0, 1}, {1, 1, 0}}},
		{"no such entry", modelretry.NewChain(2, 5), []step{{2, 0, 0}, {-1, 0, 0}}},
	} {
		for _, s := range tc.steps {
			if got := tc.chain.Allowance(s.entry, s.used); got != s.want {
				t.Errorf("%s: Allowance(%d, %d) = %d, want %d", tc.name, s.entry, s.used, got, s.want)
			}
		}
	}
	if c := modelretry.NewChain(4, 5); c.Ceiling() != modelretry.MaxAttemptsLimit || c.Total != c.Ceiling() {
		t.Errorf("chain of four: %+v, ceiling %d", c, c.Ceiling())
	}
}

// TestBreaker walks a breaker through its states on a recording clock:
// closed until Failures failing requests in a row within Window, open
// (refusing) for Cooldown after its last failure, half-open with exactly
// one probe, open again when the probe fails and closed when one succeeds.
func TestBreaker(t *testing.T) {
	clock := retrytest.NewClock(start())
	cfg := modelretry.BreakerConfig{Failures: 3, Window: time.Minute, Cooldown: 30 * time.Second}
	b, err := modelretry.NewBreaker(cfg, clock)
	if err != nil {
		t.Fatal(err)
	}
	want := func(state modelretry.BreakerState, adm modelretry.Admission) {
		t.Helper()
		if got := b.State(); got != state {
			t.Fatalf("state %v, want %v", got, state)
		}
		if got := b.Allow(); got != adm {
			t.Fatalf("Allow = %v in %v, want %v", got, state, adm)
		}
	}
	fail := func(a modelretry.Admission) { b.Record(a, modelretry.Failing) }

	// Failures far apart, or broken by a success or by a failure that
	// says nothing of the provider, do not open it.
	fail(modelretry.Admitted)
	fail(modelretry.Admitted)
	b.Record(modelretry.Admitted, modelretry.Healthy)
	fail(modelretry.Admitted)
	fail(modelretry.Admitted)
	b.Record(modelretry.Admitted, modelretry.HealthUnknown)
	clock.Advance(61 * time.Second)
	fail(modelretry.Admitted) // a new run: the first was over a minute ago
	fail(modelretry.Admitted)
	want(modelretry.BreakerClosed, modelretry.Admitted)

	fail(modelretry.Admitted) // the third in a row within the window
	want(modelretry.BreakerOpen, modelretry.Refused)
	if b.Opens() != 1 {
		t.Errorf("opens %d", b.Opens())
	}
	clock.Advance(20 * time.Second)
	fail(modelretry.Admitted) // a straggler failing: the cool-down restarts
	clock.Advance(20 * time.Second)
	want(modelretry.BreakerOpen, modelretry.Refused)
	clock.Advance(10 * time.Second)
	if got := b.State(); got != modelretry.BreakerHalfOpen {
		t.Fatalf("after the cool-down: %v", got)
	}
	if got := b.Allow(); got != modelretry.Probe {
		t.Fatalf("first Allow half-open = %v, want the probe", got)
	}
	want(modelretry.BreakerHalfOpen, modelretry.Refused) // one probe at a time

	fail(modelretry.Probe) // the probe failed: open again, for a full cool-down
	want(modelretry.BreakerOpen, modelretry.Refused)
	clock.Advance(30 * time.Second)
	if b.Allow() != modelretry.Probe {
		t.Fatal("no probe after the second cool-down")
	}
	b.Record(modelretry.Probe, modelretry.HealthUnknown) // inconclusive: the next caller probes
	if b.Allow() != modelretry.Probe {
		t.Fatal("an inconclusive probe did not free the slot")
	}
	clock.Advance(30 * time.Second)
	if b.Allow() != modelretry.Probe {
		t.Fatal("a probe unrecorded for a whole cool-down still holds the slot")
	}
	b.Record(modelretry.Probe, modelretry.Healthy)
	want(modelretry.BreakerClosed, modelretry.Admitted)
	if b.Opens() != 2 {
		t.Errorf("opens %d, want 2", b.Opens())
	}

	var none *modelretry.Breaker
	if none.Allow() != modelretry.Admitted || none.State() != modelretry.BreakerClosed {
		t.Error("a nil breaker must admit everything")
	}
	none.Record(modelretry.Admitted, modelretry.Failing)
}

func TestBreakerConfigValidate(t *testing.T) {
	if err := modelretry.DefaultBreakerConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for field, cfg := range map[string]modelretry.BreakerConfig{
		"failures": {Failures: 0, Window: time.Second, Cooldown: time.Second},
		"window":   {Failures: 1, Window: 0, Cooldown: time.Second},
		"cooldown": {Failures: 1, Window: time.Second, Cooldown: -1},
	} {
		err := cfg.Validate()
		pe, ok := err.(*modelretry.PolicyError)
		if !ok || pe.Field != field {
			t.Errorf("%+v: %v, want a PolicyError on %s", cfg, err, field)
		}
	}
	if _, err := modelretry.NewBreaker(modelretry.BreakerConfig{}, nil); err == nil {
		t.Error("NewBreaker took a zero config")
	}
}

// TestBreakerConcurrent: many callers racing through a half-open breaker
// get exactly one probe (go test -race).
func TestBreakerConcurrent(t *testing.T) {
	clock := retrytest.NewClock(start())
	b, _ := modelretry.NewBreaker(modelretry.BreakerConfig{Failures: 1, Window: time.Minute, Cooldown: time.Second}, clock)
	b.Record(modelretry.Admitted, modelretry.Failing)
	clock.Advance(time.Second)
	var probes atomic.Int32
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			if b.Allow() == modelretry.Probe {
				probes.Add(1)
			}
		})
	}
	wg.Wait()
	if n := probes.Load(); n != 1 {
		t.Errorf("%d probes, want 1", n)
	}
}
