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
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs functions on kept goroutines. Its goroutines end once idle,
// or at Close.
type Pool struct {
	work    chan func() // unbuffered: a send lands only on a waiting goroutine
	closed  chan struct{}
	closing sync.Once
	waiting atomic.Int32
	started atomic.Int64 // goroutines started and ended, for tests
	ended   atomic.Int64
	maxIdle int32
	idleFor time.Duration
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
	return &Pool{work: make(chan func()), closed: make(chan struct{}), maxIdle: int32(min(maxIdle, 1<<30)), idleFor: idleFor}
}

// Go calls f on a waiting goroutine, or on a new one if none is waiting.
// It does not wait for f.
func (p *Pool) Go(f func()) {
	select {
	case p.work <- f:
	default:
		p.started.Add(1)
		go p.loop(f)
	}
}

// Close ends the goroutines waiting for work, and each running one once
// its work is done. Work given after Close still runs, each on a goroutine
// of its own.
func (p *Pool) Close() { p.closing.Do(func() { close(p.closed) }) }

// loop runs f, then whatever work comes while it waits, until it has
// waited idleFor or enough others are waiting.
func (p *Pool) loop(f func()) {
	defer p.ended.Add(1)
	var idle *time.Timer
	for {
		f()
		f = nil // what f holds is not kept while waiting
		select {
		case <-p.closed:
			return
		default:
		}
		if p.waiting.Add(1) > p.maxIdle {
			p.waiting.Add(-1)
			return
		}
		if idle == nil {
			idle = time.NewTimer(p.idleFor)
		} else {
			idle.Reset(p.idleFor)
		}
		select {
		case f = <-p.work:
			p.waiting.Add(-1)
		case <-idle.C:
			p.waiting.Add(-1)
			return
		case <-p.closed:
			p.waiting.Add(-1)
			return
		}
	}
}
