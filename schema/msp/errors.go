package msp

import (
	"encoding/json"
	"fmt"
)

// Error codes of the MSP error registry (MSP §3.12).
const (
	CodeParseError         = -32700
	CodeInvalidRequest     = -32600
	CodeMethodNotFound     = -32601
	CodeInvalidParams      = -32602
	CodeInternal           = -32603
	CodeOverloaded         = -32001
	CodeInputTooLarge      = -32002
	CodeCapabilityRequired = -32010
	CodeNotFound           = -32011
	CodeSessionNotFound    = -32020
	CodeForkBoundary       = -32023
	CodeSessionNotLoaded   = -32024
	CodeCommandRejected    = -32030
	CodeBackpressured      = -32031
	CodeOutputUnavailable  = -32041
	CodeBoundaryPruned     = -32042

	CodeApprovalNotFound         = -32050
	CodeApprovalAlreadyResolved  = -32051
	CodeApprovalChoiceInvalid    = -32052
	CodeApprovalRequirementStale = -32053
)

// Error kinds (camelCase) carried in error.data.kind.
const (
	KindParseError         = "parseError"
	KindInvalidRequest     = "invalidRequest"
	KindNotInitialized     = "notInitialized"
	KindAlreadyInitialized = "alreadyInitialized"
	KindMethodNotFound     = "methodNotFound"
	KindInvalidParams      = "invalidParams"
	KindInternal           = "internal"
	KindOverloaded         = "overloaded"
	KindInputTooLarge      = "inputTooLarge"
	KindCapabilityRequired = "capabilityRequired"
	KindNotFound           = "notFound"
	KindSessionNotFound    = "sessionNotFound"
	KindForkBoundary       = "forkBoundaryInvalid"
	KindSessionNotLoaded   = "sessionNotLoaded"
	KindCommandRejected    = "commandRejected"
	KindBackpressured      = "backpressured"
	KindOutputUnavailable  = "outputUnavailable"
	KindBoundaryPruned     = "boundaryPruned"
	KindNoBoundary         = "noBoundary"

	KindApprovalNotFound         = "approvalNotFound"
	KindApprovalAlreadyResolved  = "approvalAlreadyResolved"
	KindApprovalChoiceInvalid    = "approvalChoiceInvalid"
	KindApprovalRequirementStale = "approvalRequirementStale"
)

// Snake_case reasons of commandRejected and notFound errors.
const (
	ReasonCommandIDConflict = "command_id_conflict"
	ReasonSessionIDConflict = "session_id_conflict"
	ReasonMissingRun        = "missing_run"
	ReasonNotQueued         = "not_queued"
	ReasonMissingAnchor     = "missingAnchor"
	// ReasonSessionDeleted answers a replay of the command that made a
	// session (session/start, session/fork) once that session is deleted.
	ReasonSessionDeleted = "session_deleted"
	// ReasonNotLatestTurn, ReasonTurnNotEnded and ReasonTurnCompacted
	// refuse a turn/start regenerate (mspd addition) of a turn that is
	// not the session's latest with a user message, that has not ended,
	// or that a compaction summarized.
	ReasonNotLatestTurn = "not_latest_turn"
	ReasonTurnNotEnded  = "turn_not_ended"
	ReasonTurnCompacted = "turn_compacted"
)

// Reasons of invalidParams and notFound errors of session MCP servers and
// item/readOutput (camelCase, in data.reason).
const (
	// ReasonTransportNotAllowed refuses a session MCP server whose
	// transport the operator does not allow (--session-mcp).
	ReasonTransportNotAllowed = "transportNotAllowed"
	// ReasonHostNotAllowed refuses a session MCP server whose URL's host
	// is not one the operator lists (--session-mcp-hosts).
	ReasonHostNotAllowed = "hostNotAllowed"
	// ReasonNameTaken refuses a session MCP server named as one of the
	// operator's.
	ReasonNameTaken = "nameTaken"
	// ReasonUnknownItem answers item/readOutput for an item the session
	// does not have.
	ReasonUnknownItem = "unknownItem"
	// ReasonUnknownOutputRef answers item/readOutput for an outputRef the
	// item does not carry.
	ReasonUnknownOutputRef = "unknownOutputRef"
	// ReasonMisalignedOffset refuses an offsetBytes inside a UTF-8
	// character of text output (data.alignedNextOffset names the next
	// boundary).
	ReasonMisalignedOffset = "misalignedOffset"
	// ReasonPastEnd refuses an offsetBytes past the end of the output.
	ReasonPastEnd = "pastEnd"
	// ReasonRegenerateInputDiffers refuses a turn/start regenerate whose
	// input does not repeat the regenerated turn's prompt.
	ReasonRegenerateInputDiffers = "regenerateInputDiffers"
)

// ErrorData is the data member of an MSP error; Kind is always set.
type ErrorData struct {
	Kind       string `json:"kind"`
	Retryable  *bool  `json:"retryable,omitempty"`
	Reason     string `json:"reason,omitempty"`
	SessionID  string `json:"sessionId,omitempty"`
	CommandID  string `json:"commandId,omitempty"`
	LimitBytes int64  `json:"limitBytes,omitempty"`
	// Capability is the capability a capabilityRequired error needs.
	Capability string `json:"capability,omitempty"`
	// ItemID, OutputRef and Availability name what item/readOutput
	// could not read, and AlignedNextOffset the next character boundary
	// after a misaligned offset.
	ItemID            string `json:"itemId,omitempty"`
	OutputRef         string `json:"outputRef,omitempty"`
	Availability      string `json:"availability,omitempty"`
	AlignedNextOffset *int64 `json:"alignedNextOffset,omitempty"`
	Capacity          int    `json:"capacity,omitempty"`
	Anchor            string `json:"anchor,omitempty"`
	// LatestBoundaryCursor is sent as an explicit null ("null") when set.
	LatestBoundaryCursor json.RawMessage `json:"latestBoundaryCursor,omitempty"`
	Details              map[string]any  `json:"details,omitempty"`

	// The approval plane's members.
	ApprovalID           string                     `json:"approvalId,omitempty"`
	ChoiceID             string                     `json:"choiceId,omitempty"`
	CurrentRequirementID *ApprovalRequirementRef    `json:"currentRequirementId,omitempty"`
	Resolution           *ApprovalResolutionSummary `json:"resolution,omitempty"`
}

// Error is a typed MSP error: the JSON-RPC error object of a response.
type Error struct {
	Code    int       `json:"code"`
	Message string    `json:"message"`
	Data    ErrorData `json:"data"`
}

// Error implements the error interface.
func (e *Error) Error() string {
	return fmt.Sprintf("msp %s (%d): %s", e.Data.Kind, e.Code, e.Message)
}

// MarshalJSON keeps the wire form stable (data always present).
func (e *Error) MarshalJSON() ([]byte, error) {
	type wire Error
	return json.Marshal((*wire)(e))
}

// NewError builds an error with the given code, kind and message.
func NewError(code int, kind, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Data: ErrorData{Kind: kind}}
}

// ErrInvalidParams reports params that failed validation; field names the
// offending member as a dotted path ("retry.maxAttempts").
func ErrInvalidParams(field, format string, args ...any) *Error {
	e := NewError(CodeInvalidParams, KindInvalidParams, format, args...)
	if field != "" {
		e.Data.Details = map[string]any{"field": field}
	}
	return e
}

// ErrSessionNotFound reports an unknown sessionId.
func ErrSessionNotFound(sessionID string) *Error {
	e := NewError(CodeSessionNotFound, KindSessionNotFound, "session %s not found", sessionID)
	e.Data.SessionID = sessionID
	return e
}

// ErrMissingAnchor reports a cursor that never existed in the session.
func ErrMissingAnchor(sessionID, cursor string) *Error {
	e := NewError(CodeNotFound, KindNotFound, "unknown cursor anchor %q", cursor)
	e.Data.Reason = ReasonMissingAnchor
	e.Data.SessionID = sessionID
	return e
}

// ErrCommandRejected reports a durable admission rejection with a snake_case reason.
func ErrCommandRejected(commandID, reason, format string, args ...any) *Error {
	e := NewError(CodeCommandRejected, KindCommandRejected, format, args...)
	e.Data.CommandID = commandID
	e.Data.Reason = reason
	return e
}

// ErrCapabilityRequired refuses a request that needs a capability the
// connection was not granted.
func ErrCapabilityRequired(capability, format string, args ...any) *Error {
	e := NewError(CodeCapabilityRequired, KindCapabilityRequired, format, args...)
	e.Data.Capability = capability
	return e
}

// ErrInternal reports a server failure.
func ErrInternal(format string, args ...any) *Error {
	return NewError(CodeInternal, KindInternal, format, args...)
}

// ErrApprovalNotFound reports an approval the session never opened.
func ErrApprovalNotFound(sessionID, approvalID string) *Error {
	e := NewError(CodeApprovalNotFound, KindApprovalNotFound, "session %s has no approval %s", sessionID, approvalID)
	e.Data.SessionID, e.Data.ApprovalID = sessionID, approvalID
	return e
}

// ErrApprovalAlreadyResolved reports a decision for an approval resolved
// already, with the resolution that holds.
func ErrApprovalAlreadyResolved(sessionID, approvalID string, won ApprovalResolutionSummary) *Error {
	e := NewError(CodeApprovalAlreadyResolved, KindApprovalAlreadyResolved, "approval %s is already resolved (%s by %s)", approvalID, won.Decision, won.ResolvedBy)
	e.Data.SessionID, e.Data.ApprovalID, e.Data.Resolution = sessionID, approvalID, &won
	return e
}

// ErrApprovalChoiceInvalid reports a choiceId that is not one of the
// approval's availableChoices.
func ErrApprovalChoiceInvalid(sessionID, approvalID, choiceID string) *Error {
	e := NewError(CodeApprovalChoiceInvalid, KindApprovalChoiceInvalid, "approval %s offers no choice %q", approvalID, choiceID)
	e.Data.SessionID, e.Data.ApprovalID, e.Data.ChoiceID = sessionID, approvalID, choiceID
	return e
}

// ErrApprovalRequirementStale reports a decision aimed at another stage
// than the approval's current requirement, which it carries.
func ErrApprovalRequirementStale(sessionID string, current ApprovalRequirementRef) *Error {
	e := NewError(CodeApprovalRequirementStale, KindApprovalRequirementStale, "approval %s's current requirement is %s/%d", current.ApprovalID, current.ApprovalID, current.SourceIndex)
	e.Data.SessionID, e.Data.ApprovalID, e.Data.CurrentRequirementID = sessionID, current.ApprovalID, &current
	return e
}
