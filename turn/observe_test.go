package turn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"mspd/modelretry"
	"mspd/modelretry/retrytest"
	"mspd/observe"
	"mspd/observe/observetest"
	"mspd/provider"
	"mspd/provider/scripted"
	"mspd/schema/msp"
	"mspd/turn"
	"mspd/turn/turntest"
)

// cursorSink fills each durable event's cursor, as a session does, and
// records it.
type cursorSink struct {
	*turntest.Sink
	mu  sync.Mutex
	seq int
}

func (s *cursorSink) stamp(p msp.ViewParams) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	p.Header().ViewCursor = fmt.Sprintf("v:s1:%d", s.seq)
}

func (s *cursorSink) Emit(ctx context.Context, method string, params msp.ViewParams) error {
	s.stamp(params)
	return s.Sink.Emit(ctx, method, params)
}

func (s *cursorSink) EmitRetry(ctx context.Context, next turn.Checkpoint, events []turn.Event) error {
	for _, e := range events {
		s.stamp(e.Params)
	}
	return s.Sink.EmitRetry(ctx, next, events)
}

// observed is a runner with every kind of telemetry recorded.
type observed struct {
	clock   *retrytest.Clock
	sink    *cursorSink
	runner  *turn.Runner
	spans   *tracetest.InMemoryExporter
	metrics *observe.Metrics
	logs    *bytes.Buffer
}

func newObserved(tracing bool) *observed {
	o := &observed{clock: retrytest.NewClock(t0), sink: &cursorSink{Sink: &turntest.Sink{}},
		spans: tracetest.NewInMemoryExporter(), metrics: observe.New(prometheus.NewRegistry()), logs: &bytes.Buffer{}}
	cfg := turn.Config{
		Model:            scripted.New(),
		Engine:           &modelretry.Engine{Clock: o.clock, Rand: retrytest.Fixed(0.5)},
		Policy:           modelretry.DefaultPolicy(),
		DefaultMaxTokens: 1000,
		Metrics:          o.metrics,
		Logger:           slog.New(observe.LogHandler(slog.NewJSONHandler(o.logs, nil))),
	}
	if tracing {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(o.spans))
		cfg.Tracer = observe.Tracer(tp, "test")
	}
	o.runner = turn.NewRunner(cfg)
	return o
}

// run runs a turn to its end, advancing the fake clock past each backoff.
func (o *observed) run(t *testing.T, text string) turn.Outcome {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		for o.clock.WaitForSleepers(ctx, 1) == nil {
			sleeps := o.clock.Sleeps()
			o.clock.Advance(sleeps[len(sleeps)-1])
		}
	}()
	sp := turn.Spec{SessionID: "s1", TurnID: "t1", Model: "m", History: []provider.Message{{Role: provider.RoleUser, Text: text}}}
	return o.runner.Run(ctx, sp, o.sink)
}

// retriedTurn fails with a 429, then streams and is cut, then answers.
var retriedTurn = scripted.Script(
	scripted.Step{Status: 429, ErrorKind: "rateLimited", RetryAfterMs: intp(40)},
	scripted.Step{Text: "partial answer", Cut: true, Usage: boolp(true), OutputTokens: intp(3)},
	scripted.Step{Text: "Hello there", Chunks: 2, OutputTokens: intp(7)},
)

func intp(v int) *int    { return &v }
func boolp(v bool) *bool { return &v }

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// wantAttrs checks that every key in want has its value and that no key
// in absent is there.
func wantAttrs(t *testing.T, what string, got []attribute.KeyValue, want []attribute.KeyValue, absent ...attribute.Key) {
	t.Helper()
	have := attrs(got)
	for _, kv := range want {
		if v, ok := have[kv.Key]; !ok || v != kv.Value {
			t.Errorf("%s: %s = %v, want %v", what, kv.Key, v.String(), kv.Value.String())
		}
	}
	for _, k := range absent {
		if v, ok := have[k]; ok {
			t.Errorf("%s: %s = %v, want none", what, k, v.String())
		}
	}
}

// TestRetriedTurnSpanTree: a turn answered by a 429, a cut stream and an
// answer is one turn span with three attempt spans under it, named and
// attributed after the GenAI conventions, and an event for each retry
// scheduled and each notice written, at its cursor.
func TestRetriedTurnSpanTree(t *testing.T) {
	o := newObserved(true)
	out := o.run(t, retriedTurn)
	if out.Completed.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %q: %+v", out.Completed.Terminal, out.Completed.Error)
	}
	spans := o.spans.GetSpans()
	if len(spans) != 4 {
		t.Fatalf("%d spans: %v", len(spans), spanNames(spans))
	}
	// Children end first; the turn span last.
	root, attempts := spans[3], spans[:3]
	if root.Name != observe.SpanTurn || root.Parent.IsValid() || root.SpanKind != trace.SpanKindInternal {
		t.Fatalf("root span %q (parent %v, kind %v)", root.Name, root.Parent, root.SpanKind)
	}
	if !out.Trace.Equal(root.SpanContext) {
		t.Errorf("Outcome.Trace %v, want the turn span's %v", out.Trace, root.SpanContext)
	}
	wantAttrs(t, "turn", root.Attributes, []attribute.KeyValue{
		observe.AttrConversationID.String("s1"), observe.AttrTurnID.String("t1"),
		observe.AttrProviderName.String("scripted"), observe.AttrSystem.String("scripted"),
		observe.AttrRequestModel.String("m"), observe.AttrTerminal.String("completed"),
		observe.AttrAttempts.Int(3), observe.AttrDiscardedTokens.Int64(3),
	}, observe.AttrErrorType)
	if root.Status.Code != codes.Unset {
		t.Errorf("turn status %v", root.Status)
	}

	type want struct {
		attrs  []attribute.KeyValue
		absent []attribute.Key
		status codes.Code
	}
	common := func(n int) []attribute.KeyValue {
		return []attribute.KeyValue{
			observe.AttrOperationName.String("chat"), observe.AttrProviderName.String("scripted"),
			observe.AttrSystem.String("scripted"), observe.AttrRequestModel.String("m"),
			observe.AttrMaxTokens.Int(1000), observe.AttrAttempt.Int(n), observe.AttrResponseModel.String("m"),
		}
	}
	for i, w := range []want{
		{append(common(1), observe.AttrErrorType.String("rateLimited"), observe.AttrHTTPStatus.Int(429),
			observe.AttrOutcome.String("retried")), []attribute.Key{observe.AttrOutputTokens}, codes.Error},
		{append(common(2), observe.AttrErrorType.String("streamInterrupted"), observe.AttrOutputTokens.Int64(3),
			observe.AttrOutcome.String("retried")), []attribute.Key{observe.AttrHTTPStatus}, codes.Error},
		{append(common(3), observe.AttrOutputTokens.Int64(7), observe.AttrOutcome.String("success"),
			observe.AttrFinishReasons.StringSlice([]string{"stop"})), []attribute.Key{observe.AttrErrorType}, codes.Unset},
	} {
		s := attempts[i]
		what := fmt.Sprintf("attempt %d", i+1)
		if s.Name != "chat m" || s.SpanKind != trace.SpanKindClient || s.Parent.SpanID() != root.SpanContext.SpanID() {
			t.Errorf("%s: span %q kind %v parent %v", what, s.Name, s.SpanKind, s.Parent.SpanID())
		}
		wantAttrs(t, what, s.Attributes, w.attrs, w.absent...)
		if _, ok := attrs(s.Attributes)[observe.AttrInputTokens]; ok != (i > 0) {
			t.Errorf("%s: input tokens present %v", what, ok)
		}
		if s.Status.Code != w.status {
			t.Errorf("%s: status %v, want %v", what, s.Status, w.status)
		}
		if len(s.Events) != 0 {
			t.Errorf("%s: events %v", what, s.Events)
		}
	}

	mn := turntest.Of[*msp.TurnModelRetryScheduledParams](o.sink.Sink, msp.NotifyTurnModelRetryScheduled)
	tn := turntest.Of[*msp.TurnRetryScheduledParams](o.sink.Sink, msp.NotifyTurnRetryScheduled)
	if len(mn) != 1 || len(tn) != 1 {
		t.Fatalf("notices: %d model, %d turn", len(mn), len(tn))
	}
	ev := root.Events
	if len(ev) != 4 {
		t.Fatalf("turn events: %v", ev)
	}
	wantEvent := func(i int, name string, want ...attribute.KeyValue) {
		t.Helper()
		if ev[i].Name != name {
			t.Errorf("event %d: %q, want %q", i, ev[i].Name, name)
		}
		wantAttrs(t, name, ev[i].Attributes, want)
	}
	wantEvent(0, observe.EventRetryScheduled, observe.AttrLayer.String("model"), observe.AttrDelayMs.Int64(40),
		observe.AttrAttempt.Int(1), observe.AttrNextAttempt.Int(2), observe.AttrErrorType.String("rateLimited"))
	wantEvent(1, observe.EventNoticeWritten, observe.AttrMethod.String(msp.NotifyTurnModelRetryScheduled),
		observe.AttrCursor.String(mn[0].ViewCursor))
	wantEvent(2, observe.EventRetryScheduled, observe.AttrLayer.String("turn"), observe.AttrDelayMs.Int64(tn[0].RetryDelayMs),
		observe.AttrAttempt.Int(2), observe.AttrNextAttempt.Int(3), observe.AttrErrorType.String("streamInterrupted"))
	wantEvent(3, observe.EventNoticeWritten, observe.AttrMethod.String(msp.NotifyTurnRetryScheduled),
		observe.AttrCursor.String(tn[0].ViewCursor))
	if mn[0].ViewCursor == "" || tn[0].ViewCursor == "" {
		t.Error("notices without cursors")
	}

	// Both retry log lines lead to the trace.
	lines := 0
	for _, l := range strings.Split(strings.TrimSpace(o.logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["msg"] == "retry scheduled" {
			lines++
			if rec[observe.LogTraceID] != root.SpanContext.TraceID().String() {
				t.Errorf("log line without the turn's trace id: %s", l)
			}
		}
	}
	if lines != 2 {
		t.Errorf("%d retry log lines:\n%s", lines, o.logs)
	}
	checkRetriedTurnMetrics(t, o.metrics)
}

// checkRetriedTurnMetrics: what retriedTurn leaves in the metrics.
func checkRetriedTurnMetrics(t *testing.T, m *observe.Metrics) {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	f, text, err := observetest.Scrape(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	req := func(kind, outcome string) observetest.Labels {
		return observetest.Labels{"system": "scripted", "model": "m", "error_kind": kind, "outcome": outcome}
	}
	for _, c := range []struct {
		name string
		sel  observetest.Labels
		want float64
	}{
		{"mspd_provider_requests_total", req("rateLimited", "retried"), 1},
		{"mspd_provider_requests_total", req("streamInterrupted", "retried"), 1},
		{"mspd_provider_requests_total", req("none", "success"), 1},
		{"mspd_provider_requests_total", nil, 3},
		{"mspd_output_tokens_total", observetest.Labels{"system": "scripted", "outcome": "kept"}, 7},
		{"mspd_output_tokens_total", observetest.Labels{"system": "scripted", "outcome": "discarded"}, 3},
	} {
		if got := f.Value(c.name, c.sel); got != c.want {
			t.Errorf("%s%v = %v, want %v\n%s", c.name, c.sel, got, c.want, text)
		}
	}
	for _, c := range []struct {
		name string
		sel  observetest.Labels
		want uint64
	}{
		{"mspd_retry_delay_seconds", observetest.Labels{"layer": "model", "system": "scripted", "error_kind": "rateLimited"}, 1},
		{"mspd_retry_delay_seconds", observetest.Labels{"layer": "turn", "system": "scripted", "error_kind": "streamInterrupted"}, 1},
		{"mspd_turn_duration_seconds", observetest.Labels{"system": "scripted", "terminal": "completed"}, 1},
		{"mspd_time_to_first_token_seconds", observetest.Labels{"system": "scripted", "model": "m"}, 1},
	} {
		if got := f.Count(c.name, c.sel); got != c.want {
			t.Errorf("%s%v count = %d, want %d", c.name, c.sel, got, c.want)
		}
	}
	if got := f.Sum("mspd_retry_delay_seconds", observetest.Labels{"layer": "model"}); got != 0.04 {
		t.Errorf("model-layer delay sum %v, want 0.04", got)
	}
}

// TestTurnMetricsWithoutTracing: with no tracer there are no spans, and
// the metrics are the same.
func TestTurnMetricsWithoutTracing(t *testing.T) {
	o := newObserved(false)
	out := o.run(t, retriedTurn)
	if out.Completed.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %q", out.Completed.Terminal)
	}
	if n := len(o.spans.GetSpans()); n != 0 {
		t.Errorf("%d spans without a tracer", n)
	}
	if out.Trace.IsValid() {
		t.Error("Outcome.Trace is valid without a tracer")
	}
	checkRetriedTurnMetrics(t, o.metrics)
}

// TestFailedTurnSpan: a turn that gives up carries the provider's
// errorKind as its error.type and an error status; a made-up kind from a
// script is reported as "other".
func TestFailedTurnSpan(t *testing.T) {
	o := newObserved(true)
	out := o.run(t, scripted.Script(scripted.Step{Status: 400, ErrorKind: "noSuchKindMARKER"}))
	if out.Completed.Terminal != msp.TerminalFailed {
		t.Fatalf("terminal %q", out.Completed.Terminal)
	}
	spans := o.spans.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("spans: %v", spanNames(spans))
	}
	wantAttrs(t, "attempt", spans[0].Attributes, []attribute.KeyValue{observe.AttrErrorType.String("other"), observe.AttrOutcome.String("failed")})
	wantAttrs(t, "turn", spans[1].Attributes, []attribute.KeyValue{observe.AttrErrorType.String("other"), observe.AttrTerminal.String("failed")})
	if spans[1].Status.Code != codes.Error {
		t.Errorf("turn status %v", spans[1].Status)
	}
	for _, s := range spans {
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.String(), "MARKER") {
				t.Errorf("%s: %s carries the script's text: %s", s.Name, kv.Key, kv.Value.String())
			}
		}
	}
}

func spanNames(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
