package anthropic_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"mspd/modelretry"
	"mspd/modelretry/retrytest"
	"mspd/provider"
	"mspd/provider/anthropic"
	"mspd/provider/anthropic/anthropictest"
	"mspd/schema/msp"
	"mspd/turn"
	"mspd/turn/turntest"
)

const (
	testKey   = anthropictest.Key
	testModel = anthropictest.Model
)

// newModel returns a Model talking to the fake.
func newModel(t *testing.T, f *anthropictest.Server, mod ...func(*anthropic.Config)) *anthropic.Model {
	t.Helper()
	cfg := anthropic.Config{Endpoint: provider.Endpoint{APIKey: testKey, BaseURL: f.URL(), Model: testModel, HTTPClient: f.Client()}}
	for _, m := range mod {
		m(&cfg)
	}
	m, err := anthropic.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// ---- driving a turn through the real runner ------------------------------

func newClock() *retrytest.Clock {
	// A whole second, so an HTTP-date Retry-After converts exactly.
	return retrytest.NewClock(time.Now().Truncate(time.Second))
}

type turnResult struct {
	out  turn.Outcome
	sink *turntest.Sink
	clk  *retrytest.Clock
}

// runTurn runs one turn with mspd's default policy, the fake clock and
// jitter fixed at 0.5, advancing the clock whenever the runner sleeps.
func runTurn(t *testing.T, clk *retrytest.Clock, m provider.Model, spec turn.Spec) turnResult {
	t.Helper()
	r := turn.NewRunner(turn.Config{
		Model:            m,
		Engine:           &modelretry.Engine{Clock: clk, Rand: retrytest.Fixed(0.5)},
		Policy:           modelretry.DefaultPolicy(),
		DefaultMaxTokens: 100,
		ModelMaxTokens:   1000,
	})
	if spec.TurnID == "" {
		spec.TurnID = "turn_1"
	}
	if spec.History == nil {
		spec.History = []provider.Message{{Role: provider.RoleUser, Text: "Hi"}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sink := &turntest.Sink{}
	done := make(chan turn.Outcome, 1)
	go func() { o := r.Run(ctx, spec, sink); sink.Settle(o); done <- o }()
	for {
		wctx, stop := context.WithCancel(ctx)
		slept := make(chan error, 1)
		go func() { slept <- clk.WaitForSleepers(wctx, 1) }()
		select {
		case out := <-done:
			stop()
			return turnResult{out: out, sink: sink, clk: clk}
		case err := <-slept:
			stop()
			if err != nil {
				t.Fatalf("turn did not finish: %v", err)
			}
			s := clk.Sleeps()
			clk.Advance(s[len(s)-1])
		}
	}
}

// modelRetry and turnRetry are what a scenario checks of the model-layer
// and turn-layer retry notices.
type (
	modelRetry = turntest.ModelRetry
	turnRetry  = turntest.TurnRetry
)

// itemStatuses lists the status and text of every closed item.
func itemStatuses(s *turntest.Sink) []string {
	var out []string
	for _, p := range turntest.Of[*msp.ItemParams](s, msp.NotifyItemCompleted) {
		text := ""
		if p.Item.Text != nil {
			text = *p.Item.Text
		}
		out = append(out, p.Item.Status+":"+text)
	}
	return out
}

const (
	mrs   = msp.NotifyTurnModelRetryScheduled
	trs   = msp.NotifyTurnRetryScheduled
	good  = "item/started, item/delta, item/completed, session/tokenUsage"
	drift = "item/started, item/delta, item/completed"
)

func seq(parts ...string) string { return strings.Join(parts, ", ") }

// TestTurnScenarios drives the real SDK client through the Model and the
// real turn.Runner against the fake server (retry-background §7).
func TestTurnScenarios(t *testing.T) {
	t.Parallel()
	const sys = "anthropic"
	schema := json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`)
	one := 1

	tests := []struct {
		name   string
		steps  func(clk *retrytest.Clock) []anthropictest.Reply
		config func(*anthropic.Config)
		spec   turn.Spec

		methods      string
		modelRetries []modelRetry
		turnRetries  []turnRetry
		items        []string
		terminal     string
		errorHas     []string // substrings of Completed.Error.Message
		answer       string
		attempts     msp.Attempts
		check        func(t *testing.T, f *anthropictest.Server, res turnResult)
	}{
		{
			name: "normal streamed answer with usage",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.Answer("end_turn", 15, "Hello", ", world")}
			},
			methods:  good,
			items:    []string{"completed:Hello, world"},
			terminal: msp.TerminalCompleted,
			answer:   "Hello, world",
			attempts: msp.Attempts{Count: 1, OutputTokens: 15, UsageComplete: true},
			check: func(t *testing.T, f *anthropictest.Server, res turnResult) {
				u := res.out.Completed.Usage
				if u == nil || u.InputTokens != 25 || u.OutputTokens != 15 {
					t.Errorf("usage %+v; want input 25, output 15", u)
				}
				tu := turntest.Of[*msp.SessionTokenUsageParams](res.sink, msp.NotifySessionTokenUsage)
				if len(tu) != 1 || tu[0].FinishReason != provider.FinishStop || tu[0].ModelID != testModel {
					t.Errorf("session/tokenUsage %s; want finishReason stop, modelId %s", turntest.JSON(tu[0]), testModel)
				}
			},
		},
		{
			name: "429 rate_limit_error with retry-after-ms",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.APIError(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit",
					"retry-after-ms", "1500", "anthropic-ratelimit-requests-remaining", "0"), anthropictest.Answer("end_turn", 3, "ok")}
			},
			methods:      seq(mrs, good),
			modelRetries: []modelRetry{turntest.NewModelRetry(1, 5, 1500, sys, "rateLimited", 429)},
			terminal:     msp.TerminalCompleted,
			answer:       "ok",
			// The runner counts a refusal with an HTTP status as zero usage.
			attempts: msp.Attempts{Count: 2, OutputTokens: 3, UsageComplete: true},
		},
		{
			name: "429 with retry-after as an HTTP date",
			steps: func(clk *retrytest.Clock) []anthropictest.Reply {
				date := clk.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)
				return []anthropictest.Reply{anthropictest.APIError(429, "rate_limit_error", "rate limited", "retry-after", date), anthropictest.Answer("end_turn", 3, "ok")}
			},
			methods:      seq(mrs, good),
			modelRetries: []modelRetry{turntest.NewModelRetry(1, 5, 3000, sys, "rateLimited", 429)},
			terminal:     msp.TerminalCompleted,
			answer:       "ok",
			attempts:     msp.Attempts{Count: 2, OutputTokens: 3, UsageComplete: true},
		},
		{
			name: "402 billing_error is not retried",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.APIError(402, "billing_error", "Your credit balance is too low")}
			},
			methods:  "",
			terminal: msp.TerminalFailed,
			errorHas: []string{"quota exhausted (HTTP 402)", "credit balance"},
			attempts: msp.Attempts{Count: 1, UsageComplete: true},
		},
		{
			name: "400 billing_error is quotaExhausted, not retried",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.APIError(400, "billing_error", "Your credit balance is too low")}
			},
			methods:  "",
			terminal: msp.TerminalFailed,
			errorHas: []string{"quota exhausted (HTTP 400)"},
			attempts: msp.Attempts{Count: 1, UsageComplete: true},
		},
		{
			name: "500 api_error retried",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.APIError(500, "api_error", "Internal server error"), anthropictest.Answer("end_turn", 2, "ok")}
			},
			methods:      seq(mrs, good),
			modelRetries: []modelRetry{turntest.NewModelRetry(1, 5, 250, sys, "serverError", 500)},
			terminal:     msp.TerminalCompleted,
			answer:       "ok",
			attempts:     msp.Attempts{Count: 2, OutputTokens: 2, UsageComplete: true},
		},
		{
			name: "502 and 503 from a proxy retried",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.PlainError(502), anthropictest.PlainError(503), anthropictest.Answer("end_turn", 2, "ok")}
			},
			methods: seq(mrs, mrs, good),
			modelRetries: []modelRetry{
				turntest.NewModelRetry(1, 5, 250, sys, "serverError", 502),
				turntest.NewModelRetry(2, 5, 500, sys, "overloaded", 503),
			},
			terminal: msp.TerminalCompleted,
			answer:   "ok",
			attempts: msp.Attempts{Count: 3, OutputTokens: 2, UsageComplete: true},
		},
		{
			name: "529 overloaded_error with x-should-retry true",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.APIError(529, "overloaded_error", "Overloaded", "x-should-retry", "true"), anthropictest.Answer("end_turn", 2, "ok")}
			},
			methods:      seq(mrs, good),
			modelRetries: []modelRetry{turntest.NewModelRetry(1, 5, 250, sys, "overloaded", 529)},
			terminal:     msp.TerminalCompleted,
			answer:       "ok",
			attempts:     msp.Attempts{Count: 2, OutputTokens: 2, UsageComplete: true},
		},
		{
			name: "400 invalid_request_error with x-should-retry true is retried",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.APIError(400, "invalid_request_error", "transient validation failure", "x-should-retry", "true"), anthropictest.Answer("end_turn", 2, "ok")}
			},
			methods:      seq(mrs, good),
			modelRetries: []modelRetry{turntest.NewModelRetry(1, 5, 250, sys, "invalidRequest", 400)},
			terminal:     msp.TerminalCompleted,
			answer:       "ok",
			attempts:     msp.Attempts{Count: 2, OutputTokens: 2, UsageComplete: true},
		},
		{
			name: "400 prompt is too long is contextLengthExceeded",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.APIError(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")}
			},
			methods:  "",
			terminal: msp.TerminalFailed,
			errorHas: []string{"context too long (HTTP 400)"},
			attempts: msp.Attempts{Count: 1, UsageComplete: true},
		},
		{
			name: "401 authentication_error is not retried",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.APIError(401, "authentication_error", "invalid x-api-key")}
			},
			methods:  "",
			terminal: msp.TerminalFailed,
			errorHas: []string{"not authorized (HTTP 401)"},
			attempts: msp.Attempts{Count: 1, UsageComplete: true},
			check: func(t *testing.T, f *anthropictest.Server, res turnResult) {
				if strings.Contains(turntest.JSON(&res.out.Completed), testKey) {
					t.Error("the turn's terminal carries the API key")
				}
			},
		},
		{
			name: "connection reset before headers",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.Reset(), anthropictest.Answer("end_turn", 2, "ok")}
			},
			methods:      seq(mrs, good),
			modelRetries: []modelRetry{turntest.NewModelRetry(1, 5, 250, sys, "connectionError", 0)},
			terminal:     msp.TerminalCompleted,
			answer:       "ok",
			attempts:     msp.Attempts{Count: 2, OutputTokens: 2},
		},
		{
			name: "stream cut after deltas is a turn-layer retry",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.Cut("Hel", "lo"), anthropictest.Answer("end_turn", 4, "Hello", " again")}
			},
			methods:     seq(drift, trs, good),
			turnRetries: []turnRetry{turntest.NewTurnRetry(1, 5, 250, "provider stream disconnected")},
			items:       []string{"failed:Hello", "completed:Hello again"},
			terminal:    msp.TerminalCompleted,
			answer:      "Hello again",
			// The cut attempt reported no output count.
			attempts: msp.Attempts{Count: 2, OutputTokens: 4, UsageComplete: false},
			check: func(t *testing.T, f *anthropictest.Server, res turnResult) {
				ids := map[string]bool{}
				for _, p := range turntest.Of[*msp.ItemParams](res.sink, msp.NotifyItemStarted) {
					ids[p.Item.ItemID] = true
				}
				if len(ids) != 2 {
					t.Errorf("%d distinct items; want a new item for the re-run", len(ids))
				}
			},
		},
		{
			name: "in-stream overloaded_error before any text",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.StreamError("overloaded_error"), anthropictest.Answer("end_turn", 2, "ok")}
			},
			methods:      seq(mrs, good),
			modelRetries: []modelRetry{turntest.NewModelRetry(1, 5, 250, sys, "overloaded", 529)},
			terminal:     msp.TerminalCompleted,
			answer:       "ok",
			// The stream had been accepted (message_start reported input
			// tokens) before the error, so that attempt's usage is unknown.
			attempts: msp.Attempts{Count: 2, OutputTokens: 2, UsageComplete: false},
		},
		{
			name: "in-stream overloaded_error after text",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.StreamError("overloaded_error", "Par", "tial"), anthropictest.Answer("end_turn", 2, "ok")}
			},
			methods:     seq(drift, trs, good),
			turnRetries: []turnRetry{turntest.NewTurnRetry(1, 5, 250, "provider stream failed: overloaded (HTTP 529)")},
			items:       []string{"failed:Partial", "completed:ok"},
			terminal:    msp.TerminalCompleted,
			answer:      "ok",
			attempts:    msp.Attempts{Count: 2, OutputTokens: 2},
		},
		{
			name: "idle stream times out",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.Stall(), anthropictest.Answer("end_turn", 2, "ok")}
			},
			config:       func(c *anthropic.Config) { c.IdleTimeout = 150 * time.Millisecond },
			methods:      seq(mrs, good),
			modelRetries: []modelRetry{turntest.NewModelRetry(1, 5, 250, sys, "timeout", 0)},
			terminal:     msp.TerminalCompleted,
			answer:       "ok",
			attempts:     msp.Attempts{Count: 2, OutputTokens: 2},
		},
		{
			name: "max_tokens truncation retry doubles max_tokens",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.Answer("max_tokens", 100, "A long answer that was cut"), anthropictest.Answer("end_turn", 150, "A long answer, whole")}
			},
			methods:     seq(good, trs, good),
			turnRetries: []turnRetry{turntest.NewTurnRetry(1, 5, 250, "output truncated at 100 tokens; retrying with 200")},
			items:       []string{"failed:A long answer that was cut", "completed:A long answer, whole"},
			terminal:    msp.TerminalCompleted,
			answer:      "A long answer, whole",
			attempts:    msp.Attempts{Count: 2, OutputTokens: 250, UsageComplete: true},
			check: func(t *testing.T, f *anthropictest.Server, res turnResult) {
				reqs := f.Requests()
				if got := []any{reqs[0].Body["max_tokens"], reqs[1].Body["max_tokens"]}; got[0] != 100.0 || got[1] != 200.0 {
					t.Errorf("max_tokens of the two requests %v; want [100 200]", got)
				}
				if got := reqs[1].Header.Get("X-Stainless-Retry-Count"); got != "1" {
					t.Errorf("second request X-Stainless-Retry-Count %q; want 1", got)
				}
			},
		},
		{
			name: "model_context_window_exceeded is not retried",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.Answer("model_context_window_exceeded", 40, "Some text")}
			},
			methods:  drift + ", session/tokenUsage",
			items:    []string{"failed:Some text"},
			terminal: msp.TerminalFailed,
			errorHas: []string{"context too long"},
			attempts: msp.Attempts{Count: 1, OutputTokens: 40, UsageComplete: true},
		},
		{
			name: "structured output native: forced tool, input streamed",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{func(w http.ResponseWriter, r *http.Request) {
					s := anthropictest.StartSSE(w)
					s.Send("message_start", anthropictest.MsgStart(40))
					s.Send("content_block_start", anthropictest.ToolStart)
					s.Send("ping", anthropictest.Ping)
					for _, c := range []string{``, `{"ans`, `wer": "4`, `2"}`} {
						s.Send("content_block_delta", anthropictest.JSONDelta(c))
					}
					s.Send("content_block_stop", anthropictest.BlockStop)
					s.Send("message_delta", anthropictest.MsgDelta("tool_use", 12))
					s.Send("message_stop", anthropictest.MsgStop)
				}}
			},
			spec:     turn.Spec{ResponseSchema: schema},
			methods:  good,
			terminal: msp.TerminalCompleted,
			answer:   `{"answer": "42"}`,
			attempts: msp.Attempts{Count: 1, OutputTokens: 12, UsageComplete: true, StructuredOutput: "native"},
			check: func(t *testing.T, f *anthropictest.Server, res turnResult) {
				body := f.Requests()[0].Body
				tools, _ := body["tools"].([]any)
				if len(tools) != 1 {
					t.Fatalf("tools %v; want one", body["tools"])
				}
				tool := tools[0].(map[string]any)
				if tool["name"] != "respond" {
					t.Errorf("tool name %v; want respond", tool["name"])
				}
				if got, _ := json.Marshal(tool["input_schema"]); !jsonEqual(got, schema) {
					t.Errorf("input_schema %s; want the response schema %s", got, schema)
				}
				if tc, _ := json.Marshal(body["tool_choice"]); !jsonEqual(tc, []byte(`{"type":"tool","name":"respond"}`)) {
					t.Errorf("tool_choice %s; want the forced respond tool", tc)
				}
				if _, ok := body["system"]; ok {
					t.Errorf("system %v; want none in tool mode", body["system"])
				}
			},
		},
		{
			name: "structured output prompt: schema in the system prompt",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.Answer("end_turn", 9, `{"answer":`, ` "42"}`)}
			},
			config:   func(c *anthropic.Config) { c.StructuredMode = anthropic.StructuredPromptMode },
			spec:     turn.Spec{ResponseSchema: schema},
			methods:  good,
			terminal: msp.TerminalCompleted,
			answer:   `{"answer": "42"}`,
			attempts: msp.Attempts{Count: 1, OutputTokens: 9, UsageComplete: true, StructuredOutput: "prompt"},
			check: func(t *testing.T, f *anthropictest.Server, res turnResult) {
				body := f.Requests()[0].Body
				sysBlocks, _ := body["system"].([]any)
				if len(sysBlocks) != 1 {
					t.Fatalf("system %v; want one text block", body["system"])
				}
				text, _ := sysBlocks[0].(map[string]any)["text"].(string)
				if !strings.Contains(text, string(schemaCompact(schema))) || !strings.Contains(text, "JSON") {
					t.Errorf("system prompt %q does not carry the schema and the JSON-only instruction", text)
				}
				if _, ok := body["tools"]; ok {
					t.Error("tools sent in prompt mode")
				}
			},
		},
		{
			name: "no message_delta usage: usageComplete false",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{func(w http.ResponseWriter, r *http.Request) {
					s := anthropictest.StartSSE(w)
					s.Send("message_start", anthropictest.MsgStart(25))
					s.Send("content_block_start", anthropictest.TextStart)
					s.Send("content_block_delta", anthropictest.TextDelta("ok"))
					s.Send("content_block_stop", anthropictest.BlockStop)
					s.Send("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null}}`)
					s.Send("message_stop", anthropictest.MsgStop)
				}}
			},
			methods:  drift,
			terminal: msp.TerminalCompleted,
			answer:   "ok",
			attempts: msp.Attempts{Count: 1, OutputTokens: 0, UsageComplete: false},
		},
		{
			name: "history alternates roles and max_tokens is sent",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.Answer("end_turn", 2, "ok")}
			},
			spec: turn.Spec{MaxTokens: 321, History: []provider.Message{
				{Role: provider.RoleAssistant, Text: "Welcome!"},
				{Role: provider.RoleUser, Text: "a"},
				{Role: provider.RoleUser, Text: "b"},
				{Role: provider.RoleAssistant, Text: "c"},
				{Role: provider.RoleAssistant, Text: ""},
				{Role: provider.RoleAssistant, Text: "d"},
				{Role: provider.RoleUser, Text: "e"},
			}},
			methods:  good,
			terminal: msp.TerminalCompleted,
			answer:   "ok",
			attempts: msp.Attempts{Count: 1, OutputTokens: 2, UsageComplete: true},
			check: func(t *testing.T, f *anthropictest.Server, res turnResult) {
				body := f.Requests()[0].Body
				want := `[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},` +
					`{"role":"assistant","content":[{"type":"text","text":"c"},{"type":"text","text":"d"}]},` +
					`{"role":"user","content":[{"type":"text","text":"e"}]}]`
				if got, _ := json.Marshal(body["messages"]); !jsonEqual(got, []byte(want)) {
					t.Errorf("messages\n got %s\nwant %s", got, want)
				}
				if body["max_tokens"] != 321.0 || body["model"] != testModel {
					t.Errorf("max_tokens %v, model %v; want 321, %s", body["max_tokens"], body["model"], testModel)
				}
			},
		},
		{
			name: "SDK retries off: one HTTP request per attempt",
			steps: func(*retrytest.Clock) []anthropictest.Reply {
				return []anthropictest.Reply{anthropictest.APIError(529, "overloaded_error", "Overloaded", "x-should-retry", "true", "retry-after", "0")}
			},
			spec:     turn.Spec{Retry: &msp.RetryPolicy{MaxAttempts: &one}},
			methods:  "",
			terminal: msp.TerminalFailed,
			errorHas: []string{"overloaded (HTTP 529)", "gave up after 1 attempts"},
			attempts: msp.Attempts{Count: 1, UsageComplete: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			steps := tc.steps(clk)
			f := anthropictest.New(t, steps...)
			var mods []func(*anthropic.Config)
			if tc.config != nil {
				mods = append(mods, tc.config)
			}
			res := runTurn(t, clk, newModel(t, f, mods...), tc.spec)
			c := res.out.Completed

			if got := res.sink.Methods(); got != tc.methods {
				t.Errorf("methods\n got %q\nwant %q", got, tc.methods)
			}
			if got := turntest.ModelRetries(res.sink); !equalSlices(got, tc.modelRetries) {
				t.Errorf("turn/modelRetryScheduled\n got %+v\nwant %+v", got, tc.modelRetries)
			}
			if got := turntest.TurnRetries(res.sink); !equalSlices(got, tc.turnRetries) {
				t.Errorf("turn/retryScheduled\n got %+v\nwant %+v", got, tc.turnRetries)
			}
			if tc.items != nil {
				if got := itemStatuses(res.sink); !equalSlices(got, tc.items) {
					t.Errorf("closed items %q; want %q", got, tc.items)
				}
			}
			if c.Terminal != tc.terminal {
				t.Errorf("terminal %q; want %q (error %+v)", c.Terminal, tc.terminal, c.Error)
			}
			if tc.terminal == msp.TerminalFailed {
				if c.Error == nil {
					t.Fatal("failed turn without error")
				}
				for _, s := range tc.errorHas {
					if !strings.Contains(c.Error.Message, s) {
						t.Errorf("error message %q lacks %q", c.Error.Message, s)
					}
				}
			}
			if res.out.Answer != tc.answer {
				t.Errorf("answer %q; want %q", res.out.Answer, tc.answer)
			}
			if c.Attempts == nil || *c.Attempts != tc.attempts {
				t.Errorf("attempts %+v; want %+v", c.Attempts, tc.attempts)
			}
			// Exactly one HTTP request per attempt: the SDK never retries.
			if got := len(f.Requests()); c.Attempts != nil && got != c.Attempts.Count {
				t.Errorf("%d HTTP requests for %d attempts", got, c.Attempts.Count)
			}
			if tc.check != nil {
				tc.check(t, f, res)
			}
		})
	}
}

func equalSlices[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return string(ja) == string(jb)
}

func schemaCompact(s json.RawMessage) []byte {
	var b bytes.Buffer
	_ = json.Compact(&b, s)
	return b.Bytes()
}

// ---- the Model on its own --------------------------------------------------

func stream(t *testing.T, m *anthropic.Model, req provider.Request) (string, provider.Response, error) {
	t.Helper()
	if req.Messages == nil {
		req.Messages = []provider.Message{{Role: provider.RoleUser, Text: "Hi"}}
	}
	if req.Attempt == 0 {
		req.Attempt = 1
	}
	var text strings.Builder
	resp, err := m.Stream(context.Background(), req, func(s string) { text.WriteString(s) })
	return text.String(), resp, err
}

func TestStreamRequestAndResponse(t *testing.T) {
	t.Parallel()
	f := anthropictest.New(t, func(w http.ResponseWriter, r *http.Request) {
		s := anthropictest.StartSSE(w)
		s.Send("message_start", anthropictest.MsgStartCached(10, 100, 20))
		s.Send("content_block_start", anthropictest.TextStart)
		s.Send("content_block_delta", anthropictest.TextDelta("Hi "))
		s.Send("ping", anthropictest.Ping)
		s.Send("content_block_delta", anthropictest.TextDelta("there"))
		s.Send("content_block_stop", anthropictest.BlockStop)
		s.Send("message_delta", anthropictest.MsgDelta("end_turn", 7))
		s.Send("message_stop", anthropictest.MsgStop)
	})
	m := newModel(t, f)
	if m.System() != "anthropic" {
		t.Errorf("System() = %q; want anthropic", m.System())
	}
	text, resp, err := stream(t, m, provider.Request{Attempt: 3})
	if err != nil {
		t.Fatal(err)
	}
	if text != "Hi there" || resp.FinishReason != provider.FinishStop || resp.Model != testModel {
		t.Errorf("text %q, response %+v", text, resp)
	}
	want := provider.Usage{InputTokens: 130, OutputTokens: 7, CachedTokens: 100}
	if resp.Usage == nil || *resp.Usage != want {
		t.Errorf("usage %+v; want %+v", resp.Usage, want)
	}
	req := f.Requests()[0]
	if req.Body["max_tokens"] != 1024.0 {
		t.Errorf("max_tokens %v; want the default 1024", req.Body["max_tokens"])
	}
	if got := req.Header.Get("X-Stainless-Retry-Count"); got != "2" {
		t.Errorf("X-Stainless-Retry-Count %q; want 2 for attempt 3", got)
	}
	t.Logf("SDK sends anthropic-version %q, credential via %s", req.Header.Get("anthropic-version"),
		map[bool]string{true: "x-api-key", false: "authorization: Bearer"}[req.Header.Get("x-api-key") != ""])
}

func TestFinishReasons(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ stop, want string }{
		{"end_turn", provider.FinishStop},
		{"stop_sequence", provider.FinishStop},
		{"max_tokens", provider.FinishLength},
		{"refusal", provider.FinishContentFilter},
		{"pause_turn", "pause_turn"},
	} {
		f := anthropictest.New(t, anthropictest.Answer(tc.stop, 1, "x"))
		_, resp, err := stream(t, newModel(t, f), provider.Request{})
		if err != nil || resp.FinishReason != tc.want {
			t.Errorf("stop_reason %s: finish %q, err %v; want %q", tc.stop, resp.FinishReason, err, tc.want)
		}
	}
	f := anthropictest.New(t, anthropictest.Answer("model_context_window_exceeded", 1, "x"))
	_, resp, err := stream(t, newModel(t, f), provider.Request{})
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Kind != "contextLengthExceeded" || resp.Usage == nil {
		t.Errorf("model_context_window_exceeded: err %v, usage %+v; want contextLengthExceeded with usage", err, resp.Usage)
	}
}

// TestErrorMapping checks the *provider.Error of every HTTP failure, and
// that modelretry classifies it as intended.
func TestErrorMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		reply     anthropictest.Reply
		kind      string
		status    int
		header    map[string]string
		classKind string
		retryable bool
	}{
		{"rate limit", anthropictest.APIError(429, "rate_limit_error", "slow down", "retry-after", "2"), "rateLimited", 429, map[string]string{"Retry-After": "2"}, "rateLimited", true},
		{"overloaded", anthropictest.APIError(529, "overloaded_error", "Overloaded", "x-should-retry", "true"), "overloaded", 529, map[string]string{"X-Should-Retry": "true"}, "overloaded", true},
		{"api error", anthropictest.APIError(500, "api_error", "oops", "retry-after-ms", "20"), "serverError", 500, map[string]string{"Retry-After-Ms": "20"}, "serverError", true},
		{"auth", anthropictest.APIError(401, "authentication_error", "invalid x-api-key"), "auth", 401, nil, "auth", false},
		{"permission", anthropictest.APIError(403, "permission_error", "no"), "auth", 403, nil, "auth", false},
		{"billing", anthropictest.APIError(402, "billing_error", "credit"), "quotaExhausted", 402, nil, "quotaExhausted", false},
		{"invalid", anthropictest.APIError(400, "invalid_request_error", "bad"), "invalidRequest", 400, nil, "invalidRequest", false},
		{"prompt too long", anthropictest.APIError(400, "invalid_request_error", "prompt is too long: 300000 tokens > 200000 maximum"), "contextLengthExceeded", 400, nil, "contextLengthExceeded", false},
		{"exceeds context", anthropictest.APIError(400, "invalid_request_error", "input length and `max_tokens` exceed context limit: 190000 + 20000 > 200000"), "contextLengthExceeded", 400, nil, "contextLengthExceeded", false},
		{"not found", anthropictest.APIError(404, "not_found_error", "model: nope"), "notFound", 404, nil, "notFound", false},
		{"too large", anthropictest.APIError(413, "request_too_large", "Request exceeds the maximum allowed number of bytes"), "invalidRequest", 413, nil, "invalidRequest", false},
		{"timeout", anthropictest.APIError(504, "timeout_error", "timed out"), "timeout", 504, nil, "timeout", true},
		{"unknown type", anthropictest.APIError(503, "brand_new_error", "??"), "", 503, nil, "overloaded", true},
		{"non-JSON body", anthropictest.PlainError(502), "", 502, nil, "serverError", true},
		{"x-should-retry false", anthropictest.APIError(500, "api_error", "no", "x-should-retry", "false"), "serverError", 500, map[string]string{"X-Should-Retry": "false"}, "serverError", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := anthropictest.New(t, tc.reply)
			text, resp, err := stream(t, newModel(t, f), provider.Request{})
			var pe *provider.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T); want *provider.Error", err, err)
			}
			if pe.Kind != tc.kind || pe.HTTPStatus != tc.status {
				t.Errorf("kind %q status %d; want %q %d (%v)", pe.Kind, pe.HTTPStatus, tc.kind, tc.status, pe)
			}
			for k, v := range tc.header {
				if got := pe.Header.Get(k); got != v {
					t.Errorf("header %s = %q; want %q", k, got, v)
				}
			}
			if len(tc.header) == 0 && len(pe.Header) != 0 {
				t.Errorf("header %v; want none", pe.Header)
			}
			if text != "" || resp.Usage != nil {
				t.Errorf("text %q, usage %+v after an HTTP error", text, resp.Usage)
			}
			fl := modelretry.Classify(modelretry.Signal{Kind: pe.Kind, HTTPStatus: pe.HTTPStatus, Header: pe.Header, Message: pe.Message}, time.Now())
			if fl.Kind != tc.classKind || fl.Retryable != tc.retryable {
				t.Errorf("classified %q retryable %v; want %q %v", fl.Kind, fl.Retryable, tc.classKind, tc.retryable)
			}
			if len(f.Requests()) != 1 {
				t.Errorf("%d HTTP requests; the SDK must not retry", len(f.Requests()))
			}
		})
	}
}

// TestInStreamErrors checks that an SSE error event after a 200 reports
// the status its type implies.
func TestInStreamErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		typ    string
		kind   string
		status int
	}{
		{"overloaded_error", "overloaded", 529},
		{"api_error", "serverError", 500},
		{"rate_limit_error", "rateLimited", 429},
		{"timeout_error", "timeout", 504},
		{"invalid_request_error", "invalidRequest", 400},
		{"mystery_error", "streamInterrupted", 0},
	} {
		f := anthropictest.New(t, anthropictest.StreamError(tc.typ, "partial"))
		text, resp, err := stream(t, newModel(t, f), provider.Request{})
		var pe *provider.Error
		if !errors.As(err, &pe) || pe.Kind != tc.kind || pe.HTTPStatus != tc.status {
			t.Errorf("%s: error %v; want kind %q status %d", tc.typ, err, tc.kind, tc.status)
			continue
		}
		if text != "partial" || resp.Usage != nil || pe.Header != nil {
			t.Errorf("%s: text %q usage %+v header %v; want the text, no usage, no header", tc.typ, text, resp.Usage, pe.Header)
		}
	}
}

func TestTransportFailures(t *testing.T) {
	t.Parallel()
	kind := func(err error) string {
		var pe *provider.Error
		if !errors.As(err, &pe) {
			return fmt.Sprintf("%T %v", err, err)
		}
		return pe.Kind
	}
	t.Run("reset before headers", func(t *testing.T) {
		t.Parallel()
		f := anthropictest.New(t, anthropictest.Reset())
		if _, _, err := stream(t, newModel(t, f), provider.Request{}); kind(err) != "connectionError" {
			t.Errorf("error %v; want connectionError", err)
		}
	})
	t.Run("EOF before message_stop", func(t *testing.T) {
		t.Parallel()
		f := anthropictest.New(t, anthropictest.Cut("a", "b"))
		text, resp, err := stream(t, newModel(t, f), provider.Request{})
		if kind(err) != "streamInterrupted" || text != "ab" || resp.Usage != nil {
			t.Errorf("error %v, text %q, usage %+v; want streamInterrupted, ab, no usage", err, text, resp.Usage)
		}
	})
	t.Run("reset mid-stream", func(t *testing.T) {
		t.Parallel()
		f := anthropictest.New(t, func(w http.ResponseWriter, r *http.Request) {
			s := anthropictest.StartSSE(w)
			s.Send("message_start", anthropictest.MsgStart(5))
			s.Send("content_block_start", anthropictest.TextStart)
			s.Send("content_block_delta", anthropictest.TextDelta("a"))
			anthropictest.Reset()(w, r)
		})
		if _, _, err := stream(t, newModel(t, f), provider.Request{}); kind(err) != "streamInterrupted" {
			t.Errorf("error %v; want streamInterrupted", err)
		}
	})
	t.Run("idle stream", func(t *testing.T) {
		t.Parallel()
		f := anthropictest.New(t, anthropictest.Stall())
		m := newModel(t, f, func(c *anthropic.Config) { c.IdleTimeout = 100 * time.Millisecond })
		start := time.Now()
		_, _, err := stream(t, m, provider.Request{})
		if kind(err) != "timeout" || !strings.Contains(err.Error(), "no data from the server for 100ms") {
			t.Errorf("error %v; want a timeout with no data for 100ms", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("idle timeout took %v", d)
		}
	})
	t.Run("silent before headers", func(t *testing.T) {
		t.Parallel()
		f := anthropictest.New(t, anthropictest.StallHeaders())
		m := newModel(t, f, func(c *anthropic.Config) { c.IdleTimeout = 100 * time.Millisecond })
		// The failure says that nothing answered, not that a stream fell
		// silent.
		if _, _, err := stream(t, m, provider.Request{}); kind(err) != "timeout" || !strings.Contains(err.Error(), "no response from the server within 100ms") {
			t.Errorf("error %v; want a timeout with no response within 100ms", err)
		}
	})
	t.Run("pings keep a stream alive", func(t *testing.T) {
		t.Parallel()
		// In a synctest bubble: the pings' spacing and the idle timer run
		// on the bubble's fake clock, exactly and at once.
		synctest.Test(t, func(t *testing.T) {
			f := anthropictest.NewInMemory(t, func(w http.ResponseWriter, r *http.Request) {
				s := anthropictest.StartSSE(w)
				s.Send("message_start", anthropictest.MsgStart(5))
				for range 8 {
					<-time.After(40 * time.Millisecond)
					s.Send("ping", anthropictest.Ping)
				}
				s.Send("content_block_start", anthropictest.TextStart)
				s.Send("content_block_delta", anthropictest.TextDelta("alive"))
				s.Send("content_block_stop", anthropictest.BlockStop)
				s.Send("message_delta", anthropictest.MsgDelta("end_turn", 1))
				s.Send("message_stop", anthropictest.MsgStop)
			})
			m := newModel(t, f, func(c *anthropic.Config) { c.IdleTimeout = 150 * time.Millisecond })
			if text, _, err := stream(t, m, provider.Request{}); err != nil || text != "alive" {
				t.Errorf("text %q, error %v; want alive: pings are liveness", text, err)
			}
		})
	})
	t.Run("client request timeout", func(t *testing.T) {
		t.Parallel()
		f := anthropictest.New(t, anthropictest.StallHeaders())
		m := newModel(t, f, func(c *anthropic.Config) {
			hc := *f.Client()
			hc.Timeout = 100 * time.Millisecond
			c.HTTPClient, c.IdleTimeout = &hc, -1
		})
		if _, _, err := stream(t, m, provider.Request{}); kind(err) != "timeout" {
			t.Errorf("error %v; want timeout", err)
		}
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	f := anthropictest.New(t, func(w http.ResponseWriter, r *http.Request) {
		s := anthropictest.StartSSE(w)
		s.Send("message_start", anthropictest.MsgStart(5))
		s.Send("content_block_start", anthropictest.TextStart)
		s.Send("content_block_delta", anthropictest.TextDelta("a"))
		<-r.Context().Done()
	})
	m := newModel(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	_, err := m.Stream(ctx, provider.Request{Messages: []provider.Message{{Role: provider.RoleUser, Text: "Hi"}}, Attempt: 1},
		func(string) { cancel() })
	if err != context.Canceled || err != ctx.Err() {
		t.Errorf("error %v (%T); want ctx.Err() itself", err, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v", d)
	}
	// Already cancelled: no request at all.
	_, err = m.Stream(ctx, provider.Request{Messages: []provider.Message{{Role: provider.RoleUser, Text: "Hi"}}}, func(string) {})
	if err != context.Canceled || len(f.Requests()) != 1 {
		t.Errorf("error %v after %d requests; want context.Canceled and no new request", err, len(f.Requests()))
	}
}

// TestKeyNeverInErrors: even a server that echoes the key cannot put it
// into an Error.
func TestKeyNeverInErrors(t *testing.T) {
	t.Parallel()
	for _, st := range []anthropictest.Reply{
		anthropictest.APIError(401, "authentication_error", "invalid x-api-key"),
		anthropictest.APIError(401, "authentication_error", "invalid x-api-key: "+testKey),
		anthropictest.StreamError("authentication_error"),
	} {
		f := anthropictest.New(t, st)
		_, _, err := stream(t, newModel(t, f), provider.Request{})
		var pe *provider.Error
		if !errors.As(err, &pe) || pe.Kind != "auth" {
			t.Fatalf("error %v; want auth", err)
		}
		texts := []string{err.Error(), pe.Message, fmt.Sprintf("%+v", pe), fmt.Sprintf("%#v", pe)}
		if pe.Err != nil {
			texts = append(texts, pe.Err.Error(), fmt.Sprintf("%+v", pe.Err))
		}
		for _, s := range texts {
			if strings.Contains(s, testKey) {
				t.Errorf("error text carries the API key: %s", s)
			}
		}
	}
}

func TestStructuredFallsBackToPromptForNonObjectSchema(t *testing.T) {
	t.Parallel()
	f := anthropictest.New(t, anthropictest.Answer("end_turn", 2, `["a"]`))
	_, resp, err := stream(t, newModel(t, f), provider.Request{ResponseSchema: json.RawMessage(`{"type":"array","items":{"type":"string"}}`)})
	if err != nil || resp.StructuredOutput != provider.StructuredPrompt {
		t.Errorf("structured %q, err %v; want prompt", resp.StructuredOutput, err)
	}
	if _, ok := f.Requests()[0].Body["tools"]; ok {
		t.Error("a tool was sent for a non-object schema")
	}
}

func TestToolWithoutArguments(t *testing.T) {
	t.Parallel()
	f := anthropictest.New(t, func(w http.ResponseWriter, r *http.Request) {
		s := anthropictest.StartSSE(w)
		s.Send("message_start", anthropictest.MsgStart(5))
		s.Send("content_block_start", anthropictest.ToolStart)
		s.Send("content_block_stop", anthropictest.BlockStop)
		s.Send("message_delta", anthropictest.MsgDelta("tool_use", 3))
		s.Send("message_stop", anthropictest.MsgStop)
	})
	text, resp, err := stream(t, newModel(t, f), provider.Request{ResponseSchema: json.RawMessage(`{"type":"object"}`)})
	if err != nil || text != "{}" || resp.StructuredOutput != provider.StructuredNative || resp.FinishReason != provider.FinishStop {
		t.Errorf("text %q, resp %+v, err %v; want {} native stop", text, resp, err)
	}
}

func TestRequestValidation(t *testing.T) {
	t.Parallel()
	f := anthropictest.New(t)
	m := newModel(t, f)
	for _, msgs := range [][]provider.Message{
		nil,
		{{Role: provider.RoleAssistant, Text: "only me"}},
		{{Role: "system", Text: "x"}},
	} {
		_, err := m.Stream(context.Background(), provider.Request{Messages: msgs}, func(string) {})
		var pe *provider.Error
		if !errors.As(err, &pe) || pe.Kind != "invalidRequest" {
			t.Errorf("messages %+v: error %v; want invalidRequest", msgs, err)
		}
	}
	if n := len(f.Requests()); n != 0 {
		t.Errorf("%d requests sent for invalid input", n)
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, cfg := range []anthropic.Config{
		{Endpoint: provider.Endpoint{Model: testModel}},
		{Endpoint: provider.Endpoint{APIKey: testKey}},
		{Endpoint: provider.Endpoint{APIKey: testKey, Model: testModel}, StructuredMode: "json"},
	} {
		if _, err := anthropic.New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		} else if strings.Contains(err.Error(), testKey) {
			t.Errorf("New error carries the key: %v", err)
		}
	}
	m, err := anthropic.New(anthropic.Config{Endpoint: provider.Endpoint{APIKey: testKey, Model: testModel, System: "gcp.vertex_ai"}})
	if err != nil || m.System() != "gcp.vertex_ai" {
		t.Errorf("System %q, err %v", m.System(), err)
	}
}

// TestMalformedBaseURLIsRefusedByNew: a base URL the SDK cannot
// parse is accepted by New; every request then fails as a retryable
// connectionError (five attempts with backoff for a configuration error)
// and the error message carries the raw URL, user info included. The
// OpenAI provider validates its base URL in New and never echoes it.
func TestMalformedBaseURLIsRefusedByNew(t *testing.T) {
	t.Parallel()
	const secret = "pr0xyS3cret"
	m, err := anthropic.New(anthropic.Config{Endpoint: provider.Endpoint{APIKey: testKey, Model: testModel,
		BaseURL: "http://mspd:" + secret + "@proxy.internal:80 80/"}})
	if err != nil {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("New error carries the URL's credentials: %v", err)
		}
		return // refused up front: fine
	}
	_, _, err = stream(t, m, provider.Request{})
	var pe *provider.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T)", err, err)
	}
	t.Errorf("New accepted a malformed base URL; Stream then fails with kind %q (retryable: %v)",
		pe.Kind, modelretry.Retryable(pe.Kind))
	if strings.Contains(pe.Message, secret) || strings.Contains(pe.Error(), secret) {
		t.Errorf("the provider error carries the base URL's credentials: %q", pe.Message)
	}
}

// TestAnswerStandsWhenOnlyMessageStopIsLost: message_delta carried the
// final stop_reason and the cumulative output_tokens (7), then the
// connection dropped before message_stop. The answer and its usage were
// complete, so the turn keeps them: no re-run paid for twice, and the
// reported tokens counted (RFC 0248 §A.2).
func TestAnswerStandsWhenOnlyMessageStopIsLost(t *testing.T) {
	t.Parallel()
	dropAfterDelta := func(w http.ResponseWriter, r *http.Request) {
		s := anthropictest.StartSSE(w)
		s.Send("message_start", anthropictest.MsgStart(25))
		s.Send("content_block_start", anthropictest.TextStart)
		s.Send("content_block_delta", anthropictest.TextDelta("Hello"))
		s.Send("content_block_stop", anthropictest.BlockStop)
		s.Send("message_delta", anthropictest.MsgDelta("end_turn", 7))
		anthropictest.Reset()(w, r)
	}
	f := anthropictest.New(t, dropAfterDelta)
	res := runTurn(t, newClock(), newModel(t, f), turn.Spec{})
	a := res.out.Completed.Attempts
	// message_delta announced the end: the answer stands, with its usage,
	// and nothing is paid for twice.
	if res.out.Completed.Terminal != "completed" || res.out.Answer != "Hello" || a == nil || a.Count != 1 || a.OutputTokens != 7 || !a.UsageComplete {
		t.Fatalf("terminal %s answer %q attempts %+v (events %s)", res.out.Completed.Terminal, res.out.Answer, a, res.sink.Methods())
	}
}

// TestRedirectIsNotFollowed: one attempt is one HTTP request; a redirect
// fails the attempt as an invalid request instead of a second request.
func TestRedirectIsNotFollowed(t *testing.T) {
	f := anthropictest.New(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/v1/elsewhere", http.StatusTemporaryRedirect)
	})
	_, _, err := stream(t, newModel(t, f), provider.Request{})
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Kind != modelretry.KindInvalidRequest || f.Count() != 1 {
		t.Fatalf("err %v, %d requests; want an invalid request after one request", err, f.Count())
	}
}
