package retrytest

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestClockAdvanceWakesDueSleepers(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewClock(t0)
	ctx := context.Background()
	done := make(chan time.Duration, 3)
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		go func() {
			if err := c.Sleep(ctx, d); err != nil {
				t.Error(err)
			}
			done <- d
		}()
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.WaitForSleepers(wctx, 3); err != nil {
		t.Fatal(err)
	}
	c.Advance(1500 * time.Millisecond)
	if got := <-done; got != time.Second {
		t.Fatalf("woke %v first", got)
	}
	if err := c.WaitForSleepers(wctx, 2); err != nil || c.Sleepers() != 2 {
		t.Fatalf("sleepers %d", c.Sleepers())
	}
	c.Advance(500 * time.Millisecond) // exactly due
	if got := <-done; got != 2*time.Second {
		t.Fatalf("woke %v second", got)
	}
	c.Advance(time.Hour)
	<-done
	if !c.Now().Equal(t0.Add(2*time.Second + time.Hour)) {
		t.Fatalf("now %v", c.Now())
	}
	if len(c.Sleeps()) != 3 || c.Sleepers() != 0 {
		t.Fatalf("sleeps %v", c.Sleeps())
	}
}

func TestClockSleepCancel(t *testing.T) {
	c := NewClock(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Sleep(ctx, time.Minute) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := c.WaitForSleepers(wctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if c.Sleepers() != 0 || !c.Now().Equal(time.Unix(0, 0)) {
		t.Fatal("cancelled sleeper left behind or clock moved")
	}
	if err := c.Sleep(ctx, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatal("Sleep on a done context must return at once")
	}
	if err := c.Sleep(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	wctx2, wcancel2 := context.WithCancel(context.Background())
	wcancel2()
	if err := c.WaitForSleepers(wctx2, 1); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

func TestRandSources(t *testing.T) {
	a, b := Rand(7), Rand(7)
	for range 100 {
		x, y := a(), b()
		if x != y || x < 0 || x >= 1 {
			t.Fatalf("seeded sources diverge or out of range: %v %v", x, y)
		}
	}
	if Fixed(0.25)() != 0.25 {
		t.Fatal("Fixed")
	}
}
