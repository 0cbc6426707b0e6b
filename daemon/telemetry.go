package daemon

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"mspd/observe"
)

// telemetry is what a daemon reports to: its own metrics registry and,
// when tracing, a tracer.
type telemetry struct {
	metrics *observe.Metrics
	tracer  trace.Tracer // nil: tracing off
	// stopTracing flushes and stops a provider built here; it does nothing
	// for one the Config brought, or when tracing is off.
	stopTracing func(context.Context) error
}

// newTelemetry creates the daemon's registry (mspd's metrics, the Go
// runtime's and the process's) and its tracer: cfg.TracerProvider, or
// one built from the OTEL_* environment.
func newTelemetry(ctx context.Context, cfg Config) (telemetry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	tel := telemetry{metrics: observe.New(reg), stopTracing: func(context.Context) error { return nil }}
	version := cfg.Server.Version
	if version == "" {
		version = "dev"
	}
	if tp := cfg.TracerProvider; tp != nil {
		tel.tracer = observe.Tracer(tp, version)
		return tel, nil
	}
	tp, err := observe.NewTracerProvider(ctx, version)
	if err != nil {
		return telemetry{}, fmt.Errorf("tracing: %w", err)
	}
	if tp != nil {
		tel.tracer, tel.stopTracing = observe.Tracer(tp, version), tp.Shutdown
		cfg.Logger.Info("tracing turns over OTLP", "service", "mspd")
	}
	return tel, nil
}

// Metrics returns the daemon's metrics, whose Handler serves /metrics.
func (d *Daemon) Metrics() *observe.Metrics { return d.metrics }
