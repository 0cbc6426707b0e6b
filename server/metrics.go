package server

import (
	"fmt"
	"net/http"
	"sync/atomic"
)

// metrics are the server's counters, exposed in the Prometheus text format.
type metrics struct {
	connsOpen      atomic.Int64
	connsTotal     atomic.Uint64
	framesReceived atomic.Uint64
	framesRejected atomic.Uint64
	framesSent     atomic.Uint64
	requestErrors  atomic.Uint64
}

func (s *Server) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	var dropped, gaps uint64
	var queued int
	s.mu.Lock()
	for c := range s.conns {
		d, g, q := c.out.stats()
		dropped, gaps, queued = dropped+d, gaps+g, queued+q
	}
	s.mu.Unlock()
	m := &s.metrics
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	for _, row := range []struct {
		name, kind, help string
		value            any
	}{
		{"mspd_connections_open", "gauge", "Open MSP connections.", m.connsOpen.Load()},
		{"mspd_connections_total", "counter", "MSP connections accepted.", m.connsTotal.Load()},
		{"mspd_frames_received_total", "counter", "Inbound frames read.", m.framesReceived.Load()},
		{"mspd_frames_rejected_total", "counter", "Inbound frames answered with an error before dispatch.", m.framesRejected.Load()},
		{"mspd_frames_sent_total", "counter", "Outbound frames written.", m.framesSent.Load()},
		{"mspd_request_errors_total", "counter", "Requests answered with an error by a handler.", m.requestErrors.Load()},
		{"mspd_events_dropped_total", "counter", "View events dropped for slow readers on open connections.", dropped},
		{"mspd_view_gaps_total", "counter", "view/gap markers sent on open connections.", gaps},
		{"mspd_outbound_queued_frames", "gauge", "Frames waiting in connection outboxes.", queued},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %v\n", row.name, row.help, row.name, row.kind, row.name, row.value)
	}
}
