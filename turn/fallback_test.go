package turn_test

import (
	"context"
	"encoding/json"
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

// stub is a provider.Model named system whose answer tests swap while
// turns run: it records every request, and what the sink held when each
// was sent.
type stub struct {
	system string
	sink   func() *turntest.Sink

	mu    sync.Mutex
	reply reply
	reqs  []provider.Request
	// before[i] are the sink's methods when request i was sent.
	before []string
}

func (s *stub) System() string { return s.system }

func (s *stub) Stream(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.before = append(s.before, s.sink().Methods())
	r := s.reply
	s.mu.Unlock()
	return r(ctx, req, onText)
}

func (s *stub) set(r reply) {
	s.mu.Lock()
	s.reply = r
	s.mu.Unlock()
}

func (s *stub) requests() []provider.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]provider.Request(nil), s.reqs...)
}

// script answers request n with replies[n-1], the last repeating.
func script(replies ...reply) reply {
	var mu sync.Mutex
	n := 0
	return func(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
		mu.Lock()
		r := replies[min(n, len(replies)-1)]
		n++
		mu.Unlock()
		return r(ctx, req, onText)
	}
}

// answeredAs answers text as model.
func answeredAs(text, model string) reply {
	return func(_ context.Context, _ provider.Request, onText func(string)) (provider.Response, error) {
		onText(text)
		return provider.Response{FinishReason: provider.FinishStop, Usage: usage(10, 2), Model: model}, nil
	}
}

var quota = &provider.Error{Kind: modelretry.KindQuotaExhausted, HTTPStatus: 429, Message: "insufficient_quota"}

// chain is a runner for provider "oa" (system openai, model gpt-x) that
// falls back on "claude" (system anthropic, model claude-x), each with
// its breaker (nil: none), on one fake clock.
type chain struct {
	*harness
	primary, fallback *stub
}

type chainOptions struct {
	policy                      modelretry.Policy
	primaryBreaker, fbBreaker   *modelretry.Breaker
	primaryReply, fallbackReply reply
	// primaryModels and fbModels are the runners' Models (nil: none).
	primaryModels, fbModels func(string) provider.ModelInfo
}

func newChain(t *testing.T, clock *retrytest.Clock, o chainOptions) *chain {
	t.Helper()
	if o.policy.MaxAttempts == 0 {
		o.policy = modelretry.DefaultPolicy()
	}
	c := &chain{harness: &harness{clock: clock, sink: &turntest.Sink{}}}
	sink := func() *turntest.Sink { return c.sink }
	c.primary = &stub{system: "openai", sink: sink, reply: o.primaryReply}
	c.fallback = &stub{system: "anthropic", sink: sink, reply: o.fallbackReply}
	engine := func() *modelretry.Engine { return &modelretry.Engine{Clock: clock, Rand: retrytest.Fixed(0.5)} }
	// Two families: each reads only its own provider's calls as calls.
	fb := turn.NewRunner(turn.Config{Model: c.fallback, Engine: engine(), Policy: o.policy, DefaultMaxTokens: 1000,
		ModelMaxTokens: 4000, Breaker: o.fbBreaker, SameFamily: func(id string) bool { return id == "claude" },
		Models: o.fbModels})
	c.runner = turn.NewRunner(turn.Config{Model: c.primary, Engine: engine(), Policy: o.policy, DefaultMaxTokens: 1000,
		ModelMaxTokens: 4000, Breaker: o.primaryBreaker, SameFamily: func(id string) bool { return id == "oa" },
		Models: o.primaryModels, Fallback: []turn.Fallback{{ProviderID: "claude", Model: "claude-x", Runner: fb}}})
	return c
}

func chainSpec() turn.Spec {
	sp := spec()
	sp.ProviderID, sp.Model = "oa", "gpt-x"
	return sp
}

// turn runs one turn in a fresh sink.
func (c *chain) turn(t *testing.T, sp turn.Spec) turn.Outcome {
	t.Helper()
	c.sink = &turntest.Sink{}
	return c.run(t, context.Background(), sp, nil)
}

func fallbackNotices(s *turntest.Sink) []*msp.TurnModelRetryScheduledParams {
	var out []*msp.TurnModelRetryScheduledParams
	for _, p := range turntest.Of[*msp.TurnModelRetryScheduledParams](s, msp.NotifyTurnModelRetryScheduled) {
		if p.Fallback {
			out = append(out, p)
		}
	}
	return out
}

func skips(s *turntest.Sink) []*msp.TurnProviderSkippedParams {
	return turntest.Of[*msp.TurnProviderSkippedParams](s, msp.NotifyTurnProviderSkipped)
}

// TestFallbackAfterAttemptsExhausted: a provider answering 429 to each of
// its five attempts is retried with a notice before each backoff; the
// fifth failure moves the step to the chain's next provider at once,
// after a notice naming the failing system, its errorKind and HTTP status
// and the provider and model answering next, durable with a checkpoint
// on that entry before its request is sent. The attempts count all six
// requests and the usage names the model that answered.
func TestFallbackAfterAttemptsExhausted(t *testing.T) {
	c := newChain(t, retrytest.NewClock(t0), chainOptions{primaryReply: fail(status(429), nil),
		fallbackReply: answeredAs("from claude", "")})
	o := c.turn(t, chainSpec())
	wantTerminal(t, o, msp.TerminalCompleted, "", 6)

	got := turntest.ModelRetries(c.sink)
	want := []turntest.ModelRetry{
		turntest.NewModelRetry(1, 10, 250, "openai", "rateLimited", 429),
		turntest.NewModelRetry(2, 10, 500, "openai", "rateLimited", 429),
		turntest.NewModelRetry(3, 10, 1000, "openai", "rateLimited", 429),
		turntest.NewModelRetry(4, 10, 2000, "openai", "rateLimited", 429),
		turntest.NewModelRetry(5, 10, 0, "openai", "rateLimited", 429),
	}
	if js(got) != js(want) {
		t.Fatalf("notices %s\nwant %s", js(got), js(want))
	}
	fb := fallbackNotices(c.sink)
	if len(fb) != 1 || fb[0].NextProviderID != "claude" || fb[0].NextModelID != "claude-x" ||
		fb[0].FallbackReason != string(modelretry.StopAttemptsExhausted) {
		t.Fatalf("fallback notices %s", js(fb))
	}
	if n := len(c.primary.requests()); n != 5 {
		t.Fatalf("openai got %d requests, want 5", n)
	}
	reqs := c.fallback.requests()
	if len(reqs) != 1 || reqs[0].Model != "claude-x" || reqs[0].Attempt != 6 {
		t.Fatalf("fallback requests %s", js(reqs))
	}
	if before := c.fallback.before[0]; !strings.HasSuffix(before, msp.NotifyTurnModelRetryScheduled) {
		t.Fatalf("the fallback's request went out after %q: want the fallback notice last", before)
	}
	// The notice's checkpoint resumes on the fallback, no request of it begun.
	var cp *turn.Checkpoint
	for _, e := range c.sink.Events() {
		if p, ok := e.Params.(*msp.TurnModelRetryScheduledParams); ok && p.Fallback {
			cp = e.Checkpoint
		}
	}
	if cp == nil || cp.Attempts != 5 || cp.Begun == nil || *cp.Begun || cp.Route == nil ||
		*cp.Route != (turn.Route{Entry: 1, ProviderID: "claude", ModelID: "claude-x", Base: 5}) {
		t.Fatalf("fallback checkpoint %s", js(cp))
	}
	usages := turntest.Of[*msp.SessionTokenUsageParams](c.sink, msp.NotifySessionTokenUsage)
	if len(usages) != 1 || usages[0].ModelID != "claude-x" {
		t.Fatalf("usage %s: want the answering model named", js(usages))
	}
	if got := c.sink.Text(turn.AnswerItemID("t1", 6)); got != "from claude" {
		t.Fatalf("answer %q", got)
	}
}

// priced answers every model at price.
func priced(price provider.Price) func(string) provider.ModelInfo {
	return func(string) provider.ModelInfo {
		return provider.ModelInfo{Capabilities: provider.Capabilities{Tools: true}, Price: &price}
	}
}

// TestFallbackIsPricedAtItsOwnPrice: a completion a fallback answered is
// priced at the fallback's configured price, not the session's
// provider's, whatever dated name the response gives its model; one whose
// model has no price has no cost.
func TestFallbackIsPricedAtItsOwnPrice(t *testing.T) {
	c := newChain(t, retrytest.NewClock(t0), chainOptions{primaryReply: fail(quota, nil),
		fallbackReply: answeredAs("from claude", "claude-x-20250101"),
		primaryModels: priced(provider.Price{In: 1, Out: 1, CachedIn: 1}),
		fbModels:      priced(provider.Price{In: 3, Out: 15, CachedIn: 0.3})})
	wantTerminal(t, c.turn(t, chainSpec()), msp.TerminalCompleted, "", 2)
	usages := turntest.Of[*msp.SessionTokenUsageParams](c.sink, msp.NotifySessionTokenUsage)
	if want := (10*3 + 2*15) / 1e6; len(usages) != 1 || usages[0].CostUSD == nil || *usages[0].CostUSD != want ||
		usages[0].ModelID != "claude-x-20250101" {
		t.Fatalf("usage %s: want costUsd %v, the fallback's price", js(usages), want)
	}

	c = newChain(t, retrytest.NewClock(t0), chainOptions{primaryReply: fail(quota, nil), fallbackReply: ok("fine"),
		primaryModels: priced(provider.Price{In: 1, Out: 1, CachedIn: 1})})
	wantTerminal(t, c.turn(t, chainSpec()), msp.TerminalCompleted, "", 2)
	if usages := turntest.Of[*msp.SessionTokenUsageParams](c.sink, msp.NotifySessionTokenUsage); len(usages) != 1 || usages[0].CostUSD != nil {
		t.Fatalf("usage %s: an unpriced fallback's completion has no cost", js(usages))
	}
}

// TestFallbackAtOnce: a provider that fails in a way another would not —
// quota, authentication, a model it lacks — is not retried: the step
// moves on after its first request.
func TestFallbackAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		kind string
	}{
		{"quota", quota, "quotaExhausted"},
		{"auth", status(401), "auth"},
		{"not found", &provider.Error{Kind: modelretry.KindNotFound, HTTPStatus: 404, Message: "no such model"}, "notFound"},
		{"overloaded, not to be retried", &provider.Error{HTTPStatus: 503, Message: "busy",
			Header: map[string][]string{"X-Should-Retry": {"false"}}}, "overloaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChain(t, retrytest.NewClock(t0), chainOptions{primaryReply: fail(tc.err, nil), fallbackReply: ok("fine")})
			o := c.turn(t, chainSpec())
			wantTerminal(t, o, msp.TerminalCompleted, "", 2)
			fb := fallbackNotices(c.sink)
			if len(fb) != 1 || fb[0].Attempt != 1 || fb[0].NextAttempt != 2 || fb[0].ErrorKind != tc.kind ||
				fb[0].FallbackReason != string(modelretry.StopNotRetryable) || fb[0].RetryDelayMs != 0 {
				t.Fatalf("notices %s", js(turntest.ModelRetries(c.sink)))
			}
			if n := len(c.primary.requests()); n != 1 {
				t.Fatalf("openai got %d requests, want 1", n)
			}
			if len(c.clock.Sleeps()) != 0 {
				t.Fatalf("slept %v: a fallback waits for nothing", c.clock.Sleeps())
			}
		})
	}
}

// TestNoFallbackOnTheRequestsOwnFailure: a request another provider
// would refuse alike (invalid, too long) or that a filter stopped fails
// the turn on the provider that said so; the chain is never asked.
func TestNoFallbackOnTheRequestsOwnFailure(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply reply
		kind  string
	}{
		{"invalid request", fail(status(400), nil), "invalidRequest"},
		{"context too long", fail(&provider.Error{Kind: modelretry.KindContextLengthExceeded, HTTPStatus: 400, Message: "too long"}, nil), "contextLengthExceeded"},
		{"content filter", answer("I can't", provider.FinishContentFilter, usage(3, 2)), "contentFilter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChain(t, retrytest.NewClock(t0), chainOptions{primaryReply: tc.reply, fallbackReply: ok("never")})
			o := c.turn(t, chainSpec())
			wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorModel, 1)
			if e := o.Completed.Error; e.ErrorKind != tc.kind || e.System != "openai" {
				t.Fatalf("error %s", js(e))
			}
			if n := len(c.fallback.requests()); n != 0 {
				t.Fatalf("the fallback got %d requests", n)
			}
		})
	}
}

// TestWholeChainFails: when every provider of the chain is spent, the
// turn fails with the last one's error, its attempts counting them all.
func TestWholeChainFails(t *testing.T) {
	c := newChain(t, retrytest.NewClock(t0), chainOptions{primaryReply: fail(status(503), nil),
		fallbackReply: fail(&provider.Error{HTTPStatus: 529, Message: "Overloaded"}, nil)})
	o := c.turn(t, chainSpec())
	wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorModel, 10)
	e := o.Completed.Error
	if e.System != "anthropic" || e.ErrorKind != "overloaded" || e.HTTPStatus != 529 ||
		e.StopReason != string(modelretry.StopAttemptsExhausted) || !e.Retryable ||
		!strings.Contains(e.Message, "gave up after 10 attempts") || !strings.Contains(e.Message, "falling back from openai") {
		t.Fatalf("error %s", js(e))
	}
	notices := turntest.ModelRetries(c.sink)
	if len(notices) != 9 || notices[4].System != "openai" || notices[5].System != "anthropic" || notices[8].Attempt != 9 {
		t.Fatalf("notices %s", js(notices))
	}
}

// TestChainKeepsTheTurnsMaxAttempts: a turn's own retry.maxAttempts
// bounds its requests across the chain (RFC 0248 §B.1), the first
// provider leaving one for the fallback; 1 makes one request and no
// fallback.
func TestChainKeepsTheTurnsMaxAttempts(t *testing.T) {
	for _, tc := range []struct{ max, primary, fallback int }{{3, 2, 1}, {1, 1, 0}, {16, 5, 5}} {
		c := newChain(t, retrytest.NewClock(t0), chainOptions{primaryReply: fail(status(429), nil), fallbackReply: fail(status(429), nil)})
		sp := chainSpec()
		sp.Retry = &msp.RetryPolicy{MaxAttempts: &tc.max}
		o := c.turn(t, sp)
		total := tc.primary + tc.fallback
		wantTerminal(t, o, msp.TerminalFailed, msp.TurnErrorModel, total)
		if p, f := len(c.primary.requests()), len(c.fallback.requests()); p != tc.primary || f != tc.fallback {
			t.Errorf("maxAttempts %d: %d and %d requests, want %d and %d", tc.max, p, f, tc.primary, tc.fallback)
		}
		for _, n := range turntest.ModelRetries(c.sink) {
			if n.MaxAttempts != total {
				t.Errorf("maxAttempts %d: notice %s, want the bound %d", tc.max, js(n), total)
			}
		}
	}
}

// TestBreakerSparesADeadProvider: a thousand turns during an outage of a
// provider with a chain. The first turn's failures open its breaker
// (three in a row here), and the turn moves on at once rather than wait
// out its backoffs; every later turn skips it (turn/providerSkipped, no
// request, no sleep) and is answered by the fallback. After the cool-down
// one request probes it: a failed probe opens it again, and the turn
// moves on; a successful one closes it, and the next turns are its own
// again.
func TestBreakerSparesADeadProvider(t *testing.T) {
	clock := retrytest.NewClock(t0)
	breaker, err := modelretry.NewBreaker(modelretry.BreakerConfig{Failures: 3, Window: time.Minute, Cooldown: 30 * time.Second}, clock)
	if err != nil {
		t.Fatal(err)
	}
	c := newChain(t, clock, chainOptions{primaryBreaker: breaker, primaryReply: fail(status(503), nil), fallbackReply: ok("claude here")})
	wantRequests := func(primary, fallback int) {
		t.Helper()
		if p, f := len(c.primary.requests()), len(c.fallback.requests()); p != primary || f != fallback {
			t.Fatalf("requests: openai %d, claude %d; want %d and %d", p, f, primary, fallback)
		}
	}

	o := c.turn(t, chainSpec())
	wantTerminal(t, o, msp.TerminalCompleted, "", 4)
	fb := fallbackNotices(c.sink)
	if len(fb) != 1 || fb[0].Attempt != 3 || fb[0].FallbackReason != msp.FallbackCircuitOpen || fb[0].ErrorKind != "overloaded" {
		t.Fatalf("first turn: %s", js(turntest.ModelRetries(c.sink)))
	}
	if breaker.State() != modelretry.BreakerOpen || len(clock.Sleeps()) != 2 {
		t.Fatalf("breaker %v, slept %v: want open after two backoffs", breaker.State(), clock.Sleeps())
	}
	wantRequests(3, 1)

	for i := range 1000 {
		o := c.turn(t, chainSpec())
		wantTerminal(t, o, msp.TerminalCompleted, "", 1)
		if i == 0 {
			s := skips(c.sink)
			if len(s) != 1 || s[0].ProviderID != "oa" || s[0].ModelID != "gpt-x" || s[0].System != "openai" ||
				s[0].Breaker != "open" || s[0].NextProviderID != "claude" || s[0].NextModelID != "claude-x" {
				t.Fatalf("skip notice %s", js(s))
			}
			if got := c.sink.Methods(); !strings.HasPrefix(got, msp.NotifyTurnProviderSkipped+", item/started") {
				t.Fatalf("events %s: want the skip first", got)
			}
		}
	}
	wantRequests(3, 1001)
	if len(clock.Sleeps()) != 2 {
		t.Fatalf("the skipped turns slept: %v", clock.Sleeps())
	}

	clock.Advance(30 * time.Second)
	o = c.turn(t, chainSpec()) // the probe fails: open again, and on to claude at once
	wantTerminal(t, o, msp.TerminalCompleted, "", 2)
	if fb := fallbackNotices(c.sink); len(fb) != 1 || fb[0].FallbackReason != msp.FallbackCircuitOpen || len(skips(c.sink)) != 0 {
		t.Fatalf("probe turn: %s", c.sink.Methods())
	}
	wantRequests(4, 1002)
	for range 100 {
		c.turn(t, chainSpec())
	}
	wantRequests(4, 1102)

	c.primary.set(ok("openai is back"))
	clock.Advance(30 * time.Second)
	o = c.turn(t, chainSpec())
	wantTerminal(t, o, msp.TerminalCompleted, "", 1)
	if breaker.State() != modelretry.BreakerClosed {
		t.Fatalf("after a successful probe: %v", breaker.State())
	}
	c.turn(t, chainSpec())
	wantRequests(6, 1102)
	if breaker.Opens() != 2 {
		t.Errorf("opened %d times, want 2", breaker.Opens())
	}
}

// TestLastEntryIsAlwaysAsked: a breaker never refuses a turn outright:
// with every provider of the chain open, the last is asked anyway.
func TestLastEntryIsAlwaysAsked(t *testing.T) {
	clock := retrytest.NewClock(t0)
	cfg := modelretry.BreakerConfig{Failures: 1, Window: time.Minute, Cooldown: time.Hour}
	pb, _ := modelretry.NewBreaker(cfg, clock)
	fbb, _ := modelretry.NewBreaker(cfg, clock)
	pb.Record(modelretry.Admitted, modelretry.Failing)
	fbb.Record(modelretry.Admitted, modelretry.Failing)
	c := newChain(t, clock, chainOptions{primaryBreaker: pb, fbBreaker: fbb, primaryReply: ok("never"), fallbackReply: ok("still here")})
	o := c.turn(t, chainSpec())
	wantTerminal(t, o, msp.TerminalCompleted, "", 1)
	if len(c.fallback.requests()) != 1 || len(skips(c.sink)) != 1 || fbb.State() != modelretry.BreakerClosed {
		t.Fatalf("events %s; fallback breaker %v", c.sink.Methods(), fbb.State())
	}

	// A provider without a chain is its own last entry: never skipped.
	sp := spec()
	h := newHarness(t, nil, ok("alone"))
	alone, _ := modelretry.NewBreaker(cfg, h.clock)
	alone.Record(modelretry.Admitted, modelretry.Failing)
	h.runner = turn.NewRunner(turn.Config{Model: h.model, Engine: h.engine(), Policy: modelretry.DefaultPolicy(), Breaker: alone})
	wantTerminal(t, h.run(t, context.Background(), sp, nil), msp.TerminalCompleted, "", 1)
}

// TestFallbackCarriesToolHistory: step one on the first provider calls a
// tool; its provider then fails for good, and step two goes to the
// fallback, another family, which reads the call and its result as text;
// its own calls (step two) stay calls in step three, which stays on the
// fallback. Each step's messages name the provider that made them.
func TestFallbackCarriesToolHistory(t *testing.T) {
	c := newChain(t, retrytest.NewClock(t0), chainOptions{})
	c.primary.set(script(calls("", call("c1", "srv", "echo", `{"x":1}`)), fail(quota, nil)))
	c.fallback.set(script(calls("", call("toolu_2", "srv", "echo", `{"x":2}`)), ok("done")))
	sp := chainSpec()
	sp.Tools = newToolbox(c.sink, echoTool("srv", "echo", false))
	c.sink = &turntest.Sink{}
	sp.Tools.(*fakeToolbox).sink = c.sink
	o := c.run(t, context.Background(), sp, nil)
	wantTerminal(t, o, msp.TerminalCompleted, "", 4)

	reqs := c.fallback.requests()
	if len(reqs) != 2 {
		t.Fatalf("fallback requests: %d", len(reqs))
	}
	step2 := reqs[0].Messages
	if len(step2) != 2 || len(step2[1].ToolCalls) != 0 || !strings.Contains(step2[1].Text, `[I called the tool srv__echo with the arguments {"x":1}; it returned: echo got {"x":1}]`) {
		t.Fatalf("step two's history: %s", js(step2))
	}
	step3 := reqs[1].Messages
	if len(step3) != 4 || step3[1].ToolCalls != nil || len(step3[2].ToolCalls) != 1 || step3[2].ToolCalls[0].ID != "toolu_2" || step3[3].Role != provider.RoleTool {
		t.Fatalf("step three's history: %s", js(step3))
	}
	var made []string
	for _, m := range o.Messages {
		if len(m.ToolCalls) > 0 {
			made = append(made, m.ToolCalls[0].ID+"@"+m.Provider)
		}
	}
	if got := strings.Join(made, " "); got != "c1@oa toolu_2@claude" {
		t.Fatalf("the turn's calls were tagged %q", got)
	}
	if fb := fallbackNotices(c.sink); len(fb) != 1 || fb[0].Attempt != 1 || fb[0].ErrorKind != "quotaExhausted" {
		t.Fatalf("step two's notices %s", js(turntest.ModelRetries(c.sink)))
	}
	if n := len(c.primary.requests()); n != 2 {
		t.Fatalf("openai got %d requests, want 2 (step one, then step two's failure)", n)
	}
}

// TestResumeOnTheRightEntry: a turn resumed from a checkpoint taken on a
// fallback goes on there, counting on from its requests; one taken on
// the session's own provider (or by a build without fallbacks, or naming
// a provider no longer in the chain) goes on on the session's provider.
func TestResumeOnTheRightEntry(t *testing.T) {
	onClaude := &turn.Route{Entry: 1, ProviderID: "claude", ModelID: "claude-x", Base: 5}
	for _, tc := range []struct {
		name              string
		res               turn.Resumption
		primary, fallback int
		notice            turntest.TurnRetry
	}{
		{"lost on the fallback", turn.Resumption{Attempts: 6, Route: onClaude, Reason: "the server restarted during attempt 6"},
			// The backoff is the entry's own: its first retry's.
			0, 1, turntest.NewTurnRetry(6, 10, 250, "the server restarted during attempt 6")},
		{"stopped before the fallback's first", turn.Resumption{Attempts: 5, Delay: time.Second, Route: onClaude, Reason: "the server restarted during the backoff before attempt 6"},
			0, 1, turntest.NewTurnRetry(5, 10, 1000, "the server restarted during the backoff before attempt 6")},
		{"no route", turn.Resumption{Attempts: 2, Reason: "the server restarted during attempt 2"},
			1, 0, turntest.NewTurnRetry(2, 10, 500, "the server restarted during attempt 2")},
		{"a provider no longer configured", turn.Resumption{Attempts: 2, Route: &turn.Route{Entry: 1, ProviderID: "gemini", Base: 1},
			Reason: "the server restarted during attempt 2"}, 1, 0, turntest.NewTurnRetry(2, 10, 500, "the server restarted during attempt 2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChain(t, retrytest.NewClock(t0), chainOptions{primaryReply: ok("openai"), fallbackReply: ok("claude")})
			sp := chainSpec()
			res := tc.res
			res.StartedAt = t0
			sp.Resume = &res
			o := c.turn(t, sp)
			wantTerminal(t, o, msp.TerminalCompleted, "", res.Attempts+1)
			if p, f := len(c.primary.requests()), len(c.fallback.requests()); p != tc.primary || f != tc.fallback {
				t.Fatalf("requests: openai %d, claude %d", p, f)
			}
			if got := turntest.TurnRetries(c.sink); len(got) != 1 || got[0] != tc.notice {
				t.Fatalf("notices %s, want %s", js(got), js(tc.notice))
			}
		})
	}

	// A step that had not begun, after a tool step answered by the
	// fallback, starts on the fallback.
	c := newChain(t, retrytest.NewClock(t0), chainOptions{primaryReply: ok("openai"), fallbackReply: ok("claude")})
	sp := chainSpec()
	sp.Resume = &turn.Resumption{Attempts: 3, Step: 1, StepBase: 3, StartedAt: t0,
		Route: &turn.Route{Entry: 1, ProviderID: "claude", ModelID: "claude-x", Base: 3}}
	o := c.turn(t, sp)
	wantTerminal(t, o, msp.TerminalCompleted, "", 4)
	if p, f := len(c.primary.requests()), len(c.fallback.requests()); p != 0 || f != 1 {
		t.Fatalf("requests: openai %d, claude %d", p, f)
	}
}

// TestCheckpointWithoutRouteStillReads: a checkpoint written before
// fallbacks existed decodes with no route.
func TestCheckpointWithoutRouteStillReads(t *testing.T) {
	var cp turn.Checkpoint
	if err := json.Unmarshal([]byte(`{"attempts":2,"nextAt":"2025-03-01T12:00:00Z","step":1,"stepBase":1}`), &cp); err != nil || cp.Route != nil || cp.Attempts != 2 {
		t.Fatalf("%+v, %v", cp, err)
	}
	if err := json.Unmarshal([]byte(`{"attempts":6,"nextAt":"2025-03-01T12:00:00Z","route":{"entry":1,"providerId":"claude","base":5}}`), &cp); err != nil ||
		cp.Route == nil || cp.Route.ProviderID != "claude" || cp.Route.Base != 5 {
		t.Fatalf("%+v, %v", cp, err)
	}
}

// TestCancelledProbeFreesTheSlot: a half-open breaker's probe whose turn
// the user stops says nothing of the provider: the next turn probes.
func TestCancelledProbeFreesTheSlot(t *testing.T) {
	clock := retrytest.NewClock(t0)
	breaker, _ := modelretry.NewBreaker(modelretry.BreakerConfig{Failures: 1, Window: time.Minute, Cooldown: time.Second}, clock)
	breaker.Record(modelretry.Admitted, modelretry.Failing)
	clock.Advance(time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newChain(t, clock, chainOptions{primaryBreaker: breaker, fallbackReply: ok("never"),
		primaryReply: func(ctx context.Context, _ provider.Request, _ func(string)) (provider.Response, error) {
			cancel() // the user stops the turn while the probe is out
			<-ctx.Done()
			return provider.Response{}, ctx.Err()
		}})
	o := c.run(t, ctx, chainSpec(), nil)
	wantTerminal(t, o, msp.TerminalCancelled, "", 1)
	if got := breaker.Allow(); got != modelretry.Probe {
		t.Fatalf("after a cancelled probe Allow = %v, want the next probe", got)
	}
	if len(c.fallback.requests()) != 0 {
		t.Fatal("a cancelled turn went on to the fallback")
	}
}
