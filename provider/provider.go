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
	// RoleTool is a message of tool results, answering the tool calls of
	// the assistant message before it.
	RoleTool = "tool"
)

// Message is one message of conversation history sent to the model: the
// user's text, the assistant's text and tool calls, or tool results.
type Message struct {
	Role string
	Text string
	// ToolCalls are the calls an assistant message made, in the order the
	// model asked for them.
	ToolCalls []ToolCall
	// ToolResults, in a RoleTool message, answer the calls of the
	// assistant message before it.
	ToolResults []ToolResult
	// Provider is the configured provider (its id) whose model made an
	// assistant message's tool calls; "" when unknown. A model of another
	// family reads such calls and their results as text (ForeignToolsAsText).
	Provider string
	// Images are a user message's images, in the order they were given
	// (see Image).
	Images []Image
	// Reasoning, in an assistant message, is the reasoning of the response
	// it was, as its provider needs it back: the session keeps it for the
	// running turn's tool steps only, and each provider sends back just
	// its own kinds (see Reasoning), before the message's text and calls.
	Reasoning []Reasoning
}

// ToolSpec is a tool the model may call.
type ToolSpec struct {
	// Name is the model-facing name, unique within a request
	// (^[a-zA-Z0-9_-]{1,64}$, what every provider accepts).
	Name        string
	Description string
	// InputSchema is the JSON Schema of the call's arguments (an object).
	InputSchema json.RawMessage
}

// ToolCall is one call the model asked for.
type ToolCall struct {
	// ID is the provider's call id (call_…, toolu_…), opaque; results
	// name it.
	ID string
	// Name is the ToolSpec name called.
	Name string
	// Args is the argument JSON exactly as the model wrote it: it may not
	// be valid JSON, which the caller checks.
	Args string
}

// ToolResult is what a tool call returned, told to the model.
type ToolResult struct {
	// CallID is the ToolCall.ID answered.
	CallID string
	// Name is the tool called (Gemini-style APIs and plain-text history
	// need it).
	Name string
	// Text is the output the model sees.
	Text string
	// IsError says the call failed (a tool error, a denial, an unknown
	// outcome): the model reads Text as the reason.
	IsError bool
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
	// Tools are the tools the model may call; none leaves the request
	// without tools.
	Tools []ToolSpec
	// Instructions is the system prompt ("" for none): Chat Completions'
	// system message, the Responses API's instructions, Anthropic's
	// top-level system.
	Instructions string
	// Attempt is the 1-based number of this request within the turn,
	// counted across every step and every retry layer (the RFC 0248
	// attempt count so far).
	Attempt int
	// ReasoningEffort is the msp.ReasoningEffort tier asked for; "" leaves
	// reasoning to the provider's and the model's defaults. Each provider
	// maps a tier to its nearest control (docs/providers.md).
	ReasoningEffort string
	// OnReasoning, when set, receives the response's reasoning as it
	// streams, part by part (ReasoningParts numbers them), apart from the
	// answer's text.
	OnReasoning func(ReasoningDelta)
}

// Finish reasons, normalised across providers.
const (
	FinishStop          = "stop"
	FinishLength        = "length"
	FinishContentFilter = "contentFilter"
	// FinishToolCalls ends a response that asks for tool calls: the turn
	// runs them and sends their results in its next step.
	FinishToolCalls = "toolCalls"
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
	// ToolCalls are the calls the response asked for, in order, each with
	// its arguments whole; set with FinishToolCalls.
	ToolCalls []ToolCall
	// Reasoning is the response's reasoning, block by block, as the
	// provider needs it back (signatures, encrypted content); nil when it
	// showed none.
	Reasoning []Reasoning
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
