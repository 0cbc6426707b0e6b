package modelretry

import (
	"net/http"
)

// Failure kinds: the open, camelCase errorKind vocabulary of
// retry-background §4.1. Providers may hint other kinds; unknown kinds are
// carried verbatim and are not retried unless their HTTP status says so.
const (
	// KindRateLimited is a transient 429 (rate_limit_exceeded, rate_limit_error).
	KindRateLimited = "rateLimited"
	// KindQuotaExhausted is a 429 insufficient_quota or 402 billing error:
	// waiting will not help, so it fails fast.
	KindQuotaExhausted = "quotaExhausted"
	// KindOverloaded is a 503/529 or an in-stream overloaded_error.
	KindOverloaded = "overloaded"
	// KindServerError is a 500/502 or another unexpected 5xx.
	KindServerError = "serverError"
	// KindTimeout is a 408/504 or a client-side connect, read or idle timeout.
	KindTimeout = "timeout"
	// KindConnectionError means no response arrived (DNS, TLS, reset, EOF
	// before headers).
	KindConnectionError = "connectionError"
	// KindStreamInterrupted is a stream that ended before its terminal event.
	KindStreamInterrupted = "streamInterrupted"
	// KindConflict is a 409, retried as the Stainless SDKs do.
	KindConflict = "conflict"
	// KindContextLengthExceeded means the prompt does not fit the model.
	KindContextLengthExceeded = "contextLengthExceeded"
	// KindContentFilter is output blocked or refused by a safety filter.
	KindContentFilter = "contentFilter"
	// KindInvalidRequest is a request the provider rejects as malformed.
	KindInvalidRequest = "invalidRequest"
	// KindAuth is a 401/403 authentication or permission failure.
	KindAuth = "auth"
	// KindNotFound is an unknown model or resource, when a provider says so
	// (a bare 404 classifies as KindInvalidRequest).
	KindNotFound = "notFound"
	// KindTruncated is output cut at maxTokens (a turn-layer retry).
	KindTruncated = "truncated"
	// KindSchemaViolation is output failing the requested JSON schema (a
	// turn-layer retry).
	KindSchemaViolation = "schemaViolation"
	// KindInvalidToolCall is output calling a tool that was not offered, or
	// with arguments its input schema refuses (a turn-layer retry).
	KindInvalidToolCall = "invalidToolCall"
	// KindCancelled is a client abort; never retried.
	KindCancelled = "cancelled"
	// KindBudgetExhausted reports a retryable failure that the shared retry
	// budget refused to retry.
	KindBudgetExhausted = "budgetExhausted"
	// KindUnknown is a failure with neither a kind hint nor an error status.
	KindUnknown = "unknown"
	// KindHostRestarted is an attempt lost because the process running it
	// stopped (a crash, a deploy): retried by the next process.
	KindHostRestarted = "hostRestarted"
)

// kindInfo is the kind → retryable table of retry-background §4.1.
func kindInfo(kind string) (retryable, known bool) {
	switch kind {
	case KindRateLimited, KindOverloaded, KindServerError, KindTimeout,
		KindConnectionError, KindStreamInterrupted, KindConflict,
		KindTruncated, KindSchemaViolation, KindInvalidToolCall, KindHostRestarted:
		return true, true
	case KindQuotaExhausted, KindContextLengthExceeded, KindContentFilter,
		KindInvalidRequest, KindAuth, KindNotFound, KindCancelled,
		KindBudgetExhausted, KindUnknown:
		return false, true
	}
	return false, false
}

// Known reports whether kind is one of the kinds above. Providers may hint
// others, carried verbatim; a metric label must not take them (an
// unbounded set, possibly from a scripted provider's user text).
func Known(kind string) bool {
	_, known := kindInfo(kind)
	return known
}

// Retryable reports whether failures of kind are retried by default (before
// x-should-retry). Unknown kinds are not.
func Retryable(kind string) bool {
	r, _ := kindInfo(kind)
	return r
}

// outputRejected marks kinds where the provider answered but the caller
// rejected the output. They do not drain the retry budget, which measures
// provider health (gRPC A6 counts only retryable failures), so a schema
// violation cannot starve other sessions on the key.
// A host restart says nothing of the provider either, nor does a prompt
// too long, re-run once its context was compacted (never retryable
// otherwise).
func outputRejected(kind string) bool {
	return kind == KindTruncated || kind == KindSchemaViolation || kind == KindInvalidToolCall || kind == KindHostRestarted ||
		kind == KindContextLengthExceeded
}

// KindFromStatus maps an HTTP status to a kind; statuses below 400 carry no
// failure information and give "".
func KindFromStatus(status int) string {
	switch {
	case status < 400:
		return ""
	case status == http.StatusRequestTimeout, status == http.StatusGatewayTimeout:
		return KindTimeout
	case status == http.StatusConflict:
		return KindConflict
	case status == http.StatusTooManyRequests:
		return KindRateLimited
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		return KindAuth
	case status == http.StatusPaymentRequired:
		return KindQuotaExhausted
	case status == http.StatusServiceUnavailable, status == 529:
		return KindOverloaded
	case status >= 500:
		// Includes 500 and 502; an unexpected 5xx is still the server's fault.
		return KindServerError
	}
	// 400, 404, 413, 422 and every other 4xx: the same request fails again.
	return KindInvalidRequest
}
