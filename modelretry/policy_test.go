package modelretry

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func fixed(v float64) func() float64 { return func() float64 { return v } }

func TestDefaultPolicy(t *testing.T) {
	p := DefaultPolicy()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Policy{MaxAttempts: 5, InitialBackoff: 500 * time.Millisecond, MaxBackoff: 8 * time.Second,
		Multiplier: 2, Jitter: JitterFull, MaxServerDelay: time.Minute, GrowMaxTokens: true}
	if p != want {
		t.Fatalf("DefaultPolicy() = %+v", p)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*Policy)
		field string
	}{
		{"ok", func(*Policy) {}, ""},
		{"one attempt", func(p *Policy) { p.MaxAttempts = 1 }, ""},
		{"sixteen attempts", func(p *Policy) { p.MaxAttempts = 16 }, ""},
		{"zero attempts", func(p *Policy) { p.MaxAttempts = 0 }, "maxAttempts"},
		{"seventeen attempts", func(p *Policy) { p.MaxAttempts = 17 }, "maxAttempts"},
		{"zero initial", func(p *Policy) { p.InitialBackoff = 0 }, "initialBackoff"},
		{"cap below initial", func(p *Policy) { p.MaxBackoff = 100 * time.Millisecond }, "maxBackoff"},
		{"multiplier below one", func(p *Policy) { p.Multiplier = 0.5 }, "multiplier"},
		{"multiplier NaN", func(p *Policy) { p.Multiplier = math.NaN() }, "multiplier"},
		{"multiplier Inf", func(p *Policy) { p.Multiplier = math.Inf(1) }, "multiplier"},
		{"jitter unknown", func(p *Policy) { p.Jitter = 7 }, "jitter"},
		{"server delay zero", func(p *Policy) { p.MaxServerDelay = 0 }, "maxServerDelay"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultPolicy()
			tt.edit(&p)
			err := p.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			var pe *PolicyError
			if !errors.As(err, &pe) || pe.Field != tt.field {
				t.Fatalf("got %v, want a PolicyError on %q", err, tt.field)
			}
		})
	}
}

func TestWithMaxAttempts(t *testing.T) {
	tests := []struct {
		n, ceiling, want int
		valid            bool
	}{
		{1, 5, 1, true},
		{3, 5, 3, true},
		{5, 5, 5, true},
		{16, 5, 5, true}, // clamped, not refused (RFC 0248 §B.3)
		{12, 16, 12, true},
		{0, 5, 0, false}, // malformed stays visible to Validate (§B.5)
		{-2, 5, -2, false},
	}
	for _, tt := range tests {
		p := DefaultPolicy().WithMaxAttempts(tt.n, tt.ceiling)
		if p.MaxAttempts != tt.want || (p.Validate() == nil) != tt.valid {
			t.Errorf("WithMaxAttempts(%d, %d) = %d (valid %v); want %d (valid %v)",
				tt.n, tt.ceiling, p.MaxAttempts, p.Validate() == nil, tt.want, tt.valid)
		}
	}
}

func TestWithGrowMaxTokens(t *testing.T) {
	on, off := DefaultPolicy(), DefaultPolicy()
	off.GrowMaxTokens = false
	if !on.WithGrowMaxTokens(true).GrowMaxTokens || on.WithGrowMaxTokens(false).GrowMaxTokens {
		t.Error("a call must be able to turn growth off")
	}
	if off.WithGrowMaxTokens(true).GrowMaxTokens {
		t.Error("a call must not widen the host policy")
	}
}

func TestDelayGrowthAndCap(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name       string
		multiplier float64
		retry      int
		want       time.Duration
	}{
		{"first retry", 2, 0, 500 * ms},
		{"second", 2, 1, 1000 * ms},
		{"third", 2, 2, 2000 * ms},
		{"fourth", 2, 3, 4000 * ms},
		{"fifth hits cap", 2, 4, 8000 * ms},
		{"beyond cap", 2, 5, 8000 * ms},
		{"huge index", 2, 1 << 30, 8000 * ms},
		{"negative index", 2, -3, 500 * ms},
		{"multiplier 1.5", 1.5, 2, 1125 * ms},
		{"multiplier 1", 1, 9, 500 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultPolicy()
			p.Multiplier = tt.multiplier
			// Proportional jitter with r = 0 gives the nominal delay exactly.
			p.Jitter = JitterProportional
			if got := p.Delay(tt.retry, fixed(0)); got != tt.want {
				t.Fatalf("nominal: got %v, want %v", got, tt.want)
			}
			p.Jitter = JitterFull
			if got := p.Delay(tt.retry, fixed(0.5)); got != (tt.want / 2).Truncate(time.Millisecond) {
				t.Fatalf("full jitter at 0.5: got %v, want %v", got, tt.want/2)
			}
		})
	}
}

func TestDelayFaultyRand(t *testing.T) {
	p := DefaultPolicy()
	for _, r := range []float64{-1, math.NaN(), 1, 7, math.Inf(1)} {
		d := p.Delay(3, fixed(r))
		if d < 0 || d > 4*time.Second {
			t.Errorf("rand %v gave %v outside [0, 4s]", r, d)
		}
	}
	if d := p.Delay(0, nil); d < 0 || d >= 500*time.Millisecond {
		t.Errorf("nil rand gave %v", d)
	}
}

func TestJitterBounds(t *testing.T) {
	const samples = 20000
	for _, mode := range []Jitter{JitterFull, JitterProportional} {
		t.Run(mode.String(), func(t *testing.T) {
			p := DefaultPolicy()
			p.Jitter = mode
			rng := rand.New(rand.NewPCG(1, 2))
			for retry := 0; retry < 7; retry++ {
				nominal := min(p.MaxBackoff, p.InitialBackoff<<retry)
				lo, hi := time.Duration(0), nominal
				if mode == JitterProportional {
					lo = nominal * 3 / 4
				}
				minSeen, maxSeen, sum := time.Duration(math.MaxInt64), time.Duration(0), 0.0
				for range samples {
					d := p.Delay(retry, rng.Float64)
					if d < lo || d > hi || d%time.Millisecond != 0 {
						t.Fatalf("retry %d: %v outside [%v, %v] or not whole ms", retry, d, lo, hi)
					}
					if mode == JitterFull && d == hi {
						t.Fatalf("retry %d: full jitter reached its bound %v", retry, hi)
					}
					minSeen, maxSeen, sum = min(minSeen, d), max(maxSeen, d), sum+float64(d)
				}
				// The samples must actually spread over the range.
				span := float64(hi - lo)
				if float64(minSeen-lo) > 0.01*span || float64(hi-maxSeen) > 0.01*span+float64(time.Millisecond) {
					t.Errorf("retry %d: samples [%v, %v] do not cover [%v, %v]", retry, minSeen, maxSeen, lo, hi)
				}
				mean, mid := sum/samples, float64(lo+hi)/2
				if math.Abs(mean-mid) > 0.02*float64(hi) {
					t.Errorf("retry %d: mean %v, want about %v", retry, time.Duration(mean), time.Duration(mid))
				}
			}
		})
	}
}

func TestNextMaxTokens(t *testing.T) {
	tests := []struct {
		name              string
		current, modelMax int
		grow              bool
		want              int
		ok                bool
	}{
		{"doubles", 1000, 8000, true, 2000, true},
		{"caps at model max", 24000, 64000, true, 48000, true},
		{"caps at model max again", 48000, 64000, true, 64000, true},
		{"stops at model max", 64000, 64000, true, 64000, false},
		{"above model max", 70000, 64000, true, 70000, false},
		{"growth off", 1000, 8000, false, 1000, false},
		{"unknown model max", 1000, 0, true, 1000, false},
		{"zero current", 0, 8000, true, 0, false},
		{"no overflow", math.MaxInt - 1, math.MaxInt, true, math.MaxInt, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := NextMaxTokens(tt.current, tt.modelMax, tt.grow)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("got (%d, %v), want (%d, %v)", got, ok, tt.want, tt.ok)
			}
		})
	}
	// The sm64ds sequence converges: 24000 → 48000 → 64000 → stop.
	n, steps := 24000, 0
	for {
		next, ok := NextMaxTokens(n, 64000, true)
		if !ok {
			break
		}
		n, steps = next, steps+1
	}
	if n != 64000 || steps != 2 {
		t.Fatalf("converged at %d after %d steps", n, steps)
	}
}

func TestPolicyErrorMessage(t *testing.T) {
	p := DefaultPolicy()
	p.MaxAttempts = 0
	if got := p.Validate().Error(); got != "modelretry: invalid policy maxAttempts: 0 is outside 1..16" {
		t.Fatal(got)
	}
}

func TestKindFromStatusAndJitterString(t *testing.T) {
	if KindFromStatus(204) != "" || KindFromStatus(302) != "" {
		t.Error("non-error statuses must carry no kind")
	}
	if JitterFull.String() != "full" || JitterProportional.String() != "proportional" || Jitter(9).String() != "Jitter(9)" {
		t.Error("Jitter.String")
	}
}
