package observe

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"mspd/modelretry"
)

// Fallback chains and circuit breakers: which provider a step left for
// which, and each provider's breaker, read at scrape time.

// fallbackMetrics are the chain's and the breakers' series.
type fallbackMetrics struct {
	fallbacks *prometheus.CounterVec // from, to, reason
	breakers  *breakerCollector
}

func newFallbackMetrics() fallbackMetrics {
	return fallbackMetrics{
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mspd_fallbacks_total",
			Help: "Steps that left a provider for the next of its fallback chain, by provider ids (from, to) and reason (attemptsExhausted, budgetExhausted, retryAfterTooLong, notRetryable; circuitOpen: its breaker was open, the provider skipped).",
		}, []string{"from", "to", "reason"}),
		breakers: &breakerCollector{
			state: prometheus.NewDesc("mspd_provider_breaker_state",
				"Each provider's circuit breaker: 1 for its current state (closed, open, halfOpen), 0 for the others.",
				[]string{"provider", "system", "state"}, nil),
			opens: prometheus.NewDesc("mspd_provider_breaker_opens_total",
				"Times each provider's circuit breaker opened (the provider failed --breaker-failures requests in a row, or a half-open probe failed).",
				[]string{"provider", "system"}, nil),
		},
	}
}

func (f fallbackMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{f.fallbacks, f.breakers}
}

// Fallback counts a step moving from one provider of a chain to the
// next, for reason.
func (m *Metrics) Fallback(from, to, reason string) {
	if m == nil {
		return
	}
	m.fallback.fallbacks.WithLabelValues(from, to, reason).Inc()
}

// WatchBreaker exports a provider's circuit breaker as
// mspd_provider_breaker_state and mspd_provider_breaker_opens_total, read
// at each scrape. A nil breaker is not exported.
func (m *Metrics) WatchBreaker(provider, system string, b *modelretry.Breaker) {
	if m == nil || b == nil {
		return
	}
	c := m.fallback.breakers
	c.mu.Lock()
	defer c.mu.Unlock()
	c.srcs = append(c.srcs, breakerSource{provider: provider, system: system, breaker: b})
}

// breakerCollector reads every watched breaker at scrape time.
type breakerCollector struct {
	state, opens *prometheus.Desc
	mu           sync.Mutex
	srcs         []breakerSource
}

type breakerSource struct {
	provider, system string
	breaker          *modelretry.Breaker
}

// Describe implements prometheus.Collector.
func (c *breakerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.state
	ch <- c.opens
}

// Collect implements prometheus.Collector.
func (c *breakerCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	srcs := append([]breakerSource(nil), c.srcs...)
	c.mu.Unlock()
	for _, s := range srcs {
		now := s.breaker.State()
		for _, st := range modelretry.BreakerStates {
			v := 0.0
			if st == now {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, v, s.provider, s.system, st.String())
		}
		ch <- prometheus.MustNewConstMetric(c.opens, prometheus.CounterValue, float64(s.breaker.Opens()), s.provider, s.system)
	}
}
