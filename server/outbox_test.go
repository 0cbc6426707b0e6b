package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// testGap renders a view/gap marker legibly.
func testGap(sessionID, after, next string) []byte {
	return fmt.Appendf(nil, "gap %s %s→%s", sessionID, after, next)
}

func ev(cursor string) []byte { return []byte("ev " + cursor) }

// newTestOutbox gives view events maxFrames and maxBytes, out of a budget
// four times as large.
func newTestOutbox(maxFrames, maxBytes int) *outbox {
	return newOutbox(outboxLimits{budget: 4 * maxBytes, reserve: maxBytes, gapBytes: maxBytes, gapFrames: maxFrames}, testGap)
}

// next waits for a frame and takes it, as a writer would: the tests read
// outboxes that no connection serves (and so that start no writer).
func (o *outbox) next(ctx context.Context) ([]byte, error) {
	for {
		if f := o.take(nil, 1, false); len(f) == 1 {
			return f[0], nil
		}
		o.mu.Lock()
		if o.head < len(o.frames) {
			o.mu.Unlock()
			continue
		}
		if o.closed {
			o.mu.Unlock()
			return nil, errClosed
		}
		// Be woken as a writer would be started.
		queued := make(chan struct{})
		o.writing = false
		o.startWriter = func() { o.startWriter = nil; close(queued) }
		o.mu.Unlock()
		select {
		case <-queued:
		case <-o.shut:
		case <-ctx.Done():
			o.mu.Lock()
			o.startWriter = nil
			o.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

// drain takes every queued frame without blocking.
func drain(t *testing.T, o *outbox) []string {
	t.Helper()
	var out []string
	for {
		o.mu.Lock()
		empty := o.head == len(o.frames)
		o.mu.Unlock()
		if empty {
			return out
		}
		f, err := o.next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(f))
	}
}

func pop(t *testing.T, o *outbox) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, err := o.next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return string(f)
}

func wantFrames(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("frames\n got %q\nwant %q", got, want)
	}
}

// delta and durable push view events of session s.
func delta(o *outbox, cursor string)   { o.pushView("s", cursor, ev(cursor), false) }
func durable(o *outbox, cursor string) { o.pushView("s", cursor, ev(cursor), true) }

func TestOutboxKeepsOrderWithinBudget(t *testing.T) {
	o := newTestOutbox(10, 1<<20)
	o.subscribed("s", "c0")
	if err := o.pushResponse(context.Background(), []byte("resp 1")); err != nil {
		t.Fatal(err)
	}
	durable(o, "c1")
	delta(o, "c1.1")
	o.pushView("t", "d1", ev("d1"), true)
	o.pushProtected([]byte("broadcast"))
	durable(o, "c2")
	wantFrames(t, drain(t, o), "resp 1", "ev c1", "ev c1.1", "ev d1", "broadcast", "ev c2")
	if dropped, gaps, queued := o.stats(); dropped != 0 || gaps != 0 || queued != 0 {
		t.Fatalf("stats %d %d %d", dropped, gaps, queued)
	}
}

func TestOutboxDropOpensHoleClosedByNextDurableEvent(t *testing.T) {
	o := newTestOutbox(2, 1<<20)
	o.subscribed("s", "c0")
	delta(o, "c0.1")
	delta(o, "c0.2")
	delta(o, "c0.3") // dropped
	delta(o, "c0.4") // dropped: the same hole
	if _, _, queued := o.stats(); queued != 2 {
		t.Fatalf("%d queued", queued)
	}
	if got := pop(t, o); got != "ev c0.1" {
		t.Fatalf("first frame %q", got)
	}
	delta(o, "c0.5") // room again, but a delta never closes a hole
	wantFrames(t, drain(t, o), "ev c0.2")
	durable(o, "c1") // closes it: the marker goes right before it
	wantFrames(t, drain(t, o), "gap s c0.2→c1", "ev c1")
	if dropped, gaps, _ := o.stats(); dropped != 3 || gaps != 1 {
		t.Fatalf("dropped %d gaps %d, want 3 and 1", dropped, gaps)
	}
	// No hole, no gap.
	delta(o, "c1.1")
	wantFrames(t, drain(t, o), "ev c1.1")
}

func TestOutboxHoleBeforeAnyDeliveryStartsAtSubscription(t *testing.T) {
	o := newTestOutbox(1, 1<<20)
	o.subscribed("s", "c0")
	o.pushView("other", "x1", ev("x1"), false) // fills the budget
	delta(o, "c0.1")                           // dropped
	wantFrames(t, drain(t, o), "ev x1")
	durable(o, "c1")
	wantFrames(t, drain(t, o), "gap s c0→c1", "ev c1")
}

func TestOutboxByteBudget(t *testing.T) {
	o := newTestOutbox(100, 12) // room for two 6-byte frames
	o.subscribed("s", "c0")
	delta(o, "c1") // "ev c1" is 5 bytes
	delta(o, "c2")
	delta(o, "c3") // 15 > 12: dropped
	if _, _, queued := o.stats(); queued != 2 {
		t.Fatalf("%d queued", queued)
	}
	wantFrames(t, drain(t, o), "ev c1", "ev c2")
	// A frame bigger than the whole budget still goes when nothing else is
	// queued, so one large event cannot wedge a view forever; what comes
	// behind it is weighed without it.
	big := strings.Repeat("x", 100)
	o.pushView("s", "c4", []byte(big), true)
	delta(o, "c5")
	delta(o, "c6")
	delta(o, "c7") // 15 > 12 behind the big one: dropped
	wantFrames(t, drain(t, o), "gap s c2→c4", big, "ev c5", "ev c6")
	durable(o, "c8")
	wantFrames(t, drain(t, o), "gap s c6→c8", "ev c8")
}

func TestOutboxHolesPerSession(t *testing.T) {
	o := newTestOutbox(2, 1<<20)
	o.subscribed("a", "a0")
	o.subscribed("b", "b0")
	o.pushView("a", "a1", ev("a1"), false)
	o.pushView("b", "b1", ev("b1"), false)
	o.pushView("a", "a2", ev("a2"), false) // dropped
	wantFrames(t, drain(t, o), "ev a1", "ev b1")
	o.pushView("b", "b2", ev("b2"), false) // b had no hole
	o.pushView("a", "a3", ev("a3"), true)
	wantFrames(t, drain(t, o), "ev b2", "gap a a1→a3", "ev a3")
}

func TestOutboxDeliversDroppedDurableTail(t *testing.T) {
	o := newTestOutbox(2, 1<<20)
	o.subscribed("s", "c0")
	durable(o, "c1")
	durable(o, "c2")
	delta(o, "c2.1") // dropped
	durable(o, "c3") // dropped, kept as the tail
	durable(o, "c4") // dropped, replaces the tail
	// Taking c1 makes room: the tail goes out with the gap, no further
	// event needed.
	if got := pop(t, o); got != "ev c1" {
		t.Fatalf("first %q", got)
	}
	wantFrames(t, drain(t, o), "ev c2", "gap s c2→c4", "ev c4")
	if _, _, queued := o.stats(); queued != 0 {
		t.Fatal("frames left")
	}
	// The hole is closed: the next event has no gap.
	durable(o, "c5")
	wantFrames(t, drain(t, o), "ev c5")
	o.mu.Lock()
	tails := o.tails
	o.mu.Unlock()
	if tails != 0 {
		t.Fatalf("tails %d", tails)
	}
}

func TestOutboxDeltaLostAfterTailKeepsHoleOpen(t *testing.T) {
	o := newTestOutbox(2, 1<<20)
	o.subscribed("s", "c0")
	durable(o, "c1")
	durable(o, "c2")
	durable(o, "c3") // dropped: tail
	delta(o, "c3.1") // dropped after the tail
	pop(t, o)        // c1 leaves; the tail is delivered
	delta(o, "c3.2") // no room: still in the hole
	wantFrames(t, drain(t, o), "ev c2", "gap s c2→c3", "ev c3")
	durable(o, "c4")
	// c3.1 and c3.2 were lost after c3: the hole is reported from c3.
	wantFrames(t, drain(t, o), "gap s c3→c4", "ev c4")
}

func TestOutboxNewerEventSupersedesTail(t *testing.T) {
	o := newTestOutbox(100, 20)
	o.subscribed("s", "c0")
	o.pushView("s", "c1", []byte(strings.Repeat("a", 15)), true)
	o.pushView("s", "c2", []byte(strings.Repeat("b", 10)), true) // no room: tail
	o.pushView("s", "c3", []byte("ccc"), true)                   // fits: delivered, tail dropped
	got := drain(t, o)
	wantFrames(t, got, strings.Repeat("a", 15), "gap s c1→c3", "ccc")
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.tails != 0 || o.views["s"].tailFrame != nil {
		t.Fatalf("the superseded tail is still kept (tails %d)", o.tails)
	}
}

func TestOutboxForgetDropsTail(t *testing.T) {
	o := newTestOutbox(1, 1<<20)
	o.subscribed("s", "c0")
	durable(o, "c1")
	durable(o, "c2") // tail
	o.forget("s")
	wantFrames(t, drain(t, o), "ev c1")
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.tails != 0 || o.views["s"] != nil {
		t.Fatalf("forget kept state: tails %d", o.tails)
	}
}

func TestOutboxNeverDropsProtected(t *testing.T) {
	// View events get one frame of 8 bytes; responses have room.
	o := newOutbox(outboxLimits{budget: 1 << 20, reserve: 1 << 10, gapBytes: 8, gapFrames: 1}, testGap)
	o.subscribed("s", "c0")
	durable(o, "c1")
	var want []string
	want = append(want, "ev c1")
	for i := range 100 {
		f := fmt.Sprintf("resp %03d with a body longer than the byte budget", i)
		if err := o.pushResponse(context.Background(), []byte(f)); err != nil {
			t.Fatal(err)
		}
		delta(o, fmt.Sprintf("c1.%d", i+1)) // all dropped
		want = append(want, f)
	}
	wantFrames(t, drain(t, o), want...)
}

func TestOutboxPushReplayWaitsForRoom(t *testing.T) {
	o := newTestOutbox(1, 1<<20)
	o.subscribed("s", "c0")
	durable(o, "c1")
	done := make(chan error, 1)
	go func() { done <- o.pushReplay(context.Background(), "s", "c2", ev("c2")) }()
	select {
	case err := <-done:
		t.Fatalf("pushReplay returned %v with the queue full", err)
	case <-time.After(20 * time.Millisecond):
	}
	if got := pop(t, o); got != "ev c1" {
		t.Fatalf("first %q", got)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pushReplay did not proceed once there was room")
	}
	// The replay moved the view to c2: a hole opened now starts there.
	durable(o, "c3") // no room behind c2: dropped, kept as the tail
	wantFrames(t, drain(t, o), "ev c2", "gap s c2→c3", "ev c3")
	if dropped, gaps, _ := o.stats(); dropped != 1 || gaps != 1 {
		t.Fatalf("dropped %d gaps %d", dropped, gaps)
	}
}

func TestOutboxPushReplayCancel(t *testing.T) {
	o := newTestOutbox(1, 1<<20)
	durable(o, "c1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.pushReplay(ctx, "s", "c2", ev("c2")) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pushReplay ignored cancellation")
	}
	wantFrames(t, drain(t, o), "ev c1")
}

func TestOutboxClose(t *testing.T) {
	o := newTestOutbox(4, 1<<20)
	o.subscribed("s", "c0")
	durable(o, "c1")
	o.pushProtected([]byte("resp"))

	// A writer blocked on an empty queue is woken by close.
	empty := newTestOutbox(4, 1<<20)
	woke := make(chan error, 1)
	go func() {
		_, err := empty.next(context.Background())
		woke <- err
	}()

	o.close()
	empty.close()
	if err := o.pushProtected([]byte("late")); !errors.Is(err, errClosed) {
		t.Fatalf("pushProtected after close: %v", err)
	}
	durable(o, "c2") // ignored
	if err := o.pushReplay(context.Background(), "s", "c3", ev("c3")); !errors.Is(err, errClosed) {
		t.Fatalf("pushReplay after close: %v", err)
	}
	// Queued frames still drain, then errClosed.
	if got := pop(t, o); got != "ev c1" {
		t.Fatalf("got %q", got)
	}
	if got := pop(t, o); got != "resp" {
		t.Fatalf("got %q", got)
	}
	for range 2 {
		if f, err := o.next(context.Background()); !errors.Is(err, errClosed) {
			t.Fatalf("after draining: %q, %v", f, err)
		}
	}
	select {
	case err := <-woke:
		if !errors.Is(err, errClosed) {
			t.Fatalf("blocked next: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("close did not wake a blocked next")
	}
}

func TestOutboxNextHonoursContext(t *testing.T) {
	o := newTestOutbox(4, 1<<20)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := o.next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}

// A stalled reader costs bounded memory however much is pushed.
func TestOutboxStalledReaderIsBounded(t *testing.T) {
	const maxFrames, protected = 64, 10
	o := newTestOutbox(maxFrames, 1<<20)
	sessions := []string{"a", "b", "c"}
	for _, s := range sessions {
		o.subscribed(s, s+":0")
	}
	for i := range 100_000 {
		s := sessions[i%len(sessions)]
		cursor := fmt.Sprintf("%s:%d", s, i)
		o.pushView(s, cursor, ev(cursor), i%7 == 0)
		if i%10_000 == 0 {
			o.pushProtected([]byte("resp"))
		}
	}
	dropped, gaps, queued := o.stats()
	if queued > maxFrames+protected {
		t.Fatalf("%d frames queued, want at most %d", queued, maxFrames+protected)
	}
	if dropped != 100_000-maxFrames || gaps != 0 {
		t.Fatalf("dropped %d, gaps %d", dropped, gaps)
	}
	o.mu.Lock()
	tails := o.tails
	o.mu.Unlock()
	if tails > len(sessions) {
		t.Fatalf("%d tails kept for %d sessions", tails, len(sessions))
	}
	// Once the reader catches up every session learns of its hole.
	got := drain(t, o)
	var gapFrames int
	for _, f := range got {
		if strings.HasPrefix(f, "gap ") {
			gapFrames++
		}
	}
	if gapFrames != len(sessions) {
		t.Fatalf("%d gap frames after catching up, want one per session: %q", gapFrames, got[len(got)-10:])
	}
}

// A reader that is always a little behind never lets the queue empty. The
// memory the queue holds must still be bounded by its budget, not grow
// with every frame that ever passed through.
func TestOutboxBacklogMemoryIsBounded(t *testing.T) {
	const maxFrames = 64
	o := newTestOutbox(maxFrames, 1<<20)
	o.subscribed("s", "c0")
	for i := range 10 {
		delta(o, fmt.Sprintf("c0.%d", i+1))
	}
	for i := range 100_000 {
		delta(o, fmt.Sprintf("c1.%d", i+1))
		if _, err := o.next(context.Background()); err != nil { // never blocks: the queue is never empty
			t.Fatal(err)
		}
	}
	o.mu.Lock()
	queued, capacity := len(o.frames)-o.head, cap(o.frames)
	o.mu.Unlock()
	if queued != 10 {
		t.Fatalf("%d queued", queued)
	}
	if capacity > 4*maxFrames {
		t.Fatalf("the queue's backing array holds %d slots for %d queued frames (budget %d): it grows with every frame ever sent while the reader lags",
			capacity, queued, maxFrames)
	}
}

// TestPushReplayWokenByClose: a replay waiting for room in a full
// outbox must return once the outbox is closed. It only watches o.space
// and ctx, and close() signals neither, so it waits forever. In a synctest
// bubble, so that the test closes the outbox once the replay is blocked
// waiting (synctest.Wait), and the 2 s bound is on the fake clock.
func TestPushReplayWokenByClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := newTestOutbox(1, 1<<20)
		durable(o, "c1") // the queue is full
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel() // a replay left blocked by a failure ends with the test
		done := make(chan error, 1)
		go func() { done <- o.pushReplay(ctx, "s", "c2", ev("c2")) }()
		synctest.Wait()
		o.mu.Lock()
		waiting := o.waiting
		o.mu.Unlock()
		if waiting != 1 {
			t.Fatalf("%d goroutines wait for room; want the replay waiting", waiting)
		}
		o.close()
		select {
		case err := <-done:
			if !errors.Is(err, errClosed) {
				t.Fatalf("pushReplay after close: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("pushReplay still blocked 2s after the outbox was closed")
		}
	})
}

// TestGapNextIsServable: §4.3 — a client fills a hole by paging
// view/page forward from `after` until a page contains `next`. view/page
// serves durable events only, so `next` must be a durable cursor. When a
// hole is closed by an ephemeral item/delta (small enough to fit the byte
// budget while the dropped durable tail did not), the marker names the
// delta's sub-position cursor, which no page will ever contain: the fill
// runs to the head of the log (re-reading events the client also gets
// live), and `mspd tail` renders everything up to the head twice.
func TestGapNextIsServable(t *testing.T) {
	o := newTestOutbox(100, 20)
	o.subscribed("s", "v:s:0")
	o.pushView("s", "v:s:1", []byte(strings.Repeat("a", 15)), true)
	o.pushView("s", "v:s:2", []byte(strings.Repeat("b", 10)), true) // dropped: the tail
	o.pushView("s", "v:s:2.1", []byte("d"), false)                  // fits: closes the hole
	for _, f := range drain(t, o) {
		if strings.HasPrefix(f, "gap ") && strings.Contains(f, "→v:s:2.1") {
			t.Fatalf("%q: view/gap.next is an ephemeral cursor view/page can never return", f)
		}
	}
}
