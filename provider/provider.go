// Package provider defines the Model interface mspd drives: one provider
// request in, streamed text deltas, usage and a finish reason out, or a
// failure described by the raw signals the retry layer classifies.
//
// Implementations never retry on their own: mspd's retry layer owns every
// attempt, so every request is counted and every backoff announced.
package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// Message roles.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Message is one turn of conversation history sent to the model.
type Message struct {
	Role string
	Text string
}

// Request is one provider request: a single attempt of a turn's model call.
type Request struct {
	// Model is the provider's model id; empty means the provider's default.
	Model string
	// Messages is the history, oldest first; the last one is the turn's
	// user message.
	Messages []Message
	// MaxTokens bounds the output of this attempt; 0 leaves it to the
	// provider (the turn runner always sets it).
	MaxTokens int
	// ResponseSchema, when set, is a JSON Schema the answer must satisfy.
	ResponseSchema json.RawMessage
	// Attempt is the 1-based number of this request within the turn's model
	// call, counted across every retry layer.
	Attempt int
}

// Finish reasons, normalised across providers.
const (
	FinishStop          = "stop"
	FinishLength        = "length"
	FinishContentFilter = "contentFilter"
)

// Structured output modes (RFC 0248 §A.3).
const (
	StructuredNative = "native"
	StructuredPrompt = "prompt"
)

// Usage are the token counters a provider reported for one request.
type Usage struct {
	InputTokens     int64
	OutputTokens    int64
	CachedTokens    int64
	ReasoningTokens int64
}

// Response describes how a request ended. A failed request may still carry
// usage the provider reported before it failed.
type Response struct {
	// FinishReason is one of the Finish constants, or the provider's own
	// word when it has no normalised form.
	FinishReason string
	// Usage is nil when the provider reported none.
	Usage *Usage
	// StructuredOutput names the mode used when the request had a
	// ResponseSchema: StructuredNative or StructuredPrompt.
	StructuredOutput string
	// Model is the model that answered, when the provider says.
	Model string
}

// Model streams one request to a provider.
type Model interface {
	// System is the provider's OpenTelemetry gen_ai.provider.name
	// ("openai", "anthropic", or a configured name).
	System() string
	// Stream sends req, calls onText for each text delta in order, and
	// returns how the request ended. A failure is returned as an *Error.
	// Stream returns promptly when ctx is cancelled.
	Stream(ctx context.Context, req Request, onText func(string)) (Response, error)
}

// Error is a failed provider request, described by the signals the retry
// layer classifies. It never carries credentials.
type Error struct {
	// Kind is the errorKind when the provider knows it, one of
	// modelretry's Kind constants (for example modelretry.KindQuotaExhausted
	// from an OpenAI insufficient_quota body, or KindStreamInterrupted);
	// empty leaves classification to the HTTP status.
	Kind string
	// HTTPStatus is the provider's status, or the status an in-stream
	// error implies (overloaded_error → 529); 0 when there is none.
	HTTPStatus int
	// Header holds the response headers that steer retries
	// (retry-after, retry-after-ms, x-should-retry); may be nil.
	Header http.Header
	// Message is a short description safe for logs and users.
	Message string
	// Accepted is true when the provider had accepted the request (its
	// stream was open) before the failure, as with an error event inside a
	// stream: output may have been generated and billed even without a
	// delta, so the attempt's usage is unknown rather than zero.
	Accepted bool
	// Err is the underlying error, if any.
	Err error
}

// Error implements the error interface.
func (e *Error) Error() string {
	switch {
	case e.HTTPStatus != 0 && e.Kind != "":
		return fmt.Sprintf("%s (HTTP %d): %s", e.Kind, e.HTTPStatus, e.Message)
	case e.HTTPStatus != 0:
		return fmt.Sprintf("HTTP %d: %s", e.HTTPStatus, e.Message)
	case e.Kind != "":
		return fmt.Sprintf("%s: %s", e.Kind, e.Message)
	}
	return e.Message
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }
