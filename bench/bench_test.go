package bench

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"mspd/schema/msp"
)

// The clients classify mspd's frames without decoding them; what they read
// must match what a decoder reads.
func TestFrameReading(t *testing.T) {
	p, _ := msp.Marshal(msp.ItemDeltaParams{SessionID: "s", ViewCursor: "v:s:3.2", ItemID: "i", Delta: `say "hi"`})
	f := msp.EncodeNotification(msp.NotifyItemDelta, p, 1764480000123)
	if m := methodOf(f); string(m) != msp.NotifyItemDelta {
		t.Errorf("methodOf = %q", m)
	}
	if d := stringMember(f, "delta"); string(d) != `say \"hi\"` {
		t.Errorf("delta = %q", d)
	}
	if c := stringMember(f, "viewCursor"); string(c) != "v:s:3.2" {
		t.Errorf("cursor = %q", c)
	}
	if ms := intMember(f, "emittedAtMs"); ms != 1764480000123 {
		t.Errorf("emittedAtMs = %d", ms)
	}
	if got := string(paramsOf(f)); got != string(p) {
		t.Errorf("params = %s, want %s", got, p)
	}
	if m := methodOf([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)); m != nil {
		t.Errorf("a response read as method %q", m)
	}
	res, ok, err := responseTo([]byte(`{"jsonrpc":"2.0","id":7,"result":{"a":1}}`), "7")
	if !ok || err != nil || string(res) != `{"a":1}` {
		t.Errorf("responseTo = %s, %v, %v", res, ok, err)
	}
	for _, c := range []string{"v:019a-x:42", "v:019a-x:3f9c0a7be1d2-42"} {
		if seq, err := durableSeq(c); err != nil || seq != 42 {
			t.Errorf("durableSeq(%q) = %d, %v", c, seq, err)
		}
	}
}

// The raw baseline's frames are mspd-shaped deltas of the size asked for.
func TestDeltaFrameOfSize(t *testing.T) {
	for _, size := range []int{10, 251, 641, 5000} {
		f := deltaFrameOfSize(size)
		if len(f) < size || (size > 200 && len(f) != size) {
			t.Errorf("size %d: frame of %d bytes", size, len(f))
		}
		if string(methodOf(f)) != msp.NotifyItemDelta || len(stringMember(f, "delta")) == 0 {
			t.Errorf("size %d: not a delta: %s", size, f)
		}
	}
}

func TestPercentilesAndMedian(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	p := percentilesOf(d)
	if p.p50 != 51*time.Millisecond || p.p99 != 99*time.Millisecond || p.max != 100*time.Millisecond || p.n != 100 {
		t.Errorf("percentiles %+v", p)
	}
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3: %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median of 4: %v", m)
	}
}

// parallel runs every index once, on at most width goroutines, and stops
// at the first error.
func TestParallel(t *testing.T) {
	var ran, running, most atomic.Int64
	err := parallel(context.Background(), 50, 4, func(context.Context, int) error {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		ran.Add(1)
		running.Add(-1)
		return nil
	})
	if err != nil || ran.Load() != 50 || most.Load() > 4 {
		t.Fatalf("err %v, ran %d, at most %d at once", err, ran.Load(), most.Load())
	}
	boom := errors.New("boom")
	if err := parallel(context.Background(), 10, 2, func(_ context.Context, i int) error {
		if i == 3 {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
}

// The server's CPU and memory are read from /proc; here, this process's.
func TestProcReadings(t *testing.T) {
	cpu, err := procCPU(os.Getpid())
	if err != nil || cpu <= 0 {
		t.Fatalf("procCPU = %v, %v", cpu, err)
	}
	rss, err := procRSS(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Fatalf("procRSS = %d, %v", rss, err)
	}
	if _, err := raiseFileLimit(); err != nil {
		t.Fatal(err)
	}
	m, err := readMachineTicks()
	if err != nil || m.total == 0 || m.busy > m.total {
		t.Fatalf("readMachineTicks = %+v, %v", m, err)
	}
	later := machineTicks{busy: m.busy + 30, total: m.total + 40}
	if got := busyPercent(m, later); got != 75 {
		t.Fatalf("busyPercent = %v, want 75", got)
	}
	if got := busyPercent(machineTicks{}, later); got != 0 {
		t.Fatalf("busyPercent from a failed reading = %v, want 0", got)
	}
}

// Durable events are counted by their cursors: a sub-position is a delta
// or an answer's ephemeral item/started.
func TestDurableCursor(t *testing.T) {
	for c, want := range map[string]bool{"v:s:3": true, "v:s:3.2": false, "v:a.b:7": true, "v:a.b:7.1": false, "v:s:3f9c0a7be1d2-3": true, "v:s:3f9c0a7be1d2-3.2": false, "": false} {
		if got := durableCursor([]byte(c)); got != want {
			t.Errorf("durableCursor(%q) = %v, want %v", c, got, want)
		}
	}
}
