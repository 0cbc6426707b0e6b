package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// BenchmarkStreamDeltasTracing: BenchmarkStreamDeltas with tracing off
// (no OTLP endpoint configured) and on (every turn and attempt exported
// over OTLP/HTTP to a local collector that discards them), in one run.
func BenchmarkStreamDeltasTracing(b *testing.B) {
	var posts atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		posts.Add(1)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	b.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	for _, on := range []bool{false, true} {
		name, endpoint := "tracing=off", ""
		if on {
			name, endpoint = "tracing=on", collector.URL
		}
		b.Run(name, func(b *testing.B) {
			b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			before := posts.Load()
			d, c, sid := benchDaemon(b)
			streamDeltas(b, c, sid)
			// What the provider streamed; readers behind get some of it
			// coalesced, so deltas/s above counts fewer frames.
			b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "provider-deltas/s")
			c.Close()
			if err := d.Close(b.Context()); err != nil { // flushes the spans
				b.Fatal(err)
			}
			if got := posts.Load() - before; on != (got > 0) {
				b.Fatalf("tracing %v: %d exports", on, got)
			}
		})
	}
}
