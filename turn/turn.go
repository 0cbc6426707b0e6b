// Package turn runs one turn of a session: it builds the provider request
// from the session's history, drives the model through the retry layer,
// opens and closes agentMessage items, streams deltas, accounts usage and
// attempts, and reports the terminal. It emits events through a Sink and
// knows nothing of WebSockets or JSON-RPC.
package turn

import (
	"context"
	"encoding/json"

	"mspd/provider"
	"mspd/schema/msp"
)

// Sink receives a turn's events in order.
type Sink interface {
	// Emit appends one durable event; the sink fills the params' header
	// (sessionId, viewCursor, sourceRange) and fans it out once written.
	Emit(ctx context.Context, method string, params msp.ViewParams) error
	// Delta streams ephemeral text appended to an open item. It never blocks
	// on slow readers.
	Delta(itemID, text string)
}

// Spec is what a turn runs.
type Spec struct {
	SessionID string
	TurnID    string
	// History is the conversation so far, oldest first, ending with this
	// turn's user message.
	History []provider.Message
	// ProviderID names the configured provider the session uses; a router
	// picks the runner by it.
	ProviderID string
	// Model is the provider's model id; empty for the provider default.
	Model string
	// MaxTokens bounds each attempt's output; 0 takes the runner default.
	MaxTokens int
	// ResponseSchema, when set, asks for a structured answer.
	ResponseSchema json.RawMessage
	// Retry is the turn's own retry policy (RFC 0248 §B), if it gave one.
	Retry *msp.RetryPolicy
}

// Outcome is how a turn ended.
type Outcome struct {
	// Completed is the terminal event, header unset.
	Completed msp.TurnCompletedParams
	// Answer is the final agent text when the turn completed.
	Answer string
}

// Refused is the outcome of a turn that could not run at all: failed with
// kind, no attempt made, so nothing is missing from its accounting.
func Refused(kind, message string) Outcome {
	var zero int64
	return Outcome{Completed: msp.TurnCompletedParams{
		Terminal:   msp.TerminalFailed,
		Error:      &msp.TurnError{Kind: kind, Message: message},
		DurationMs: &zero,
		Attempts:   &msp.Attempts{UsageComplete: true},
	}}
}
