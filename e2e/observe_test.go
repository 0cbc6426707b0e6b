package e2e

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"mspd/client"
	"mspd/daemon"
	"mspd/internal/testlog"
	"mspd/observe"
	"mspd/observe/observetest"
	"mspd/provider/openai/openaitest"
	"mspd/provider/scripted"
	"mspd/schema/msp"
	"mspd/server"
)

// tracedDaemon starts a daemon whose spans go to an in-memory exporter.
func tracedDaemon(t *testing.T, cfg daemon.Config) (*daemon.Daemon, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(t.Context()) })
	cfg.TracerProvider = tp
	return startDaemon(t, cfg), exp
}

func spanAttr(kvs []attribute.KeyValue, key attribute.Key) attribute.Value {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// TestObservedRetriedTurn: a turn answered by a 429, a cut stream and an
// answer, through the real server and store: one turn span with three
// attempt spans under it, its retry and notice events at the cursors the
// client received; then /metrics, parsed with Prometheus's parser, holds
// the counts of exactly that turn.
func TestObservedRetriedTurn(t *testing.T) {
	d, spans := tracedDaemon(t, daemon.Config{RetryBudget: daemon.Budget{Tokens: 10}})
	c := dial(t, d.URL(), client.Options{})
	start, err := c.StartSession(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	sid, model := start.Session.SessionID, *start.Session.ModelID
	events, done := answerTurn(t, c, sid, scripted.Script(
		scripted.Step{Status: 429, ErrorKind: "rateLimited", RetryAfterMs: ptr(40)},
		scripted.Step{Text: "partial answer", Cut: true, Usage: ptr(true), OutputTokens: ptr(3)},
		scripted.Step{Text: "Hello there", Chunks: 2, OutputTokens: ptr(7)},
	))
	if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 3 {
		t.Fatalf("turn: %s", events[len(events)-1].Params)
	}
	mn := only(events, msp.NotifyTurnModelRetryScheduled)
	tn := only(events, msp.NotifyTurnRetryScheduled)
	if len(mn) != 1 || len(tn) != 1 {
		t.Fatalf("events: %s", compact(methods(events)))
	}

	got := spans.GetSpans()
	if len(got) != 4 {
		t.Fatalf("%d spans", len(got))
	}
	root := got[3]
	if root.Name != observe.SpanTurn || root.Parent.IsValid() {
		t.Fatalf("root span %q parent %v", root.Name, root.Parent)
	}
	if v := spanAttr(root.Attributes, observe.AttrConversationID).AsString(); v != sid {
		t.Errorf("gen_ai.conversation.id %q, want %q", v, sid)
	}
	if v := spanAttr(root.Attributes, observe.AttrTurnID).AsString(); v != done.TurnID {
		t.Errorf("mspd.turn.id %q, want %q", v, done.TurnID)
	}
	for i, s := range got[:3] {
		if s.Name != "chat "+model || s.SpanKind != trace.SpanKindClient || s.Parent.SpanID() != root.SpanContext.SpanID() {
			t.Errorf("attempt %d: %q kind %v parent %v", i+1, s.Name, s.SpanKind, s.Parent.SpanID())
		}
		if n := spanAttr(s.Attributes, observe.AttrAttempt).AsInt64(); n != int64(i+1) {
			t.Errorf("attempt %d: mspd.attempt %d", i+1, n)
		}
	}
	for i, want := range []string{"rateLimited", "streamInterrupted", ""} {
		if v := spanAttr(got[i].Attributes, observe.AttrErrorType).AsString(); v != want {
			t.Errorf("attempt %d: error.type %q, want %q", i+1, v, want)
		}
	}
	var names, cursors []string
	for _, e := range root.Events {
		names = append(names, e.Name)
		if e.Name == observe.EventNoticeWritten {
			cursors = append(cursors, spanAttr(e.Attributes, observe.AttrCursor).AsString())
		}
	}
	wantNames := []string{observe.EventRetryScheduled, observe.EventNoticeWritten, observe.EventRetryScheduled, observe.EventNoticeWritten}
	if fmt.Sprint(names) != fmt.Sprint(wantNames) {
		t.Errorf("turn events %v, want %v", names, wantNames)
	}
	if want := []string{mn[0].Cursor(), tn[0].Cursor()}; fmt.Sprint(cursors) != fmt.Sprint(want) {
		t.Errorf("notices written at %v, received at %v", cursors, want)
	}

	f, text, err := observetest.Scrape("http://" + d.Addr() + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v\n%s", err, text)
	}
	req := func(kind, outcome string) observetest.Labels {
		return observetest.Labels{"system": "scripted", "model": model, "error_kind": kind, "outcome": outcome}
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
		{"mspd_output_tokens_total", observetest.Labels{"outcome": "kept"}, 7},
		{"mspd_output_tokens_total", observetest.Labels{"outcome": "discarded"}, 3},
		{"mspd_turns_total", observetest.Labels{"terminal": "completed"}, 1},
		{"mspd_model_retries_total", observetest.Labels{"error_kind": "rateLimited"}, 1},
		{"mspd_turn_retries_total", nil, 1},
		{"mspd_provider_attempts_total", nil, 3},
		{"mspd_connections_open", nil, 1},
		{"mspd_turns_running", nil, 0},
		{"mspd_turns_queued", nil, 0},
		{"mspd_sessions_loaded", nil, 1},
	} {
		if v := f.Value(c.name, c.sel); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.sel, v, c.want)
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
		{"mspd_time_to_first_token_seconds", observetest.Labels{"system": "scripted", "model": model}, 1},
		{"mspd_turn_attempts", nil, 1},
	} {
		if n := f.Count(c.name, c.sel); n != c.want {
			t.Errorf("%s%v count = %d, want %d", c.name, c.sel, n, c.want)
		}
	}
	if n := f.Bucket("mspd_turn_attempts", nil, 2); n != 0 {
		t.Errorf("mspd_turn_attempts le=2: %d, want 0", n)
	}
	if n := f.Bucket("mspd_turn_attempts", nil, 3); n != 1 {
		t.Errorf("mspd_turn_attempts le=3: %d, want 1", n)
	}
	if s := f.Sum("mspd_retry_delay_seconds", observetest.Labels{"layer": "model"}); s != 0.04 {
		t.Errorf("model-layer retry delay sum %v, want 0.04 (Retry-After-Ms 40)", s)
	}
	// Every durable event waits for a group commit; every frame sent
	// waited in an outbound queue.
	if n := f.Count("mspd_store_commit_seconds", nil); n == 0 {
		t.Error("no store commit observed")
	}
	if n := f.Count("mspd_store_commit_batches", nil); n == 0 {
		t.Error("no store commit batch size observed")
	}
	if n := f.Count("mspd_outbound_queue_wait_seconds", nil); n == 0 {
		t.Error("no outbound queue wait observed")
	}
	// Two transient failures took a token each from the full ten; the
	// success and the refill gave some back.
	if v := f.Value("mspd_retry_budget_tokens", observetest.Labels{"system": "scripted"}); v < 8 || v > 10 {
		t.Errorf("retry budget tokens %v, want 8..10", v)
	}
	if f["go_goroutines"] == nil || f["process_cpu_seconds_total"] == nil {
		t.Error("the Go runtime and process collectors are missing")
	}
}

// TestNoSecretsInTelemetry: markers put in the user's text, the model's
// answer, a provider error message, the provider API key and the server's
// auth token appear in no exported span (names, attributes, events,
// status, resource), no metric and no log line, while the telemetry
// itself is all there.
func TestNoSecretsInTelemetry(t *testing.T) {
	const (
		userMarker   = "MARKER-USER-TEXT-7d1c"
		answerMarker = "MARKER-ANSWER-TEXT-51f0"
		errMarker    = "MARKER-PROVIDER-MESSAGE-9a2e"
		keyMarker    = "sk-MARKER-API-KEY-3b8f"
		tokenMarker  = "MARKER-AUTH-TOKEN-c4e6"
	)
	fake := openaitest.New(t, "/v1",
		openaitest.Error(429, openaitest.ErrorBody("slow down "+errMarker, "requests", "rate_limit_exceeded"), "Retry-After-Ms", "20"),
		openaitest.StreamAbort(openaitest.Role(), openaitest.Delta("partial "+answerMarker)),
		openaitest.Stream(openaitest.Answer("Hello "+answerMarker, " again")...))
	logs := &testlog.Buffer{}
	d, spans := tracedDaemon(t, daemon.Config{Provider: "openai", Model: "gpt-test",
		Env:    mapEnv(map[string]string{"OPENAI_BASE_URL": fake.URL(), "OPENAI_API_KEY": keyMarker}),
		Server: server.Config{AuthToken: tokenMarker},
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	c := dial(t, d.URL(), client.Options{Token: tokenMarker})
	start, err := c.StartSession(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	events, done := answerTurn(t, c, start.Session.SessionID, "please repeat "+userMarker)
	if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 3 || !strings.Contains(streamedText(t, events), answerMarker) {
		t.Fatalf("turn: %s", events[len(events)-1].Params)
	}
	exported, err := json.Marshal(spans.GetSpans())
	if err != nil {
		t.Fatal(err)
	}
	_, metrics, err := observetest.Scrape("http://" + d.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"spans": string(exported), "metrics": metrics, "logs": logs.String()} {
		for _, m := range []string{userMarker, answerMarker, errMarker, keyMarker, tokenMarker, "MARKER"} {
			if strings.Contains(text, m) {
				t.Errorf("%s carry %q", what, m)
			}
		}
	}
	// The telemetry is there: the check above is not vacuous.
	for _, want := range []string{`"gen_ai.provider.name"`, `"rateLimited"`, `"streamInterrupted"`, `"mspd.notice.cursor"`} {
		if !strings.Contains(string(exported), want) {
			t.Errorf("spans lack %s", want)
		}
	}
	if !strings.Contains(metrics, `mspd_provider_requests_total{error_kind="rateLimited",model="gpt-test",outcome="retried",system="openai"} 1`) {
		t.Errorf("metrics lack the 429:\n%s", metrics)
	}
	if !strings.Contains(logs.String(), `"msg":"retry scheduled"`) || !strings.Contains(logs.String(), `"trace_id"`) {
		t.Errorf("logs lack the retry lines with their trace id:\n%s", logs)
	}
}

// TestCheckpointObserved: deleting a session truncates the write-ahead log
// (so no copy of what it erased stays there), a checkpoint the store runs
// on its checkpoint connection; /metrics counts it and its log size.
func TestCheckpointObserved(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	c := dial(t, d.URL(), client.Options{})
	sid := newSession(t, c)
	answerTurn(t, c, sid, "hello")
	if err := c.Call(testCtx(t), msp.MethodSessionDelete, msp.SessionDeleteParams{CommandID: client.NewCommandID(), SessionID: sid}, nil); err != nil {
		t.Fatal(err)
	}
	for { // the erasure, checkpoint included, is done when this arrives
		n, err := c.Next(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if n.Method == msp.NotifySessionDeleteCompleted {
			break
		}
	}
	f, text, err := observetest.Scrape("http://" + d.Addr() + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v\n%s", err, text)
	}
	if v := f.Value("mspd_store_checkpoints_total", observetest.Labels{"kind": "truncate", "result": "complete"}); v != 1 {
		t.Errorf("mspd_store_checkpoints_total{kind=truncate,result=complete} = %v, want the deletion's checkpoint", v)
	}
	if v := f.Value("mspd_store_checkpoints_total", nil); v != 1 {
		t.Errorf("%v checkpoints in all, want the deletion's alone", v)
	}
	if v := f.Value("mspd_store_wal_frames", nil); v != 0 {
		t.Errorf("mspd_store_wal_frames = %v after a truncating checkpoint, want 0", v)
	}
}
