package tool

import (
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Second}.withDefaults()
	tests := []struct {
		n    int
		r    float64
		want time.Duration
	}{
		{1, 0, 100 * time.Millisecond},
		{2, 0, 200 * time.Millisecond},
		{4, 0, 800 * time.Millisecond},
		{5, 0, time.Second}, // capped
		{100, 0, time.Second},
		{1, 0.5, 75 * time.Millisecond}, // jitter takes up to half off
		{5, 0.999, 500500 * time.Microsecond},
	}
	for _, tt := range tests {
		if got := b.delay(tt.n, tt.r); got != tt.want {
			t.Errorf("delay(%d, %v) = %v, want %v", tt.n, tt.r, got, tt.want)
		}
	}
	if d := (Backoff{}).withDefaults(); d.Min != 250*time.Millisecond || d.Max != 30*time.Second || d.Healthy != time.Minute {
		t.Errorf("defaults %+v", d)
	}
}

func TestRestartPolicyResetsAfterHealthyUptime(t *testing.T) {
	p := restartPolicy{backoff: Backoff{Min: time.Second, Max: time.Minute, Healthy: 10 * time.Second}, rand: func() float64 { return 0 }}
	steps := []struct {
		uptime, want time.Duration
	}{
		{0, time.Second}, // failed to start
		{time.Second, 2 * time.Second},
		{9 * time.Second, 4 * time.Second},
		{10 * time.Second, time.Second}, // it was healthy: start over
		{0, 2 * time.Second},
		{time.Hour, time.Second},
	}
	for i, s := range steps {
		if got := p.next(s.uptime); got != s.want {
			t.Errorf("step %d (up %v): %v, want %v", i, s.uptime, got, s.want)
		}
	}
}
