package session

import (
	"sort"
	"sync"

	"mspd/observe"
	"mspd/schema/msp"
)

// Stats counts what turns did, for the server's /metrics.
type Stats struct {
	// Terminals counts settled turns by terminal (completed, failed,
	// cancelled).
	Terminals map[string]uint64
	// ModelRetries counts turn/modelRetryScheduled notices by errorKind.
	ModelRetries map[string]uint64
	// TurnRetries counts turn/retryScheduled notices.
	TurnRetries uint64
	// Attempts counts provider requests (RFC 0248 attempts.count summed).
	Attempts uint64
	// AttemptsPerTurn buckets settled turns by attempts.count, with gRPC's
	// retry-histogram bounds (1, 2, 3, 4, 5, 10, 100).
	AttemptsPerTurn map[int]uint64
	// LoadedSessions is the number of sessions in memory.
	LoadedSessions int
	// RunningTurns counts turns whose model call is under way, backoffs
	// included.
	RunningTurns int
	// QueuedTurns counts admitted turns of loaded sessions waiting behind
	// their session's running turn (a session with a queue stays loaded).
	QueuedTurns int
}

// attemptBuckets are the upper bounds of Stats.AttemptsPerTurn; read only.
var attemptBuckets = []int{1, 2, 3, 4, 5, 10, 100}

// AttemptBuckets returns the histogram bounds of Stats.AttemptsPerTurn.
func AttemptBuckets() []int { return append([]int(nil), attemptBuckets...) }

// counters accumulates Stats, and counts in metrics (when set) as well.
type counters struct {
	mu      sync.Mutex
	stats   Stats
	metrics *observe.Metrics
}

func (c *counters) observe(method string, params msp.ViewParams) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.stats
	switch p := params.(type) {
	case *msp.TurnModelRetryScheduledParams:
		c.metrics.ModelRetryNotice(p.ErrorKind)
		if s.ModelRetries == nil {
			s.ModelRetries = map[string]uint64{}
		}
		s.ModelRetries[p.ErrorKind]++
	case *msp.TurnRetryScheduledParams:
		c.metrics.TurnRetryNotice()
		s.TurnRetries++
	case *msp.TurnCompletedParams:
		if s.Terminals == nil {
			s.Terminals = map[string]uint64{}
			s.AttemptsPerTurn = map[int]uint64{}
		}
		s.Terminals[p.Terminal]++
		if p.Attempts != nil {
			c.metrics.TurnSettled(p.Terminal, p.Attempts.Count)
			s.Attempts += uint64(p.Attempts.Count)
			i := sort.SearchInts(attemptBuckets, p.Attempts.Count)
			if i < len(attemptBuckets) {
				s.AttemptsPerTurn[attemptBuckets[i]]++
			}
		}
	}
}

// Stats returns a snapshot of the manager's counters.
func (m *Manager) Stats() Stats {
	m.stats.mu.Lock()
	s := m.stats.stats
	s.Terminals = clone(s.Terminals)
	s.ModelRetries = clone(s.ModelRetries)
	s.AttemptsPerTurn = clone(s.AttemptsPerTurn)
	m.stats.mu.Unlock()
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

func clone[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
