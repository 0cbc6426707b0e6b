// Package observe is mspd's observability: the Prometheus metrics every
// component reports to, the OpenTelemetry tracing setup and span
// vocabulary, and a log handler that puts a span's trace id on log lines.
// It knows nothing of MSP, sessions or transports; the daemon creates one
// prometheus.Registry and one Metrics on it, and hands them to the turn
// runners, the session manager, the store and the server, which call
// typed methods (ProviderRequest, RetryScheduled, StoreCommit, …) or hand
// over snapshots of counts they keep themselves (WatchServer,
// WatchSessions, WatchBudget). A nil *Metrics does nothing, so tests need
// none.
//
// # Why client_golang
//
// Metrics go through github.com/prometheus/client_golang rather than the
// OpenTelemetry metrics SDK with its Prometheus exporter: mspd is scraped,
// not pushed from, so Prometheus's own reference library is the shortest
// path — metric names are exactly the ones written here (the OTel exporter
// adds unit suffixes and scope labels, which would rename the existing
// mspd_* series dashboards and alerts use), collectors that read a
// snapshot at scrape time are first class, the exposition is the one
// Prometheus parses, and the OTel exporter is still a v0 module. Traces
// are OpenTelemetry's, where the GenAI semantic conventions live.
//
// # Labels
//
// Label values come from small fixed sets: system and model from the
// configuration, errorKind through Kind (modelretry's vocabulary or
// "other"), layer, terminal and outcome from this package's constants.
// Never a session id, a token or user text: a scripted provider's invented
// errorKind becomes "other".
//
// # Tracing
//
// One span per turn (SpanTurn), one child per provider attempt named and
// attributed after the GenAI semantic conventions, span events for each
// scheduled retry and each retry notice written. NewTracerProvider builds
// the OTLP exporter from the standard OTEL_* variables and returns nil
// unless an endpoint is configured; a nil provider means no spans at all.
//
//	reg := prometheus.NewRegistry()
//	metrics := observe.New(reg)
//	tp, err := observe.NewTracerProvider(ctx, version) // nil: tracing off
//	runner := turn.NewRunner(turn.Config{…, Metrics: metrics, Tracer: observe.Tracer(tp, version)})
//	http.Handle("/metrics", metrics.Handler())
package observe
