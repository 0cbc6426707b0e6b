package msp

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestErrorKindWords(t *testing.T) {
	for kind, want := range map[string]string{
		"rateLimited":       "rate limited",
		"timeout":           "timed out",
		"connectionError":   "connection dropped",
		"streamInterrupted": "stream interrupted",
		"budgetExhausted":   "retry budget exhausted",
		"":                  "error",
		"modelWentFishing":  "model went fishing",
		"upstreamHTTPError": "upstream http error",
	} {
		if got := ErrorKindWords(kind); got != want {
			t.Errorf("ErrorKindWords(%q) = %q, want %q", kind, got, want)
		}
	}
	if got := ErrorKindWords(strings.Repeat("aB", 200)); len(got) > MaxReason {
		t.Errorf("long unknown kind not capped: %d bytes", len(got))
	}
}

func TestFailureWords(t *testing.T) {
	tests := []struct {
		kind   string
		status int
		want   string
	}{
		{"serverError", 500, "server error (HTTP 500)"},
		{"streamInterrupted", 0, "stream interrupted"},
		{"overloaded", 529, "overloaded (HTTP 529)"},
	}
	for _, tt := range tests {
		if got := FailureWords(tt.kind, tt.status); got != tt.want {
			t.Errorf("FailureWords(%q, %d) = %q, want %q", tt.kind, tt.status, got, tt.want)
		}
	}
	for _, kind := range []string{strings.Repeat("aB", 200), strings.Repeat("é", 200)} {
		if got := FailureWords(kind, 599); len(got) == 0 || len(got) > MaxReason || !utf8.ValidString(got) {
			t.Errorf("words %q: length %d outside 1..%d or invalid UTF-8", got, len(got), MaxReason)
		}
	}
}
