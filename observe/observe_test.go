package observe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"mspd/modelretry"
	"mspd/observe"
	"mspd/observe/observetest"
)

func scrape(t *testing.T, m *observe.Metrics) (observetest.Families, string) {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	fams, text, err := observetest.Scrape(srv.URL)
	if err != nil {
		t.Fatalf("scrape: %v\n%s", err, text)
	}
	return fams, text
}

func TestKind(t *testing.T) {
	for in, want := range map[string]string{
		"":                   observe.KindNone,
		"rateLimited":        "rateLimited",
		"streamInterrupted":  "streamInterrupted",
		"budgetExhausted":    "budgetExhausted",
		"madeUpByTheScript":  observe.KindOther,
		"rateLimited\nMARK1": observe.KindOther,
	} {
		if got := observe.Kind(in); got != want {
			t.Errorf("Kind(%q) = %q, want %q", in, got, want)
		}
	}
}

// populated returns metrics with a sample in every series.
func populated(t *testing.T) *observe.Metrics {
	t.Helper()
	m := observe.New(prometheus.NewRegistry())
	m.ProviderRequest("openai", "gpt-4o", "rateLimited", observe.OutcomeRetried)
	m.ProviderRequest("openai", "gpt-4o", "", observe.OutcomeSuccess)
	m.ProviderRequest("openai", "", "inventedKind", observe.OutcomeFailed)
	m.OutputTokens("openai", observe.TokensKept, 7)
	m.OutputTokens("openai", observe.TokensDiscarded, 3)
	m.OutputTokens("openai", observe.TokensDiscarded, 0) // nothing to add
	m.RetryScheduled("model", "openai", "rateLimited", 1500*time.Millisecond)
	m.TurnEnded("openai", "gpt-4o", "completed", 2*time.Second, 300*time.Millisecond)
	m.TurnEnded("openai", "gpt-4o", "failed", time.Second, -1) // no text streamed
	m.TurnSettled("completed", 2)
	m.ModelRetryNotice("rateLimited")
	m.TurnRetryNotice()
	m.ToolCalled("files", "read", "completed", 40*time.Millisecond)
	m.ToolRefused("files", "write", "rejected")
	m.ApprovalRequested()
	m.ApprovalResolved("denied", "user")
	m.StoreCommit(3, 2*time.Millisecond, 40)
	m.StoreCheckpoint("background", 1200, 1200, false, nil)
	m.StoreCheckpoint("background", 1500, 900, false, nil) // a reader held the rest
	m.StoreCheckpoint("tail", 0, 0, false, errors.New("disk I/O error"))
	m.StoreCheckpoint("truncate", 151, 151, true, nil) // copied, but a reader kept the log
	for range 4 {
		m.QueueWait(time.Millisecond)
	}
	b := modelretry.DefaultBudget()
	b.OnFailure()
	m.WatchBudget("main", "openai", b)
	m.WatchBudget("free", "demo", nil) // unthrottled: not exported
	m.Fallback("main", "spare", "attemptsExhausted")
	br, err := modelretry.NewBreaker(modelretry.BreakerConfig{Failures: 1, Window: time.Minute, Cooldown: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	br.Record(modelretry.Admitted, modelretry.Failing)
	m.WatchBreaker("main", "openai", br)
	m.WatchBreaker("spare", "anthropic", nil) // no breaker: not exported
	if err := m.WatchServer(func() observe.ServerStats { return observe.ServerStats{ConnsOpen: 2, FramesSent: 9} }); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchSessions(func() observe.SessionStats { return observe.SessionStats{Loaded: 3, Running: 1, Queued: 2} }); err != nil {
		t.Fatal(err)
	}

	return m
}

// TestMetricsExposition: every typed method lands in the series it names,
// and the exposition parses with Prometheus's text parser.
func TestMetricsExposition(t *testing.T) {
	m := populated(t)
	f, text := scrape(t, m)
	for _, c := range []struct {
		name string
		sel  observetest.Labels
		want float64
	}{
		{"mspd_provider_requests_total", observetest.Labels{"error_kind": "rateLimited", "outcome": "retried", "model": "gpt-4o"}, 1},
		{"mspd_provider_requests_total", observetest.Labels{"error_kind": "none", "outcome": "success"}, 1},
		{"mspd_provider_requests_total", observetest.Labels{"error_kind": "other", "model": "default"}, 1},
		{"mspd_output_tokens_total", observetest.Labels{"outcome": "kept"}, 7},
		{"mspd_output_tokens_total", observetest.Labels{"outcome": "discarded"}, 3},
		{"mspd_turns_total", observetest.Labels{"terminal": "completed"}, 1},
		{"mspd_model_retries_total", observetest.Labels{"error_kind": "rateLimited"}, 1},
		{"mspd_store_checkpoints_total", observetest.Labels{"kind": "background", "result": "complete"}, 1},
		{"mspd_store_checkpoints_total", observetest.Labels{"kind": "background", "result": "partial"}, 1},
		{"mspd_store_checkpoints_total", observetest.Labels{"kind": "tail", "result": "failed"}, 1},
		{"mspd_store_checkpoints_total", observetest.Labels{"kind": "truncate", "result": "blocked"}, 1},
		{"mspd_store_wal_frames", nil, 151},
		{"mspd_store_wal_pages_total", nil, 40},
		{"mspd_turn_retries_total", nil, 1},
		{"mspd_provider_attempts_total", nil, 2},
		{"mspd_retry_budget_tokens", observetest.Labels{"provider": "main", "system": "openai"}, 9},
		{"mspd_fallbacks_total", observetest.Labels{"from": "main", "to": "spare", "reason": "attemptsExhausted"}, 1},
		{"mspd_provider_breaker_state", observetest.Labels{"provider": "main", "state": "open"}, 1},
		{"mspd_provider_breaker_state", observetest.Labels{"provider": "main", "state": "closed"}, 0},
		{"mspd_provider_breaker_state", observetest.Labels{"provider": "main", "state": "halfOpen"}, 0},
		{"mspd_provider_breaker_opens_total", observetest.Labels{"provider": "main", "system": "openai"}, 1},
		{"mspd_connections_open", nil, 2},
		{"mspd_frames_sent_total", nil, 9},
		{"mspd_sessions_loaded", nil, 3},
		{"mspd_turns_running", nil, 1},
		{"mspd_turns_queued", nil, 2},
	} {
		if got := f.Value(c.name, c.sel); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.sel, got, c.want)
		}
	}
	for _, c := range []struct {
		name string
		sel  observetest.Labels
		want uint64
	}{
		{"mspd_retry_delay_seconds", observetest.Labels{"layer": "model", "error_kind": "rateLimited"}, 1},
		{"mspd_turn_duration_seconds", nil, 2},
		{"mspd_time_to_first_token_seconds", nil, 1},
		{"mspd_turn_attempts", nil, 1},
		{"mspd_store_commit_seconds", nil, 1},
		{"mspd_store_commit_batches", nil, 1},
		{"mspd_outbound_queue_wait_seconds", nil, 4},
	} {
		if got := f.Count(c.name, c.sel); got != c.want {
			t.Errorf("%s%v count = %d, want %d", c.name, c.sel, got, c.want)
		}
	}
	if got := f.Bucket("mspd_turn_attempts", nil, 1); got != 0 {
		t.Errorf("mspd_turn_attempts le=1 = %d, want 0", got)
	}
	if got := f.Bucket("mspd_turn_attempts", nil, 2); got != 1 {
		t.Errorf("mspd_turn_attempts le=2 = %d, want 1", got)
	}
	if got := f.LabelValues("mspd_retry_budget_tokens", "provider"); len(got) != 1 {
		t.Errorf("budgets exported: %v, want only the throttled one", got)
	}
	// The names operators already scrape keep their exact text form.
	for _, want := range []string{`mspd_turn_attempts_bucket{le="2"} 1`, "mspd_connections_open 2", "# TYPE mspd_turn_attempts histogram"} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}

// TestNilMetrics: a component built without metrics calls them freely.
func TestNilMetrics(t *testing.T) {
	var m *observe.Metrics
	m.ProviderRequest("s", "m", "k", observe.OutcomeSuccess)
	m.OutputTokens("s", observe.TokensKept, 1)
	m.RetryScheduled("model", "s", "k", time.Second)
	m.TurnEnded("s", "m", "completed", time.Second, time.Second)
	m.TurnSettled("completed", 1)
	m.ModelRetryNotice("k")
	m.Fallback("a", "b", "circuitOpen")
	m.WatchBreaker("a", "s", nil)
	m.TurnRetryNotice()
	m.StoreCommit(1, time.Second, 1)
	m.QueueWait(time.Second)
	m.WatchBudget("p", "s", modelretry.DefaultBudget())
	if err := m.WatchSessions(func() observe.SessionStats { return observe.SessionStats{} }); err != nil {
		t.Fatal(err)
	}
}

// TestLogHandler: a record logged inside a span carries its trace and
// span ids; one logged outside carries neither.
func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(observe.LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	ctx, span := tp.Tracer("t").Start(context.Background(), "op")
	log.InfoContext(ctx, "inside")
	span.End()
	log.Info("outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log lines: %q", lines)
	}
	var in, out map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &in); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &out); err != nil {
		t.Fatal(err)
	}
	if in[observe.LogTraceID] != span.SpanContext().TraceID().String() || in[observe.LogSpanID] != span.SpanContext().SpanID().String() {
		t.Errorf("inside the span: %v, want trace %s span %s", in, span.SpanContext().TraceID(), span.SpanContext().SpanID())
	}
	if in["component"] != "test" {
		t.Errorf("WithAttrs lost: %v", in)
	}
	if _, ok := out[observe.LogTraceID]; ok {
		t.Errorf("outside any span: %v", out)
	}
}

// TestTracingConfiguredByEnv: nothing is exported unless an OTLP endpoint
// is named, and OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none win.
func TestTracingConfiguredByEnv(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_SERVICE_NAME": "x"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
	} {
		got := observe.TracingConfigured(func(k string) string { return c.env[k] })
		if got != c.want {
			t.Errorf("%v: configured = %v, want %v", c.env, got, c.want)
		}
	}
}

// TestTracerProviderFromEnv: without an endpoint there is no provider;
// with one, spans reach it over OTLP/HTTP; gRPC is refused in words.
func TestTracerProviderFromEnv(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tp, err := observe.NewTracerProvider(context.Background(), "test")
	if err != nil || tp != nil {
		t.Fatalf("unconfigured: %v, %v; want no provider", tp, err)
	}
	if observe.Tracer(nil, "test") != nil {
		t.Fatal("a nil provider gives a tracer")
	}

	got := make(chan string, 16)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.URL.Path + " " + r.Header.Get("Content-Type")
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	if _, err := observe.NewTracerProvider(context.Background(), "test"); err == nil || !strings.Contains(err.Error(), "4318") {
		t.Fatalf("grpc: %v, want a refusal naming the HTTP port", err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	tp, err = observe.NewTracerProvider(context.Background(), "test")
	if err != nil || tp == nil {
		t.Fatalf("configured: %v, %v", tp, err)
	}
	_, span := observe.Tracer(tp, "test").Start(context.Background(), observe.SpanTurn)
	span.End()
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if req := <-got; req != "POST /v1/traces application/x-protobuf" {
		t.Errorf("collector got %q", req)
	}
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
