package modelretry

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Signal is the raw description of one failed provider request, adapted by
// the caller from its provider's error type.
type Signal struct {
	// Kind is the provider's kind hint ("quotaExhausted" for an OpenAI
	// insufficient_quota 429); empty leaves the kind to HTTPStatus.
	Kind string
	// HTTPStatus is the response status, or the status an in-stream error
	// implies (overloaded_error → 529); 0 when there is none.
	HTTPStatus int
	// Header holds retry-after-ms, x-ms-retry-after-ms, retry-after and
	// x-should-retry; may be nil. Keys are matched case-insensitively.
	Header http.Header
	// Message is a short description safe for logs. For rateLimited failures
	// without a header delay, "try again in 1.2s" in it is honoured as a
	// server-directed delay, as Codex does.
	Message string
}

// Failure is a classified failure: what the retry engine decides on and
// what the caller reports (errorKind, httpStatus).
type Failure struct {
	// Kind is the errorKind to report. The engine replaces it with
	// KindBudgetExhausted or KindCancelled when those stop the retry.
	Kind string
	// OriginalKind is the classified kind when the engine replaced Kind;
	// empty otherwise.
	OriginalKind string
	// HTTPStatus is the provider's status; 0 when there is none.
	HTTPStatus int
	// Retryable says whether the failure may be retried at all, after
	// x-should-retry; attempts, budget and caps are the engine's business.
	Retryable bool
	// RetryAfter is the server-directed delay, uncapped, so the real value can
	// be reported; meaningful only when HasRetryAfter.
	RetryAfter time.Duration
	// HasRetryAfter says the server directed a delay (0 for an HTTP-date in
	// the past).
	HasRetryAfter bool
	// Message is the signal's message, for logs; not user text.
	Message string
}

// Classify turns a signal into a Failure. now is the reference for an
// HTTP-date Retry-After (pass the injected clock's Now).
//
// Rules, in order: a known kind hint wins over the status-derived kind
// (429 + quotaExhausted is not retried); an unknown hint keeps the name but
// takes its retryability from the status, and without a status it is not
// retried; x-should-retry: true|false then overrides retryability both ways,
// as every Stainless SDK does.
func Classify(sig Signal, now time.Time) Failure {
	f := Failure{HTTPStatus: sig.HTTPStatus, Message: sig.Message}
	statusKind := KindFromStatus(sig.HTTPStatus)
	switch {
	case sig.Kind != "":
		f.Kind = sig.Kind
		if r, known := kindInfo(sig.Kind); known {
			f.Retryable = r
		} else {
			f.Retryable = Retryable(statusKind)
		}
	case statusKind != "":
		f.Kind = statusKind
		f.Retryable = Retryable(statusKind)
	default:
		f.Kind = KindUnknown
	}
	if v, ok := parseBool(headerValue(sig.Header, "X-Should-Retry")); ok {
		f.Retryable = v
	}
	if d, ok := serverDelay(sig.Header, now); ok {
		f.RetryAfter, f.HasRetryAfter = d, true
	} else if f.Kind == KindRateLimited {
		f.RetryAfter, f.HasRetryAfter = messageDelay(sig.Message)
	}
	return f
}

// signalHeaders are the response headers Classify reads, canonical.
var signalHeaders = [...]string{"Retry-After-Ms", "X-Ms-Retry-After-Ms", "Retry-After", "X-Should-Retry"}

// KeepSignals returns a copy of the headers of h that Classify reads
// (retry-after-ms, x-ms-retry-after-ms, retry-after, x-should-retry), nil
// when h has none of them: what a provider keeps of a failed response,
// rather than all of it, for Signal.Header.
func KeepSignals(h http.Header) http.Header {
	var out http.Header
	for _, name := range signalHeaders {
		if vs := h.Values(name); len(vs) > 0 {
			if out == nil {
				out = make(http.Header, len(signalHeaders))
			}
			out[name] = append([]string(nil), vs...)
		}
	}
	return out
}

// serverDelay reads the headers in SDK order: retry-after-ms (Azure's
// x-ms-retry-after-ms too), then retry-after as float seconds or an
// HTTP-date. A negative or unparsable value is ignored, and the next header
// is tried.
func serverDelay(h http.Header, now time.Time) (time.Duration, bool) {
	if len(h) == 0 {
		return 0, false
	}
	// Names are canonical so http.Header.Get does not allocate.
	for _, name := range [...]string{"Retry-After-Ms", "X-Ms-Retry-After-Ms"} {
		if ms, ok := parseNonNegFloat(headerValue(h, name)); ok {
			return floatDuration(ms, time.Millisecond), true
		}
	}
	v := headerValue(h, "Retry-After")
	if s, ok := parseNonNegFloat(v); ok {
		return floatDuration(s, time.Second), true
	}
	if t, err := http.ParseTime(v); err == nil {
		// A date already past means "now"; report it as a zero delay.
		return ceilMillis(max(0, t.Sub(now))), true
	}
	return 0, false
}

// messageDelay parses OpenAI's "Please try again in 1.2s" (also "6ms",
// "7m12s") from a rate-limit message.
func messageDelay(msg string) (time.Duration, bool) {
	const marker = "try again in "
	i := strings.Index(strings.ToLower(msg), marker)
	if i < 0 {
		return 0, false
	}
	rest := msg[i+len(marker):]
	end := 0
	for end < len(rest) && (rest[end] >= '0' && rest[end] <= '9' || rest[end] == '.' ||
		rest[end] >= 'a' && rest[end] <= 'z') {
		end++
	}
	d, err := time.ParseDuration(strings.TrimSuffix(rest[:end], "."))
	if err != nil || d < 0 {
		return 0, false
	}
	return ceilMillis(d), true
}

// headerValue is http.Header.Get that also matches keys a caller stored
// without canonicalising them.
func headerValue(h http.Header, name string) string {
	if v := h.Get(name); v != "" {
		return strings.TrimSpace(v)
	}
	for k, vs := range h {
		if len(vs) > 0 && strings.EqualFold(k, name) {
			return strings.TrimSpace(vs[0])
		}
	}
	return ""
}

func parseBool(s string) (v, ok bool) {
	switch strings.ToLower(s) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

func parseNonNegFloat(s string) (float64, bool) {
	if s == "" {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, false
	}
	return v, true
}

// floatDuration converts v units to a Duration, rounding up to the
// millisecond (never retry earlier than asked, and the announced
// retryDelayMs stays exact) and saturating instead of overflowing.
func floatDuration(v float64, unit time.Duration) time.Duration {
	ms := math.Ceil(v * float64(unit) / float64(time.Millisecond))
	if ms >= float64(math.MaxInt64/int64(time.Millisecond)) {
		return time.Duration(math.MaxInt64 / int64(time.Millisecond) * int64(time.Millisecond))
	}
	return time.Duration(ms) * time.Millisecond
}

// ceilMillis rounds d up to a whole millisecond, for the same reason.
func ceilMillis(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r != 0 && d < math.MaxInt64-time.Millisecond {
		d += time.Millisecond - r
	}
	return d
}
