package modelretry

import (
	"fmt"
	"sync"
	"time"
)

// BreakerState is where a circuit breaker stands.
type BreakerState int32

const (
	// BreakerClosed: requests go to the provider, and its consecutive
	// failures are counted.
	BreakerClosed BreakerState = iota
	// BreakerOpen: the provider failed Failures requests in a row within
	// Window. A caller with another provider to ask skips it, until
	// Cooldown has passed since it last failed.
	BreakerOpen
	// BreakerHalfOpen: the cool-down has passed. One request, the probe,
	// is let through; its success closes the breaker, its failure opens it
	// again.
	BreakerHalfOpen
)

// String returns "closed", "open" or "halfOpen", as the wire and metric
// labels name them.
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "halfOpen"
	}
	return fmt.Sprintf("BreakerState(%d)", int(s))
}

// BreakerStates are the states in order, for metric labels.
var BreakerStates = [...]BreakerState{BreakerClosed, BreakerOpen, BreakerHalfOpen}

// BreakerConfig sets a circuit breaker's figures.
type BreakerConfig struct {
	// Failures is how many requests in a row must fail (HealthOf says
	// Failing) to open the breaker.
	Failures int
	// Window bounds how long such a run may take: a failure more than
	// Window after the run's first starts a new run. Failures far apart
	// are a flaky provider, not a dead one, and retries serve it better.
	Window time.Duration
	// Cooldown is how long an open breaker skips its provider before it
	// lets one probe through.
	Cooldown time.Duration
}

// DefaultBreakerConfig returns mspd's figures:
//
//   - Failures 5: Envoy's outlier detection ejects after 5 consecutive
//     5xx, and it is one turn's whole default chain of attempts — a
//     single turn that exhausted its retries on a provider opens it, a
//     burst that a retry rode out does not;
//   - Window 60 s: a run of failures must be an outage, not five
//     unlucky requests over an afternoon;
//   - Cooldown 30 s: Envoy's base ejection time. A chat turn that would
//     have waited out a provider's backoffs is answered by the next
//     provider at once meanwhile; after it, one request probes.
func DefaultBreakerConfig() BreakerConfig {
	return BreakerConfig{Failures: 5, Window: time.Minute, Cooldown: 30 * time.Second}
}

// Validate reports the first invalid field as a *PolicyError naming it
// (failures, window, cooldown), or nil.
func (c BreakerConfig) Validate() error {
	switch {
	case c.Failures < 1:
		return &PolicyError{Field: "failures", Reason: fmt.Sprintf("%d is not positive", c.Failures)}
	case c.Window <= 0:
		return &PolicyError{Field: "window", Reason: fmt.Sprintf("%v is not positive", c.Window)}
	case c.Cooldown <= 0:
		return &PolicyError{Field: "cooldown", Reason: fmt.Sprintf("%v is not positive", c.Cooldown)}
	}
	return nil
}

// Admission is a breaker's answer for a request about to be sent.
type Admission int

const (
	// Admitted: the breaker is closed (or there is none); the request goes.
	Admitted Admission = iota
	// Probe: the breaker is half-open and this request is its one probe.
	// Its outcome must be recorded (Record), or the probe slot stays taken
	// until another Cooldown has passed.
	Probe
	// Refused: the breaker is open, or half-open with its probe out. A
	// caller with another provider to ask goes there; one without asks
	// this provider anyway (and records the outcome as Admitted).
	Refused
)

// Breaker is a circuit breaker for one provider, shared by every call to
// it: closed, it counts consecutive failures; open, it refuses requests
// for a cool-down; half-open, it lets one probe through. Time comes from
// its clock. It is safe for concurrent use; a nil *Breaker admits every
// request and records nothing.
type Breaker struct {
	cfg   BreakerConfig
	clock Clock

	mu       sync.Mutex
	state    BreakerState
	run      int       // consecutive failures so far (closed)
	runStart time.Time // the first of them
	failedAt time.Time // the last failure seen open: the cool-down runs from it
	probeAt  time.Time // when the probe went, zero when none is out
	opens    int64
}

// NewBreaker returns a closed breaker; cfg must be valid. A nil clock is
// the system clock.
func NewBreaker(cfg BreakerConfig, clock Clock) (*Breaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clock == nil {
		clock = SystemClock()
	}
	return &Breaker{cfg: cfg, clock: clock}, nil
}

// Config returns the breaker's figures.
func (b *Breaker) Config() BreakerConfig { return b.cfg }

// Allow asks for one request: Admitted while closed, Probe for the first
// caller once the cool-down is over (and again if a probe went unrecorded
// for a whole Cooldown), Refused otherwise.
func (b *Breaker) Allow() Admission {
	if b == nil {
		return Admitted
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	b.advanceLocked(now)
	switch b.state {
	case BreakerClosed:
		return Admitted
	case BreakerHalfOpen:
		if !b.probeAt.IsZero() && now.Sub(b.probeAt) < b.cfg.Cooldown {
			return Refused
		}
		b.probeAt = now
		return Probe
	}
	return Refused
}

// Record reports how a request went: a healthy one closes the breaker, a
// failing one counts towards opening it (or reopens it when half-open, or
// restarts an open one's cool-down), an unknown one changes nothing but
// frees the probe slot when the request was the probe.
func (b *Breaker) Record(a Admission, h Health) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	b.advanceLocked(now)
	if a == Probe {
		b.probeAt = time.Time{}
	}
	switch h {
	case Healthy:
		b.state, b.run, b.probeAt = BreakerClosed, 0, time.Time{}
	case Failing:
		switch b.state {
		case BreakerClosed:
			if b.run == 0 || now.Sub(b.runStart) > b.cfg.Window {
				b.run, b.runStart = 0, now
			}
			b.run++
			if b.run >= b.cfg.Failures {
				b.openLocked(now)
			}
		case BreakerHalfOpen:
			b.openLocked(now)
		case BreakerOpen:
			b.failedAt = now // still failing: the cool-down starts again
		}
	}
}

func (b *Breaker) openLocked(now time.Time) {
	b.state, b.run, b.failedAt, b.probeAt = BreakerOpen, 0, now, time.Time{}
	b.opens++
}

// advanceLocked half-opens an open breaker whose cool-down is over.
func (b *Breaker) advanceLocked(now time.Time) {
	if b.state == BreakerOpen && now.Sub(b.failedAt) >= b.cfg.Cooldown {
		b.state, b.probeAt = BreakerHalfOpen, time.Time{}
	}
}

// State returns the breaker's state now (an open breaker whose cool-down
// is over reads halfOpen). A nil breaker is closed.
func (b *Breaker) State() BreakerState {
	if b == nil {
		return BreakerClosed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(b.clock.Now())
	return b.state
}

// Opens counts the times the breaker opened, for metrics.
func (b *Breaker) Opens() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.opens
}
