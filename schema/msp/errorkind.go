package msp

import (
	"fmt"
	"strings"
	"unicode"
)

// MaxReason bounds turn/retryScheduled's reason, in bytes here (the wire
// bound is 160 characters; bytes are the stricter count).
const MaxReason = 160

// ErrorKindWords gives short user-facing words for an errorKind, as UIs
// show them ("openai · rate limited · retrying in 3s"). Unknown kinds are
// spelt out from their camelCase ("modelWentFishing" → "model went
// fishing"), never from provider text.
func ErrorKindWords(kind string) string {
	switch kind {
	case "rateLimited":
		return "rate limited"
	case "quotaExhausted":
		return "quota exhausted"
	case "overloaded":
		return "overloaded"
	case "serverError":
		return "server error"
	case "timeout":
		return "timed out"
	case "connectionError":
		return "connection dropped"
	case "streamInterrupted":
		return "stream interrupted"
	case "conflict":
		return "request conflict"
	case "contextLengthExceeded":
		return "context too long"
	case "contentFilter":
		return "blocked by content filter"
	case "invalidRequest":
		return "invalid request"
	case "auth":
		return "not authorized"
	case "notFound":
		return "not found"
	case "truncated":
		return "output truncated"
	case "schemaViolation":
		return "output did not match the schema"
	case "cancelled":
		return "cancelled"
	case "budgetExhausted":
		return "retry budget exhausted"
	case "unknown", "":
		return "error"
	}
	return splitCamel(kind)
}

// FailureWords words a failure for a reason or a terminal message:
// "server error (HTTP 500)", within MaxReason.
func FailureWords(kind string, httpStatus int) string {
	s := ErrorKindWords(kind)
	if httpStatus != 0 {
		s = fmt.Sprintf("%s (HTTP %d)", s, httpStatus)
	}
	if len(s) > MaxReason {
		s = strings.ToValidUTF8(s[:MaxReason], "")
	}
	return s
}

// splitCamel turns "fooBarBaz" into "foo bar baz" and "upstreamHTTPError"
// into "upstream http error", capped so a reason built from it fits.
func splitCamel(s string) string {
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		if i > 0 && unicode.IsUpper(r) &&
			(!unicode.IsUpper(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
			b.WriteByte(' ')
		}
		b.WriteRune(unicode.ToLower(r))
		if b.Len() >= MaxReason-20 {
			break
		}
	}
	return b.String()
}
