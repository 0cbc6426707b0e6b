package observe

import "github.com/prometheus/client_golang/prometheus"

// ServerStats is a snapshot of the server's own counts, which it keeps in
// atomics on its hot paths and hands over at each scrape.
type ServerStats struct {
	ConnsOpen      int64
	ConnsTotal     uint64
	ConnsWedged    uint64
	FramesReceived uint64
	FramesRejected uint64
	FramesSent     uint64
	RequestErrors  uint64
	// EventsDropped, ViewGaps and DeltasCoalesced are summed over open
	// connections.
	EventsDropped   uint64
	ViewGaps        uint64
	DeltasCoalesced uint64
	// QueuedFrames and QueuedBytes are summed over open connections;
	// QueuedBytesMax is the fullest connection's.
	QueuedFrames   int
	QueuedBytes    int
	QueuedBytesMax int
	// InboundBytes is what inbound frames hold of the server-wide intake
	// budget; InboundWaiting counts connections waiting for room in it.
	InboundBytes   int64
	InboundWaiting int64
}

// SessionStats is a snapshot of the session manager's gauges.
type SessionStats struct {
	// Loaded counts sessions held in memory.
	Loaded int
	// Running counts turns whose model call is under way (attempts and
	// backoffs included).
	Running int
	// Queued counts admitted turns waiting behind a running one.
	Queued int
}

// WatchServer exports the server's counts, read by snapshot at each
// scrape.
func (m *Metrics) WatchServer(snapshot func() ServerStats) error {
	return m.Register(newSnapshot(snapshot, []reading[ServerStats]{
		gauge("mspd_connections_open", "Open MSP connections.", func(s ServerStats) float64 { return float64(s.ConnsOpen) }),
		counter("mspd_connections_total", "MSP connections accepted.", func(s ServerStats) float64 { return float64(s.ConnsTotal) }),
		counter("mspd_connections_wedged_total", "Connections closed because their outbound queue stayed full.", func(s ServerStats) float64 { return float64(s.ConnsWedged) }),
		counter("mspd_frames_received_total", "Inbound frames read.", func(s ServerStats) float64 { return float64(s.FramesReceived) }),
		counter("mspd_frames_rejected_total", "Inbound frames answered with an error before dispatch.", func(s ServerStats) float64 { return float64(s.FramesRejected) }),
		counter("mspd_frames_sent_total", "Outbound frames written.", func(s ServerStats) float64 { return float64(s.FramesSent) }),
		counter("mspd_request_errors_total", "Requests answered with an error by a handler.", func(s ServerStats) float64 { return float64(s.RequestErrors) }),
		counter("mspd_events_dropped_total", "View events dropped for slow readers on open connections.", func(s ServerStats) float64 { return float64(s.EventsDropped) }),
		counter("mspd_view_gaps_total", "view/gap markers sent on open connections.", func(s ServerStats) float64 { return float64(s.ViewGaps) }),
		counter("mspd_deltas_coalesced_total", "item/delta events merged into a queued delta of the same item for readers behind, on open connections.", func(s ServerStats) float64 { return float64(s.DeltasCoalesced) }),
		gauge("mspd_outbound_queued_frames", "Frames waiting in connection outboxes.", func(s ServerStats) float64 { return float64(s.QueuedFrames) }),
		gauge("mspd_outbound_queued_bytes", "Bytes held by connection outboxes (queued frames, kept events, the batch being written and answers waiting for room).", func(s ServerStats) float64 { return float64(s.QueuedBytes) }),
		gauge("mspd_inbound_bytes", "Bytes of inbound frames being read and decoded, held of the --inbound-bytes budget.", func(s ServerStats) float64 { return float64(s.InboundBytes) }),
		gauge("mspd_inbound_waiting", "Connections whose frame waits for room in the --inbound-bytes budget (not reading: TCP pushes back).", func(s ServerStats) float64 { return float64(s.InboundWaiting) }),
		gauge("mspd_outbound_queued_bytes_max", "Bytes held by the fullest connection outbox; each is bounded by --queue-bytes.", func(s ServerStats) float64 { return float64(s.QueuedBytesMax) }),
	}))
}

// WatchSessions exports the session manager's gauges, read by snapshot at
// each scrape.
func (m *Metrics) WatchSessions(snapshot func() SessionStats) error {
	return m.Register(newSnapshot(snapshot, []reading[SessionStats]{
		gauge("mspd_sessions_loaded", "Sessions held in memory.", func(s SessionStats) float64 { return float64(s.Loaded) }),
		gauge("mspd_turns_running", "Turns whose model call is under way, backoffs included.", func(s SessionStats) float64 { return float64(s.Running) }),
		gauge("mspd_turns_queued", "Admitted turns waiting behind their session's running turn.", func(s SessionStats) float64 { return float64(s.Queued) }),
	}))
}

// reading is one metric read off a snapshot.
type reading[S any] struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(S) float64
}

func gauge[S any](name, help string, value func(S) float64) reading[S] {
	return reading[S]{prometheus.NewDesc(name, help, nil, nil), prometheus.GaugeValue, value}
}

func counter[S any](name, help string, value func(S) float64) reading[S] {
	return reading[S]{prometheus.NewDesc(name, help, nil, nil), prometheus.CounterValue, value}
}

// snapshotCollector takes one snapshot per scrape and reads every metric
// off it, so the values of a scrape agree with each other.
type snapshotCollector[S any] struct {
	take     func() S
	readings []reading[S]
}

func newSnapshot[S any](take func() S, readings []reading[S]) *snapshotCollector[S] {
	return &snapshotCollector[S]{take: take, readings: readings}
}

// Describe implements prometheus.Collector.
func (c *snapshotCollector[S]) Describe(ch chan<- *prometheus.Desc) {
	for _, r := range c.readings {
		ch <- r.desc
	}
}

// Collect implements prometheus.Collector.
func (c *snapshotCollector[S]) Collect(ch chan<- prometheus.Metric) {
	s := c.take()
	for _, r := range c.readings {
		ch <- prometheus.MustNewConstMetric(r.desc, r.typ, r.value(s))
	}
}
