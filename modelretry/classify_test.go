package modelretry

import (
	"net/http"
	"testing"
	"time"
)

var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestClassifyTable(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		hint        string
		shouldRetry string // x-should-retry header; "" for none
		wantKind    string
		wantRetry   bool
	}{
		{"408", 408, "", "", KindTimeout, true},
		{"409", 409, "", "", KindConflict, true},
		{"429", 429, "", "", KindRateLimited, true},
		{"401", 401, "", "", KindAuth, false},
		{"403", 403, "", "", KindAuth, false},
		{"400", 400, "", "", KindInvalidRequest, false},
		{"404", 404, "", "", KindInvalidRequest, false},
		{"413", 413, "", "", KindInvalidRequest, false},
		{"422", 422, "", "", KindInvalidRequest, false},
		{"402", 402, "", "", KindQuotaExhausted, false},
		{"418 other 4xx", 418, "", "", KindInvalidRequest, false},
		{"500", 500, "", "", KindServerError, true},
		{"502", 502, "", "", KindServerError, true},
		{"503", 503, "", "", KindOverloaded, true},
		{"529", 529, "", "", KindOverloaded, true},
		{"504", 504, "", "", KindTimeout, true},
		{"501 other 5xx", 501, "", "", KindServerError, true},
		{"599 other 5xx", 599, "", "", KindServerError, true},
		{"no status no hint", 0, "", "", KindUnknown, false},
		{"200 no hint", 200, "", "", KindUnknown, false},

		// A known hint wins over the status.
		{"429 quota hint", 429, KindQuotaExhausted, "", KindQuotaExhausted, false},
		{"400 context hint", 400, KindContextLengthExceeded, "", KindContextLengthExceeded, false},
		{"200 in-stream overloaded", 200, KindOverloaded, "", KindOverloaded, true},
		{"connection error", 0, KindConnectionError, "", KindConnectionError, true},
		{"stream interrupted", 0, KindStreamInterrupted, "", KindStreamInterrupted, true},
		{"timeout hint", 0, KindTimeout, "", KindTimeout, true},
		{"cancelled hint", 0, KindCancelled, "", KindCancelled, false},
		{"truncated hint", 0, KindTruncated, "", KindTruncated, true},
		{"schema hint", 0, KindSchemaViolation, "", KindSchemaViolation, true},
		{"content filter", 200, KindContentFilter, "", KindContentFilter, false},

		// Unknown hints keep their name; retryability comes from the status.
		{"unknown hint no status", 0, "weirdThing", "", "weirdThing", false},
		{"unknown hint 503", 503, "weirdThing", "", "weirdThing", true},
		{"unknown hint 400", 400, "weirdThing", "", "weirdThing", false},

		// x-should-retry overrides both ways, over status and hint.
		{"500 should-retry false", 500, "", "false", KindServerError, false},
		{"400 should-retry true", 400, "", "true", KindInvalidRequest, true},
		{"quota should-retry true", 429, KindQuotaExhausted, "true", KindQuotaExhausted, true},
		{"529 should-retry TRUE", 529, "", "TRUE", KindOverloaded, true},
		{"unknown no status should-retry true", 0, "", "true", KindUnknown, true},
		{"should-retry garbage ignored", 500, "", "maybe", KindServerError, true},
		{"should-retry garbage ignored 400", 400, "", "1", KindInvalidRequest, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sig := Signal{Kind: tt.hint, HTTPStatus: tt.status, Message: "m"}
			if tt.shouldRetry != "" {
				sig.Header = hdr("x-should-retry", tt.shouldRetry)
			}
			f := Classify(sig, testNow)
			if f.Kind != tt.wantKind || f.Retryable != tt.wantRetry {
				t.Fatalf("got kind %q retryable %v; want %q %v", f.Kind, f.Retryable, tt.wantKind, tt.wantRetry)
			}
			if f.HTTPStatus != tt.status || f.Message != "m" || f.OriginalKind != "" {
				t.Fatalf("status/message/originalKind not carried: %+v", f)
			}
		})
	}
}

func TestClassifyHeaderCaseInsensitive(t *testing.T) {
	// A map built by hand, not canonicalised by http.Header.Set.
	h := http.Header{"x-should-retry": {"false"}, "retry-after-ms": {"250"}}
	f := Classify(Signal{HTTPStatus: 503, Header: h}, testNow)
	if f.Retryable || !f.HasRetryAfter || f.RetryAfter != 250*time.Millisecond {
		t.Fatalf("got %+v", f)
	}
}

func TestClassifyRetryAfter(t *testing.T) {
	tests := []struct {
		name    string
		header  http.Header
		message string
		kind    string
		want    time.Duration
		wantHas bool
	}{
		{"none", nil, "", "", 0, false},
		{"ms integer", hdr("retry-after-ms", "1500"), "", "", 1500 * time.Millisecond, true},
		{"ms float rounds up", hdr("retry-after-ms", "1500.2"), "", "", 1501 * time.Millisecond, true},
		{"ms sub-millisecond", hdr("retry-after-ms", "0.5"), "", "", time.Millisecond, true},
		{"ms zero", hdr("retry-after-ms", "0"), "", "", 0, true},
		{"azure ms", hdr("x-ms-retry-after-ms", "700"), "", "", 700 * time.Millisecond, true},
		{"seconds", hdr("retry-after", "2"), "", "", 2 * time.Second, true},
		{"seconds float", hdr("retry-after", "1.5"), "", "", 1500 * time.Millisecond, true},
		{"seconds spaces", hdr("retry-after", " 3 "), "", "", 3 * time.Second, true},
		{"ms wins over seconds", hdr("retry-after-ms", "250", "retry-after", "10"), "", "", 250 * time.Millisecond, true},
		{"garbage ms falls back", hdr("retry-after-ms", "soon", "retry-after", "3"), "", "", 3 * time.Second, true},
		{"negative ms falls back", hdr("retry-after-ms", "-5", "retry-after", "4"), "", "", 4 * time.Second, true},
		{"date future", hdr("retry-after", testNow.Add(30*time.Second).Format(http.TimeFormat)), "", "", 30 * time.Second, true},
		{"date future RFC850", hdr("retry-after", testNow.Add(90*time.Second).Format(time.RFC850)), "", "", 90 * time.Second, true},
		{"date past", hdr("retry-after", testNow.Add(-time.Hour).Format(http.TimeFormat)), "", "", 0, true},
		{"garbage", hdr("retry-after", "later please"), "", "", 0, false},
		{"negative seconds", hdr("retry-after", "-1"), "", "", 0, false},
		{"NaN", hdr("retry-after", "NaN"), "", "", 0, false},
		{"Inf", hdr("retry-after", "+Inf"), "", "", 0, false},
		{"above cap reported raw", hdr("retry-after", "600"), "", "", 600 * time.Second, true},
		{"huge saturates", hdr("retry-after", "1e300"), "", "", time.Duration(1<<63 - 1).Truncate(time.Millisecond), true},
		{"message seconds", nil, "Rate limit reached. Please try again in 1.2s. Visit ...", KindRateLimited, 1200 * time.Millisecond, true},
		{"message ms", nil, "Please try again in 6ms.", KindRateLimited, 6 * time.Millisecond, true},
		{"message compound", nil, "Please try again in 7m12s", KindRateLimited, 7*time.Minute + 12*time.Second, true},
		{"message garbage", nil, "Please try again in a while", KindRateLimited, 0, false},
		{"message ignored for other kinds", nil, "Please try again in 5s", KindServerError, 0, false},
		{"header wins over message", hdr("retry-after", "2"), "Please try again in 9s", KindRateLimited, 2 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Classify(Signal{Kind: tt.kind, HTTPStatus: 429, Header: tt.header, Message: tt.message}, testNow)
			if f.RetryAfter != tt.want || f.HasRetryAfter != tt.wantHas {
				t.Fatalf("got %v (has %v); want %v (has %v)", f.RetryAfter, f.HasRetryAfter, tt.want, tt.wantHas)
			}
		})
	}
}

func TestKindsAreInTheRetryTable(t *testing.T) {
	for _, k := range []string{
		KindRateLimited, KindQuotaExhausted, KindOverloaded, KindServerError, KindTimeout,
		KindConnectionError, KindStreamInterrupted, KindConflict, KindContextLengthExceeded,
		KindContentFilter, KindInvalidRequest, KindAuth, KindNotFound, KindTruncated,
		KindSchemaViolation, KindCancelled, KindBudgetExhausted, KindUnknown,
	} {
		if _, known := kindInfo(k); !known {
			t.Errorf("kind %q missing from the retry table", k)
		}
	}
}

func TestRetryAfterDateRoundsUp(t *testing.T) {
	// now carries sub-millisecond precision; the date has whole seconds.
	now := testNow.Add(300 * time.Microsecond)
	h := hdr("retry-after", testNow.Add(30*time.Second).Format(http.TimeFormat))
	f := Classify(Signal{HTTPStatus: 429, Header: h}, now)
	if f.RetryAfter != 30*time.Second {
		t.Fatalf("got %v, want 30s (rounded up to whole ms)", f.RetryAfter)
	}
}

// KeepSignals keeps what Classify reads of a response's headers, copied,
// and nothing else (cookies and account details stay behind).
func TestKeepSignals(t *testing.T) {
	h := http.Header{}
	h.Set("retry-after-ms", "250")
	h.Set("x-ms-retry-after-ms", "300")
	h.Set("Retry-After", "2")
	h.Set("X-Should-Retry", "false")
	h.Set("Set-Cookie", "session=secret")
	h.Set("Openai-Organization", "acme")
	kept := KeepSignals(h)
	if len(kept) != 4 || kept.Get("Set-Cookie") != "" || kept.Get("Openai-Organization") != "" {
		t.Fatalf("kept %v", kept)
	}
	h.Set("Retry-After", "9")
	if kept.Get("Retry-After") != "2" {
		t.Error("the kept headers share the response's values")
	}
	f := Classify(Signal{HTTPStatus: 429, Header: kept}, time.Now())
	if f.Retryable || !f.HasRetryAfter || f.RetryAfter != 250*time.Millisecond {
		t.Errorf("classified from the kept headers: %+v", f)
	}
	if KeepSignals(http.Header{"Set-Cookie": {"x"}}) != nil || KeepSignals(nil) != nil {
		t.Error("a response with no signal header keeps a non-nil header")
	}
}
