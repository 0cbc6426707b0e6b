package modelretry

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// MaxAttemptsLimit is the largest MaxAttempts a policy may have: RFC 0248
// §B allows a per-call maxAttempts of 1..16.
const MaxAttemptsLimit = 16

// Jitter selects how a computed backoff is randomised.
type Jitter int

const (
	// JitterFull sleeps U(0, d) (AWS "full jitter", gRPC A6). The default:
	// mspd fans many sessions onto one provider key, and full jitter breaks
	// up a herd best; because the exact delay is announced before sleeping,
	// clients still show a correct countdown.
	JitterFull Jitter = iota
	// JitterProportional sleeps d·U(0.75, 1.0], as the OpenAI and Anthropic
	// SDKs do: more predictable, but it decorrelates a herd less well.
	JitterProportional
)

// String returns "full" or "proportional".
func (j Jitter) String() string {
	switch j {
	case JitterFull:
		return "full"
	case JitterProportional:
		return "proportional"
	}
	return fmt.Sprintf("Jitter(%d)", int(j))
}

// Policy bounds and paces the attempts of one model call. The zero value is
// invalid; start from DefaultPolicy.
type Policy struct {
	// MaxAttempts bounds the provider requests of the call, the first one
	// included, across model-layer and turn-layer retries (1..16; 1 turns
	// retries off).
	MaxAttempts int
	// InitialBackoff is the backoff before the first retry, before jitter.
	InitialBackoff time.Duration
	// MaxBackoff caps the computed backoff, before jitter. It does not cap
	// server-directed delays; MaxServerDelay does.
	MaxBackoff time.Duration
	// Multiplier grows the backoff per retry (>= 1).
	Multiplier float64
	// Jitter randomises the computed backoff; the zero value is JitterFull.
	Jitter Jitter
	// MaxServerDelay bounds a server-directed delay (Retry-After). A longer
	// one is not retried: the call fails at once and reports the real delay.
	// Clamping would retry before the server asked and earn another 429 at
	// the cost of an attempt and budget (openai-python #3555; Portkey fails
	// the same way). A delay equal to the bound is honoured.
	MaxServerDelay time.Duration
	// GrowMaxTokens lets a truncation retry double maxTokens (RFC 0248 §B.2).
	// The caller applies it: NextMaxTokens(cur, modelMax, p.GrowMaxTokens).
	GrowMaxTokens bool
}

// DefaultPolicy returns mspd's defaults:
//
//   - 5 attempts in all: gRPC clamps maxAttempts to 5, and Codex and
//     google-genai also use 5; the SDKs' 3 gives up within ~1.5 s, too soon
//     to ride out a 529 burst, while more makes a user watch a long chain.
//   - backoff 500 ms ×2, capped at 8 s: the constants every Stainless SDK
//     (OpenAI, Anthropic) and openai-node's WebSocket reconnect use, so
//     provider-side expectations match; with full jitter the four retries
//     wait about 3.75 s on average and at most 7.5 s.
//   - full jitter (see JitterFull).
//   - MaxServerDelay 60 s: a user watching a countdown in a chat should not
//     be held longer per retry; anthropic-python, openai-node and Portkey use
//     60 s (openai-python allows 120 s, mostly for batch callers).
//   - GrowMaxTokens true: RFC 0248 §B's default.
func DefaultPolicy() Policy {
	return Policy{
		MaxAttempts:    5,
		InitialBackoff: 500 * time.Millisecond,
		MaxBackoff:     8 * time.Second,
		Multiplier:     2,
		Jitter:         JitterFull,
		MaxServerDelay: 60 * time.Second,
		GrowMaxTokens:  true,
	}
}

// PolicyError reports an invalid policy field. Field is the camelCase
// member name ("maxAttempts"), so a caller can answer validation_error with
// details.field "retry.maxAttempts" (RFC 0248 §B.5).
type PolicyError struct {
	Field  string
	Reason string
}

// Error implements the error interface.
func (e *PolicyError) Error() string {
	return "modelretry: invalid policy " + e.Field + ": " + e.Reason
}

// Validate reports the first invalid field as a *PolicyError, or nil.
func (p Policy) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &PolicyError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case p.MaxAttempts < 1 || p.MaxAttempts > MaxAttemptsLimit:
		return bad("maxAttempts", "%d is outside 1..%d", p.MaxAttempts, MaxAttemptsLimit)
	case p.InitialBackoff <= 0:
		return bad("initialBackoff", "%v is not positive", p.InitialBackoff)
	case p.MaxBackoff < p.InitialBackoff:
		return bad("maxBackoff", "%v is below initialBackoff %v", p.MaxBackoff, p.InitialBackoff)
	case math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0) || p.Multiplier < 1:
		return bad("multiplier", "%v is not a finite number >= 1", p.Multiplier)
	case p.Jitter != JitterFull && p.Jitter != JitterProportional:
		return bad("jitter", "unknown mode %v", p.Jitter)
	case p.MaxServerDelay <= 0:
		return bad("maxServerDelay", "%v is not positive", p.MaxServerDelay)
	}
	return nil
}

// WithMaxAttempts applies a per-call maxAttempts: n above ceiling is clamped
// to ceiling, not refused (RFC 0248 §B.3). Pass p.MaxAttempts as ceiling to
// let a call only narrow the host's bound. n below 1 is kept, so Validate
// refuses it rather than silently ignoring it (§B.5).
func (p Policy) WithMaxAttempts(n, ceiling int) Policy {
	p.MaxAttempts = min(n, ceiling)
	return p
}

// WithGrowMaxTokens applies a per-call growMaxTokens. It only narrows: a
// call cannot turn growth on when the host policy has it off.
func (p Policy) WithGrowMaxTokens(grow bool) Policy {
	p.GrowMaxTokens = p.GrowMaxTokens && grow
	return p
}

// maxExponent keeps Multiplier^n finite; any realistic policy hits
// MaxBackoff long before (the SDKs cap the retry count at 1000 likewise).
const maxExponent = 1000

// Delay computes the jittered backoff before retry number retry (0 for the
// first retry): min(MaxBackoff, InitialBackoff·Multiplier^retry), jittered.
// rnd returns values in [0, 1); nil uses math/rand/v2. The result is whole
// milliseconds, so the announced retryDelayMs is exactly the sleep.
func (p Policy) Delay(retry int, rnd func() float64) time.Duration {
	d := float64(p.MaxBackoff)
	if retry < maxExponent {
		if v := float64(p.InitialBackoff) * math.Pow(p.Multiplier, float64(max(retry, 0))); v < d {
			d = v
		}
	}
	r := unit(rnd)
	if p.Jitter == JitterProportional {
		d *= 1 - 0.25*r
	} else {
		d *= r
	}
	return time.Duration(d).Truncate(time.Millisecond)
}

// unit draws from rnd, clamped to [0, 1) so a faulty source cannot produce a
// negative or over-long delay.
func unit(rnd func() float64) float64 {
	if rnd == nil {
		return rand.Float64()
	}
	r := rnd()
	if !(r >= 0) { // also catches NaN
		return 0
	}
	if r >= 1 {
		return math.Nextafter(1, 0)
	}
	return r
}

// NextMaxTokens returns the maxTokens for a truncation retry: current
// doubled, capped at the model's maximum output. ok is false when it cannot
// grow: grow is off (RFC 0248 §B.2), current is already at modelMax, or
// modelMax is unknown (<= 0) — growth without a cap need not converge
// (retry-background §1, §3.3 item 14). The caller must also not grow when
// the prompt already fills the context window, nor on a context-window stop
// (classify those as contextLengthExceeded, which is not retried).
func NextMaxTokens(current, modelMax int, grow bool) (int, bool) {
	if !grow || current <= 0 || modelMax <= 0 || current >= modelMax {
		return current, false
	}
	if current > modelMax/2 {
		return modelMax, true
	}
	return current * 2, true
}
