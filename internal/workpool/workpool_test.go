package workpool

import (
	"testing"
	"time"
)

// waitUntil polls cond until it holds, failing the test after a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		<-tick.C
	}
}

// waitingIn counts the goroutines of p waiting for work.
func waitingIn(p *Pool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// TestPoolKeepsItsGoroutines: work that follows other work runs on
// the goroutine that ran it, with the stack it grew.
func TestPoolKeepsItsGoroutines(t *testing.T) {
	w := New(4, time.Hour)
	for i := range 20 {
		done := make(chan struct{})
		w.Go(func() { deepStack(64 << 10); close(done) })
		<-done
		waitUntil(t, "the worker waits again", func() bool { return waitingIn(w) == 1 })
		if n := w.started.Load(); n != 1 {
			t.Fatalf("after %d frames one after another, %d goroutines started; want 1", i+1, n)
		}
	}
}

// deepStack uses about n bytes of stack.
func deepStack(n int) byte {
	var buf [1024]byte
	buf[n%1024] = byte(n)
	if n <= 1024 {
		return buf[0]
	}
	return deepStack(n-1024) + buf[n%1024]
}

// TestPoolBoundsWhatWaits: a burst runs on as many goroutines as it
// needs, and then at most maxIdle stay, each only for idleFor.
func TestPoolBoundsWhatWaits(t *testing.T) {
	const burst, maxIdle = 10, 3
	idleFor := time.Hour
	w := New(maxIdle, idleFor)
	release := make(chan struct{})
	ran := make(chan struct{}, burst)
	for range burst {
		w.Go(func() { <-release; ran <- struct{}{} })
	}
	if n := w.started.Load(); n != burst {
		t.Fatalf("%d blocked frames started %d goroutines; want %d", burst, n, burst)
	}
	close(release)
	for range burst {
		<-ran
	}
	waitUntil(t, "the burst's workers settle", func() bool { return waitingIn(w) == maxIdle })

	// Those waiting take the next frames: no goroutine starts.
	done := make(chan struct{}, maxIdle)
	for range maxIdle {
		w.Go(func() { done <- struct{}{} })
		<-done
	}
	if n := w.started.Load(); n != burst {
		t.Fatalf("frames after the burst started goroutines: %d started in all, want %d", n, burst)
	}
	waitUntil(t, "the others end", func() bool { return w.ended.Load() == burst-maxIdle })

	// Idle ones leave.
	w2 := New(maxIdle, time.Millisecond)
	w2.Go(func() {})
	waitUntil(t, "an idle worker leaves", func() bool { return w2.ended.Load() == 1 })
	w2.Go(func() { done <- struct{}{} })
	<-done
	if n := w2.started.Load(); n != 2 {
		t.Fatalf("after the idle worker left, %d goroutines started; want 2", n)
	}
}

// TestCloseEndsTheWaiting: Close ends every waiting goroutine, and work
// given later still runs.
func TestCloseEndsTheWaiting(t *testing.T) {
	p := New(8, time.Hour)
	release := make(chan struct{})
	ran := make(chan struct{}, 3)
	for range 3 {
		p.Go(func() { <-release; ran <- struct{}{} })
	}
	close(release)
	for range 3 {
		<-ran
	}
	waitUntil(t, "three wait", func() bool { return waitingIn(p) == 3 })
	p.Close()
	waitUntil(t, "all end", func() bool { return p.ended.Load() == 3 })
	p.Go(func() { ran <- struct{}{} })
	<-ran
	waitUntil(t, "the late one ends too", func() bool { return p.ended.Load() == 4 })
}
