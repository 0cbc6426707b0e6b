// Package workpool runs short-lived work on goroutines kept from one
// piece of work to the next.
//
// Handling a frame runs deep (schema validation recurses through the
// document, a turn's admission goes through the store), and so does a
// turn. A new goroutine grows its stack to that depth a doubling at a
// time, each doubling a copy of the stack: under load that was 5% of the
// server's CPU when every frame had a goroutine of its own, and 3% more
// for the turns. A kept goroutine has grown already.
//
// A Pool lets at most maxIdle goroutines wait for work, each for at most
// idleFor, so an idle server does not hold grown stacks for long.
package workpool

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs functions on kept goroutines. Its goroutines end once idle,
// or at Close.
type Pool struct {
	mu sync.Mutex
	// idle are the goroutines waiting for work, the one that waited least
	// last: it is handed the next work, so the pool's stacks stay few and
	// warm and the rest age out.
	idle    []*worker
	closed  chan struct{}
	closing sync.Once
	started atomic.Int64 // goroutines started and ended, for tests
	ended   atomic.Int64
	maxIdle int
	idleFor time.Duration
}

// worker is one kept goroutine. A goroutine on the idle stack is handed
// work only through its own channel, once Go has taken it off the stack:
// the hand-off cannot miss a goroutine that registered as waiting.
type worker struct {
	work chan func() // cap 1: Go never blocks on it
}

// Defaults fit a server: enough waiting goroutines for a burst of requests
// on many connections, let go after a quiet spell.
const (
	DefaultMaxIdle = 64
	DefaultIdleFor = 2 * time.Second
)

// New returns a pool that keeps at most maxIdle goroutines waiting for
// work, each for at most idleFor.
func New(maxIdle int, idleFor time.Duration) *Pool {
	return &Pool{closed: make(chan struct{}), maxIdle: max(maxIdle, 0), idleFor: idleFor}
}

// Go calls f on a waiting goroutine, or on a new one if none is waiting.
// It does not wait for f.
func (p *Pool) Go(f func()) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.work <- f
		return
	}
	p.mu.Unlock()
	p.started.Add(1)
	go p.loop(&worker{work: make(chan func(), 1)}, f)
}

// Close ends the goroutines waiting for work, and each running one once
// its work is done. Work given after Close still runs, each on a goroutine
// of its own.
func (p *Pool) Close() { p.closing.Do(func() { close(p.closed) }) }

// loop runs f, then whatever work comes while it waits, until it has
// waited idleFor or enough others are waiting.
func (p *Pool) loop(w *worker, f func()) {
	defer p.ended.Add(1)
	var idle *time.Timer
	for {
		f()
		f = nil // what f holds is not kept while waiting
		if !p.park(w) {
			return
		}
		if idle == nil {
			idle = time.NewTimer(p.idleFor)
		} else {
			idle.Reset(p.idleFor)
		}
		select {
		case f = <-w.work:
			idle.Stop()
			continue
		case <-idle.C:
		case <-p.closed:
			idle.Stop()
		}
		if p.unpark(w) {
			return
		}
		f = <-w.work // Go took it off the stack just now: its work is on the way
	}
}

// park puts w on the idle stack, unless the pool is closed or enough
// goroutines wait already.
func (p *Pool) park(w *worker) bool {
	select {
	case <-p.closed:
		return false
	default:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) >= p.maxIdle {
		return false
	}
	p.idle = append(p.idle, w)
	return true
}

// unpark takes w off the idle stack; false means Go has taken it and is
// handing it work.
func (p *Pool) unpark(w *worker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.idle, w)
	if i < 0 {
		return false
	}
	p.idle = slices.Delete(p.idle, i, i+1)
	return true
}
