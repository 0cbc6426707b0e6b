package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mspd/client"
	"mspd/daemon"
	"mspd/modelretry"
	"mspd/observe/observetest"
	"mspd/provider/anthropic/anthropictest"
	"mspd/provider/openai/openaitest"
	"mspd/provider/providertest"
	"mspd/schema/msp"
	"mspd/tool/tooltest"
)

// chainConfig writes a configuration of an OpenAI provider "oa" (model
// gpt-test) whose fallback is an Anthropic provider "claude", at the two
// fake servers' URLs, with more (an [[mcp]] table, say) appended, and
// returns its path.
func chainConfig(t *testing.T, oaURL, anURL, more string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "mspd.toml")
	conf := fmt.Sprintf(`default = "oa"
[[providers]]
id = "oa"
type = "openai"
base_url = %q
model = "gpt-test"
api_key_env = "TEST_KEY"
fallback = ["claude"]
[[providers]]
id = "claude"
type = "anthropic"
base_url = %q
model = %q
api_key_env = "TEST_ANTHROPIC_KEY"
`, oaURL, anURL, anthropictest.Model) + more
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

var chainEnv = mapEnv(map[string]string{"TEST_KEY": "sk-e2e", "TEST_ANTHROPIC_KEY": anthropictest.Key})

// times repeats a reply n times.
func times(n int, r providertest.Reply) []providertest.Reply {
	out := make([]providertest.Reply, n)
	for i := range out {
		out[i] = r
	}
	return out
}

// fallbackNotice decodes the turn/modelRetryScheduled notices of events
// that hand the turn to another provider.
func fallbackNotices(t *testing.T, events []client.Notification) []msp.TurnModelRetryScheduledParams {
	var out []msp.TurnModelRetryScheduledParams
	for _, n := range only(events, msp.NotifyTurnModelRetryScheduled) {
		if p := decode[msp.TurnModelRetryScheduledParams](t, n); p.Fallback {
			out = append(out, p)
		}
	}
	return out
}

// TestFallbackOverTheWire: an OpenAI provider answering 429 to each of
// its three attempts, with a chain to Anthropic. The client sees the two
// retry notices, then the fallback notice naming the failing system, its
// errorKind and HTTP status and the provider and model answering next.
// When the fake Anthropic server receives its request, that notice is
// already in the session's log (a second connection, on the stable
// rendering, reads it there as turn/retryScheduled with the route in
// words), and the server answers only once the client has seen it.
// attempts.count counts every request of both providers and the usage
// names the Anthropic model.
func TestFallbackOverTheWire(t *testing.T) {
	var sid atomic.Value
	seen := make(chan struct{})
	var reader *checkedClient
	oa := openaitest.New(t, "/v1", times(3, openaitest.Error(429, openaitest.RateLimitBody, "Retry-After-Ms", "5"))...)
	an := anthropictest.New(t, func(w http.ResponseWriter, r *http.Request) {
		var page msp.ViewPageResult
		if err := reader.Call(r.Context(), msp.MethodViewPage, msp.ViewPageParams{SessionID: sid.Load().(string), Limit: 1000}, &page); err != nil {
			t.Errorf("view/page from the fake Anthropic server: %v", err)
		}
		var reasons []string
		for _, e := range page.Events {
			if e.Method == msp.NotifyTurnRetryScheduled {
				var p msp.TurnRetryScheduledParams
				json.Unmarshal(e.Params, &p)
				reasons = append(reasons, p.Reason)
			}
		}
		want := "openai · rate limited (HTTP 429) · answering with " + anthropictest.Model
		if len(reasons) != 3 || reasons[2] != want {
			t.Errorf("when the fallback's request arrived, the log held the notices %q; want the third %q", reasons, want)
		}
		select {
		case <-seen:
		case <-time.After(10 * time.Second):
			t.Error("the client never saw the fallback notice while the fallback's request waited")
		}
		anthropictest.Answer("end_turn", 4, "Hello", " from", " Claude")(w, r)
	})
	d := startDaemon(t, daemon.Config{ConfigFile: chainConfig(t, oa.URL(), an.URL(), ""), Env: chainEnv,
		Retry: modelretry.Policy{MaxAttempts: 3}})
	c := dial(t, d.URL(), client.Options{})
	reader = dial(t, d.URL(), client.Options{StableRetryNotices: true})
	ctx := testCtx(t)
	sid.Store(newSession(t, c))
	ack, err := c.StartTurn(ctx, sid.Load().(string), "hello?")
	if err != nil {
		t.Fatal(err)
	}
	var events []client.Notification
	for len(fallbackNotices(t, events)) == 0 {
		n, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for the fallback notice: %v; events %s", err, compact(methods(events)))
		}
		events = append(events, n)
		if n.Method == msp.NotifyTurnCompleted {
			t.Fatalf("the turn ended with no fallback notice: %s", compact(methods(events)))
		}
	}
	close(seen)
	rest, err := c.WaitTurn(ctx, ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	events = append(events, rest...)
	done := decode[msp.TurnCompletedParams](t, events[len(events)-1])

	var notices []string
	for _, n := range only(events, msp.NotifyTurnModelRetryScheduled) {
		p := decode[msp.TurnModelRetryScheduledParams](t, n)
		notices = append(notices, fmt.Sprintf("%d→%d/%d %s %s %d %dms fallback=%v %s→%s %s %s", p.Attempt, p.NextAttempt, p.MaxAttempts,
			p.System, p.ErrorKind, p.HTTPStatus, p.RetryDelayMs, p.Fallback, p.ProviderID, p.NextProviderID, p.NextModelID, p.FallbackReason))
	}
	want := []string{
		"1→2/6 openai rateLimited 429 5ms fallback=false →  ",
		"2→3/6 openai rateLimited 429 5ms fallback=false →  ",
		"3→4/6 openai rateLimited 429 0ms fallback=true oa→claude " + anthropictest.Model + " attemptsExhausted",
	}
	if strings.Join(notices, "\n") != strings.Join(want, "\n") {
		t.Errorf("notices:\n%s\nwant:\n%s", strings.Join(notices, "\n"), strings.Join(want, "\n"))
	}
	if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 4 || done.Attempts.OutputTokens != 4 || !done.Attempts.UsageComplete {
		t.Errorf("terminal %s", events[len(events)-1].Params)
	}
	if got := streamedText(t, events); got != "Hello from Claude" {
		t.Errorf("streamed %q", got)
	}
	usages := only(events, msp.NotifySessionTokenUsage)
	if len(usages) != 1 || decode[msp.SessionTokenUsageParams](t, usages[0]).ModelID != anthropictest.Model {
		t.Errorf("usage: %v", usages)
	}
	if oa.Count() != 3 || an.Count() != 1 {
		t.Errorf("requests: openai %d, anthropic %d", oa.Count(), an.Count())
	}
}

// TestFallbackMovesAtOnceOnQuota: an exhausted quota is not retried on
// its provider (waiting will not help): the first failure hands the turn
// to the chain's next provider.
func TestFallbackMovesAtOnceOnQuota(t *testing.T) {
	oa := openaitest.New(t, "/v1", openaitest.Error(429, openaitest.QuotaBody))
	an := anthropictest.New(t, anthropictest.Answer("end_turn", 2, "covered"))
	d := startDaemon(t, daemon.Config{ConfigFile: chainConfig(t, oa.URL(), an.URL(), ""), Env: chainEnv})
	c := dial(t, d.URL(), client.Options{})
	events, done := answerTurn(t, c, newSession(t, c), "hi")
	fb := fallbackNotices(t, events)
	if len(only(events, msp.NotifyTurnModelRetryScheduled)) != 1 || len(fb) != 1 || fb[0].Attempt != 1 || fb[0].NextAttempt != 2 ||
		fb[0].ErrorKind != "quotaExhausted" || fb[0].HTTPStatus != 429 || fb[0].FallbackReason != "notRetryable" || fb[0].NextProviderID != "claude" {
		t.Fatalf("notices: %s", compact(methods(events)))
	}
	if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 2 || oa.Count() != 1 || an.Count() != 1 {
		t.Fatalf("terminal %+v; requests openai %d, anthropic %d", done, oa.Count(), an.Count())
	}
}

// TestInvalidRequestDoesNotFallBack: a 400 is the request's own fault,
// which another provider would refuse alike: the turn fails on the
// provider that said so, and the chain is never asked.
func TestInvalidRequestDoesNotFallBack(t *testing.T) {
	oa := openaitest.New(t, "/v1", openaitest.Error(400, openaitest.ErrorBody("Invalid 'messages'", "invalid_request_error", "")))
	an := anthropictest.New(t)
	d := startDaemon(t, daemon.Config{ConfigFile: chainConfig(t, oa.URL(), an.URL(), ""), Env: chainEnv})
	c := dial(t, d.URL(), client.Options{})
	events, done := answerTurn(t, c, newSession(t, c), "hi")
	e := done.Error
	if done.Terminal != msp.TerminalFailed || e == nil || e.ErrorKind != "invalidRequest" || e.System != "openai" || e.HTTPStatus != 400 {
		t.Fatalf("terminal %s", events[len(events)-1].Params)
	}
	if len(only(events, msp.NotifyTurnModelRetryScheduled)) != 0 || an.Count() != 0 || done.Attempts.Count != 1 {
		t.Fatalf("events %s; anthropic got %d requests", compact(methods(events)), an.Count())
	}
}

// shiftedClock is the real clock, read ahead by a shift the test moves:
// backoffs sleep for real, and a breaker's cool-down passes when told.
type shiftedClock struct{ shift atomic.Int64 }

func (c *shiftedClock) Now() time.Time { return time.Now().Add(time.Duration(c.shift.Load())) }

func (c *shiftedClock) Sleep(ctx context.Context, d time.Duration) error {
	return modelretry.SystemClock().Sleep(ctx, d)
}

func (c *shiftedClock) advance(d time.Duration) { c.shift.Add(int64(d)) }

// TestBreakerSkipsADeadProvider: the first turn against a dead OpenAI
// provider (503 to every request) opens its breaker after three failures
// and moves to Anthropic at once; model/list shows the breaker open, and
// the next turns skip OpenAI without a request, each told so by
// turn/providerSkipped. After the cool-down, model/list shows it
// half-open and one turn probes it: a failed probe opens it again and
// that turn moves on; a successful one closes it, and OpenAI answers the
// next turns. The fake OpenAI server fails the test on any request beyond
// its script, so it got exactly the requests counted here; /metrics shows
// the breaker and the fallbacks.
func TestBreakerSkipsADeadProvider(t *testing.T) {
	dead := openaitest.Error(503, openaitest.OverloadedBody)
	oa := openaitest.New(t, "/v1", append(times(4, dead),
		openaitest.Stream(openaitest.Answer("openai", " is back")...), openaitest.Stream(openaitest.Answer("still openai")...))...)
	an := anthropictest.New(t, times(7, anthropictest.Answer("end_turn", 2, "claude here"))...)
	clock := &shiftedClock{}
	d := startDaemon(t, daemon.Config{ConfigFile: chainConfig(t, oa.URL(), an.URL(), ""), Env: chainEnv, Clock: clock,
		Breaker: modelretry.BreakerConfig{Failures: 3, Window: time.Minute, Cooldown: 30 * time.Second}})
	c := dial(t, d.URL(), client.Options{})
	ctx := testCtx(t)
	sid := newSession(t, c)
	breaker := func() string {
		t.Helper()
		var list msp.ModelListResult
		if err := c.Call(ctx, msp.MethodModelList, map[string]any{}, &list); err != nil {
			t.Fatal(err)
		}
		for _, m := range list.Models {
			if m.ProviderID == "oa" {
				if len(m.Fallback) != 1 || m.Fallback[0] != (msp.ModelRef{ProviderID: "claude", ModelID: anthropictest.Model}) {
					t.Errorf("oa's row: fallback %+v", m.Fallback)
				}
				return m.BreakerState
			}
		}
		t.Fatal("model/list has no oa row")
		return ""
	}
	answeredBy := func(events []client.Notification) string {
		u := only(events, msp.NotifySessionTokenUsage)
		return decode[msp.SessionTokenUsageParams](t, u[len(u)-1]).ModelID
	}
	if got := breaker(); got != "closed" {
		t.Fatalf("breaker %q before any turn", got)
	}

	events, done := answerTurn(t, c, sid, "one")
	fb := fallbackNotices(t, events)
	if len(fb) != 1 || fb[0].Attempt != 3 || fb[0].ErrorKind != "overloaded" || fb[0].HTTPStatus != 503 || fb[0].FallbackReason != "circuitOpen" ||
		done.Attempts.Count != 4 || answeredBy(events) != anthropictest.Model {
		t.Fatalf("first turn: %s; %+v", compact(methods(events)), fb)
	}
	if got := breaker(); got != "open" {
		t.Fatalf("breaker %q after three failures in a row", got)
	}
	for i := range 5 {
		events, done := answerTurn(t, c, sid, "again")
		skips := only(events, msp.NotifyTurnProviderSkipped)
		ms := methods(events)
		if len(skips) != 1 || slices.Index(ms, msp.NotifyTurnProviderSkipped) > slices.Index(ms, msp.NotifyItemStarted) ||
			done.Attempts.Count != 1 || answeredBy(events) != anthropictest.Model {
			t.Fatalf("turn %d: %s", i+2, compact(methods(events)))
		}
		if p := decode[msp.TurnProviderSkippedParams](t, skips[0]); p.ProviderID != "oa" || p.System != "openai" || p.Breaker != "open" ||
			p.NextProviderID != "claude" || p.NextModelID != anthropictest.Model {
			t.Fatalf("skip notice %s", skips[0].Params)
		}
	}
	if oa.Count() != 3 {
		t.Fatalf("the dead provider got %d requests, want the 3 that opened its breaker", oa.Count())
	}

	clock.advance(30 * time.Second)
	if got := breaker(); got != "halfOpen" {
		t.Fatalf("breaker %q after the cool-down", got)
	}
	events, _ = answerTurn(t, c, sid, "probe")
	if fb := fallbackNotices(t, events); len(fb) != 1 || fb[0].Attempt != 1 || fb[0].FallbackReason != "circuitOpen" || oa.Count() != 4 {
		t.Fatalf("failed probe: %s; openai %d requests", compact(methods(events)), oa.Count())
	}
	if got := breaker(); got != "open" {
		t.Fatalf("breaker %q after a failed probe", got)
	}

	clock.advance(30 * time.Second)
	for _, want := range []string{"openai is back", "still openai"} {
		events, done := answerTurn(t, c, sid, "probe again")
		if got := streamedText(t, events); got != want || done.Attempts.Count != 1 || len(only(events, msp.NotifyTurnProviderSkipped)) != 0 {
			t.Fatalf("after the cool-down: %q, %s", got, compact(methods(events)))
		}
	}
	if got := breaker(); got != "closed" {
		t.Fatalf("breaker %q after a successful probe", got)
	}
	if oa.Count() != 6 || an.Count() != 7 {
		t.Fatalf("requests: openai %d, anthropic %d", oa.Count(), an.Count())
	}

	f, _, err := observetest.Scrape("http://" + d.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		sel  observetest.Labels
		want float64
	}{
		{"mspd_provider_breaker_state", observetest.Labels{"provider": "oa", "state": "closed"}, 1},
		{"mspd_provider_breaker_state", observetest.Labels{"provider": "oa", "state": "open"}, 0},
		{"mspd_provider_breaker_opens_total", observetest.Labels{"provider": "oa"}, 2},
		{"mspd_fallbacks_total", observetest.Labels{"from": "oa", "to": "claude", "reason": "circuitOpen"}, 7},
	} {
		if got := f.Value(c.name, c.sel); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.sel, got, c.want)
		}
	}
}

// TestFallbackWithTools: step one on OpenAI calls a tool; OpenAI's quota
// then runs out, and step two goes to Anthropic, which gets the call and
// its result as text (its API has no use for OpenAI's call ids). The
// Anthropic request stalls and the server restarts: the next process
// resumes the turn on Anthropic, not OpenAI — the checkpoint names the
// chain's entry — with the same history folded from the log.
func TestFallbackWithTools(t *testing.T) {
	journal := filepath.Join(t.TempDir(), "journal")
	ts := tooltest.New(journal)
	mcp := httptest.NewServer(ts.HTTPHandler())
	t.Cleanup(mcp.Close)
	oa := openaitest.New(t, "/v1",
		openaitest.Stream(openaitest.ToolCalls(5, openaitest.Call{ID: "call_1", Name: "t__lookup", Args: `{"key":"k"}`})...),
		openaitest.Error(429, openaitest.QuotaBody))
	arrived, resumed := make(chan struct{}), make(chan struct{})
	an := anthropictest.New(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done() // stalled until the server stops
	}, func(w http.ResponseWriter, r *http.Request) {
		<-resumed
		anthropictest.Answer("end_turn", 2, "found it")(w, r)
	})
	cfg := daemon.Config{ConfigFile: chainConfig(t, oa.URL(), an.URL(), fmt.Sprintf("[[mcp]]\nname = \"t\"\nurl = %q\napproval = \"never\"\n", mcp.URL)),
		Env: chainEnv, DataDir: t.TempDir()}
	d := startDaemon(t, cfg)
	c := dial(t, d.URL(), client.Options{})
	ctx := testCtx(t)
	sid := newSession(t, c)
	ack, err := c.StartTurn(ctx, sid, "look up k")
	if err != nil {
		t.Fatal(err)
	}
	var events []client.Notification
	for len(fallbackNotices(t, events)) == 0 {
		n, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("%v; events %s", err, compact(methods(events)))
		}
		events = append(events, n)
	}
	if fb := fallbackNotices(t, events); fb[0].Attempt != 1 || fb[0].ErrorKind != "quotaExhausted" {
		t.Fatalf("step two's fallback %+v", fb[0])
	}
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("no request reached Anthropic")
	}
	// A deploy with no grace: the stalled request is cut, and the turn
	// stays active with its checkpoint, for the next process.
	stop, cancel := context.WithCancel(context.Background())
	cancel()
	d.Close(stop)

	d2 := startDaemon(t, cfg)
	c2 := dial(t, d2.URL(), client.Options{})
	if _, err := c2.Resume(ctx, sid, nil); err != nil {
		t.Fatal(err)
	}
	close(resumed)
	rest, err := c2.WaitTurn(ctx, ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	done := decode[msp.TurnCompletedParams](t, rest[len(rest)-1])
	if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 4 {
		t.Fatalf("resumed turn: %s", rest[len(rest)-1].Params)
	}
	if oa.Count() != 2 || an.Count() != 2 {
		t.Fatalf("requests: openai %d, anthropic %d; want the resumed one on anthropic", oa.Count(), an.Count())
	}
	text := `[I called the tool t__lookup with the arguments {\"key\":\"k\"}; it returned: value of k]`
	for i, r := range an.Requests() {
		if strings.Contains(string(r.Raw), "tool_use") || strings.Contains(string(r.Raw), "tool_result") || !strings.Contains(string(r.Raw), text) {
			t.Errorf("anthropic request %d: want the OpenAI call as text, no tool blocks: %s", i+1, r.Raw)
		}
	}
	if n, _ := tooltest.Count(journal, tooltest.Lookup); n != 1 {
		t.Errorf("lookup ran %d times, want 1", n)
	}
}

// TestWholeChainFailsWithTheLastError: two providers naming each other
// as fallback. A turn on OpenAI whose quota is out goes to Anthropic,
// whose key is refused: the turn fails with Anthropic's error, after one
// request each — Anthropic's own chain (back to OpenAI) is not followed.
func TestWholeChainFailsWithTheLastError(t *testing.T) {
	oa := openaitest.New(t, "/v1", openaitest.Error(429, openaitest.QuotaBody))
	an := anthropictest.New(t, anthropictest.APIError(401, "authentication_error", "invalid x-api-key"))
	file := chainConfig(t, oa.URL(), an.URL(), "")
	raw, _ := os.ReadFile(file)
	mutual := strings.Replace(string(raw), "api_key_env = \"TEST_ANTHROPIC_KEY\"\n", "api_key_env = \"TEST_ANTHROPIC_KEY\"\nfallback = [\"oa\"]\n", 1)
	if err := os.WriteFile(file, []byte(mutual), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, daemon.Config{ConfigFile: file, Env: chainEnv})
	c := dial(t, d.URL(), client.Options{})
	events, done := answerTurn(t, c, newSession(t, c), "hi")
	e := done.Error
	if done.Terminal != msp.TerminalFailed || e == nil || e.System != "anthropic" || e.ErrorKind != "auth" || e.HTTPStatus != 401 ||
		!strings.Contains(e.Message, "falling back from openai") || done.Attempts.Count != 2 {
		t.Fatalf("terminal %s", events[len(events)-1].Params)
	}
	if fb := fallbackNotices(t, events); len(fb) != 1 || fb[0].ErrorKind != "quotaExhausted" {
		t.Fatalf("events %s", compact(methods(events)))
	}
	if oa.Count() != 1 || an.Count() != 1 {
		t.Fatalf("requests: openai %d, anthropic %d", oa.Count(), an.Count())
	}
}

// durableEvents are the events of ns a replay holds again: those whose
// cursor names a durable record (an ephemeral event's has a ".n"), by
// cursor.
func durableEvents(ns []client.Notification) map[string]client.Notification {
	out := map[string]client.Notification{}
	for _, n := range ns {
		if c := n.Cursor(); c != "" && !strings.Contains(c[strings.LastIndexByte(c, ':')+1:], ".") {
			out[c] = n
		}
	}
	return out
}

// pagedAsLive checks that view/page of sid holds every durable event of
// live, its method and params byte-equal to the frame the live client
// received, and returns the page.
func pagedAsLive(t *testing.T, ctx context.Context, c *checkedClient, sid string, live []client.Notification) []msp.ViewEvent {
	t.Helper()
	want := durableEvents(live)
	page := pageAll(t, ctx, c, sid)
	for _, e := range page {
		var h struct {
			ViewCursor string `json:"viewCursor"`
		}
		json.Unmarshal(e.Params, &h)
		n, ok := want[h.ViewCursor]
		if !ok {
			continue
		}
		delete(want, h.ViewCursor)
		if e.Method != n.Method || string(e.Params) != string(n.Params) {
			t.Errorf("view/page's event at %s differs from the live frame:\n paged %s %s\n live  %s %s", h.ViewCursor, e.Method, e.Params, n.Method, n.Params)
		}
	}
	for c, n := range want {
		t.Errorf("view/page lacks the live %s at %s", n.Method, c)
	}
	return page
}

// resumedAsLive resumes sid on a new connection from cursor from, reads
// the replay through the turn/completed of turnID, and checks that it
// holds every durable event of live (the events after from), method and
// params byte-equal to the live frames, and nothing of the session
// before from.
func resumedAsLive(t *testing.T, ctx context.Context, url, sid, from, turnID string, live []client.Notification) {
	t.Helper()
	want := durableEvents(live)
	r := dial(t, url, client.Options{})
	if _, err := r.Resume(ctx, sid, &from); err != nil {
		t.Fatal(err)
	}
	replayed, err := r.WaitTurn(ctx, turnID)
	if err != nil {
		t.Fatal(err)
	}
	after := cursorPos(t, from)
	for _, n := range replayed {
		c := n.Cursor()
		if c == "" {
			continue
		}
		if p := cursorPos(t, c); p[0] < after[0] || (p[0] == after[0] && p[1] <= after[1]) {
			t.Errorf("resumed after %s, replayed %s at %s", from, n.Method, c)
		}
		w, ok := want[c]
		if !ok {
			continue
		}
		delete(want, c)
		if n.Method != w.Method || string(n.Params) != string(w.Params) {
			t.Errorf("the replayed event at %s differs from the live frame:\n replayed %s %s\n live     %s %s", c, n.Method, n.Params, w.Method, w.Params)
		}
	}
	for c, n := range want {
		t.Errorf("the resume from %s did not replay the live %s at %s", from, n.Method, c)
	}
}

// forkedAsRecorded forks sid whole and checks that the fork's log is the
// source's event for event, equal but for the identities a fork
// re-mints (sansIdentities), and that its history's items are byte-equal
// to items, as delivered live. It returns the fork's log.
func forkedAsRecorded(t *testing.T, ctx context.Context, c *checkedClient, sid string, src []msp.ViewEvent, items []json.RawMessage) []msp.ViewEvent {
	t.Helper()
	raw, err := c.CallRaw(ctx, msp.MethodSessionFork, msp.SessionForkParams{CommandID: client.NewCommandID(), SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	sameItems(t, "session/fork", rawItems(t, raw), items)
	var fork msp.SessionSnapshot
	json.Unmarshal(raw, &fork)
	copied := pageAll(t, ctx, c, fork.Session.SessionID)
	if len(copied) != len(src) {
		t.Fatalf("the fork holds %d events, the source %d", len(copied), len(src))
	}
	for i, e := range copied {
		if e.Method != src[i].Method || !maps.Equal(sansIdentities(t, e.Params), sansIdentities(t, src[i].Params)) {
			t.Errorf("forked event %d:\n fork   %s %s\n source %s %s", i, e.Method, e.Params, src[i].Method, src[i].Params)
		}
	}
	return copied
}

// TestFallbackReplaysAndForksAsRecorded: a turn on a dead OpenAI provider
// (503 to each of its three attempts) falls back to Anthropic, which
// opens OpenAI's breaker; the next turn skips OpenAI (turn/providerSkipped)
// and Anthropic answers. view/page and a session/resume from the
// session's start replay every durable event of both turns — the retry
// notices, the fallback's turn/modelRetryScheduled, the
// turn/providerSkipped — byte-equal to the frames the live client
// received; a fork copies them as recorded (but for its own session id
// and cursors), its history's items byte-equal, and asks no provider
// anything.
func TestFallbackReplaysAndForksAsRecorded(t *testing.T) {
	dead := openaitest.Error(503, openaitest.OverloadedBody)
	oa := openaitest.New(t, "/v1", times(3, dead)...)
	an := anthropictest.New(t, anthropictest.Answer("end_turn", 2, "claude here"), anthropictest.Answer("end_turn", 3, "claude again"))
	d := startDaemon(t, daemon.Config{ConfigFile: chainConfig(t, oa.URL(), an.URL(), ""), Env: chainEnv,
		Breaker: modelretry.BreakerConfig{Failures: 3, Window: time.Minute, Cooldown: time.Hour}})
	c := dial(t, d.URL(), client.Options{})
	ctx := testCtx(t)
	start, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID

	ev1, done1 := answerTurn(t, c, sid, "one")
	ev2, done2 := answerTurn(t, c, sid, "two")
	fb := only(ev1, msp.NotifyTurnModelRetryScheduled)
	skips := only(ev2, msp.NotifyTurnProviderSkipped)
	if len(fb) != 3 || !decode[msp.TurnModelRetryScheduledParams](t, fb[2]).Fallback || len(skips) != 1 ||
		done1.Terminal != msp.TerminalCompleted || done2.Terminal != msp.TerminalCompleted {
		t.Fatalf("turns: %s; %s", compact(methods(ev1)), compact(methods(ev2)))
	}
	live := append(ev1, ev2...)
	for _, n := range append(fb, skips...) {
		if _, ok := durableEvents(live)[n.Cursor()]; !ok {
			t.Fatalf("%s has no durable cursor: %s", n.Method, n.Params)
		}
	}

	page := pagedAsLive(t, ctx, c, sid, live)
	resumedAsLive(t, ctx, d.URL(), sid, start.ViewCursor, done2.TurnID, live)

	oaBefore, anBefore := oa.Count(), an.Count()
	copied := forkedAsRecorded(t, ctx, c, sid, page, liveItems(t, live))
	var fellBack, skipped int
	for _, e := range copied {
		switch {
		case e.Method == msp.NotifyTurnModelRetryScheduled && strings.Contains(string(e.Params), `"fallback":true`):
			fellBack++
		case e.Method == msp.NotifyTurnProviderSkipped:
			skipped++
		}
	}
	if fellBack != 1 || skipped != 1 {
		t.Errorf("the fork holds %d fallback notices and %d skip notices, want 1 each", fellBack, skipped)
	}
	if oa.Count() != oaBefore || an.Count() != anBefore {
		t.Errorf("forking sent provider requests: openai %d → %d, anthropic %d → %d", oaBefore, oa.Count(), anBefore, an.Count())
	}
}
