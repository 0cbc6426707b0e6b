// Package gcheadroom keeps the garbage collector from running after every
// few megabytes of allocation while the live heap is small.
//
// With GOGC=100 the collector starts a cycle when the heap has grown by as
// much as was live after the last one. A server whose live heap is 20 MB
// and which allocates hundreds of megabytes a second in a burst of turns
// then collects five to ten times a second, and every cycle costs it
// latency beyond its CPU: goroutines that allocate during the mark phase
// are made to assist, and the end of a mark waits for every P to reach a
// safe point (measured in a burst of 1,000 turns on two cores: the SQLite
// writer parked 33 ms in gcMarkDone while retry notices waited on its
// commit). Raising GOGC for good would multiply the slack of a large heap
// too. Headroom instead sets, after each cycle, the percentage that puts
// the next goal at least headroom bytes above the heap just found live:
// a small heap gets a fixed allowance of garbage, a large one (above
// headroom) keeps GOGC=100. A memory limit (GOMEMLIMIT) still applies.
package gcheadroom

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Percentages Start sets stay within these: DefaultPercent is Go's own
// GOGC, and MaxPercent bounds the slack of a very small heap.
const (
	DefaultPercent = 100
	MaxPercent     = 1000
)

const liveMetric = "/gc/heap/live:bytes"

// Tuner adjusts GOGC after every garbage collection. It is made by Start.
type Tuner struct {
	headroom uint64

	mu      sync.Mutex
	stopped bool
	percent int           // the last percentage set
	tuned   chan struct{} // closed, and replaced, at each adjustment
}

// Start begins tuning for headroom bytes and returns the tuner; Stop ends
// it and restores DefaultPercent. headroom 0 tunes nothing (the returned
// tuner's Stop does nothing). Callers leave GOGC alone when the operator
// set it in the environment.
func Start(headroom uint64) *Tuner {
	t := &Tuner{headroom: headroom, percent: DefaultPercent, tuned: make(chan struct{})}
	if headroom == 0 {
		t.stopped = true
		return t
	}
	t.tune()
	return t
}

// sentinel is allocated after each collection, and cleaned up once the
// next has found it unreachable. It holds a pointer so that it is not a
// tiny allocation, which could share a block kept alive by its neighbours.
type sentinel struct {
	_ *byte
	_ [16]byte
}

func (t *Tuner) arm() {
	s := &sentinel{}
	runtime.AddCleanup(s, func(t *Tuner) { t.tune() }, t)
}

// tune sets the percentage for the heap found live and arms the next
// call, until Stop.
func (t *Tuner) tune() {
	sample := []metrics.Sample{{Name: liveMetric}}
	metrics.Read(sample)
	var live uint64
	if sample[0].Value.Kind() == metrics.KindUint64 {
		live = sample[0].Value.Uint64()
	}
	p := PercentFor(live, t.headroom)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	if p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
	close(t.tuned)
	t.tuned = make(chan struct{})
	t.arm()
}

// PercentFor is the GOGC that puts the next heap goal headroom bytes
// above live (goal = live × (1 + GOGC/100)), within DefaultPercent and
// MaxPercent.
func PercentFor(live, headroom uint64) int {
	if live == 0 {
		return MaxPercent
	}
	p := headroom * 100 / live
	return int(min(max(p, DefaultPercent), MaxPercent))
}

// Percent returns the percentage set last, and a channel closed at the
// next collection's adjustment.
func (t *Tuner) Percent() (int, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.percent, t.tuned
}

// Stop ends the tuning and puts GOGC back to DefaultPercent.
func (t *Tuner) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	debug.SetGCPercent(DefaultPercent)
	t.percent = DefaultPercent
}
