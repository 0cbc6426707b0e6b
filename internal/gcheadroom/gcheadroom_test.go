package gcheadroom

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live, headroom uint64
		want           int
	}{
		{0, 64 * mib, MaxPercent},
		{1 * mib, 64 * mib, MaxPercent}, // 6400%, bounded
		{16 * mib, 64 * mib, 400},
		{40 * mib, 64 * mib, 160},
		{64 * mib, 64 * mib, DefaultPercent},
		{1024 * mib, 64 * mib, DefaultPercent}, // a large heap keeps Go's default
	} {
		if got := PercentFor(tc.live, tc.headroom); got != tc.want {
			t.Errorf("PercentFor(%d MiB, %d MiB) = %d, want %d", tc.live/mib, tc.headroom/mib, got, tc.want)
		}
	}
}

// collectUntil runs collections until the tuner's percentage satisfies
// ok, waiting for its adjustment after each.
func collectUntil(t *testing.T, tu *Tuner, ok func(int) bool) int {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		p, tuned := tu.Percent()
		if ok(p) {
			return p
		}
		runtime.GC()
		select {
		case <-tuned:
		case <-deadline:
			t.Fatalf("percentage still %d after collections", p)
		}
	}
}

// TestTunerFollowsTheLiveHeap: a small live heap gets a percentage above
// Go's default; once more than the headroom is live, the default is back;
// Stop leaves GOGC at the default.
func TestTunerFollowsTheLiveHeap(t *testing.T) {
	const headroom = 8 << 20
	tu := Start(headroom)
	defer tu.Stop()
	collectUntil(t, tu, func(p int) bool { return p > DefaultPercent })

	live := make([]byte, 4*headroom)
	for i := range live {
		live[i] = byte(i)
	}
	collectUntil(t, tu, func(p int) bool { return p == DefaultPercent })
	runtime.KeepAlive(live)
	live = nil

	collectUntil(t, tu, func(p int) bool { return p > DefaultPercent })
	tu.Stop()
	if p, _ := tu.Percent(); p != DefaultPercent {
		t.Errorf("after Stop the tuner reports %d", p)
	}
	if prev := debug.SetGCPercent(DefaultPercent); prev != DefaultPercent {
		t.Errorf("after Stop GOGC is %d, want %d", prev, DefaultPercent)
	}
	runtime.GC() // a collection after Stop changes nothing
	if prev := debug.SetGCPercent(DefaultPercent); prev != DefaultPercent {
		t.Errorf("a collection after Stop set GOGC to %d", prev)
	}
}

// TestZeroHeadroomTunesNothing: Start(0) leaves GOGC as it is.
func TestZeroHeadroomTunesNothing(t *testing.T) {
	prev := debug.SetGCPercent(150)
	defer debug.SetGCPercent(prev)
	tu := Start(0)
	runtime.GC()
	tu.Stop()
	if got := debug.SetGCPercent(150); got != 150 {
		t.Errorf("GOGC became %d", got)
	}
}
