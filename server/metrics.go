package server

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync/atomic"

	"mspd/session"
)

// metrics are the server's own counters; turn counters come from the
// session manager. Exposed in the Prometheus text format.
type metrics struct {
	connsOpen      atomic.Int64
	connsTotal     atomic.Uint64
	connsWedged    atomic.Uint64
	framesReceived atomic.Uint64
	framesRejected atomic.Uint64
	framesSent     atomic.Uint64
	requestErrors  atomic.Uint64
}

func (s *Server) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	var dropped, gaps, coalesced uint64
	var queued, bytes, maxBytes int
	s.mu.Lock()
	for c := range s.conns {
		d, g, q := c.out.stats()
		dropped, gaps, queued = dropped+d, gaps+g, queued+q
		coalesced += c.out.coalescedCount()
		b, _ := c.out.queuedBytes()
		bytes, maxBytes = bytes+b, max(maxBytes, b)
	}
	s.mu.Unlock()
	m := &s.metrics
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	p := promWriter{w: w}
	p.metric("mspd_connections_open", "gauge", "Open MSP connections.", sample{v: m.connsOpen.Load()})
	p.metric("mspd_connections_total", "counter", "MSP connections accepted.", sample{v: m.connsTotal.Load()})
	p.metric("mspd_connections_wedged_total", "counter", "Connections closed because their outbound queue stayed full.", sample{v: m.connsWedged.Load()})
	p.metric("mspd_frames_received_total", "counter", "Inbound frames read.", sample{v: m.framesReceived.Load()})
	p.metric("mspd_frames_rejected_total", "counter", "Inbound frames answered with an error before dispatch.", sample{v: m.framesRejected.Load()})
	p.metric("mspd_frames_sent_total", "counter", "Outbound frames written.", sample{v: m.framesSent.Load()})
	p.metric("mspd_request_errors_total", "counter", "Requests answered with an error by a handler.", sample{v: m.requestErrors.Load()})
	p.metric("mspd_events_dropped_total", "counter", "View events dropped for slow readers on open connections.", sample{v: dropped})
	p.metric("mspd_view_gaps_total", "counter", "view/gap markers sent on open connections.", sample{v: gaps})
	p.metric("mspd_deltas_coalesced_total", "counter", "item/delta events merged into a queued delta of the same item for readers behind, on open connections.", sample{v: coalesced})
	p.metric("mspd_outbound_queued_frames", "gauge", "Frames waiting in connection outboxes.", sample{v: queued})
	p.metric("mspd_outbound_queued_bytes", "gauge", "Bytes held by connection outboxes (queued frames and kept events).", sample{v: bytes})
	p.metric("mspd_outbound_queued_bytes_max", "gauge", "Bytes held by the fullest connection outbox; each is bounded by --queue-bytes.", sample{v: maxBytes})

	st := s.mgr.Stats()
	p.metric("mspd_sessions_loaded", "gauge", "Sessions held in memory.", sample{v: st.LoadedSessions})
	p.metric("mspd_turns_total", "counter", "Settled turns by terminal.", labelled("terminal", st.Terminals)...)
	p.metric("mspd_model_retries_total", "counter", "turn/modelRetryScheduled notices by errorKind.", labelled("error_kind", st.ModelRetries)...)
	p.metric("mspd_turn_retries_total", "counter", "turn/retryScheduled notices.", sample{v: st.TurnRetries})
	p.metric("mspd_provider_attempts_total", "counter", "Provider requests made by turns (RFC 0248 attempts).", sample{v: st.Attempts})
	// attempts per turn, as a histogram with gRPC's retry buckets.
	var hist []sample
	var cum, count uint64
	for _, le := range session.AttemptBuckets() {
		cum += st.AttemptsPerTurn[le]
		hist = append(hist, sample{name: "_bucket", labels: fmt.Sprintf(`le="%d"`, le), v: cum})
	}
	for _, n := range st.AttemptsPerTurn {
		count += n
	}
	hist = append(hist, sample{name: "_bucket", labels: `le="+Inf"`, v: count},
		sample{name: "_sum", v: st.Attempts}, sample{name: "_count", v: count})
	p.metric("mspd_turn_attempts", "histogram", "Provider requests per settled turn.", hist...)
}

// sample is one line of a metric: an optional name suffix and labels.
type sample struct {
	name, labels string
	v            any
}

func labelled[V any](label string, values map[string]V) []sample {
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]sample, 0, len(keys))
	for _, k := range keys {
		out = append(out, sample{labels: fmt.Sprintf("%s=%q", label, k), v: values[k]})
	}
	return out
}

type promWriter struct{ w io.Writer }

func (p promWriter) metric(name, kind, help string, samples ...sample) {
	fmt.Fprintf(p.w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
	for _, s := range samples {
		line := name + s.name
		if s.labels != "" {
			line += "{" + s.labels + "}"
		}
		fmt.Fprintf(p.w, "%s %v\n", line, s.v)
	}
}
