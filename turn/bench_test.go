package turn_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"mspd/modelretry"
	"mspd/observe"
	"mspd/provider"
	"mspd/schema/msp"
	"mspd/turn"
)

// streamModel answers every request with n one-word deltas.
type streamModel struct{ n int }

func (streamModel) System() string { return "bench" }

func (m streamModel) Stream(_ context.Context, _ provider.Request, onText func(string)) (provider.Response, error) {
	for range m.n {
		onText("word ")
	}
	return provider.Response{FinishReason: provider.FinishStop, Usage: &provider.Usage{InputTokens: 10, OutputTokens: int64(m.n)}}, nil
}

// nullSink drops every event, so a benchmark measures the runner alone.
type nullSink struct{}

func (nullSink) Emit(context.Context, string, msp.ViewParams) error             { return nil }
func (nullSink) EmitRetry(context.Context, turn.Checkpoint, []turn.Event) error { return nil }
func (nullSink) BeginAttempt(context.Context, turn.Checkpoint) error            { return nil }
func (nullSink) Delta(string, string)                                           {}

// benchDeltas runs b.N turns of 1000 deltas each on cfg and reports the
// deltas the runner passed on per second.
func benchDeltas(b *testing.B, cfg turn.Config) {
	const deltas = 1000
	cfg.Model = streamModel{n: deltas}
	cfg.Engine = &modelretry.Engine{}
	cfg.Policy = modelretry.DefaultPolicy()
	r := turn.NewRunner(cfg)
	spec := turn.Spec{SessionID: "s", TurnID: "t", History: []provider.Message{{Role: provider.RoleUser, Text: "hi"}}}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if o := r.Run(ctx, spec, nullSink{}); o.Completed.Terminal != msp.TerminalCompleted {
			b.Fatalf("terminal %q", o.Completed.Terminal)
		}
	}
	b.ReportMetric(float64(b.N*deltas)/b.Elapsed().Seconds(), "deltas/s")
}

// BenchmarkRunnerDeltas: a 1000-delta turn through the runner, with
// telemetry off, with metrics, and with metrics and tracing (a real SDK
// provider batching to an exporter that drops the spans). Spans and
// metrics are per attempt and per turn; the delta callback does no
// telemetry work, so the three should match per delta.
func BenchmarkRunnerDeltas(b *testing.B) {
	b.Run("tracing=off", func(b *testing.B) { benchDeltas(b, turn.Config{}) })
	b.Run("metrics", func(b *testing.B) {
		benchDeltas(b, turn.Config{Metrics: observe.New(prometheus.NewRegistry())})
	})
	b.Run("tracing=on", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		defer tp.Shutdown(context.Background())
		benchDeltas(b, turn.Config{Metrics: observe.New(prometheus.NewRegistry()), Tracer: observe.Tracer(tp, "bench")})
	})
}
