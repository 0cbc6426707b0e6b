package msp

// Compaction and the context window: session/compact, the compaction item
// and session/contextUsage, in upstream's shapes (msp.schema.json says
// what mspd means by each member).

// MethodSessionCompact compacts a session's context: a model call
// summarises its conversation into a compaction item.
const MethodSessionCompact = "session/compact"

// NotifySessionContextUsage tells how full the model's context window is,
// each time the triple changes.
const NotifySessionContextUsage = "session/contextUsage"

// ItemCompaction is the kind of the item a compaction produces.
const ItemCompaction = "compaction"

// SessionCompactParams are the params of session/compact.
type SessionCompactParams struct {
	CommandID string `json:"commandId"`
	SessionID string `json:"sessionId"`
	// TurnID names the turn whose context to compact: only the session's
	// latest is accepted; empty takes it.
	TurnID string `json:"turnId,omitempty"`
}

// SessionCompactResult is the ack of session/compact.
type SessionCompactResult struct {
	CommandID string `json:"commandId"`
	Status    string `json:"status"`
	// Reason says why a noop was one; empty on accepted.
	Reason string `json:"reason,omitempty"`
}

// CompactNoop is session/compact's ack status when there is nothing to
// compact (StatusAccepted otherwise).
const CompactNoop = "noop"

// ReasonNoCompactableHistory is a noop's reason: no turn completed since
// the session began or since its last compaction.
const ReasonNoCompactableHistory = "no_compactable_history"

// Compaction outcomes, on a compaction item's terminal revision.
const (
	CompactionCompacted = "compacted"
	CompactionNoop      = "noop"
	CompactionFailed    = "failed"
	CompactionCancelled = "cancelled"
)

// Compaction triggers.
const (
	CompactionManual = "manual"
	CompactionAuto   = "auto"
)

// Context pressure levels.
const (
	PressureNormal  = "normal"
	PressureWarning = "warning"
	PressureBlocked = "blocked"
)

// ContextUsage is a (windowTokens, usedTokens, pressure) triple: the
// snapshot block, and the body of session/contextUsage.
type ContextUsage struct {
	Pressure   string `json:"pressure"`
	UsedTokens int64  `json:"usedTokens"`
	// WindowTokens is nil when the model's window is unknown.
	WindowTokens *int64 `json:"windowTokens,omitempty"`
}

// SessionContextUsageParams are the params of session/contextUsage.
type SessionContextUsageParams struct {
	ViewHeader
	ContextUsage
}
