package provider

// The errorKind hints a provider may put in Error.Kind: the camelCase
// vocabulary of retry-background §4.1. The retry layer classifies them
// (and any other name, which it treats by HTTP status); providers spell
// them through these constants rather than depending on the retry engine.
const (
	KindRateLimited           = "rateLimited"
	KindQuotaExhausted        = "quotaExhausted"
	KindOverloaded            = "overloaded"
	KindServerError           = "serverError"
	KindTimeout               = "timeout"
	KindConnectionError       = "connectionError"
	KindStreamInterrupted     = "streamInterrupted"
	KindConflict              = "conflict"
	KindContextLengthExceeded = "contextLengthExceeded"
	KindContentFilter         = "contentFilter"
	KindInvalidRequest        = "invalidRequest"
	KindAuth                  = "auth"
	KindNotFound              = "notFound"
)
