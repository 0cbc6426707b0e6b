package scripted_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"mspd/provider"
	"mspd/provider/providertest"
	"mspd/provider/scripted"
)

var _ provider.Model = (*scripted.Model)(nil)

// run streams one request and collects what the model did.
func run(t *testing.T, ctx context.Context, req provider.Request) ([]string, provider.Response, error) {
	t.Helper()
	var deltas []string
	resp, err := scripted.New().Stream(ctx, req, func(s string) {
		if s == "" {
			t.Errorf("empty delta")
		}
		deltas = append(deltas, s)
	})
	return deltas, resp, err
}

// req builds a request whose user message is text, at the given attempt.
func req(text string, attempt int) provider.Request {
	return provider.Request{
		Messages: []provider.Message{
			{Role: provider.RoleUser, Text: "an earlier question"},
			{Role: provider.RoleAssistant, Text: "an earlier answer"},
			{Role: provider.RoleUser, Text: text},
		},
		Attempt: attempt,
	}
}

func providerError(t *testing.T, err error) *provider.Error {
	t.Helper()
	var pe *provider.Error
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v (%T), want *provider.Error", err, err)
	}
	return pe
}

func TestSystem(t *testing.T) {
	if got := scripted.New().System(); got != "scripted" {
		t.Fatalf("System() = %q", got)
	}
}

func TestFailures(t *testing.T) {
	tests := []struct {
		name       string
		step       scripted.Step
		kind       string
		status     int
		header     map[string]string
		message    string
		wantUsage  bool
		usageOut   int64
		wantNoHead bool
	}{
		{
			name:   "rate limited with retry-after-ms",
			step:   scripted.Step{Status: 429, ErrorKind: "rateLimited", RetryAfterMs: new(40)},
			kind:   "rateLimited",
			status: 429,
			header: map[string]string{"Retry-After-Ms": "40"},
		},
		{
			name:       "connection error has no status",
			step:       scripted.Step{ErrorKind: "connectionError"},
			kind:       "connectionError",
			wantNoHead: true,
		},
		{
			name:       "status only leaves the kind to the classifier",
			step:       scripted.Step{Status: 500},
			status:     500,
			wantNoHead: true,
		},
		{
			name:   "raw retry-after, x-should-retry and message",
			step:   scripted.Step{Status: 529, ErrorKind: "overloaded", RetryAfter: "2", ShouldRetry: new(true), Message: "busy"},
			kind:   "overloaded",
			status: 529,
			header: map[string]string{"Retry-After": "2", "X-Should-Retry": "true"},
		},
		{
			name:   "x-should-retry false and zero retry-after-ms",
			step:   scripted.Step{Status: 503, ShouldRetry: new(false), RetryAfterMs: new(0)},
			status: 503,
			header: map[string]string{"X-Should-Retry": "false", "Retry-After-Ms": "0"},
		},
		{
			name:      "explicit usage on a failure",
			step:      scripted.Step{ErrorKind: "timeout", Usage: new(true), OutputTokens: new(3)},
			kind:      "timeout",
			wantUsage: true,
			usageOut:  3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deltas, resp, err := run(t, t.Context(), req(scripted.Script(tt.step), 1))
			if len(deltas) != 0 {
				t.Errorf("deltas = %q, want none before a failure", deltas)
			}
			pe := providerError(t, err)
			if pe.Kind != tt.kind || pe.HTTPStatus != tt.status {
				t.Errorf("Kind, HTTPStatus = %q, %d; want %q, %d", pe.Kind, pe.HTTPStatus, tt.kind, tt.status)
			}
			for k, v := range tt.header {
				if got := pe.Header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if tt.wantNoHead && pe.Header != nil {
				t.Errorf("Header = %v, want nil", pe.Header)
			}
			if tt.step.Message != "" && pe.Message != tt.step.Message {
				t.Errorf("Message = %q, want %q", pe.Message, tt.step.Message)
			}
			if pe.Message == "" {
				t.Error("empty Message")
			}
			if tt.wantUsage != (resp.Usage != nil) {
				t.Fatalf("Usage = %+v, want present=%v", resp.Usage, tt.wantUsage)
			}
			if tt.wantUsage && resp.Usage.OutputTokens != tt.usageOut {
				t.Errorf("OutputTokens = %d, want %d", resp.Usage.OutputTokens, tt.usageOut)
			}
		})
	}
}

func TestText(t *testing.T) {
	schema := json.RawMessage(`{"type":"object"}`)
	tests := []struct {
		name      string
		step      scripted.Step
		maxTokens int
		schema    json.RawMessage
		deltas    []string
		finish    string
		usage     bool
		out       int64
		structed  string
	}{
		{
			name:   "defaults: one delta, stop, word-count usage",
			step:   scripted.Step{Text: "Hello there"},
			deltas: []string{"Hello there"},
			finish: provider.FinishStop,
			usage:  true,
			out:    2,
		},
		{
			name:   "chunks and explicit tokens",
			step:   scripted.Step{Text: "Hello there", Chunks: 3, OutputTokens: new(7)},
			deltas: []string{"Hell", "o th", "ere"},
			finish: provider.FinishStop,
			usage:  true,
			out:    7,
		},
		{
			name:   "finish length",
			step:   scripted.Step{Text: "abc", Finish: "length"},
			deltas: []string{"abc"},
			finish: provider.FinishLength,
			usage:  true,
			out:    1,
		},
		{
			name:   "usage false",
			step:   scripted.Step{Text: "abc", Usage: new(false)},
			deltas: []string{"abc"},
			finish: provider.FinishStop,
		},
		{
			name:      "output tokens clamped to MaxTokens",
			step:      scripted.Step{Text: "abc", OutputTokens: new(900)},
			maxTokens: 256,
			deltas:    []string{"abc"},
			finish:    provider.FinishStop,
			usage:     true,
			out:       256,
		},
		{
			name:      "needsMaxTokens not met",
			step:      scripted.Step{Text: "long answer", NeedsMaxTokens: 600, OutputTokens: new(1000)},
			maxTokens: 300,
			deltas:    []string{"long answer"},
			finish:    provider.FinishLength,
			usage:     true,
			out:       300,
		},
		{
			name:      "needsMaxTokens met",
			step:      scripted.Step{Text: "long answer", NeedsMaxTokens: 600, OutputTokens: new(450)},
			maxTokens: 600,
			deltas:    []string{"long answer"},
			finish:    provider.FinishStop,
			usage:     true,
			out:       450,
		},
		{
			name:   "needsMaxTokens with no MaxTokens truncates",
			step:   scripted.Step{Text: "x", NeedsMaxTokens: 1},
			deltas: []string{"x"},
			finish: provider.FinishLength,
			usage:  true,
			out:    1,
		},
		{
			name:     "schema defaults to native",
			step:     scripted.Step{Text: `{"a":1}`},
			schema:   schema,
			deltas:   []string{`{"a":1}`},
			finish:   provider.FinishStop,
			usage:    true,
			out:      1,
			structed: provider.StructuredNative,
		},
		{
			name:     "schema with prompt mode",
			step:     scripted.Step{Text: `{"a":1}`, StructuredOutput: "prompt"},
			schema:   schema,
			deltas:   []string{`{"a":1}`},
			finish:   provider.FinishStop,
			usage:    true,
			out:      1,
			structed: provider.StructuredPrompt,
		},
		{
			name:   "structured mode ignored without a schema",
			step:   scripted.Step{Text: "x", StructuredOutput: "prompt"},
			deltas: []string{"x"},
			finish: provider.FinishStop,
			usage:  true,
			out:    1,
		},
		{
			name:   "empty text streams nothing",
			step:   scripted.Step{Chunks: 4},
			finish: provider.FinishStop,
			usage:  true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := req(scripted.Script(tt.step), 1)
			r.MaxTokens = tt.maxTokens
			r.ResponseSchema = tt.schema
			deltas, resp, err := run(t, t.Context(), r)
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if !reflect.DeepEqual(deltas, tt.deltas) {
				t.Errorf("deltas = %q, want %q", deltas, tt.deltas)
			}
			if resp.FinishReason != tt.finish {
				t.Errorf("FinishReason = %q, want %q", resp.FinishReason, tt.finish)
			}
			if resp.StructuredOutput != tt.structed {
				t.Errorf("StructuredOutput = %q, want %q", resp.StructuredOutput, tt.structed)
			}
			if tt.usage != (resp.Usage != nil) {
				t.Fatalf("Usage = %+v, want present=%v", resp.Usage, tt.usage)
			}
			if tt.usage {
				if resp.Usage.OutputTokens != tt.out {
					t.Errorf("OutputTokens = %d, want %d", resp.Usage.OutputTokens, tt.out)
				}
				if resp.Usage.InputTokens < 1 {
					t.Errorf("InputTokens = %d, want an estimate >= 1", resp.Usage.InputTokens)
				}
			}
		})
	}
}

func TestChunking(t *testing.T) {
	texts := []string{"a", "Hello there", "héllo wörld ✓ 日本語のテキスト", "🙂🙃😉", strings.Repeat("xyz ", 50)}
	for _, text := range texts {
		runes := len([]rune(text))
		for _, chunks := range []int{0, 1, 2, 3, 7, runes, runes + 5} {
			deltas, _, err := run(t, t.Context(), req(scripted.Script(scripted.Step{Text: text, Chunks: chunks}), 1))
			if err != nil {
				t.Fatal(err)
			}
			want := min(max(chunks, 1), runes)
			if len(deltas) != want {
				t.Errorf("%q in %d chunks: got %d deltas, want %d", text, chunks, len(deltas), want)
			}
			if got := strings.Join(deltas, ""); got != text {
				t.Errorf("%q in %d chunks: deltas join to %q", text, chunks, got)
			}
			// Even split: rune counts differ by at most one, larger first.
			for i := 1; i < len(deltas); i++ {
				a, b := len([]rune(deltas[i-1])), len([]rune(deltas[i]))
				if a < b || a-b > 1 {
					t.Errorf("%q in %d chunks: uneven deltas %q", text, chunks, deltas)
					break
				}
			}
		}
	}
}

func TestCut(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		deltas, resp, err := run(t, t.Context(), req(scripted.Script(scripted.Step{Text: "partial", Cut: true, Chunks: 2}), 1))
		if got := strings.Join(deltas, ""); len(deltas) != 2 || got != "partial" {
			t.Errorf("deltas = %q, want partial in 2", deltas)
		}
		pe := providerError(t, err)
		if pe.Kind != "streamInterrupted" || pe.HTTPStatus != 0 {
			t.Errorf("Kind, HTTPStatus = %q, %d", pe.Kind, pe.HTTPStatus)
		}
		if resp.Usage != nil {
			t.Errorf("Usage = %+v, want nil", resp.Usage)
		}
	})
	t.Run("usage and in-stream kind", func(t *testing.T) {
		step := scripted.Step{Text: "two words", Cut: true, Usage: new(true), ErrorKind: "overloaded", Status: 529}
		deltas, resp, err := run(t, t.Context(), req(scripted.Script(step), 1))
		if len(deltas) != 1 {
			t.Errorf("deltas = %q", deltas)
		}
		pe := providerError(t, err)
		if pe.Kind != "overloaded" || pe.HTTPStatus != 529 {
			t.Errorf("Kind, HTTPStatus = %q, %d", pe.Kind, pe.HTTPStatus)
		}
		if resp.Usage == nil || resp.Usage.OutputTokens != 2 {
			t.Errorf("Usage = %+v, want 2 output tokens", resp.Usage)
		}
	})
}

func TestAttemptsAndExhaustion(t *testing.T) {
	text := scripted.Script(
		scripted.Step{Status: 429, ErrorKind: "rateLimited"},
		scripted.Step{Text: "partial", Cut: true},
		scripted.Step{Text: "done"},
	)
	// Out of order on purpose: the model is stateless.
	for _, attempt := range []int{3, 1, 2, 3} {
		deltas, _, err := run(t, t.Context(), req(text, attempt))
		switch attempt {
		case 1:
			if pe := providerError(t, err); pe.Kind != "rateLimited" {
				t.Errorf("attempt 1: Kind = %q", pe.Kind)
			}
		case 2:
			if pe := providerError(t, err); pe.Kind != "streamInterrupted" {
				t.Errorf("attempt 2: Kind = %q", pe.Kind)
			}
		case 3:
			if err != nil || !reflect.DeepEqual(deltas, []string{"done"}) {
				t.Errorf("attempt 3: deltas %q, err %v", deltas, err)
			}
		}
	}
	for _, attempt := range []int{4, 10} {
		deltas, _, err := run(t, t.Context(), req(text, attempt))
		if pe := providerError(t, err); pe.Kind != scripted.KindScriptExhausted || len(deltas) != 0 {
			t.Errorf("attempt %d: Kind = %q, deltas %q", attempt, pe.Kind, deltas)
		}
	}
	_, _, err := run(t, t.Context(), req(scripted.Script(), 1))
	if pe := providerError(t, err); pe.Kind != scripted.KindScriptExhausted {
		t.Errorf("empty script: Kind = %q", pe.Kind)
	}
	_, _, err = run(t, t.Context(), req(text, 0))
	if pe := providerError(t, err); pe.Kind != scripted.KindInvalidRequest {
		t.Errorf("attempt 0: Kind = %q", pe.Kind)
	}
}

func TestUsesLastUserMessage(t *testing.T) {
	r := provider.Request{
		Messages: []provider.Message{
			{Role: provider.RoleUser, Text: scripted.Script(scripted.Step{Text: "old"})},
			{Role: provider.RoleUser, Text: scripted.Script(scripted.Step{Text: "new"})},
			{Role: provider.RoleAssistant, Text: scripted.Script(scripted.Step{Text: "assistant"})},
		},
		Attempt: 1,
	}
	deltas, _, err := run(t, t.Context(), r)
	if err != nil || !reflect.DeepEqual(deltas, []string{"new"}) {
		t.Fatalf("deltas %q, err %v", deltas, err)
	}
}

func TestEcho(t *testing.T) {
	for _, text := range []string{
		"What is the capital of France?",
		"  leading and  double  spaces\nand lines ",
		`{"not": "a script"}`,
		"{ just a brace",
		"single",
	} {
		r := req(text, 1)
		r.MaxTokens = 3
		deltas, resp, err := run(t, t.Context(), r)
		if err != nil {
			t.Fatalf("%q: err = %v", text, err)
		}
		if got := strings.Join(deltas, ""); got != text {
			t.Errorf("echo of %q streamed %q", text, got)
		}
		if words := len(strings.Fields(text)); len(deltas) != words {
			t.Errorf("echo of %q: %d deltas, want one per word (%d)", text, len(deltas), words)
		}
		if resp.FinishReason != provider.FinishStop || resp.Usage == nil || resp.Usage.InputTokens < 1 {
			t.Errorf("echo of %q: resp = %+v", text, resp)
		}
		if want := min(int64(len(strings.Fields(text))), 3); resp.Usage.OutputTokens != want {
			t.Errorf("echo of %q: OutputTokens = %d, want %d", text, resp.Usage.OutputTokens, want)
		}
	}
}

func TestMalformed(t *testing.T) {
	tests := []struct {
		name, text, mention string
	}{
		{"not an array", `{"mspScript": {"text": "x"}}`, "array"},
		{"null", `{"mspScript": null}`, "array"},
		{"entry not an object", `{"mspScript": ["hello"]}`, "mspScript[0]"},
		{"wrong field type", `{"mspScript": [{"text": "ok"}, {"status": "429"}]}`, "mspScript[1]"},
		{"unknown field", `{"mspScript": [{"txt": "typo"}]}`, "txt"},
		{"broken JSON", `{"mspScript": [{"text": "x",}]}`, "JSON"},
		{"bad finish", `{"mspScript": [{"text": "x", "finish": "done"}]}`, "finish"},
		{"negative chunks", `{"mspScript": [{"text": "x", "chunks": -1}]}`, "chunks"},
		{"bad status", `{"mspScript": [{"status": 42}]}`, "status"},
		{"text on a failure", `{"mspScript": [{"status": 500, "text": "x"}]}`, "cut"},
		{"signals without a failure", `{"mspScript": [{"retryAfterMs": 5}]}`, "retryAfterMs"},
		{"bad structured mode", `{"mspScript": [{"text": "x", "structuredOutput": "json"}]}`, "structuredOutput"},
		{"echo with text", `{"mspScript": [{"echoRequest": true, "text": "x"}]}`, "echoRequest"},
		{"echo failing", `{"mspScript": [{"echoRequest": true, "status": 503}]}`, "echoRequest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Attempt 1 is fine even when only a later entry is broken: the
			// whole script is checked so the turn fails at once.
			deltas, _, err := run(t, t.Context(), req(tt.text, 1))
			pe := providerError(t, err)
			if pe.Kind != scripted.KindInvalidRequest || !strings.Contains(pe.Message, tt.mention) {
				t.Errorf("Kind %q, Message %q; want invalidRequest naming %q", pe.Kind, pe.Message, tt.mention)
			}
			if len(deltas) != 0 {
				t.Errorf("deltas = %q", deltas)
			}
		})
	}
}

func TestScriptRoundTrip(t *testing.T) {
	text := scripted.Script(scripted.Step{Status: 429, RetryAfterMs: new(0)}, scripted.Step{Text: "x"})
	want := `{"mspScript":[{"status":429,"retryAfterMs":0},{"text":"x"}]}`
	if text != want {
		t.Errorf("Script = %s, want %s", text, want)
	}
}

func TestCancelMidStream(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var deltas []string
	_, err := scripted.New().Stream(ctx, req(scripted.Script(scripted.Step{Text: "abcdef", Chunks: 6}), 1), func(s string) {
		deltas = append(deltas, s)
		if len(deltas) == 2 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || !reflect.DeepEqual(deltas, []string{"a", "b"}) {
		t.Fatalf("err %v, deltas %q; want Canceled after 2 deltas", err, deltas)
	}
}

func TestCancelDuringDelay(t *testing.T) {
	for _, step := range []scripted.Step{
		{Text: "never", DelayMs: 60_000},
		{Text: "ab", Chunks: 2, ChunkDelayMs: 60_000},
		{Status: 503, DelayMs: 60_000},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		start := time.Now()
		_, _, err := run(t, ctx, req(scripted.Script(step), 1))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%+v: err = %v, want DeadlineExceeded", step, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%+v: took %v to notice cancellation", step, d)
		}
	}
}

func TestCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	deltas, _, err := run(t, ctx, req("echo me", 1))
	if err != context.Canceled || len(deltas) != 0 {
		t.Fatalf("err %v, deltas %q", err, deltas)
	}
}

func TestDelayElapses(t *testing.T) {
	deltas, _, err := run(t, t.Context(), req(scripted.Script(scripted.Step{Text: "ab", Chunks: 2, DelayMs: 1, ChunkDelayMs: 1}), 1))
	if err != nil || !reflect.DeepEqual(deltas, []string{"a", "b"}) {
		t.Fatalf("err %v, deltas %q", err, deltas)
	}
}

func TestCalls(t *testing.T) {
	text := scripted.Script(
		scripted.Step{Text: "Let me add.", Calls: []scripted.Call{
			{ID: "c1", Name: "builtin__calculator", Args: `{"expression":"2+2"}`},
			{Name: "builtin__clock", Args: `not json`},
		}},
		scripted.Step{Text: "4"},
	)
	r := req(text, 1)
	// Later steps keep the user message last among user messages.
	r.Messages = append(r.Messages, provider.Message{Role: provider.RoleTool, ToolResults: []provider.ToolResult{{CallID: "x", Text: "y"}}})
	deltas, resp, err := run(t, t.Context(), r)
	if err != nil || !reflect.DeepEqual(deltas, []string{"Let me add."}) {
		t.Fatalf("deltas %q, err %v", deltas, err)
	}
	want := []provider.ToolCall{
		{ID: "c1", Name: "builtin__calculator", Args: `{"expression":"2+2"}`},
		{ID: "call_1_2", Name: "builtin__clock", Args: `not json`},
	}
	if resp.FinishReason != provider.FinishToolCalls || !reflect.DeepEqual(resp.ToolCalls, want) {
		t.Fatalf("finish %q calls %+v", resp.FinishReason, resp.ToolCalls)
	}
	_, resp, err = run(t, t.Context(), req(text, 2))
	if err != nil || resp.FinishReason != provider.FinishStop || resp.ToolCalls != nil {
		t.Fatalf("second entry: %+v %v", resp, err)
	}
}

// TestEchoRequest: an echoRequest entry answers with the request's
// history — its messages, the calls and their results.
func TestEchoRequest(t *testing.T) {
	r := req(scripted.Script(scripted.Step{Calls: []scripted.Call{{ID: "c1", Name: "s__append", Args: `{"text":"a"}`}}},
		scripted.Step{EchoRequest: true, Chunks: 3}), 2)
	r.Messages = append(r.Messages,
		provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{{ID: "c1", Name: "s__append", Args: `{"text":"a"}`}}},
		provider.Message{Role: provider.RoleTool, ToolResults: []provider.ToolResult{{CallID: "c1", Name: "s__append", Text: "unknown", IsError: true}}})
	deltas, resp, err := run(t, t.Context(), r)
	if err != nil || resp.FinishReason != provider.FinishStop || len(deltas) != 3 {
		t.Fatalf("deltas %q, finish %q, err %v", deltas, resp.FinishReason, err)
	}
	var got []scripted.Echoed
	if err := json.Unmarshal([]byte(strings.Join(deltas, "")), &got); err != nil {
		t.Fatal(err)
	}
	want := []scripted.Echoed{
		{Role: provider.RoleUser, Text: "an earlier question"},
		{Role: provider.RoleAssistant, Text: "an earlier answer"},
		{Role: provider.RoleUser, Text: r.Messages[2].Text},
		{Role: provider.RoleAssistant, Calls: []scripted.Call{{ID: "c1", Name: "s__append", Args: `{"text":"a"}`}}},
		{Role: provider.RoleTool, Results: []scripted.Result{{CallID: "c1", Name: "s__append", Text: "unknown", IsError: true}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("echoed %+v\nwant %+v", got, want)
	}
}

// TestEchoRequestInstructionsAndImages: the echo starts with the
// instructions as a "system" entry and reports each image a message
// carried by media type, size and digest.
func TestEchoRequestInstructionsAndImages(t *testing.T) {
	png := providertest.PNG(3, 3)
	r := req(scripted.Script(scripted.Step{EchoRequest: true}), 1)
	r.Instructions = "Be terse."
	r.Messages[len(r.Messages)-1].Images = []provider.Image{{MediaType: provider.MediaPNG, Data: providertest.B64(png), Size: int64(len(png))}}
	deltas, _, err := run(t, t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	var got []scripted.Echoed
	if err := json.Unmarshal([]byte(strings.Join(deltas, "")), &got); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(png)
	if len(got) != 4 || !reflect.DeepEqual(got[0], scripted.Echoed{Role: scripted.RoleSystem, Text: "Be terse."}) ||
		!reflect.DeepEqual(got[3].Images, []scripted.EchoedImage{{MediaType: "image/png", Bytes: len(png), SHA256: hex.EncodeToString(sum[:])}}) {
		t.Errorf("echoed %+v", got)
	}
}

// TestToolNames: an entry with toolNames answers the names of the tools
// its request offers, sorted, after its text; a failure may not.
func TestToolNames(t *testing.T) {
	r := req(scripted.Script(scripted.Step{Text: "offered: ", ToolNames: true}), 1)
	r.Tools = []provider.ToolSpec{{Name: "t__b"}, {Name: "builtin__clock"}, {Name: "t__a"}}
	deltas, _, err := run(t, t.Context(), r)
	if err != nil || strings.Join(deltas, "") != "offered: builtin__clock,t__a,t__b" {
		t.Fatalf("deltas %q, err %v", deltas, err)
	}
	if _, _, err := run(t, t.Context(), req(scripted.Script(scripted.Step{Status: 500, ToolNames: true}), 1)); err == nil || !strings.Contains(err.Error(), "streams nothing") {
		t.Fatalf("a failure naming tools: %v", err)
	}
}
