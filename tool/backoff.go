package tool

import "time"

// Backoff spaces a server's reconnections: the n-th consecutive failure
// waits Min·2ⁿ⁻¹, capped at Max, jittered down by up to half (so that
// servers that died together do not restart together). A connection that
// stayed up Healthy or longer resets the count. Zero fields take the
// defaults.
type Backoff struct {
	Min     time.Duration // default 250 ms
	Max     time.Duration // default 30 s
	Healthy time.Duration // default 1 min
}

func (b Backoff) withDefaults() Backoff {
	if b.Min <= 0 {
		b.Min = 250 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 30 * time.Second
	}
	if b.Max < b.Min {
		b.Max = b.Min
	}
	if b.Healthy <= 0 {
		b.Healthy = time.Minute
	}
	return b
}

// delay is the wait after the n-th consecutive failure (n ≥ 1); r in
// [0, 1) draws the jitter.
func (b Backoff) delay(n int, r float64) time.Duration {
	d := b.Min
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	return d - time.Duration(r*float64(d/2))
}

// restartPolicy counts a server's consecutive failures and spaces its
// reconnections.
type restartPolicy struct {
	backoff  Backoff
	rand     func() float64
	failures int
}

// next is the wait after a connection that ended (or failed to open)
// after uptime.
func (p *restartPolicy) next(uptime time.Duration) time.Duration {
	if uptime >= p.backoff.Healthy {
		p.failures = 0
	}
	p.failures++
	return p.backoff.delay(p.failures, p.rand())
}
