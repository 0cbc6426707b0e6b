package server

import (
	"sync/atomic"

	"mspd/observe"
)

// metrics are the server's own counters, kept in atomics on its hot paths
// and read at each scrape (see stats); the metrics' definitions and the
// exposition are observe's.
type metrics struct {
	connsOpen      atomic.Int64
	connsTotal     atomic.Uint64
	connsWedged    atomic.Uint64
	framesReceived atomic.Uint64
	framesRejected atomic.Uint64
	framesSent     atomic.Uint64
	requestErrors  atomic.Uint64
}

// stats is a snapshot of the server's counts and of its connections'
// outboxes, for observe.Metrics.WatchServer.
func (s *Server) stats() observe.ServerStats {
	m := &s.metrics
	st := observe.ServerStats{
		ConnsOpen:      m.connsOpen.Load(),
		ConnsTotal:     m.connsTotal.Load(),
		ConnsWedged:    m.connsWedged.Load(),
		FramesReceived: m.framesReceived.Load(),
		FramesRejected: m.framesRejected.Load(),
		FramesSent:     m.framesSent.Load(),
		RequestErrors:  m.requestErrors.Load(),
		InboundBytes:   s.intake.held.Load(),
		InboundWaiting: s.intake.waiting.Load(),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		d, g, q := c.out.stats()
		st.EventsDropped, st.ViewGaps, st.QueuedFrames = st.EventsDropped+d, st.ViewGaps+g, st.QueuedFrames+q
		st.DeltasCoalesced += c.out.coalescedCount()
		b := c.out.inFlightBytes()
		st.QueuedBytes, st.QueuedBytesMax = st.QueuedBytes+b, max(st.QueuedBytesMax, b)
	}
	return st
}

// sessionStats is a snapshot of the session manager's gauges, for
// observe.Metrics.WatchSessions.
func (s *Server) sessionStats() observe.SessionStats {
	st := s.mgr.Stats()
	return observe.SessionStats{Loaded: st.LoadedSessions, Running: st.RunningTurns, Queued: st.QueuedTurns}
}
