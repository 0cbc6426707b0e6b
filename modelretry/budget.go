package modelretry

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Budget is a retry throttle shared by every call to one provider key:
// gRPC A6's token bucket. The count starts full at maxTokens; each transient
// failure takes one token, each success gives back tokenRatio, and a retry
// is allowed only while the count is above maxTokens/2.
//
// Chosen over Finagle's percentage budget because it needs no clock or
// sliding window, is deterministic to test, and with 10/0.1 throttles once
// failures exceed about 10 % of successes — while a quiet key still gets
// its first few retries at once. It is safe for concurrent use; a nil
// *Budget allows every retry.
type Budget struct {
	mu sync.Mutex
	// Milli-tokens: gRPC allows three decimals in tokenRatio, and integers
	// keep long runs of ±ratio free of float drift.
	tokens, max, ratio int64
	// refill milli-tokens a second come back with time (see WithRefill).
	refill int64
	now    func() time.Time
	last   time.Time
}

// NewBudget returns a full budget. maxTokens must be positive; tokenRatio
// must be positive, at most maxTokens, and is used to three decimals.
func NewBudget(maxTokens int, tokenRatio float64) (*Budget, error) {
	if maxTokens <= 0 || maxTokens > math.MaxInt32 {
		return nil, fmt.Errorf("modelretry: budget maxTokens %d is outside 1..%d", maxTokens, math.MaxInt32)
	}
	ratio := int64(math.Round(tokenRatio * 1000))
	if math.IsNaN(tokenRatio) || ratio < 1 || ratio > int64(maxTokens)*1000 {
		return nil, fmt.Errorf("modelretry: budget tokenRatio %v is outside 0.001..%d", tokenRatio, maxTokens)
	}
	m := int64(maxTokens) * 1000
	return &Budget{tokens: m, max: m, ratio: ratio}, nil
}

// DefaultBudget returns gRPC's retryThrottling defaults: maxTokens 10,
// tokenRatio 0.1. A fresh key allows four retries in a row; the fifth
// consecutive failure is throttled until successes refill it.
func DefaultBudget() *Budget {
	b, _ := NewBudget(10, 0.1)
	return b
}

// WithRefill makes tokens also come back with time, perSecond tokens a
// second read from now, and returns b. gRPC's bucket refills only through
// successes, which suits a busy key; a quiet one (a single user's chat)
// would stay throttled after one bad minute until many requests succeed.
// With a refill, a drained key gets a retry back every 1/perSecond seconds:
// bounded extra load during an outage, prompt recovery after it.
func (b *Budget) WithRefill(perSecond float64, now func() time.Time) *Budget {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill = int64(math.Round(perSecond * 1000))
	b.now = now
	if now != nil {
		b.last = now()
	}
	return b
}

// refillLocked adds the tokens time has given back since the last call.
func (b *Budget) refillLocked() {
	if b.refill <= 0 || b.now == nil {
		return
	}
	now := b.now()
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(b.max, b.tokens+int64(elapsed.Seconds()*float64(b.refill)))
		b.last = now
	}
}

// OnFailure takes one token for a transient failure and reports whether a
// retry is still allowed.
func (b *Budget) OnFailure() (retryAllowed bool) {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked()
	b.tokens = max(0, b.tokens-1000)
	return b.tokens > b.max/2
}

// OnSuccess gives back tokenRatio tokens, up to maxTokens.
func (b *Budget) OnSuccess() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked()
	b.tokens = min(b.max, b.tokens+b.ratio)
}

// AllowsRetry reports whether a retry would be allowed now, without taking
// a token.
func (b *Budget) AllowsRetry() bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked()
	return b.tokens > b.max/2
}

// Tokens returns the current token count, for metrics.
func (b *Budget) Tokens() float64 {
	if b == nil {
		return math.Inf(1)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked()
	return float64(b.tokens) / 1000
}
