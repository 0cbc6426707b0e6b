package demo_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"mspd/provider"
	"mspd/provider/demo"
)

var _ provider.Model = (*demo.Model)(nil)

type result struct {
	deltas []string
	resp   provider.Response
	err    error
}

func (r result) text() string { return strings.Join(r.deltas, "") }

func run(ctx context.Context, m *demo.Model, req provider.Request) result {
	var r result
	r.resp, r.err = m.Stream(ctx, req, func(s string) { r.deltas = append(r.deltas, s) })
	return r
}

func req(prompt string, attempt int) provider.Request {
	return provider.Request{
		Messages: []provider.Message{{Role: provider.RoleUser, Text: prompt}},
		Attempt:  attempt,
	}
}

// fast is a model that never pauses, for tests.
func fast(seed int64, faultRate float64) *demo.Model {
	return demo.New(demo.Config{WordDelay: demo.NoDelay, Seed: seed, FaultRate: faultRate})
}

const prompt = "How should I design caching for a websocket gateway?"

func TestSystem(t *testing.T) {
	if got := fast(1, 0).System(); got != "demo" {
		t.Fatalf("System() = %q", got)
	}
}

func TestReply(t *testing.T) {
	r := run(t.Context(), fast(7, 0), req(prompt, 1))
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.deltas) < 20 {
		t.Errorf("only %d words: %q", len(r.deltas), r.text())
	}
	for i, d := range r.deltas {
		if len(strings.Fields(d)) != 1 {
			t.Errorf("delta %d = %q, want exactly one word", i, d)
		}
	}
	mentions := false
	for _, k := range []string{"design", "caching", "websocket", "gateway"} {
		mentions = mentions || strings.Contains(strings.ToLower(r.text()), k)
	}
	if !mentions {
		t.Errorf("reply does not mention the prompt: %q", r.text())
	}
	want := provider.Response{
		FinishReason: provider.FinishStop,
		Usage:        &provider.Usage{InputTokens: 9, OutputTokens: int64(len(r.deltas))},
		Model:        demo.DefaultModel,
	}
	if !reflect.DeepEqual(r.resp, want) {
		t.Errorf("resp = %+v (usage %+v), want %+v (usage %+v)", r.resp, r.resp.Usage, want, want.Usage)
	}

	named := req(prompt, 1)
	named.Model = "demo-large"
	if got := run(t.Context(), fast(7, 0), named).resp.Model; got != "demo-large" {
		t.Errorf("Model = %q, want the requested one", got)
	}
}

func TestNoKeywords(t *testing.T) {
	for _, p := range []string{"", "hi", "?!", "what is this"} {
		r := run(t.Context(), fast(3, 0), req(p, 1))
		if r.err != nil || len(r.deltas) == 0 || r.resp.Usage.InputTokens < 1 {
			t.Errorf("%q: err %v, %d deltas, usage %+v", p, r.err, len(r.deltas), r.resp.Usage)
		}
	}
}

func TestDeterministicBySeed(t *testing.T) {
	a := run(t.Context(), fast(42, 0.5), req(prompt, 1))
	b := run(t.Context(), fast(42, 0.5), req(prompt, 1))
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different results:\n%+v\n%+v", a, b)
	}
	texts := map[string]bool{}
	for seed := int64(1); seed <= 8; seed++ {
		texts[run(t.Context(), fast(seed, 0), req(prompt, 1)).text()] = true
	}
	if len(texts) < 4 {
		t.Errorf("8 seeds gave only %d distinct replies", len(texts))
	}
	// Varied by prompt too, not only by seed.
	other := run(t.Context(), fast(42, 0), req("Tell me about sourdough baking and hydration", 1))
	if other.text() == run(t.Context(), fast(42, 0), req(prompt, 1)).text() {
		t.Error("different prompts, same reply")
	}
}

func TestMaxTokens(t *testing.T) {
	full := run(t.Context(), fast(5, 0), req(prompt, 1))
	for _, maxTokens := range []int{1, 5, len(full.deltas) - 1, len(full.deltas), len(full.deltas) + 10} {
		r0 := req(prompt, 1)
		r0.MaxTokens = maxTokens
		r := run(t.Context(), fast(5, 0), r0)
		if r.err != nil {
			t.Fatal(r.err)
		}
		wantWords, wantFinish := maxTokens, provider.FinishLength
		if maxTokens >= len(full.deltas) {
			wantWords, wantFinish = len(full.deltas), provider.FinishStop
		}
		if len(r.deltas) != wantWords || r.resp.FinishReason != wantFinish || r.resp.Usage.OutputTokens != int64(wantWords) {
			t.Errorf("MaxTokens %d: %d words, finish %q, output %d; want %d, %q",
				maxTokens, len(r.deltas), r.resp.FinishReason, r.resp.Usage.OutputTokens, wantWords, wantFinish)
		}
		if !strings.HasPrefix(full.text(), r.text()) {
			t.Errorf("MaxTokens %d: %q is not a prefix of the full reply", maxTokens, r.text())
		}
	}
}

func TestFaultRateZero(t *testing.T) {
	m := fast(11, 0)
	for i := range 100 {
		for attempt := 1; attempt <= 3; attempt++ {
			if r := run(t.Context(), m, req(fmt.Sprintf("question %d", i), attempt)); r.err != nil {
				t.Fatalf("prompt %d attempt %d: %v", i, attempt, r.err)
			}
		}
	}
}

func TestFaultRateOne(t *testing.T) {
	m := fast(11, 1)
	seen := map[string]bool{}
	for i := range 100 {
		p := fmt.Sprintf("question number %d about retries", i)
		for attempt := 1; attempt <= demo.DefaultMaxFaultAttempt; attempt++ {
			r := run(t.Context(), m, req(p, attempt))
			var pe *provider.Error
			if !errors.As(r.err, &pe) {
				t.Fatalf("attempt %d: err = %v, want *provider.Error", attempt, r.err)
			}
			if len(r.deltas) != 0 || r.resp.Usage != nil {
				t.Errorf("fault after output: %q, usage %+v", r.deltas, r.resp.Usage)
			}
			shape := fmt.Sprintf("%s/%d", pe.Kind, pe.HTTPStatus)
			seen[shape] = true
			switch shape {
			case "rateLimited/429":
				ms, err := strconv.Atoi(pe.Header.Get("retry-after-ms"))
				if err != nil || ms < 300 || ms > 1500 {
					t.Errorf("retry-after-ms = %q", pe.Header.Get("retry-after-ms"))
				}
			case "overloaded/529":
				if pe.Header.Get("x-should-retry") != "true" {
					t.Errorf("529 without x-should-retry: %v", pe.Header)
				}
			case "overloaded/503", "timeout/0", "connectionError/0":
			default:
				t.Errorf("unexpected fault %s: %v", shape, pe)
			}
		}
		// The demo always answers eventually.
		if r := run(t.Context(), m, req(p, demo.DefaultMaxFaultAttempt+1)); r.err != nil || len(r.deltas) == 0 {
			t.Fatalf("attempt %d: err %v", demo.DefaultMaxFaultAttempt+1, r.err)
		}
	}
	if len(seen) != 5 {
		t.Errorf("fault shapes seen: %v, want all 5", seen)
	}
}

func TestFaultRatePartial(t *testing.T) {
	m := fast(99, 0.3)
	failed := 0
	const n = 400
	for i := range n {
		r := run(t.Context(), m, req(fmt.Sprintf("prompt %d", i), 1))
		if r.err != nil {
			failed++
		}
		if again := run(t.Context(), m, req(fmt.Sprintf("prompt %d", i), 1)); (again.err != nil) != (r.err != nil) {
			t.Fatalf("prompt %d: fault decision is not deterministic", i)
		}
	}
	if failed < n/5 || failed > 2*n/5 {
		t.Errorf("%d of %d failed at rate 0.3", failed, n)
	}
}

func TestMaxFaultAttempt(t *testing.T) {
	never := demo.New(demo.Config{WordDelay: demo.NoDelay, Seed: 1, FaultRate: 1, MaxFaultAttempt: -1})
	if r := run(t.Context(), never, req(prompt, 1)); r.err != nil {
		t.Errorf("MaxFaultAttempt -1: %v", r.err)
	}
	five := demo.New(demo.Config{WordDelay: demo.NoDelay, Seed: 1, FaultRate: 1, MaxFaultAttempt: 5})
	if r := run(t.Context(), five, req(prompt, 5)); r.err == nil {
		t.Error("MaxFaultAttempt 5: attempt 5 succeeded")
	}
	if r := run(t.Context(), five, req(prompt, 6)); r.err != nil {
		t.Errorf("MaxFaultAttempt 5: attempt 6: %v", r.err)
	}
	// Out-of-range rates are clamped.
	if r := run(t.Context(), fast(1, 7), req(prompt, 1)); r.err == nil {
		t.Error("FaultRate 7 did not fail")
	}
	if r := run(t.Context(), fast(1, -1), req(prompt, 1)); r.err != nil {
		t.Errorf("FaultRate -1: %v", r.err)
	}
}

func TestResponseSchema(t *testing.T) {
	r0 := req("Summarise the caching design review", 1)
	r0.ResponseSchema = json.RawMessage(`{
		"type": "object",
		"properties": {
			"title": {"type": "string"},
			"score": {"type": "number"},
			"count": {"type": "integer"},
			"approved": {"type": "boolean"},
			"level": {"enum": ["low", "high"]},
			"kind": {"const": "review"},
			"tags": {"type": "array", "items": {"type": "string"}},
			"owner": {"type": ["object", "null"], "properties": {"name": {"type": "string"}}}
		},
		"required": ["title"]
	}`)
	r := run(t.Context(), fast(3, 0), r0)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.resp.StructuredOutput != provider.StructuredPrompt || r.resp.FinishReason != provider.FinishStop {
		t.Errorf("resp = %+v", r.resp)
	}
	var got struct {
		Title    string
		Score    float64
		Count    int
		Approved *bool
		Level    string
		Kind     string
		Tags     []string
		Owner    struct{ Name string }
	}
	dec := json.NewDecoder(strings.NewReader(r.text()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("%s: %v", r.text(), err)
	}
	if got.Title == "" || got.Count < 1 || got.Approved == nil || (got.Level != "low" && got.Level != "high") ||
		got.Kind != "review" || len(got.Tags) != 1 || got.Owner.Name == "" {
		t.Errorf("value %+v from %s", got, r.text())
	}
	if !strings.HasPrefix(r.text(), `{"title": `) || !strings.Contains(r.text(), `"tags": [`) {
		t.Errorf("properties out of schema order: %s", r.text())
	}
	if int64(len(r.deltas)) != r.resp.Usage.OutputTokens {
		t.Errorf("%d deltas, %d output tokens", len(r.deltas), r.resp.Usage.OutputTokens)
	}

	bad := req("x", 1)
	bad.ResponseSchema = json.RawMessage(`{"type":`)
	var pe *provider.Error
	if err := run(t.Context(), fast(3, 0), bad).err; !errors.As(err, &pe) || pe.Kind != "invalidRequest" || pe.HTTPStatus != 400 {
		t.Errorf("invalid schema: err = %v", err)
	}
}

func TestCancelMidStream(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var deltas []string
	_, err := fast(1, 0).Stream(ctx, req(prompt, 1), func(s string) {
		deltas = append(deltas, s)
		if len(deltas) == 2 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || len(deltas) != 2 {
		t.Fatalf("err %v after %d deltas; want Canceled after 2", err, len(deltas))
	}
}

func TestCancelDuringDelay(t *testing.T) {
	m := demo.New(demo.Config{WordDelay: time.Hour, Seed: 1})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	r := run(ctx, m, req(prompt, 1))
	if !errors.Is(r.err, context.DeadlineExceeded) || len(r.deltas) != 0 {
		t.Fatalf("err %v, deltas %q", r.err, r.deltas)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v to notice cancellation", d)
	}

	done, stop := context.WithCancel(t.Context())
	stop()
	if r := run(done, fast(1, 0), req(prompt, 1)); r.err != context.Canceled || len(r.deltas) != 0 {
		t.Errorf("cancelled before start: err %v, deltas %q", r.err, r.deltas)
	}
}

func TestConfigDefaults(t *testing.T) {
	if s := demo.New(demo.Config{Seed: 1}).String(); !strings.Contains(s, "word delay 35ms") || !strings.Contains(s, "attempt 2") {
		t.Errorf("zero config: %s", s)
	}
	if s := fast(1, 0).String(); !strings.Contains(s, "word delay 0s") {
		t.Errorf("NoDelay: %s", s)
	}
	// A zero seed picks one; the model still works.
	if r := run(t.Context(), demo.New(demo.Config{WordDelay: demo.NoDelay}), req(prompt, 1)); r.err != nil {
		t.Error(r.err)
	}
}

func TestConcurrent(t *testing.T) {
	m := fast(8, 0.5)
	want := run(t.Context(), m, req(prompt, 1))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got := run(t.Context(), m, req(prompt, 1)); !reflect.DeepEqual(got, want) {
				t.Error("concurrent request differs")
			}
		})
	}
	wg.Wait()
}

func TestPairsNeverRepeatATopic(t *testing.T) {
	pairs := regexp.MustCompile(`keep (\w+) simple, and let (\w+) guide|how (\w+) interacts with (\w+)|(\w+) rarely fails in isolation; (\w+) usually`)
	for seed := int64(1); seed <= 200; seed++ {
		text := run(t.Context(), fast(seed, 0), req(prompt, 1)).text()
		for _, m := range pairs.FindAllStringSubmatch(text, -1) {
			var words []string
			for _, g := range m[1:] {
				if g != "" {
					words = append(words, g)
				}
			}
			if words[0] == words[1] {
				t.Fatalf("seed %d pairs %q with itself: %s", seed, words[0], text)
			}
		}
	}
}

func TestCallsABuiltInToolWhenAsked(t *testing.T) {
	m := demo.New(demo.Config{WordDelay: demo.NoDelay, Seed: 1})
	tools := []provider.ToolSpec{{Name: "builtin__clock"}, {Name: "builtin__calculator"}}
	ask := func(text string, tools []provider.ToolSpec) provider.Response {
		t.Helper()
		resp, err := m.Stream(t.Context(), provider.Request{Messages: []provider.Message{{Role: provider.RoleUser, Text: text}},
			Tools: tools, Attempt: 3}, func(string) {})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := ask("what is (2+3)*4?", tools)
	if resp.FinishReason != provider.FinishToolCalls || len(resp.ToolCalls) != 1 ||
		resp.ToolCalls[0].Name != "builtin__calculator" || resp.ToolCalls[0].Args != `{"expression":"(2+3)*4"}` {
		t.Fatalf("arithmetic: %+v", resp)
	}
	if resp := ask("what time is it in Paris?", tools); len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "builtin__clock" {
		t.Fatalf("time: %+v", resp)
	}
	if resp := ask("what is 2+2?", nil); resp.FinishReason != provider.FinishStop || resp.ToolCalls != nil {
		t.Fatalf("no tools offered: %+v", resp)
	}
	if resp := ask("tell me about rivers", tools); resp.ToolCalls != nil {
		t.Fatalf("nothing asked: %+v", resp)
	}

	// With the result in, it answers from it.
	var text strings.Builder
	resp, err := m.Stream(t.Context(), provider.Request{Messages: []provider.Message{
		{Role: provider.RoleUser, Text: "what is 2+2?"},
		{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{{ID: "c", Name: "builtin__calculator", Args: `{"expression":"2+2"}`}}},
		{Role: provider.RoleTool, ToolResults: []provider.ToolResult{{CallID: "c", Name: "builtin__calculator", Text: "4"}}},
	}, Tools: tools, Attempt: 4}, func(s string) { text.WriteString(s) })
	if err != nil || resp.FinishReason != provider.FinishStop || text.String() != "The calculator says 4." {
		t.Fatalf("answer %q %+v %v", text.String(), resp, err)
	}
}

// TestMentionsImages: the demo says what images the turn's message
// carried, so a user sees they reached the model.
func TestMentionsImages(t *testing.T) {
	r := req("What is this?", 1)
	r.Messages[0].Images = []provider.Image{{MediaType: provider.MediaPNG, Data: "iVBORw0KGgo="}}
	got := run(t.Context(), fast(7, 0), r)
	if got.err != nil || !strings.HasPrefix(got.text(), "I got your image (image/png of 8 bytes).") {
		t.Fatalf("text %q, err %v", got.text(), got.err)
	}
	if got := run(t.Context(), fast(7, 0), req("What is this?", 1)); strings.Contains(got.text(), "image") {
		t.Errorf("no image, yet %q", got.text())
	}
}
