package observe

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"mspd/modelretry"
)

// Label values with a fixed meaning.
const (
	// KindNone is the error_kind of a request that did not fail.
	KindNone = "none"
	// KindOther stands for an errorKind outside modelretry's vocabulary:
	// a label never takes a value a provider (or a scripted turn's text)
	// made up.
	KindOther = "other"

	// OutcomeSuccess: the attempt's answer is the turn's answer.
	OutcomeSuccess = "success"
	// OutcomeRetried: the attempt failed or its output was rejected, and
	// another attempt was granted.
	OutcomeRetried = "retried"
	// OutcomeFailed: the attempt failed or was rejected and the turn ended
	// with it (not retryable, attempts or budget spent, the log refused).
	OutcomeFailed = "failed"
	// OutcomeCancelled: the user's stop or a stopping host cut the attempt.
	OutcomeCancelled = "cancelled"

	// TokensKept are output tokens of the answer the user got.
	TokensKept = "kept"
	// TokensDiscarded are output tokens of attempts whose output was
	// thrown away: paid for, never shown as the answer.
	TokensDiscarded = "discarded"
)

// Kind returns errorKind as a label value: KindNone for "", the kind
// itself when modelretry knows it, KindOther for anything else.
func Kind(errorKind string) string {
	switch {
	case errorKind == "":
		return KindNone
	case modelretry.Known(errorKind):
		return errorKind
	}
	return KindOther
}

// Bucket bounds, in seconds unless named otherwise.
var (
	// turnBuckets spans a one-word answer to a long answer after retries.
	turnBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300}
	// ttftBuckets spans a fast first token to one behind several backoffs.
	ttftBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}
	// delayBuckets spans jittered backoffs up to --retry-max-server-delay.
	delayBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}
	// commitBuckets spans a page-cache write to a stalled disk.
	commitBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}
	// batchBuckets are batches per group commit (the writer takes at most
	// 256 by default).
	batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}
	// waitBuckets spans a frame sent at once to one behind a slow reader
	// (--write-timeout is 10 s by default).
	waitBuckets = []float64{0.00001, 0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}
	// attemptBuckets are gRPC's retry-histogram bounds.
	attemptBuckets = []float64{1, 2, 3, 4, 5, 10, 100}
)

// Metrics are mspd's Prometheus metrics, registered on one registry the
// daemon creates. Its methods are safe for concurrent use and do nothing
// on a nil *Metrics, so a component built without metrics needs no
// checks.
type Metrics struct {
	reg *prometheus.Registry

	// The turn layer: every provider request and every retry.
	providerRequests *prometheus.CounterVec   // system, model, error_kind, outcome
	outputTokens     *prometheus.CounterVec   // system, outcome
	retryDelay       *prometheus.HistogramVec // layer, system, error_kind
	turnDuration     *prometheus.HistogramVec // system, terminal
	firstToken       *prometheus.HistogramVec // system, model
	toolCalls        *prometheus.CounterVec   // server, tool, result
	toolDuration     *prometheus.HistogramVec // server

	// The session layer: durable events as written.
	turns           *prometheus.CounterVec // terminal
	modelRetries    *prometheus.CounterVec // error_kind
	turnRetries     prometheus.Counter
	approvals       prometheus.Counter
	resolutions     *prometheus.CounterVec // decision, resolved_by
	attempts        prometheus.Counter
	attemptsPerTurn prometheus.Histogram

	// The store and the connections.
	commitSeconds prometheus.Histogram
	commitBatches prometheus.Histogram
	checkpoints   *prometheus.CounterVec
	walPages      prometheus.Counter
	walFrames     prometheus.Gauge
	queueWait     prometheus.Histogram

	budgets  *budgetCollector
	fallback fallbackMetrics
}

// New defines every metric and registers it on reg. It panics if reg
// already holds one of them: give each Metrics a registry of its own.
func New(reg *prometheus.Registry) *Metrics {
	m := &Metrics{
		reg: reg,
		providerRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mspd_provider_requests_total",
			Help: "Provider requests (attempts) by system, model, errorKind (none when it did not fail) and outcome (success, retried, failed, cancelled).",
		}, []string{"system", "model", "error_kind", "outcome"}),
		outputTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mspd_output_tokens_total",
			Help: "Output tokens providers reported, by system and outcome: kept (the answer the user got) or discarded (attempts thrown away: paid for, never the answer).",
		}, []string{"system", "outcome"}),
		retryDelay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mspd_retry_delay_seconds",
			Help:    "Backoff scheduled before a retry, by layer (model: turn/modelRetryScheduled, turn: turn/retryScheduled), system and errorKind.",
			Buckets: delayBuckets,
		}, []string{"layer", "system", "error_kind"}),
		turnDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mspd_turn_duration_seconds",
			Help:    "Time from a turn's start to its terminal (turn/completed durationMs), by system and terminal.",
			Buckets: turnBuckets,
		}, []string{"system", "terminal"}),
		firstToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mspd_time_to_first_token_seconds",
			Help:    "Time from a turn's start to its first streamed text, backoffs included: how long the user waited.",
			Buckets: ttftBuckets,
		}, []string{"system", "model"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mspd_tool_calls_total",
			Help: "Tool calls by MCP server, tool and result (the toolCall item's status: completed, failed, timedOut, cancelled, rejected).",
		}, []string{"server", "tool", "result"}),
		toolDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mspd_tool_call_duration_seconds",
			Help:    "Time a tool call ran, by MCP server.",
			Buckets: turnBuckets,
		}, []string{"server"}),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mspd_turns_total",
			Help: "Settled turns by terminal.",
		}, []string{"terminal"}),
		modelRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mspd_model_retries_total",
			Help: "turn/modelRetryScheduled notices by errorKind.",
		}, []string{"error_kind"}),
		turnRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mspd_turn_retries_total",
			Help: "turn/retryScheduled notices.",
		}),
		approvals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mspd_approvals_requested_total",
			Help: "Tool calls that waited for a person's approval, or were denied by the session's approval mode (approval/requested written).",
		}),
		resolutions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mspd_approvals_resolved_total",
			Help: "Approvals resolved (approval/resolved written), by decision (approved, approvedForSession, denied, timedOut, abort) and who resolved them (user, policy).",
		}, []string{"decision", "resolved_by"}),
		attempts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mspd_provider_attempts_total",
			Help: "Provider requests made by settled turns (RFC 0248 attempts.count summed).",
		}),
		attemptsPerTurn: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mspd_turn_attempts",
			Help:    "Provider requests per settled turn.",
			Buckets: attemptBuckets,
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mspd_store_commit_seconds",
			Help:    "Time the store's writer took to write and fsync one group commit.",
			Buckets: commitBuckets,
		}),
		commitBatches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mspd_store_commit_batches",
			Help:    "Batches (callers' commits) written together in one group commit.",
			Buckets: batchBuckets,
		}),
		checkpoints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mspd_store_checkpoints_total",
			Help: "Checkpoints of the SQLite write-ahead log by kind (background: every 4,000 pages, beside the writer; tail: the writer copying what was written meanwhile; truncate: emptying the log after a session's erasure) and result (complete; partial: a reader still needed older frames; blocked: a reader kept it from finishing, so a truncate left the log as it was; failed).",
		}, []string{"kind", "result"}),
		walPages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mspd_store_wal_pages_total",
			Help: "Pages the store's writer wrote to the SQLite write-ahead log; over mspd_store_commit_batches, what a commit costs in writes, syncs and checkpoints.",
		}),
		walFrames: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mspd_store_wal_frames",
			Help: "Frames in the SQLite write-ahead log at the last checkpoint; a steady climb means checkpoints cannot finish (a long read holds them back) and the log, on disk, grows.",
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mspd_outbound_queue_wait_seconds",
			Help:    "Time a frame waited in a connection's outbound queue before its write began.",
			Buckets: waitBuckets,
		}),
		budgets: &budgetCollector{desc: prometheus.NewDesc("mspd_retry_budget_tokens",
			"Tokens left in each provider's retry budget; retries stop while fewer than half remain.",
			[]string{"provider", "system"}, nil)},
		fallback: newFallbackMetrics(),
	}
	reg.MustRegister(m.fallback.collectors()...)
	reg.MustRegister(m.providerRequests, m.outputTokens, m.retryDelay, m.turnDuration, m.firstToken, m.toolCalls, m.toolDuration,
		m.turns, m.modelRetries, m.turnRetries, m.approvals, m.resolutions, m.attempts, m.attemptsPerTurn,
		m.commitSeconds, m.commitBatches, m.checkpoints, m.walPages, m.walFrames, m.queueWait, m.budgets)
	return m
}

// Handler serves the registry in the Prometheus exposition formats (the
// text format unless the scraper asks for another).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Gatherer is the registry the metrics are on, for reading them back.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Register adds a collector of another component to the registry.
func (m *Metrics) Register(c prometheus.Collector) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(c)
}

// ProviderRequest counts one provider request as it ended.
func (m *Metrics) ProviderRequest(system, model, errorKind, outcome string) {
	if m == nil {
		return
	}
	m.providerRequests.WithLabelValues(system, modelLabel(model), Kind(errorKind), outcome).Inc()
}

// OutputTokens adds n output tokens of system's attempts, kept or
// discarded (TokensKept, TokensDiscarded).
func (m *Metrics) OutputTokens(system, outcome string, n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.outputTokens.WithLabelValues(system, outcome).Add(float64(n))
}

// RetryScheduled records the backoff of a granted retry; layer is
// modelretry.Layer's String.
func (m *Metrics) RetryScheduled(layer, system, errorKind string, delay time.Duration) {
	if m == nil {
		return
	}
	m.retryDelay.WithLabelValues(layer, system, Kind(errorKind)).Observe(delay.Seconds())
}

// ToolCalled records one tool call: its result is the toolCall item's
// final status.
func (m *Metrics) ToolCalled(server, tool, result string, took time.Duration) {
	if m == nil {
		return
	}
	m.toolCalls.WithLabelValues(server, tool, result).Inc()
	m.toolDuration.WithLabelValues(server).Observe(took.Seconds())
}

// ApprovalRequested counts an approval/requested written.
func (m *Metrics) ApprovalRequested() {
	if m == nil {
		return
	}
	m.approvals.Inc()
}

// ApprovalResolved counts an approval/resolved written, by its decision
// and who resolved it (ApprovalDecision and ApprovalResolvedBy values:
// a closed set mspd writes).
func (m *Metrics) ApprovalResolved(decision, resolvedBy string) {
	if m == nil {
		return
	}
	m.resolutions.WithLabelValues(decision, resolvedBy).Inc()
}

// ToolRefused records a tool call its approval kept from running (denied,
// timed out, stopped while it waited): counted with result, its item's
// status, and no duration, since it never ran.
func (m *Metrics) ToolRefused(server, tool, result string) {
	if m == nil {
		return
	}
	m.toolCalls.WithLabelValues(server, tool, result).Inc()
}

// TurnEnded records a turn's duration and, when any text streamed
// (firstToken >= 0), its time to first token.
func (m *Metrics) TurnEnded(system, model, terminal string, duration, firstToken time.Duration) {
	if m == nil {
		return
	}
	m.turnDuration.WithLabelValues(system, terminal).Observe(duration.Seconds())
	if firstToken >= 0 {
		m.firstToken.WithLabelValues(system, modelLabel(model)).Observe(firstToken.Seconds())
	}
}

// TurnSettled counts a durable turn/completed and its attempts.count.
func (m *Metrics) TurnSettled(terminal string, attempts int) {
	if m == nil {
		return
	}
	m.turns.WithLabelValues(terminal).Inc()
	m.attempts.Add(float64(attempts))
	m.attemptsPerTurn.Observe(float64(attempts))
}

// ModelRetryNotice counts a durable turn/modelRetryScheduled.
func (m *Metrics) ModelRetryNotice(errorKind string) {
	if m == nil {
		return
	}
	m.modelRetries.WithLabelValues(Kind(errorKind)).Inc()
}

// TurnRetryNotice counts a durable turn/retryScheduled.
func (m *Metrics) TurnRetryNotice() {
	if m == nil {
		return
	}
	m.turnRetries.Inc()
}

// StoreCommit records one group commit of the store's writer: how many
// callers' batches it carried, how long it took and how many pages it
// wrote to the write-ahead log.
func (m *Metrics) StoreCommit(batches int, took time.Duration, pages int) {
	if m == nil {
		return
	}
	m.commitBatches.Observe(float64(batches))
	m.commitSeconds.Observe(took.Seconds())
	m.walPages.Add(float64(pages))
}

// StoreCheckpoint records one checkpoint of the store's write-ahead log:
// its kind (why it ran), the frames the log held and how many of them are
// now in the database file, whether a reader blocked it, or the error.
func (m *Metrics) StoreCheckpoint(kind string, frames, copied int, blocked bool, err error) {
	if m == nil {
		return
	}
	result := "complete"
	switch {
	case err != nil:
		m.checkpoints.WithLabelValues(kind, "failed").Inc()
		return
	case blocked:
		result = "blocked"
	case copied < frames:
		result = "partial"
	}
	m.checkpoints.WithLabelValues(kind, result).Inc()
	m.walFrames.Set(float64(frames))
}

// QueueWait records how long one frame waited in an outbound queue
// before its write began.
func (m *Metrics) QueueWait(wait time.Duration) {
	if m == nil {
		return
	}
	m.queueWait.Observe(wait.Seconds())
}

// WatchBudget exports a provider's retry budget as
// mspd_retry_budget_tokens{provider, system}; tokens is read at each
// scrape (modelretry.Budget.Tokens). A nil budget (unthrottled) is not
// exported: it has no tokens to run out of.
func (m *Metrics) WatchBudget(provider, system string, b *modelretry.Budget) {
	if m == nil || b == nil {
		return
	}
	m.budgets.add(budgetSource{provider: provider, system: system, budget: b})
}

// modelLabel names a request's model; empty means the provider default.
func modelLabel(model string) string {
	if model == "" {
		return "default"
	}
	return model
}

// budgetCollector reads every watched budget at scrape time.
type budgetCollector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	srcs []budgetSource
}

type budgetSource struct {
	provider, system string
	budget           *modelretry.Budget
}

func (c *budgetCollector) add(s budgetSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.srcs = append(c.srcs, s)
}

// Describe implements prometheus.Collector.
func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	srcs := append([]budgetSource(nil), c.srcs...)
	c.mu.Unlock()
	for _, s := range srcs {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, s.budget.Tokens(), s.provider, s.system)
	}
}
