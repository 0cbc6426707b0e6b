// Package retrytest provides test doubles for modelretry: a manual Clock
// that tests advance by hand, so nothing ever sleeps for real, and seeded
// random sources. It does not import modelretry, so modelretry's own tests
// can use it; *Clock satisfies modelretry.Clock.
package retrytest

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Clock is a fake clock. Sleep blocks until Advance moves time to or past
// its wake-up time, or its context ends. Safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*waiter
	sleeps  []time.Duration
	changed chan struct{} // closed and replaced whenever the sleepers change
}

type waiter struct {
	until time.Time
	done  chan struct{}
}

// NewClock returns a fake clock reading start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, changed: make(chan struct{})}
}

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep records d and waits until the clock is advanced by d or ctx ends,
// returning ctx.Err() in that case. A d <= 0 returns at once.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	if d <= 0 {
		c.mu.Unlock()
		return nil
	}
	w := &waiter{until: c.now.Add(d), done: make(chan struct{})}
	c.waiters = append(c.waiters, w)
	c.signalLocked()
	c.mu.Unlock()

	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		c.waiters = slices.DeleteFunc(c.waiters, func(x *waiter) bool { return x == w })
		c.signalLocked()
		c.mu.Unlock()
		return ctx.Err()
	}
}

// Advance moves the clock forward by d and wakes every sleeper due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	woke := false
	c.waiters = slices.DeleteFunc(c.waiters, func(w *waiter) bool {
		if w.until.After(c.now) {
			return false
		}
		close(w.done)
		woke = true
		return true
	})
	if woke {
		c.signalLocked()
	}
}

// Sleepers returns how many goroutines are blocked in Sleep.
func (c *Clock) Sleepers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// WaitForSleepers blocks until at least n goroutines are blocked in Sleep,
// or ctx ends. It waits on a signal, never on time.
func (c *Clock) WaitForSleepers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		if len(c.waiters) >= n {
			c.mu.Unlock()
			return nil
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Sleeps returns every duration passed to Sleep, in call order.
func (c *Clock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sleeps)
}

func (c *Clock) signalLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Rand returns a deterministic source of values in [0, 1) seeded by seed,
// safe for concurrent use (for modelretry.Engine.Rand).
func Rand(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

// Fixed returns a source that always yields v, for exact delays in tests
// (0.5 makes full jitter sleep half the backoff).
func Fixed(v float64) func() float64 {
	return func() float64 { return v }
}
