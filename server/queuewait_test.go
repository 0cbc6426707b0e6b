package server

import (
	"fmt"
	"testing"
	"time"
)

// TestQueueWaitReported: every frame the writer takes reports how long it
// waited, exactly, also after the queue's slots were compacted.
func TestQueueWaitReported(t *testing.T) {
	o := newTestOutbox(1000, 1<<20)
	var now time.Duration
	o.clock = func() time.Duration { return now }
	var waits []time.Duration
	o.onWait = func(d time.Duration) { waits = append(waits, d) }
	// Frame i is queued at i ms.
	push := func(from, to int) {
		for i := from; i < to; i++ {
			now = time.Duration(i) * time.Millisecond
			if err := o.pushProtected(fmt.Appendf(nil, "frame %d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	push(0, 100)
	// 70 taken at 500 ms, a few at a time: past half the slots, the rest
	// moves to the front.
	now = 500 * time.Millisecond
	for taken := 0; taken < 70; {
		taken += len(o.take(nil, 40, false))
	}
	push(100, 150)
	now = time.Second
	for len(o.take(nil, 1<<20, false)) > 0 {
	}
	if len(waits) != 150 {
		t.Fatalf("%d waits reported for 150 frames", len(waits))
	}
	for i, w := range waits {
		want := time.Second - time.Duration(i)*time.Millisecond
		if i < 70 {
			want = 500*time.Millisecond - time.Duration(i)*time.Millisecond
		}
		if w != want {
			t.Fatalf("frame %d waited %v, want %v", i, w, want)
		}
	}
}
