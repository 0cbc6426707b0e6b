package session

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"mspd/schema/msp"
)

// countSub counts what is replayed to it and signals each turn/completed.
type countSub struct {
	n, bytes  atomic.Int64
	completed chan struct{}
}

func (c *countSub) Deliver(n Notification) {
	c.n.Add(1)
	c.bytes.Add(int64(len(n.Frame)))
	if n.Method == msp.NotifyTurnCompleted && c.completed != nil {
		c.completed <- struct{}{}
	}
}

func (c *countSub) Replay(_ context.Context, n Notification) error { c.Deliver(n); return nil }
func (c *countSub) Subscribed(string, string)                      {}
func (c *countSub) Broadcasts() bool                               { return false }

// BenchmarkReplay subscribes from the first cursor of a session of 10,000
// durable events (one-delta turns, as mspbench's resume scenario): the
// whole durable replay, from the store to Subscriber.Replay.
func BenchmarkReplay(b *testing.B) {
	st := openStore(b)
	m := newManager(b, st, newHistModel(), mgrOpts{})
	live := &countSub{completed: make(chan struct{}, 1)}
	sid := startSession(b, m, live)
	ctx := context.Background()
	for i := 0; ; i++ {
		s, release, err := m.acquire(ctx, sid)
		if err != nil {
			b.Fatal(err)
		}
		s.mu.Lock()
		head := s.head
		s.mu.Unlock()
		release()
		if head >= 10000 {
			break
		}
		startTurn(b, m, textTurn(sid, fmt.Sprintf("q%d", i)))
		<-live.completed
	}
	from := cursorIn(b, st, sid, 0)
	var events int64
	cpu0 := processCPU()
	for b.Loop() {
		sub := &countSub{}
		if err := m.attach(ctx, sub, sid, from); err != nil {
			b.Fatal(err)
		}
		if err := m.Unsubscribe(ctx, sub, sid); err != nil {
			b.Fatal(err)
		}
		events = sub.n.Load()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(int64(b.N)*events), "ns/event")
	// CPU, unlike wall time, hardly moves with what else runs on the
	// machine.
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(int64(b.N)*events), "cpu-ns/event")
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestFrameArena: frames cut from an arena are msp.EncodeNotification's,
// byte for byte; appending to one never writes over the next; a large one
// is allocated alone.
func TestFrameArena(t *testing.T) {
	var a frameArena
	var frames [][]byte
	var want [][]byte
	for i := range 300 { // several chunks
		p := json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, strings.Repeat("x", i*3)))
		frames = append(frames, a.notification(msp.NotifyItemCompleted, p, int64(i)))
		want = append(want, msp.EncodeNotification(msp.NotifyItemCompleted, p, int64(i)))
	}
	for i := range frames {
		if cap(frames[i]) != len(frames[i]) {
			t.Fatalf("frame %d: capacity %d past its length %d", i, cap(frames[i]), len(frames[i]))
		}
		_ = append(frames[i], "garbage"...)
	}
	for i := range frames {
		if !bytes.Equal(frames[i], want[i]) {
			t.Fatalf("frame %d:\n%s\nwant\n%s", i, frames[i], want[i])
		}
	}
	large := json.RawMessage(`"` + strings.Repeat("y", arenaChunk) + `"`)
	before := len(a.buf)
	if f := a.notification("m", large, 1); !bytes.Equal(f, msp.EncodeNotification("m", large, 1)) || len(a.buf) != before {
		t.Fatal("a large frame went into the chunk")
	}
}
