package modelretry

import (
	"math"
	"sync"
	"testing"
	"time"
)

func TestBudgetDrainsAndRefills(t *testing.T) {
	b := DefaultBudget()
	if b.Tokens() != 10 || !b.AllowsRetry() {
		t.Fatalf("fresh budget: %v tokens", b.Tokens())
	}
	// 10 → 9, 8, 7, 6 allow; 5 is not above max/2.
	for i, want := range []bool{true, true, true, true, false, false} {
		if got := b.OnFailure(); got != want {
			t.Fatalf("failure %d: allowed %v, want %v (tokens %v)", i+1, got, want, b.Tokens())
		}
	}
	if b.Tokens() != 4 || b.AllowsRetry() {
		t.Fatalf("after 6 failures: %v tokens", b.Tokens())
	}
	// Refill with 0.1 per success: 4 → 5.0 after 10 (still refused) → 5.1.
	for range 10 {
		b.OnSuccess()
	}
	if b.Tokens() != 5 || b.AllowsRetry() {
		t.Fatalf("at exactly max/2: %v tokens, allows %v", b.Tokens(), b.AllowsRetry())
	}
	b.OnSuccess()
	if b.Tokens() != 5.1 || !b.AllowsRetry() {
		t.Fatalf("above max/2: %v tokens", b.Tokens())
	}
	// Never below zero, never above max.
	for range 100 {
		b.OnFailure()
	}
	if b.Tokens() != 0 {
		t.Fatalf("floor: %v", b.Tokens())
	}
	for range 1000 {
		b.OnSuccess()
	}
	if b.Tokens() != 10 {
		t.Fatalf("ceiling: %v", b.Tokens())
	}
}

func TestBudgetConcurrent(t *testing.T) {
	b := DefaultBudget()
	run := func(n int, f func()) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(f)
		}
		wg.Wait()
	}
	run(100, b.OnSuccess) // capped at 10
	run(7, func() { b.OnFailure() })
	if b.Tokens() != 3 {
		t.Fatalf("after 7 concurrent failures: %v", b.Tokens())
	}
	run(20, b.OnSuccess)
	if b.Tokens() != 5 {
		t.Fatalf("after 20 concurrent successes: %v", b.Tokens())
	}
	// Mixed traffic keeps the invariant 0..max.
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			for range 200 {
				if i%2 == 0 {
					b.OnFailure()
				} else {
					b.OnSuccess()
				}
				_ = b.AllowsRetry()
			}
		})
	}
	wg.Wait()
	if tok := b.Tokens(); tok < 0 || tok > 10 {
		t.Fatalf("tokens %v outside 0..10", tok)
	}
}

func TestNewBudget(t *testing.T) {
	tests := []struct {
		max   int
		ratio float64
		ok    bool
	}{
		{10, 0.1, true},
		{1, 1, true},
		{100, 0.001, true},
		{0, 0.1, false},
		{-1, 0.1, false},
		{10, 0, false},
		{10, 0.0004, false}, // rounds to 0 at three decimals
		{10, -0.1, false},
		{10, math.NaN(), false},
		{10, 11, false},
	}
	for _, tt := range tests {
		b, err := NewBudget(tt.max, tt.ratio)
		if (err == nil) != tt.ok || (b != nil) != tt.ok {
			t.Errorf("NewBudget(%d, %v) = %v, %v", tt.max, tt.ratio, b, err)
		}
	}
}

func TestNilBudget(t *testing.T) {
	var b *Budget
	if !b.OnFailure() || !b.AllowsRetry() || !math.IsInf(b.Tokens(), 1) {
		t.Fatal("a nil budget must allow everything")
	}
	b.OnSuccess()
}

func TestBudgetRefillsWithTime(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := DefaultBudget().WithRefill(0.2, func() time.Time { return now })
	for range 5 {
		b.OnFailure()
	}
	if b.AllowsRetry() {
		t.Fatalf("drained to %v tokens but still allows retries", b.Tokens())
	}
	// During an outage the key gets one retry back every 5 s.
	now = now.Add(time.Second)
	if !b.AllowsRetry() || b.OnFailure() {
		t.Fatalf("after 1s: %v tokens", b.Tokens())
	}
	now = now.Add(4 * time.Second)
	if b.AllowsRetry() {
		t.Fatalf("4s after a retry: %v tokens", b.Tokens())
	}
	now = now.Add(time.Second)
	if !b.AllowsRetry() {
		t.Fatalf("5s after a retry: %v tokens", b.Tokens())
	}
	now = now.Add(time.Hour)
	if b.Tokens() != 10 {
		t.Fatalf("refill is capped at max: %v", b.Tokens())
	}
}
