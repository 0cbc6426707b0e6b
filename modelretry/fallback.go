package modelretry

import "cmp"

// A model call may name a fallback chain: providers asked in order when
// the one before cannot answer. This file is the chain's policy: which
// failures move a call on (FailsOver), what a failure says of a
// provider's health (HealthOf, for its Breaker), and how a call's
// requests are shared along the chain (Chain). Which provider answers next
// is the caller's business.

// blame says whose a failure is. It decides both whether a chain moves on
// and whether a breaker counts the failure, so that the two never
// disagree.
type blame int

const (
	// blameNone: nobody's in particular (a cancellation, a host restart,
	// a failure with neither kind nor status).
	blameNone blame = iota
	// blameService: the provider's service is failing (rate limited,
	// overloaded, erroring, unreachable, cut off). Another provider may
	// answer; the breaker counts it.
	blameService
	// blameAccount: the credential or the account cannot be served
	// (quota, billing, authentication). Another provider, another
	// account, may answer; the breaker counts it, since every request on
	// the key fails alike.
	blameAccount
	// blameModel: the model or endpoint is not there (notFound). Another
	// provider may answer; the breaker does not count it, since the
	// provider's other models may be fine.
	blameModel
	// blameRequest: the request's own fault (malformed, too long for the
	// context window, filtered). Another provider would fail it alike or,
	// for a filter, would only be shopping for a laxer one: it never
	// moves, and says nothing of the provider's health.
	blameRequest
	// blameOutput: the provider answered and the caller rejected the
	// answer (truncated, failing the schema, calling a tool wrongly): the
	// provider is up.
	blameOutput
)

// blameOf classifies a kind (an unknown one by its HTTP status).
func blameOf(kind string, status int) blame {
	switch kind {
	case KindRateLimited, KindOverloaded, KindServerError, KindTimeout, KindConnectionError,
		KindStreamInterrupted, KindConflict:
		return blameService
	case KindQuotaExhausted, KindAuth:
		return blameAccount
	case KindNotFound:
		return blameModel
	case KindInvalidRequest, KindContextLengthExceeded, KindContentFilter:
		return blameRequest
	case KindTruncated, KindSchemaViolation, KindInvalidToolCall:
		return blameOutput
	case KindCancelled, KindHostRestarted, KindUnknown, KindBudgetExhausted, "":
		return blameNone
	}
	// A kind a provider made up: its status says whose it is.
	if k := KindFromStatus(status); k != "" {
		return blameOf(k, 0)
	}
	return blameNone
}

// failureBlame is the blame of f's classified kind (the original kind of
// a budgetExhausted failure).
func failureBlame(f Failure) blame {
	return blameOf(cmp.Or(f.OriginalKind, f.Kind), f.HTTPStatus)
}

// FailsOver reports whether a call that ended on one provider with d
// should go on with the next provider of its chain: the provider cannot
// answer — its attempts ran out on failures of its service, its retry
// budget is spent, it asked to wait longer than the call waits, or it
// failed in a way another provider would not (quota, authentication, an
// overload it said not to retry, a model it does not have). A failure of
// the request's own (invalid, too long, filtered), a rejected answer, a
// deadline and a cancellation do not move. A granted retry never does.
func FailsOver(d Decision) bool {
	if d.Retry {
		return false
	}
	switch d.Stop {
	case StopNotRetryable, StopAttemptsExhausted, StopBudgetExhausted, StopRetryAfterTooLong:
	default:
		return false
	}
	switch failureBlame(d.Failure) {
	case blameService, blameAccount, blameModel:
		return true
	}
	return false
}

// Health is what one request's outcome says of its provider, for the
// provider's Breaker.
type Health int

const (
	// HealthUnknown: the outcome says nothing of the provider (cancelled,
	// the request's own fault, a model it lacks).
	HealthUnknown Health = iota
	// Healthy: the provider answered, whether or not the answer was kept.
	Healthy
	// Failing: the provider failed in a way every request to it would
	// (its service or its account).
	Failing
)

// String returns "unknown", "healthy" or "failing".
func (h Health) String() string {
	switch h {
	case Healthy:
		return "healthy"
	case Failing:
		return "failing"
	}
	return "unknown"
}

// HealthOf is what a failed request's failure says of its provider.
func HealthOf(f Failure) Health {
	switch failureBlame(f) {
	case blameService, blameAccount:
		return Failing
	case blameOutput:
		return Healthy
	}
	return HealthUnknown
}

// Chain shares one model call's requests along a fallback chain. Each
// entry gets its own attempts (up to PerEntry, the host policy's
// MaxAttempts, counted by a modelretry.Call of its own), and the call as a
// whole makes at most Total: RFC 0248 §B.1's bound on the requests of a
// call, fallbacks included. An entry leaves one request for each entry
// after it whenever it can, so that a chain is not starved by its first
// provider; a Total of 1 still makes that one request.
type Chain struct {
	// Entries counts the providers of the chain, the first included.
	Entries int
	// PerEntry bounds the requests made to one entry (1..16).
	PerEntry int
	// Total bounds the requests of the whole call (1..Ceiling()).
	Total int
}

// NewChain is a chain of entries providers, perEntry requests each, whose
// Total is its Ceiling.
func NewChain(entries, perEntry int) Chain {
	c := Chain{Entries: max(entries, 1), PerEntry: perEntry}
	c.Total = c.Ceiling()
	return c
}

// Ceiling is the most requests the chain may make: every entry's
// PerEntry, within MaxAttemptsLimit. A call's own maxAttempts is clamped
// to it (RFC 0248 §B.3); a chain of one entry has its PerEntry, as a call
// without fallbacks.
func (c Chain) Ceiling() int {
	return min(MaxAttemptsLimit, c.PerEntry*max(c.Entries, 1))
}

// Allowance is how many requests entry (0-based) may make once the call
// has made used: 0 when the call's Total is spent or there is no such
// entry.
func (c Chain) Allowance(entry, used int) int {
	left := c.Total - used
	if left <= 0 || entry < 0 || entry >= c.Entries {
		return 0
	}
	later := c.Entries - entry - 1
	return min(c.PerEntry, max(1, left-later), left)
}
