package modelretry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"mspd/modelretry"
	"mspd/modelretry/retrytest"
)

// TestResumeContinuesTheCount: a call resumed after a lost process keeps
// counting from the requests already made, announces the retry through
// Backoff before it sleeps, and never exceeds MaxAttempts.
func TestResumeContinuesTheCount(t *testing.T) {
	clock := retrytest.NewClock(start())
	budget, _ := modelretry.NewBudget(2, 0.1)
	e := newEngine(clock, budget, retrytest.Fixed(0))
	c, d, err := e.Resume(withAttempts(3), 2, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Retry || d.Attempt != 2 || d.NextAttempt != 3 || d.MaxAttempts != 3 || d.Layer != modelretry.LayerTurn ||
		d.Delay != 1500*time.Millisecond || d.Failure.Kind != modelretry.KindHostRestarted {
		t.Fatalf("decision %+v", d)
	}
	if _, err := c.Begin(context.Background()); !errors.Is(err, modelretry.ErrBackoffPending) {
		t.Fatalf("Begin before the backoff: %v", err)
	}
	var noticed []modelretry.Decision
	go func() {
		clock.WaitForSleepers(context.Background(), 1)
		clock.Advance(1500 * time.Millisecond)
	}()
	if err := c.Backoff(context.Background(), func(d modelretry.Decision) error {
		if clock.Sleepers() != 0 {
			t.Error("notified while sleeping")
		}
		noticed = append(noticed, d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(noticed) != 1 || noticed[0].NextAttempt != 3 {
		t.Fatalf("notices %+v", noticed)
	}
	a, err := c.Begin(context.Background())
	if err != nil || a.N() != 3 {
		t.Fatalf("resumed attempt: %v, %v; want attempt 3", a, err)
	}
	if c.Attempts() != 3 {
		t.Fatalf("count %d, want 3", c.Attempts())
	}
	// A restart is no provider failure: the budget was not charged.
	if budget.Tokens() != 2 {
		t.Fatal("the resume drained the retry budget")
	}
	if d := a.Fail(context.Background(), overloaded); d.Retry || d.Stop != modelretry.StopAttemptsExhausted {
		t.Fatalf("failure of the last attempt: %+v", d)
	}
}

// TestResumeWithNoAttemptLeft: a call whose lost request was the last
// allowed one ends at once.
func TestResumeWithNoAttemptLeft(t *testing.T) {
	e := newEngine(retrytest.NewClock(start()), nil, retrytest.Fixed(0))
	c, d, err := e.Resume(withAttempts(2), 2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d.Retry || d.Stop != modelretry.StopAttemptsExhausted || d.Attempt != 2 {
		t.Fatalf("decision %+v", d)
	}
	if _, err := c.Begin(context.Background()); !errors.Is(err, modelretry.ErrCallEnded) {
		t.Fatalf("Begin after an exhausted resume: %v", err)
	}
}
