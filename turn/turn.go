// Package turn runs one turn of a session: it builds the provider request
// from the session's history, drives the model through the retry layer,
// opens and closes agentMessage and reasoning items (reasoning.go),
// streams deltas, accounts usage and attempts, and reports the terminal.
// It emits events through a Sink and knows nothing of WebSockets or
// JSON-RPC.
package turn

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"mspd/provider"
	"mspd/schema/msp"
)

// Sink receives a turn's events in order.
type Sink interface {
	// Emit appends one durable event; the sink fills the params' header
	// (sessionId, viewCursor, sourceRange) and fans it out once written.
	Emit(ctx context.Context, method string, params msp.ViewParams) error
	// EmitRetry appends events together with the checkpoint the turn
	// resumes from should this process stop before the next attempt ends:
	// one durable write. The events are an attempt's closed item and usage
	// with either the retry notice that follows them or the tool calls
	// its step asked for, each written before it is made.
	EmitRetry(ctx context.Context, next Checkpoint, events []Event) error
	// BeginAttempt makes cp (its Begun set) durable before a retried
	// request is sent, with no events: a process that takes the turn over
	// then counts that request whatever its clock says.
	BeginAttempt(ctx context.Context, cp Checkpoint) error
	// Delta streams ephemeral text appended to an open item. It never blocks
	// on slow readers.
	Delta(itemID, text string)
}

// Event is one durable event of a turn.
type Event struct {
	Method string
	Params msp.ViewParams
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
	// Tools are the tools the model may call; nil offers none.
	Tools Toolbox
	// Approvals decides which calls wait for a person and keeps their
	// approvals; nil runs every call without asking.
	Approvals Approvals
	// MaxSteps, when positive, lowers the runner's step limit for this
	// turn.
	MaxSteps int
	// Instructions are the session's own instructions, sent after the
	// operator's (Config.Models) as the request's system prompt.
	Instructions string
	// Images loads the images History names by ref, for each request;
	// nil when it names none.
	Images Images
	// ReasoningEffort is the msp.ReasoningEffort tier the turn runs with;
	// "" leaves it to the provider.
	ReasoningEffort string
	// Resume, when set, continues a turn whose process stopped mid-way.
	Resume *Resumption
	// Context is what the session knows of its context window: how full
	// it was last, and what may be compacted (compact.go).
	Context Context
	// Compact, when set (msp.CompactionManual), makes the turn a
	// compaction alone, for session/compact: History is not answered.
	Compact string
}

// Checkpoint is where a turn stands between two attempts, durable with
// its retry notice.
type Checkpoint struct {
	// Attempts counts the provider requests made so far.
	Attempts int `json:"attempts"`
	// NextAt is when the next attempt is due, after its backoff.
	NextAt time.Time `json:"nextAt"`
	// MaxTokens is the next attempt's output bound (truncation retries
	// grow it).
	MaxTokens int `json:"maxTokens,omitempty"`
	// Stopped marks a checkpoint written by a host that stopped the turn
	// itself (a graceful shutdown): Attempts and Lost are exact. Without
	// it a process that died left only its last notice's checkpoint.
	Stopped bool `json:"stopped,omitempty"`
	// Lost says the last counted attempt was cut off in flight.
	Lost bool `json:"lost,omitempty"`
	// Step is the 0-based step (model call) under way, and StepBase the
	// requests the steps before it made: Attempts-StepBase are the step's
	// own. Both are zero for a turn's first step, as in checkpoints of
	// builds without tools.
	Step     int `json:"step,omitempty"`
	StepBase int `json:"stepBase,omitempty"`
	// Begun says whether the request after Attempts was begun: false in
	// a retry notice's checkpoint, true once the request is about to be
	// sent (Sink.BeginAttempt). Nil in checkpoints of builds that did not
	// record it, whose resumption goes by the clock instead.
	Begun *bool `json:"begun,omitempty"`
	// Route is the fallback chain's entry the step is on; nil on the
	// session's own provider, as in checkpoints of builds without
	// fallbacks.
	Route *Route `json:"route,omitempty"`
}

// ErrHostStopping is the cancellation cause with which a host stops a
// turn it means to resume in its next process: the attempt in flight is
// discarded (its item fails, its text kept) and the turn does not end.
var ErrHostStopping = errors.New("turn: the host is stopping")

// Resumption continues a turn that another process began and lost: the
// lost attempt counts, its usage is unknown, and the next one runs under
// the same policy and attempt counter after a turn/retryScheduled that
// says why.
type Resumption struct {
	// Attempts counts the requests made, the lost one included.
	Attempts int
	// Delay is the wait before the next attempt; 0 takes the policy's
	// backoff.
	Delay time.Duration
	// Reason is the notice's reason, e.g. "the server restarted during
	// attempt 2".
	Reason string
	// MaxTokens is the next attempt's output bound; 0 for the turn's own.
	MaxTokens int
	// StartedAt is when the turn first started: its durationMs runs from
	// there.
	StartedAt time.Time
	// Usage sums what the turn's responses reported; nil when none did.
	Usage *msp.TokenUsage
	// Step and StepBase are the checkpoint's: the step under way and the
	// requests of the steps before it. Attempts == StepBase means the
	// step had not sent a request.
	Step, StepBase int
	// Route is the checkpoint's: the fallback chain's entry the step is
	// on, nil for the session's own provider.
	Route *Route
	// OpenCalls are the tool calls the turn recorded and did not close,
	// in the order they were asked for: those whose approval was never
	// granted wait for it again; the others' outcome is unknown.
	OpenCalls []msp.Item
	// StoppedBy says what stopped the process that ran the turn, as
	// Reason begins ("the server restarted", "node n1 stopped"), for the
	// open calls' failure reasons; "" says "the server stopped".
	StoppedBy string
	// Unapproved are the OpenCalls, by item id, whose approval was still
	// pending when the turn was taken up: they never ran (a decision
	// made since, by this process, lets them run now).
	Unapproved map[string]bool
}

// Outcome is how a turn ended.
type Outcome struct {
	// Completed is the terminal event, header unset.
	Completed msp.TurnCompletedParams
	// Answer is the final agent text when the turn completed.
	Answer string
	// Messages are what the turn adds to the session's history: its steps'
	// text, tool calls and results, then its answer.
	Messages []provider.Message
	// Stopped, when set, says the turn did not end: the host stopped it
	// (ErrHostStopping) and it resumes from this checkpoint; Completed is
	// then unset.
	Stopped *Checkpoint
	// Held are the last attempt's closing events (its item's final state,
	// its usage), for the caller to append in the same write as the
	// terminal (or the checkpoint): one fsync instead of three.
	Held []Event
	// Trace is the turn span's context (invalid when not tracing), so the
	// caller's log lines about the turn carry its trace id.
	Trace trace.SpanContext
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
