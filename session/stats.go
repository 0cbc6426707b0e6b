package session

import (
	"mspd/observe"
	"mspd/schema/msp"
)

// Stats are the manager's gauges, for the server's /metrics. What turns
// did is counted into Config.Metrics as their events are written.
type Stats struct {
	// LoadedSessions is the number of sessions in memory.
	LoadedSessions int
	// RunningTurns counts turns whose model call is under way, backoffs
	// included.
	RunningTurns int
	// QueuedTurns counts admitted turns of loaded sessions waiting behind
	// their session's running turn (a session with a queue stays loaded).
	QueuedTurns int
}

// counters counts written events into metrics (when set).
type counters struct{ metrics *observe.Metrics }

func (c counters) observe(params msp.ViewParams) {
	switch p := params.(type) {
	case *msp.TurnModelRetryScheduledParams:
		c.metrics.ModelRetryNotice(p.ErrorKind)
	case *msp.TurnRetryScheduledParams:
		c.metrics.TurnRetryNotice()
	case *msp.ApprovalRequestParams:
		c.metrics.ApprovalRequested()
	case *msp.ApprovalResolvedParams:
		c.metrics.ApprovalResolved(p.Decision, p.ResolvedBy)
	case *msp.TurnCompletedParams:
		attempts := 0
		if p.Attempts != nil {
			attempts = p.Attempts.Count
		}
		c.metrics.TurnSettled(p.Terminal, attempts)
	}
}

// Stats returns a snapshot of the manager's gauges.
func (m *Manager) Stats() Stats {
	var s Stats
	s.RunningTurns = int(m.running.Load())
	m.mu.Lock()
	s.LoadedSessions = len(m.sessions)
	for _, l := range m.sessions {
		select {
		case <-l.done: // l.s is set once done is closed
			if l.s != nil {
				s.QueuedTurns += int(l.s.queued.Load())
			}
		default: // still loading: not counted yet
		}
	}
	m.mu.Unlock()
	return s
}
