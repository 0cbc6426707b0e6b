package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// retryHarness is one daemon and session for the retry scenarios, which
// all end with a check that resume and view/page serve the retry notices
// and attempts byte-identical to what was streamed live.
type retryHarness struct {
	t    *testing.T
	url  string
	c    *checkedClient
	sid  string
	live map[string]string // durable cursor → params as streamed
}

func newRetryHarness(t *testing.T) *retryHarness {
	d := startDaemon(t, daemon.Config{})
	c := dial(t, d.URL(), client.Options{})
	start, err := c.StartSession(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return &retryHarness{t: t, url: d.URL(), c: c, sid: start.Session.SessionID, live: map[string]string{}}
}

// turn runs one scripted turn and returns its events (session/started and
// other turns' events excluded) and its terminal.
func (h *retryHarness) turn(p msp.TurnStartParams, steps ...scripted.Step) ([]client.Notification, msp.TurnCompletedParams) {
	h.t.Helper()
	p.SessionID = h.sid
	p.Input = []msp.TurnInputPart{{Type: "text", Text: scripted.Script(steps...)}}
	ack, err := h.c.StartTurnWith(testCtx(h.t), p)
	if err != nil {
		h.t.Fatal(err)
	}
	all, err := h.c.WaitTurn(testCtx(h.t), ack.TurnID)
	if err != nil {
		h.t.Fatal(err)
	}
	var events []client.Notification
	for _, n := range all {
		if n.Method == msp.NotifySessionStarted {
			continue
		}
		if n.Method != msp.NotifyItemDelta {
			h.live[n.Cursor()] = string(n.Params)
		}
		if n.Method == msp.NotifySessionNameChanged {
			continue // not the turn's: the session's, named by its first turn
		}
		events = append(events, n)
	}
	assertCursorsIncrease(h.t, events)
	return events, decode[msp.TurnCompletedParams](h.t, events[len(events)-1])
}

func TestRetryScenarios(t *testing.T) {
	h := newRetryHarness(t)

	t.Run("429 then 503 then success", func(t *testing.T) {
		events, done := h.turn(msp.TurnStartParams{},
			scripted.Step{Status: 429, ErrorKind: "rateLimited", RetryAfterMs: new(40)},
			scripted.Step{Status: 503},
			scripted.Step{Text: "finally", Chunks: 2, OutputTokens: new(4)})
		want := "turn/started, item/completed, turn/modelRetryScheduled ×2, item/started, item/delta ×2, item/completed, session/tokenUsage, turn/completed"
		if got := compact(methods(events)); got != want {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
		r1 := decode[msp.TurnModelRetryScheduledParams](t, events[2])
		r2 := decode[msp.TurnModelRetryScheduledParams](t, events[3])
		if r1.Attempt != 1 || r1.NextAttempt != 2 || r1.MaxAttempts != 5 || r1.RetryDelayMs < 40 ||
			r1.ErrorKind != "rateLimited" || r1.HTTPStatus != 429 || r1.System != "scripted" {
			t.Errorf("first notice: %s", events[2].Params)
		}
		if r2.Attempt != 2 || r2.NextAttempt != 3 || r2.ErrorKind != "overloaded" || r2.HTTPStatus != 503 || r2.System != "scripted" {
			t.Errorf("second notice: %s", events[3].Params)
		}
		if strings.Contains(string(events[2].Params), `"reason"`) {
			t.Errorf("modelRetryScheduled carries a reason: %s", events[2].Params)
		}
		a := done.Attempts
		if done.Terminal != msp.TerminalCompleted || a == nil || a.Count != 3 || a.OutputTokens != 4 || !a.UsageComplete || a.StructuredOutput != "" {
			t.Errorf("terminal: %s", events[len(events)-1].Params)
		}
	})

	t.Run("truncation then success", func(t *testing.T) {
		events, done := h.turn(msp.TurnStartParams{MaxTokens: new(300)},
			scripted.Step{Text: "cut short", Chunks: 2, Finish: "length", OutputTokens: new(300)},
			scripted.Step{Text: "the whole answer", NeedsMaxTokens: 600, OutputTokens: new(450)})
		want := "turn/started, item/completed, item/started, item/delta ×2, item/completed, session/tokenUsage, turn/retryScheduled, item/started, item/delta, item/completed, session/tokenUsage, turn/completed"
		if got := compact(methods(events)); got != want {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
		first := decode[msp.ItemParams](t, events[5]).Item
		retry := decode[msp.TurnRetryScheduledParams](t, events[7])
		second := decode[msp.ItemParams](t, events[10]).Item
		if first.Status != msp.ItemFailed || *first.Text != "cut short" {
			t.Errorf("first item: %+v", first)
		}
		if retry.Attempt != 1 || retry.NextAttempt != 2 || retry.Reason == "" || len(retry.Reason) > 160 || !strings.Contains(retry.Reason, "300") || !strings.Contains(retry.Reason, "600") {
			t.Errorf("retry notice: %s", events[7].Params)
		}
		if second.Status != msp.ItemCompleted || second.ItemID == first.ItemID {
			t.Errorf("second item: %+v", second)
		}
		if done.Attempts.Count != 2 || done.Attempts.OutputTokens != 750 || done.Terminal != msp.TerminalCompleted {
			t.Errorf("terminal: %+v", done.Attempts)
		}
	})

	t.Run("growMaxTokens false never asks for more", func(t *testing.T) {
		grow := false
		step := scripted.Step{Text: "needs room", NeedsMaxTokens: 600, OutputTokens: new(600)}
		events, done := h.turn(msp.TurnStartParams{MaxTokens: new(300), Retry: &msp.RetryPolicy{MaxAttempts: new(3), GrowMaxTokens: &grow}}, step, step, step)
		if done.Terminal != msp.TerminalFailed || done.Error == nil || done.Error.Kind != msp.TurnErrorModel || done.Attempts.Count != 3 {
			t.Fatalf("terminal: %s", events[len(events)-1].Params)
		}
		for _, n := range only(events, msp.NotifySessionTokenUsage) {
			if u := decode[msp.SessionTokenUsageParams](t, n); u.Usage.OutputTokens > 300 {
				t.Errorf("an attempt was allowed %d output tokens, above maxTokens 300", u.Usage.OutputTokens)
			}
		}
		if len(only(events, msp.NotifyTurnRetryScheduled)) != 2 {
			t.Errorf("want 2 truncation retries: %s", compact(methods(events)))
		}
	})

	t.Run("maxAttempts 1 makes one request", func(t *testing.T) {
		events, done := h.turn(msp.TurnStartParams{Retry: &msp.RetryPolicy{MaxAttempts: new(1)}},
			scripted.Step{Status: 500},
			scripted.Step{Text: "never requested"})
		want := "turn/started, item/completed, turn/completed"
		if got := compact(methods(events)); got != want {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
		if done.Terminal != msp.TerminalFailed || done.Attempts.Count != 1 || done.Error == nil || done.Error.Kind != msp.TurnErrorModel {
			t.Errorf("terminal: %s", events[len(events)-1].Params)
		}
	})

	t.Run("usage false makes usage incomplete", func(t *testing.T) {
		_, done := h.turn(msp.TurnStartParams{}, scripted.Step{Text: "no usage here", Usage: new(false)})
		if done.Terminal != msp.TerminalCompleted || done.Attempts.UsageComplete || done.Attempts.Count != 1 {
			t.Errorf("attempts: %+v", done.Attempts)
		}
	})

	t.Run("schema violation then valid", func(t *testing.T) {
		schema := json.RawMessage(`{"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"]}`)
		events, done := h.turn(msp.TurnStartParams{ResponseSchema: schema},
			scripted.Step{Text: `{"answer": "forty-two"`, StructuredOutput: "native", OutputTokens: new(6)},
			scripted.Step{Text: `{"answer": 42}`, StructuredOutput: "native", OutputTokens: new(5)})
		retries := only(events, msp.NotifyTurnRetryScheduled)
		if len(retries) != 1 || !strings.Contains(decode[msp.TurnRetryScheduledParams](t, retries[0]).Reason, "schema") {
			t.Fatalf("want one schema retry: %s", compact(methods(events)))
		}
		a := done.Attempts
		if done.Terminal != msp.TerminalCompleted || a.Count != 2 || a.OutputTokens != 11 || !a.UsageComplete || a.StructuredOutput != "native" {
			t.Errorf("attempts: %+v", a)
		}
	})

	t.Run("stream cut after output", func(t *testing.T) {
		events, done := h.turn(msp.TurnStartParams{},
			scripted.Step{Text: "half an ans", Chunks: 3, Cut: true},
			scripted.Step{Text: "a whole answer"})
		retries := only(events, msp.NotifyTurnRetryScheduled)
		if len(retries) != 1 || decode[msp.TurnRetryScheduledParams](t, retries[0]).Reason != "provider stream disconnected" {
			t.Fatalf("retries: %s", compact(methods(events)))
		}
		if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 2 || done.Attempts.UsageComplete {
			t.Errorf("attempts: %+v", done.Attempts)
		}
	})

	t.Run("interrupt during backoff", func(t *testing.T) {
		ctx := testCtx(t)
		p := msp.TurnStartParams{CommandID: client.NewCommandID(), SessionID: h.sid,
			Input: []msp.TurnInputPart{{Type: "text", Text: scripted.Script(
				scripted.Step{Status: 429, RetryAfterMs: new(30000)},
				scripted.Step{Text: "must not be requested"})}}}
		if _, err := h.c.StartTurnWith(ctx, p); err != nil {
			t.Fatal(err)
		}
		for {
			n, err := h.c.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			h.live[n.Cursor()] = string(n.Params)
			if n.Method == msp.NotifyTurnModelRetryScheduled {
				if r := decode[msp.TurnModelRetryScheduledParams](t, n); r.RetryDelayMs != 30000 {
					t.Errorf("retryDelayMs %d, want the server's 30000", r.RetryDelayMs)
				}
				break
			}
		}
		if err := h.c.Call(ctx, msp.MethodTurnInterrupt, msp.TurnStopParams{CommandID: client.NewCommandID(), SessionID: h.sid}, nil); err != nil {
			t.Fatal(err)
		}
		rest, err := h.c.WaitTurn(ctx, p.CommandID)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range rest {
			h.live[n.Cursor()] = string(n.Params)
		}
		if got := compact(methods(rest)); got != msp.NotifyTurnCompleted {
			t.Fatalf("after the interrupt: %s", got)
		}
		done := decode[msp.TurnCompletedParams](t, rest[0])
		if done.Terminal != msp.TerminalCancelled || done.Attempts.Count != 1 || done.Error != nil {
			t.Errorf("terminal: %s", rest[0].Params)
		}
	})

	t.Run("malformed retry is refused", func(t *testing.T) {
		head := func() string {
			var r msp.ViewCursorResult
			if err := h.c.Call(testCtx(t), msp.MethodViewSubscribe, msp.ViewSubscribeParams{SessionID: h.sid}, &r); err != nil {
				t.Fatal(err)
			}
			return r.ViewCursor
		}
		before := head()
		defer func() {
			if after := head(); after != before {
				t.Errorf("a refused turn/start changed the log: head %s → %s", before, after)
			}
		}()
		for _, bad := range []string{`{"maxAttempts":0}`, `{"maxAttempts":2.5}`, `{"maxAttempts":17}`, `{"maxAttempts":"3"}`, `{"growMaxTokens":"no"}`, `"often"`} {
			frame := `{"jsonrpc":"2.0","id":"bad","method":"turn/start","params":{"commandId":"` + client.NewCommandID() + `","sessionId":"` + h.sid + `","input":[{"type":"text","text":"x"}],"retry":` + bad + `}}`
			_, me := rawExchange(t, testCtx(t), h.c, frame)
			if me == nil || me.Code != msp.CodeInvalidParams {
				t.Fatalf("retry %s: %v", bad, me)
			}
			field, _ := me.Data.Details["field"].(string)
			if !strings.HasPrefix(field, "retry") || (strings.Contains(bad, "maxAttempts") && field != "retry.maxAttempts") {
				t.Errorf("retry %s: field %q", bad, field)
			}
		}
	})

	t.Run("served again byte-identical", func(t *testing.T) {
		ctx := testCtx(t)
		other := dial(t, h.url, client.Options{})
		res, err := other.Resume(ctx, h.sid, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.History.Mode != msp.HistoryInline {
			t.Fatalf("history %s", res.History.Mode)
		}
		var page msp.ViewPageResult
		if err := other.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: h.sid, Limit: 1000}, &page); err != nil {
			t.Fatal(err)
		}
		checked := map[string]int{}
		for _, e := range page.Events {
			n := client.Notification{Method: e.Method, Params: e.Params}
			if live, ok := h.live[n.Cursor()]; !ok || live != string(e.Params) {
				t.Errorf("%s %s differs from the live frame:\nlive %s\npage %s", e.Method, n.Cursor(), live, e.Params)
			}
			checked[e.Method]++
		}
		if checked[msp.NotifyTurnModelRetryScheduled] < 3 || checked[msp.NotifyTurnRetryScheduled] < 4 || checked[msp.NotifyTurnCompleted] < 8 {
			t.Errorf("page covers %v", checked)
		}
	})
}

// TestRetryBudget: during an outage the shared budget stops retries, so
// failures are not multiplied; the terminal says so.
func TestRetryBudget(t *testing.T) {
	d := startDaemon(t, daemon.Config{RetryBudget: daemon.Budget{Tokens: 10, Ratio: 0.1, Refill: -1}})
	c := dial(t, d.URL(), client.Options{})
	ctx := testCtx(t)
	start, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	outage := scripted.Script(scripted.Step{Status: 503}, scripted.Step{Status: 503}, scripted.Step{Status: 503},
		scripted.Step{Status: 503}, scripted.Step{Status: 503})
	retries := 0
	var last msp.TurnCompletedParams
	for range 2 {
		ack, err := c.StartTurn(ctx, start.Session.SessionID, outage)
		if err != nil {
			t.Fatal(err)
		}
		events, err := c.WaitTurn(ctx, ack.TurnID)
		if err != nil {
			t.Fatal(err)
		}
		retries += len(only(events, msp.NotifyTurnModelRetryScheduled))
		last = decode[msp.TurnCompletedParams](t, events[len(events)-1])
	}
	// 10 tokens, retries only above 5: four retries in all, then the
	// fifth failure is not retried, and the second turn gets one request.
	if retries != 4 || last.Attempts.Count != 1 || last.Error == nil || !strings.Contains(last.Error.Message, "retry budget") {
		t.Fatalf("retries %d; last turn %+v %+v", retries, last.Attempts, last.Error)
	}
}
