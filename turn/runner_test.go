package turn_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"mspd/modelretry"
	"mspd/modelretry/retrytest"
	"mspd/provider"
	"mspd/schema/msp"
	"mspd/turn"
	"mspd/turn/turntest"
)

// t0 is the fake clock's origin.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// reply answers one provider request.
type reply func(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error)

// fakeModel is a provider.Model that records every request and answers the
// n-th one with replies[n-1] (the last reply repeats).
type fakeModel struct {
	replies []reply

	mu   sync.Mutex
	reqs []provider.Request
}

func (m *fakeModel) System() string { return "fake" }

func (m *fakeModel) Stream(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	m.mu.Lock()
	i := len(m.reqs)
	req.Messages = slices.Clone(req.Messages)
	m.reqs = append(m.reqs, req)
	r := m.replies[min(i, len(m.replies)-1)]
	m.mu.Unlock()
	return r(ctx, req, onText)
}

func (m *fakeModel) requests() []provider.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.reqs)
}

func (m *fakeModel) maxTokens() []int {
	var out []int
	for _, r := range m.requests() {
		out = append(out, r.MaxTokens)
	}
	return out
}

func usage(in, out int64) *provider.Usage {
	return &provider.Usage{InputTokens: in, OutputTokens: out}
}

// answer streams text word by word and ends with finish.
func answer(text, finish string, u *provider.Usage) reply {
	return func(_ context.Context, _ provider.Request, onText func(string)) (provider.Response, error) {
		for _, w := range strings.SplitAfter(text, " ") {
			onText(w)
		}
		return provider.Response{FinishReason: finish, Usage: u, Model: "fake-1"}, nil
	}
}

func ok(text string) reply { return answer(text, provider.FinishStop, usage(10, 5)) }

// fail refuses a request before any output.
func fail(err error, u *provider.Usage) reply {
	return func(context.Context, provider.Request, func(string)) (provider.Response, error) {
		return provider.Response{Usage: u}, err
	}
}

// cut streams text, then fails with err.
func cut(text string, err error, u *provider.Usage) reply {
	return func(_ context.Context, _ provider.Request, onText func(string)) (provider.Response, error) {
		onText(text)
		return provider.Response{Usage: u}, err
	}
}

func status(code int) error {
	return &provider.Error{HTTPStatus: code, Message: http.StatusText(code)}
}

type harness struct {
	clock  *retrytest.Clock
	model  *fakeModel
	sink   *turntest.Sink
	runner *turn.Runner
	opts   options
}

// engine is a retry engine on the harness's clock with known delays.
func (h *harness) engine() *modelretry.Engine {
	return &modelretry.Engine{Clock: h.clock, Rand: retrytest.Fixed(0.5)}
}

func (h *harness) policy() modelretry.Policy { return h.opts.policy }

type options struct {
	policy         modelretry.Policy
	modelMaxTokens int
}

func newHarness(t *testing.T, o *options, replies ...reply) *harness {
	t.Helper()
	if o == nil {
		o = &options{}
	}
	if o.policy.MaxAttempts == 0 {
		o.policy = modelretry.DefaultPolicy()
	}
	if o.modelMaxTokens == 0 {
		o.modelMaxTokens = 4000
	}
	h := &harness{clock: retrytest.NewClock(t0), model: &fakeModel{replies: replies}, sink: &turntest.Sink{}, opts: *o}
	// Rand 0.5 with full jitter: the n-th retry waits exactly half of
	// 500ms·2^n, so delays are known in advance.
	h.runner = turn.NewRunner(turn.Config{
		Model:            h.model,
		Engine:           h.engine(),
		Policy:           o.policy,
		DefaultMaxTokens: 1000,
		ModelMaxTokens:   o.modelMaxTokens,
	})
	return h
}

func spec() turn.Spec {
	return turn.Spec{SessionID: "s1", TurnID: "t1", Model: "m",
		History: []provider.Message{{Role: provider.RoleUser, Text: "hello"}}}
}

// run runs the turn in a goroutine, and each time a backoff sleeper shows
// up calls onSleep (if set) and then advances the fake clock by exactly the
// duration that was asked for. Nothing sleeps for real.
func (h *harness) run(t *testing.T, ctx context.Context, sp turn.Spec, onSleep func()) turn.Outcome {
	t.Helper()
	done := make(chan turn.Outcome, 1)
	panicked := make(chan any, 1)
	go func() {
		// A panic in the runner would kill the whole test binary; report
		// it as this test's failure instead.
		defer func() {
			if r := recover(); r != nil {
				panicked <- r
			}
		}()
		o := h.runner.Run(ctx, sp, h.sink)
		h.sink.Settle(o)
		done <- o
	}()
	deadline := time.After(10 * time.Second)
	for {
		wctx, cancel := context.WithCancel(context.Background())
		slept := make(chan error, 1)
		go func() { slept <- h.clock.WaitForSleepers(wctx, 1) }()
		select {
		case o := <-done:
			cancel()
			return o
		case r := <-panicked:
			cancel()
			t.Fatalf("Runner.Run panicked: %v\nevents so far: %s", r, h.sink.Methods())
		case err := <-slept:
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if onSleep != nil {
				onSleep()
			}
			sleeps := h.clock.Sleeps()
			h.clock.Advance(sleeps[len(sleeps)-1])
		case <-deadline:
			cancel()
			t.Fatalf("turn did not end; events so far: %s", h.sink.Methods())
		}
	}
}

func modelNotices(h *harness) []*msp.TurnModelRetryScheduledParams {
	return turntest.Of[*msp.TurnModelRetryScheduledParams](h.sink, msp.NotifyTurnModelRetryScheduled)
}

func turnNotices(h *harness) []*msp.TurnRetryScheduledParams {
	return turntest.Of[*msp.TurnRetryScheduledParams](h.sink, msp.NotifyTurnRetryScheduled)
}

func completedItems(h *harness) []msp.Item {
	var out []msp.Item
	for _, p := range turntest.Of[*msp.ItemParams](h.sink, msp.NotifyItemCompleted) {
		out = append(out, p.Item)
	}
	return out
}

func startedItems(h *harness) []msp.Item {
	var out []msp.Item
	for _, p := range turntest.Of[*msp.ItemParams](h.sink, msp.NotifyItemStarted) {
		out = append(out, p.Item)
	}
	return out
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func wantTerminal(t *testing.T, o turn.Outcome, terminal, errKind string, count int) {
	t.Helper()
	c := o.Completed
	if c.Terminal != terminal {
		t.Fatalf("terminal %q, want %q: %s", c.Terminal, terminal, js(c))
	}
	switch {
	case errKind == "" && c.Error != nil:
		t.Fatalf("unexpected error: %s", js(c))
	case errKind != "" && (c.Error == nil || c.Error.Kind != errKind):
		t.Fatalf("error %s, want kind %q", js(c.Error), errKind)
	}
	if c.Attempts == nil || c.Attempts.Count != count {
		t.Fatalf("attempts %s, want count %d", js(c.Attempts), count)
	}
	if c.TurnID != "t1" {
		t.Fatalf("turnId %q", c.TurnID)
	}
}

func TestNoticeIsEmittedBeforeBackoff(t *testing.T) {
	h := newHarness(t, nil, fail(status(500), nil), ok("fine"))
	var atSleep []string
	var nowAtSleep time.Time
	var reqsAtSleep int
	o := h.run(t, context.Background(), spec(), func() {
		atSleep = strings.Split(h.sink.Methods(), ", ")
		nowAtSleep = h.clock.Now()
		reqsAtSleep = len(h.model.requests())
	})
	wantTerminal(t, o, msp.TerminalCompleted, "", 2)
	if len(atSleep) == 0 || atSleep[len(atSleep)-1] != msp.NotifyTurnModelRetryScheduled {
		t.Fatalf("when the backoff began the sink held %v; want the notice last", atSleep)
	}
	if !nowAtSleep.Equal(t0) {
		t.Fatalf("clock had moved to %v before the notice's backoff", nowAtSleep)
	}
	if reqsAtSleep != 1 {
		t.Fatalf("%d requests before the backoff, want 1", reqsAtSleep)
	}
	n := modelNotices(h)
	sleeps := h.clock.Sleeps()
	if len(n) != 1 || len(sleeps) != 1 {
		t.Fatalf("notices %s, sleeps %v", js(n), sleeps)
	}
	want := msp.TurnModelRetryScheduledParams{TurnID: "t1", Attempt: 1, NextAttempt: 2, MaxAttempts: 5,
		RetryDelayMs: 250, System: "fake", ErrorKind: modelretry.KindServerError, HTTPStatus: 500}
	if *n[0] != want {
		t.Fatalf("notice %s, want %s", js(n[0]), js(want))
	}
	if n[0].RetryDelayMs != sleeps[0].Milliseconds() || sleeps[0] != 250*time.Millisecond {
		t.Fatalf("retryDelayMs %d, slept %v", n[0].RetryDelayMs, sleeps[0])
	}
	if o.Answer != "fine" {
		t.Fatalf("answer %q", o.Answer)
	}
}

func TestRetryDelayIsTheSleep(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		delay time.Duration
	}{
		{"computed backoff", status(503), 250 * time.Millisecond},
		{"retry-after seconds", &provider.Error{HTTPStatus: 429, Header: http.Header{"Retry-After": {"2"}}}, 2 * time.Second},
		{"retry-after-ms", &provider.Error{HTTPStatus: 429, Header: http.Header{"Retry-After-Ms": {"1234"}}}, 1234 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil, fail(tt.err, nil), ok("fine"))
			o := h.run(t, context.Background(), spec(), nil)
			wantTerminal(t, o, msp.TerminalCompleted, "", 2)
			n := modelNotices(h)
			sleeps := h.clock.Sleeps()
			if len(n) != 1 || !slices.Equal(sleeps, []time.Duration{tt.delay}) || n[0].RetryDelayMs != tt.delay.Milliseconds() {
				t.Fatalf("notices %s, sleeps %v, want delay %v", js(n), sleeps, tt.delay)
			}
			// The turn's duration is exactly the backoff on the fake clock.
			if d := o.Completed.DurationMs; d == nil || *d != tt.delay.Milliseconds() {
				t.Fatalf("durationMs %v, want %d", d, tt.delay.Milliseconds())
			}
		})
	}
}

func TestAttemptNumberingIsSharedAcrossLayers(t *testing.T) {
	h := newHarness(t, nil,
		fail(status(500), nil),
		answer("cut short", provider.FinishLength, usage(10, 1000)),
		ok("whole answer"))
	o := h.run(t, context.Background(), spec(), nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 3)

	mn, tn := modelNotices(h), turnNotices(h)
	if len(mn) != 1 || len(tn) != 1 {
		t.Fatalf("model notices %s, turn notices %s", js(mn), js(tn))
	}
	if mn[0].Attempt != 1 || mn[0].NextAttempt != 2 || mn[0].MaxAttempts != 5 {
		t.Errorf("modelRetryScheduled %s, want 1→2 of 5", js(mn[0]))
	}
	if tn[0].Attempt != 2 || tn[0].NextAttempt != 3 || tn[0].MaxAttempts != 5 {
		t.Errorf("retryScheduled %s, want 2→3 of 5", js(tn[0]))
	}
	if !strings.Contains(tn[0].Reason, "1000") || !strings.Contains(tn[0].Reason, "2000") || len(tn[0].Reason) > 160 {
		t.Errorf("reason %q should name 1000 and 2000", tn[0].Reason)
	}
	// The backoff of the n-th retry is half of 500ms·2^(n-1), whichever
	// layer retried.
	sleeps := h.clock.Sleeps()
	if !slices.Equal(sleeps, []time.Duration{250 * time.Millisecond, 500 * time.Millisecond}) ||
		mn[0].RetryDelayMs != 250 || tn[0].RetryDelayMs != 500 {
		t.Errorf("sleeps %v, delays %d and %d", sleeps, mn[0].RetryDelayMs, tn[0].RetryDelayMs)
	}
	var attempts []int
	for _, r := range h.model.requests() {
		attempts = append(attempts, r.Attempt)
	}
	if !slices.Equal(attempts, []int{1, 2, 3}) {
		t.Errorf("Request.Attempt %v", attempts)
	}
	if got := h.model.maxTokens(); !slices.Equal(got, []int{1000, 1000, 2000}) {
		t.Errorf("MaxTokens %v, want [1000 1000 2000]", got)
	}
	want := "turn/modelRetryScheduled, item/started, item/delta, item/completed, session/tokenUsage, " +
		"turn/retryScheduled, item/started, item/delta, item/completed, session/tokenUsage"
	if got := h.sink.Methods(); got != want {
		t.Errorf("events\n got %s\nwant %s", got, want)
	}
}

func TestRequestCarriesSpec(t *testing.T) {
	h := newHarness(t, nil, ok("x"))
	sp := spec()
	sp.History = []provider.Message{{Role: provider.RoleUser, Text: "a"}, {Role: provider.RoleAssistant, Text: "b"}, {Role: provider.RoleUser, Text: "c"}}
	sp.MaxTokens = 77
	h.run(t, context.Background(), sp, nil)
	reqs := h.model.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Model != "m" || r.MaxTokens != 77 || r.Attempt != 1 || !reflect.DeepEqual(r.Messages, sp.History) {
		t.Fatalf("request %+v", r)
	}
}

func TestMaxAttemptsBound(t *testing.T) {
	tests := []struct {
		name      string
		host      int
		turn      *int
		wantCount int
	}{
		{"host bound", 3, nil, 3},
		{"turn asks for more than the host allows", 3, new(10), 3},
		{"turn at the protocol limit is clamped", 4, new(16), 4},
		{"turn narrows", 5, new(2), 2},
		{"maxAttempts 1 makes one request", 5, new(1), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := modelretry.DefaultPolicy()
			p.MaxAttempts = tt.host
			h := newHarness(t, &options{policy: p}, fail(status(503), nil)) // every request fails
			sp := spec()
			if tt.turn != nil {
				sp.Retry = &msp.RetryPolicy{MaxAttempts: tt.turn}
			}
			o := h.run(t, context.Background(), sp, nil)
			wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorModel, tt.wantCount)
			if n := len(h.model.requests()); n != tt.wantCount {
				t.Fatalf("%d requests, want %d", n, tt.wantCount)
			}
			notices := modelNotices(h)
			if len(notices) != tt.wantCount-1 {
				t.Fatalf("%d notices, want %d", len(notices), tt.wantCount-1)
			}
			for i, n := range notices {
				if n.Attempt != i+1 || n.NextAttempt != i+2 || n.MaxAttempts != tt.wantCount {
					t.Errorf("notice %d: %s", i, js(n))
				}
			}
			if !o.Completed.Error.Retryable {
				t.Errorf("exhausted attempts should be retryable by the user: %s", js(o.Completed.Error))
			}
			if tt.wantCount > 1 && !strings.Contains(o.Completed.Error.Message, "gave up after") {
				t.Errorf("message %q", o.Completed.Error.Message)
			}
			if len(h.clock.Sleeps()) != tt.wantCount-1 {
				t.Errorf("sleeps %v", h.clock.Sleeps())
			}
		})
	}
}

func TestInvalidTurnRetryPolicyMakesNoRequest(t *testing.T) {
	h := newHarness(t, nil, ok("never"))
	sp := spec()
	sp.Retry = &msp.RetryPolicy{MaxAttempts: new(0)}
	o := h.run(t, context.Background(), sp, nil)
	wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorConfig, 0)
	if len(h.model.requests()) != 0 || h.sink.Methods() != "" {
		t.Fatalf("requests %d, events %s", len(h.model.requests()), h.sink.Methods())
	}
	if !o.Completed.Attempts.UsageComplete {
		t.Errorf("nothing asked, nothing missing: %s", js(o.Completed.Attempts))
	}
}

func TestGrowMaxTokens(t *testing.T) {
	truncated := answer("cut", provider.FinishLength, usage(10, 1))
	tests := []struct {
		name       string
		maxTokens  int
		modelMax   int
		grow       *bool
		maxAttempt int
		want       []int
	}{
		{"doubles up to the cap, then stops", 0, 4000, nil, 5, []int{1000, 2000, 4000}},
		{"the last step is clamped to the cap", 0, 3000, nil, 5, []int{1000, 2000, 3000}},
		{"growMaxTokens true is the default", 0, 4000, new(true), 5, []int{1000, 2000, 4000}},
		{"already at the cap", 4000, 4000, nil, 5, []int{4000}},
		{"attempts run out before the cap", 250, 32000, nil, 3, []int{250, 500, 1000}},
		{"growMaxTokens false keeps MaxTokens", 300, 4000, new(false), 4, []int{300, 300, 300, 300}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, &options{modelMaxTokens: tt.modelMax}, truncated)
			sp := spec()
			sp.MaxTokens = tt.maxTokens
			sp.Retry = &msp.RetryPolicy{MaxAttempts: new(tt.maxAttempt), GrowMaxTokens: tt.grow}
			o := h.run(t, context.Background(), sp, nil)
			got := h.model.maxTokens()
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Request.MaxTokens %v, want %v", got, tt.want)
			}
			for _, m := range got {
				if m > max(tt.modelMax, tt.maxTokens) {
					t.Fatalf("asked for %d tokens, above the model's %d", m, tt.modelMax)
				}
			}
			wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorModel, len(tt.want))
			if n := turnNotices(h); len(n) != len(tt.want)-1 {
				t.Fatalf("%d turn/retryScheduled, want %d", len(n), len(tt.want)-1)
			}
			if n := modelNotices(h); len(n) != 0 {
				t.Fatalf("truncation is a turn-layer retry, got model notices %s", js(n))
			}
			for i, it := range completedItems(h) {
				if it.Status != msp.ItemFailed {
					t.Errorf("item %d of a truncated attempt is %q, want failed", i, it.Status)
				}
			}
			if !strings.Contains(o.Completed.Error.Message, "truncated") {
				t.Errorf("message %q", o.Completed.Error.Message)
			}
		})
	}
}

func TestNonRetryableFailuresFailAtOnce(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"auth 401", &provider.Error{HTTPStatus: 401, Message: "bad key"}},
		{"forbidden 403", &provider.Error{HTTPStatus: 403}},
		{"quotaExhausted on 429", &provider.Error{HTTPStatus: 429, Kind: modelretry.KindQuotaExhausted, Message: "insufficient_quota"}},
		{"invalidRequest 400", &provider.Error{HTTPStatus: 400, Message: "bad request"}},
		{"contextLengthExceeded", &provider.Error{HTTPStatus: 400, Kind: modelretry.KindContextLengthExceeded}},
		{"scriptExhausted kind without status", &provider.Error{Kind: "scriptExhausted", Message: "no entry"}},
		{"x-should-retry false on a 503", &provider.Error{HTTPStatus: 503, Header: http.Header{"X-Should-Retry": {"false"}}}},
		{"plain error without status", errors.New("something odd")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil, fail(tt.err, nil), ok("never"))
			o := h.run(t, context.Background(), spec(), nil)
			wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorModel, 1)
			if n := len(h.model.requests()); n != 1 {
				t.Fatalf("%d requests", n)
			}
			if got := h.sink.Methods(); got != "" {
				t.Fatalf("a failure before output emitted %s", got)
			}
			if len(h.clock.Sleeps()) != 0 {
				t.Fatalf("slept %v", h.clock.Sleeps())
			}
			if o.Completed.Error.Retryable {
				t.Errorf("a non-retryable failure reported retryable: %s", js(o.Completed.Error))
			}
			if o.Completed.Error.Message == "" || len([]rune(o.Completed.Error.Message)) > 500 {
				t.Errorf("message %q", o.Completed.Error.Message)
			}
		})
	}
}

func TestShouldRetryTrueRetriesA400(t *testing.T) {
	h := newHarness(t, nil,
		fail(&provider.Error{HTTPStatus: 400, Header: http.Header{"x-should-retry": {"true"}}}, nil),
		ok("fine"))
	o := h.run(t, context.Background(), spec(), nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 2)
	n := modelNotices(h)
	if len(n) != 1 || n[0].ErrorKind != modelretry.KindInvalidRequest || n[0].HTTPStatus != 400 {
		t.Fatalf("notices %s", js(n))
	}
}

func TestRetryAfterAboveMaxServerDelayFailsAtOnce(t *testing.T) {
	p := modelretry.DefaultPolicy()
	p.MaxServerDelay = 10 * time.Second
	h := newHarness(t, &options{policy: p},
		fail(&provider.Error{HTTPStatus: 429, Header: http.Header{"Retry-After": {"11"}}}, nil),
		ok("never"))
	o := h.run(t, context.Background(), spec(), nil)
	wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorModel, 1)
	if len(h.model.requests()) != 1 || len(h.clock.Sleeps()) != 0 || len(modelNotices(h)) != 0 {
		t.Fatalf("requests %d, sleeps %v, events %s", len(h.model.requests()), h.clock.Sleeps(), h.sink.Methods())
	}
	if msg := o.Completed.Error.Message; !strings.Contains(msg, "11s") {
		t.Errorf("message %q should name the server's delay", msg)
	}
	// Exactly at the bound is still honoured.
	h = newHarness(t, &options{policy: p},
		fail(&provider.Error{HTTPStatus: 429, Header: http.Header{"Retry-After": {"10"}}}, nil),
		ok("fine"))
	o = h.run(t, context.Background(), spec(), nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 2)
	if !slices.Equal(h.clock.Sleeps(), []time.Duration{10 * time.Second}) {
		t.Fatalf("sleeps %v", h.clock.Sleeps())
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	h := newHarness(t, nil, fail(status(503), nil), ok("never"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := h.run(t, ctx, spec(), cancel)
	wantTerminal(t, o, msp.TerminalCancelled, "", 1)
	if n := len(h.model.requests()); n != 1 {
		t.Fatalf("the model saw %d requests, want 1", n)
	}
	if got := h.sink.Methods(); got != msp.NotifyTurnModelRetryScheduled {
		t.Fatalf("events %s", got)
	}
	if o.Completed.Error != nil {
		t.Fatalf("cancelled turn carries an error: %s", js(o.Completed))
	}
}

func TestCancelMidStreamClosesItemCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newHarness(t, nil, func(ctx context.Context, _ provider.Request, onText func(string)) (provider.Response, error) {
		onText("partial ")
		onText("answer")
		cancel()
		<-ctx.Done()
		return provider.Response{}, ctx.Err()
	}, ok("never"))
	o := h.run(t, ctx, spec(), nil)
	wantTerminal(t, o, msp.TerminalCancelled, "", 1)
	if n := len(h.model.requests()); n != 1 {
		t.Fatalf("%d requests", n)
	}
	want := "item/started, item/delta, item/completed"
	if got := h.sink.Methods(); got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	it := completedItems(h)[0]
	if it.Status != msp.ItemCancelled || it.Text == nil || *it.Text != "partial answer" || it.Revision != 2 {
		t.Fatalf("item %s", js(it))
	}
	if len(turnNotices(h)) != 0 || len(modelNotices(h)) != 0 {
		t.Fatal("a cancelled attempt was retried")
	}
}

func TestFailureBeforeOutputOpensNoItem(t *testing.T) {
	h := newHarness(t, nil, fail(status(500), nil), fail(status(502), nil), ok("done"))
	o := h.run(t, context.Background(), spec(), nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 3)
	if s := startedItems(h); len(s) != 1 {
		t.Fatalf("%d items opened, want only the successful attempt's: %s", len(s), h.sink.Methods())
	}
	if got := h.sink.Methods(); !strings.HasPrefix(got, "turn/modelRetryScheduled, turn/modelRetryScheduled, item/started") {
		t.Fatalf("events %s", got)
	}
}

func TestStreamCutAfterOutput(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		reason string
	}{
		{"stream interrupted", &provider.Error{Kind: modelretry.KindStreamInterrupted, Message: "eof"}, "provider stream disconnected"},
		{"overloaded in stream", &provider.Error{HTTPStatus: 529, Message: "overloaded_error"}, "provider stream failed: overloaded (HTTP 529)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil, cut("half an ", tt.err, nil), ok("whole answer"))
			o := h.run(t, context.Background(), spec(), nil)
			wantTerminal(t, o, msp.TerminalCompleted, "", 2)
			want := "item/started, item/delta, item/completed, turn/retryScheduled, item/started, item/delta, item/completed, session/tokenUsage"
			if got := h.sink.Methods(); got != want {
				t.Fatalf("events\n got %s\nwant %s", got, want)
			}
			started, done := startedItems(h), completedItems(h)
			if started[0].ItemID == started[1].ItemID {
				t.Fatalf("the retry reused item %s", started[0].ItemID)
			}
			if done[0].ItemID != started[0].ItemID || done[0].Status != msp.ItemFailed || *done[0].Text != "half an " {
				t.Errorf("first item closed as %s", js(done[0]))
			}
			if done[1].ItemID != started[1].ItemID || done[1].Status != msp.ItemCompleted || *done[1].Text != "whole answer" {
				t.Errorf("second item closed as %s", js(done[1]))
			}
			if got := h.sink.Text(started[1].ItemID); got != "whole answer" {
				t.Errorf("second item's deltas %q", got)
			}
			n := turnNotices(h)
			if len(n) != 1 || n[0].Reason != tt.reason || n[0].Attempt != 1 || n[0].NextAttempt != 2 {
				t.Errorf("notice %s, want reason %q", js(n), tt.reason)
			}
			if o.Answer != "whole answer" {
				t.Errorf("answer %q", o.Answer)
			}
		})
	}
}

func TestEmptyAnswerStillGetsAnItem(t *testing.T) {
	h := newHarness(t, nil, answer("", provider.FinishStop, usage(3, 0)))
	o := h.run(t, context.Background(), spec(), nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 1)
	if got := h.sink.Methods(); got != "item/started, item/completed, session/tokenUsage" {
		t.Fatalf("events %s", got)
	}
	s, d := startedItems(h)[0], completedItems(h)[0]
	if s.ItemID != d.ItemID || d.Status != msp.ItemCompleted || d.Text == nil || *d.Text != "" ||
		s.Kind != msp.ItemAgentMessage || s.Status != msp.ItemInProgress || *s.TurnID != "t1" {
		t.Fatalf("items %s → %s", js(s), js(d))
	}
	if o.Completed.TimeToFirstTokenMs != nil {
		t.Errorf("no token, yet timeToFirstTokenMs %d", *o.Completed.TimeToFirstTokenMs)
	}
}

func TestContentFilterFailsWithoutRetry(t *testing.T) {
	h := newHarness(t, nil, answer("some bad words", provider.FinishContentFilter, usage(5, 3)), ok("never"))
	o := h.run(t, context.Background(), spec(), nil)
	wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorModel, 1)
	if n := len(h.model.requests()); n != 1 {
		t.Fatalf("%d requests", n)
	}
	d := completedItems(h)
	if len(d) != 1 || d[0].Status != msp.ItemFailed {
		t.Fatalf("items %s", js(d))
	}
	if len(turnNotices(h)) != 0 || len(modelNotices(h)) != 0 {
		t.Fatalf("retried: %s", h.sink.Methods())
	}
	if o.Completed.Error.Retryable || o.Answer != "" {
		t.Errorf("terminal %s answer %q", js(o.Completed), o.Answer)
	}
}

const answerSchema = `{"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"]}`

func TestResponseSchemaViolationIsRetried(t *testing.T) {
	structured := func(text, mode string) reply {
		return func(_ context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
			if string(req.ResponseSchema) != answerSchema {
				return provider.Response{}, errors.New("request lost its responseSchema")
			}
			onText(text)
			return provider.Response{FinishReason: provider.FinishStop, Usage: usage(10, 4), StructuredOutput: mode}, nil
		}
	}
	tests := []struct {
		name, first string
	}{
		{"invalid JSON", `{"answer": 4`},
		{"schema violation", `{"answer": "four"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil, structured(tt.first, provider.StructuredPrompt), structured("```json\n{\"answer\": 4}\n```", provider.StructuredNative))
			sp := spec()
			sp.ResponseSchema = json.RawMessage(answerSchema)
			o := h.run(t, context.Background(), sp, nil)
			wantTerminal(t, o, msp.TerminalCompleted, "", 2)
			n := turnNotices(h)
			if len(n) != 1 || !strings.Contains(n[0].Reason, "schema") || len(n[0].Reason) > 160 {
				t.Fatalf("notices %s", js(n))
			}
			if got := o.Completed.Attempts.StructuredOutput; got != provider.StructuredNative {
				t.Errorf("structuredOutput %q, want the final attempt's %q", got, provider.StructuredNative)
			}
			if o.Completed.Attempts.OutputTokens != 8 || !o.Completed.Attempts.UsageComplete {
				t.Errorf("attempts %s", js(o.Completed.Attempts))
			}
			// The rejected answer's item must not read as a completed answer:
			// the architecture says rejected output completes as failed, and
			// the session rebuilds history from completed agent items.
			d := completedItems(h)
			if len(d) != 2 || d[0].Status != msp.ItemFailed || d[1].Status != msp.ItemCompleted {
				t.Errorf("item statuses %s, want [failed completed]", js(d))
			}
		})
	}
}

func TestResponseSchemaAlwaysViolatedExhaustsAttempts(t *testing.T) {
	h := newHarness(t, nil, answer("not json at all", provider.FinishStop, usage(1, 1)))
	sp := spec()
	sp.ResponseSchema = json.RawMessage(answerSchema)
	sp.Retry = &msp.RetryPolicy{MaxAttempts: new(3)}
	o := h.run(t, context.Background(), sp, nil)
	wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorModel, 3)
	if len(turnNotices(h)) != 2 || len(h.model.requests()) != 3 {
		t.Fatalf("events %s", h.sink.Methods())
	}
	if o.Completed.Attempts.StructuredOutput != "" {
		t.Errorf("no mode reported, yet structuredOutput %q", o.Completed.Attempts.StructuredOutput)
	}
}

func TestBrokenResponseSchemaIsConfigError(t *testing.T) {
	h := newHarness(t, nil, ok("never"))
	sp := spec()
	sp.ResponseSchema = json.RawMessage(`{"type": 12}`)
	o := h.run(t, context.Background(), sp, nil)
	wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorConfig, 0)
	if len(h.model.requests()) != 0 {
		t.Fatal("a request was made with a broken schema")
	}
}

func TestUsageAccounting(t *testing.T) {
	conn := &provider.Error{Kind: modelretry.KindConnectionError, Message: "reset"}
	tests := []struct {
		name         string
		replies      []reply
		tokenUsage   int // session/tokenUsage events
		outputTokens int64
		complete     bool
		usage        *msp.TokenUsage
	}{
		{"all reported, failed attempt included",
			[]reply{cut("par", &provider.Error{Kind: modelretry.KindStreamInterrupted}, usage(10, 3)), ok("done")},
			2, 8, true, &msp.TokenUsage{InputTokens: 20, OutputTokens: 8}},
		{"refused with a status before output counts as zero",
			[]reply{fail(status(429), nil), fail(status(503), nil), ok("done")},
			1, 5, true, &msp.TokenUsage{InputTokens: 10, OutputTokens: 5}},
		{"refused with usage is accounted",
			[]reply{fail(status(500), usage(7, 0)), ok("done")},
			2, 5, true, &msp.TokenUsage{InputTokens: 17, OutputTokens: 5}},
		{"streamed attempt without usage",
			[]reply{cut("par", &provider.Error{Kind: modelretry.KindStreamInterrupted}, nil), ok("done")},
			1, 5, false, &msp.TokenUsage{InputTokens: 10, OutputTokens: 5}},
		{"error inside an accepted stream before output",
			[]reply{fail(&provider.Error{HTTPStatus: 529, Accepted: true, Message: "overloaded_error"}, nil), ok("done")},
			1, 5, false, &msp.TokenUsage{InputTokens: 10, OutputTokens: 5}},
		{"connection error without status",
			[]reply{fail(conn, nil), ok("done")},
			1, 5, false, &msp.TokenUsage{InputTokens: 10, OutputTokens: 5}},
		{"success without usage",
			[]reply{answer("done", provider.FinishStop, nil)},
			0, 0, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil, tt.replies...)
			o := h.run(t, context.Background(), spec(), nil)
			wantTerminal(t, o, msp.TerminalCompleted, "", len(tt.replies))
			tu := turntest.Of[*msp.SessionTokenUsageParams](h.sink, msp.NotifySessionTokenUsage)
			if len(tu) != tt.tokenUsage {
				t.Fatalf("%d session/tokenUsage, want %d: %s", len(tu), tt.tokenUsage, h.sink.Methods())
			}
			for _, u := range tu {
				if u.TurnID != "t1" || u.PromptTokens != u.Usage.InputTokens || u.TotalTokens != u.Usage.InputTokens+u.Usage.OutputTokens || u.DurationMs == nil {
					t.Errorf("tokenUsage %s", js(u))
				}
			}
			a := o.Completed.Attempts
			if a.OutputTokens != tt.outputTokens || a.UsageComplete != tt.complete {
				t.Errorf("attempts %s, want outputTokens %d usageComplete %v", js(a), tt.outputTokens, tt.complete)
			}
			if js(o.Completed.Usage) != js(tt.usage) {
				t.Errorf("usage %s, want %s", js(o.Completed.Usage), js(tt.usage))
			}
		})
	}
}

func TestTimingFromTheClock(t *testing.T) {
	var h *harness
	h = newHarness(t, nil,
		fail(status(500), nil),
		func(_ context.Context, _ provider.Request, onText func(string)) (provider.Response, error) {
			h.clock.Advance(40 * time.Millisecond)
			onText("first ")
			h.clock.Advance(60 * time.Millisecond)
			onText("second")
			return provider.Response{FinishReason: provider.FinishStop, Usage: usage(1, 2), Model: "fake-1"}, nil
		})
	o := h.run(t, context.Background(), spec(), nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 2)
	c := o.Completed
	// 250ms backoff, then 40ms to the first token, 60ms more to the end.
	if c.TimeToFirstTokenMs == nil || *c.TimeToFirstTokenMs != 290 {
		t.Errorf("timeToFirstTokenMs %s, want 290", js(c.TimeToFirstTokenMs))
	}
	if c.DurationMs == nil || *c.DurationMs != 350 {
		t.Errorf("durationMs %s, want 350", js(c.DurationMs))
	}
	tu := turntest.Of[*msp.SessionTokenUsageParams](h.sink, msp.NotifySessionTokenUsage)
	if len(tu) != 1 || tu[0].DurationMs == nil || *tu[0].DurationMs != 100 || tu[0].ModelID != "fake-1" || tu[0].FinishReason != provider.FinishStop {
		t.Errorf("tokenUsage %s", js(tu))
	}
	if d := completedItems(h); len(d) != 1 || d[0].RecordedAt != "2025-03-01T12:00:00.350Z" {
		t.Errorf("item recordedAt %s", js(d))
	}
}

func TestSinkRefusal(t *testing.T) {
	tests := []struct {
		name     string
		refuse   string
		replies  []reply
		requests int
		sleeps   int // backoffs slept before the refusal
	}{
		{"item/started", msp.NotifyItemStarted, []reply{ok("hi")}, 1, 0},
		// A retried attempt's closing events go with its notice, in one
		// write; the last attempt's are the session's to write with the
		// terminal (Outcome.Held).
		{"a cut attempt's item/completed", msp.NotifyItemCompleted, []reply{cut("partial", &provider.Error{Kind: modelretry.KindStreamInterrupted}, nil), ok("never")}, 1, 0},
		{"a cut attempt's session/tokenUsage", msp.NotifySessionTokenUsage, []reply{cut("partial", &provider.Error{Kind: modelretry.KindStreamInterrupted}, usage(1, 1)), ok("never")}, 1, 0},
		{"retry notice", msp.NotifyTurnModelRetryScheduled, []reply{fail(status(503), nil), ok("never")}, 1, 0},
		{"turn retry notice", msp.NotifyTurnRetryScheduled, []reply{answer("cut", provider.FinishLength, nil), ok("never")}, 1, 0},
		// The retried request is not sent unless its beginning is durable.
		{"a retried request's begin mark", turntest.BeginAttempt, []reply{fail(status(503), nil), ok("never")}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil, tt.replies...)
			h.sink.Fail = func(method string) error {
				if method == tt.refuse {
					return errors.New("disk full")
				}
				return nil
			}
			o := h.run(t, context.Background(), spec(), nil)
			wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorLog, tt.requests)
			if n := len(h.model.requests()); n != tt.requests {
				t.Fatalf("%d requests, want %d", n, tt.requests)
			}
			if !strings.Contains(o.Completed.Error.Message, "disk full") || !o.Completed.Error.Retryable {
				t.Errorf("error %s", js(o.Completed.Error))
			}
			if len(h.clock.Sleeps()) != tt.sleeps {
				t.Errorf("slept %v, want %d backoffs before the log refused", h.clock.Sleeps(), tt.sleeps)
			}
		})
	}
}

func TestRunnerIsSafeForConcurrentTurns(t *testing.T) {
	h := newHarness(t, nil, ok("same answer"))
	runner := h.runner
	var wg sync.WaitGroup
	outs := make([]turn.Outcome, 8)
	for i := range outs {
		wg.Go(func() {
			outs[i] = runner.Run(context.Background(), spec(), &turntest.Sink{})
		})
	}
	wg.Wait()
	for i, o := range outs {
		if o.Completed.Terminal != msp.TerminalCompleted || o.Answer != "same answer" {
			t.Errorf("turn %d: %s", i, js(o.Completed))
		}
	}
}
