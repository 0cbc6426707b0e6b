package msp

import "encoding/json"

// InitializeParams are the params of initialize.
type InitializeParams struct {
	ClientInfo   ClientInfo          `json:"clientInfo"`
	Capabilities *ClientCapabilities `json:"capabilities,omitempty"`
}

// ClientInfo identifies the client, for diagnostics only.
type ClientInfo struct {
	Name    string `json:"name"`
	Title   string `json:"title,omitempty"`
	Version string `json:"version"`
}

// ClientCapabilities are the client's fixed-for-the-connection options.
type ClientCapabilities struct {
	ExperimentalAPI           bool     `json:"experimentalApi,omitempty"`
	OptOutNotificationMethods []string `json:"optOutNotificationMethods,omitempty"`
	RequestedCapabilities     []string `json:"requestedCapabilities,omitempty"`
	UserInputDialogs          *bool    `json:"userInputDialogs,omitempty"`
}

// InitializeResult is the result of initialize.
type InitializeResult struct {
	ExperimentalAPI     bool         `json:"experimentalApi"`
	GrantedCapabilities []string     `json:"grantedCapabilities"`
	MuseHome            string       `json:"museHome"`
	PlatformFamily      string       `json:"platformFamily"`
	PlatformOS          string       `json:"platformOs"`
	Schema              SchemaInfo   `json:"schema"`
	ServerInfo          ServerInfo   `json:"serverInfo"`
	SessionDurability   string       `json:"sessionDurability"`
	UserAgent           string       `json:"userAgent"`
	AIProviders         *AIProviders `json:"aiProviders,omitempty"`
}

// SchemaInfo names the envelope version and the served schema fingerprint.
type SchemaInfo struct {
	Fingerprint string `json:"fingerprint"`
	Version     int    `json:"version"`
}

// ServerInfo identifies the server.
type ServerInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// AIProviders advertises RFC 0248 support (an additive member of InitializeResult).
type AIProviders struct {
	CallAccounting CallAccounting `json:"callAccounting"`
}

// CallAccounting flags: turn results carry attempts; turn/start honours retry.
type CallAccounting struct {
	Attempts    bool `json:"attempts"`
	RetryPolicy bool `json:"retryPolicy"`
}

// Session is the session object returned by every lifecycle method.
// The required-nullable members are pointers without omitempty so that they
// are always present, as null when unset.
type Session struct {
	ActiveTurnID    *string         `json:"activeTurnId"`
	CreatedAt       string          `json:"createdAt"`
	FirstUserPrompt string          `json:"firstUserPrompt,omitempty"`
	ForkedFrom      *ForkProvenance `json:"forkedFrom"`
	LastActivityAt  string          `json:"lastActivityAt,omitempty"`
	ModelID         *string         `json:"modelId"`
	Name            string          `json:"name,omitempty"`
	Path            string          `json:"path"`
	ProviderID      *string         `json:"providerId"`
	SessionID       string          `json:"sessionId"`
	Status          string          `json:"status"`
	TurnCount       int             `json:"turnCount"`
	UpdatedAt       string          `json:"updatedAt"`
	WorkspaceRoot   *string         `json:"workspaceRoot"`
	// ApprovalMode is the approval mode in effect; mspd always sends it.
	ApprovalMode *EffectiveApprovalModeState `json:"approvalMode,omitempty"`
	// Match (mspd extension) is where a session/list row matched the
	// filter's content member; nil elsewhere.
	Match *SessionMatch `json:"match,omitempty"`
	// ReasoningEffort (mspd addition) is the session's reasoning-effort
	// default; nil until session/setReasoningEffort sets one.
	ReasoningEffort *ReasoningEffortState `json:"reasoningEffort,omitempty"`
}

// ForkProvenance names where a forked session was cut from.
type ForkProvenance struct {
	CommandID   string `json:"commandId"`
	CutCursor   string `json:"cutCursor"`
	CutExplicit bool   `json:"cutExplicit"`
	SessionID   string `json:"sessionId"`
}

// Session statuses.
const (
	SessionIdle    = "idle"
	SessionRunning = "running"
)

// SessionStartParams are the params of session/start.
type SessionStartParams struct {
	CommandID string `json:"commandId"`
	// ApprovalMode selects the session's approval mode; nil takes the
	// server default (ApprovalPromptUnmatched).
	ApprovalMode   *string        `json:"approvalMode,omitempty"`
	Config         *SessionConfig `json:"config,omitempty"`
	SessionID      string         `json:"sessionId,omitempty"`
	ModelID        string         `json:"modelId,omitempty"`
	ProviderID     *string        `json:"providerId,omitempty"`
	WorkspaceRoot  string         `json:"workspaceRoot,omitempty"`
	WorkspaceRoots []string       `json:"workspaceRoots,omitempty"`
}

// SessionStartResult is the result of session/start.
type SessionStartResult struct {
	Session    Session `json:"session"`
	ViewCursor string  `json:"viewCursor"`
}

// SessionResumeParams are the params of session/resume.
type SessionResumeParams struct {
	CommandID    string         `json:"commandId"`
	Config       *SessionConfig `json:"config,omitempty"`
	SessionID    string         `json:"sessionId"`
	Cursor       *string        `json:"cursor,omitempty"`
	ExcludeItems bool           `json:"excludeItems,omitempty"`
	History      string         `json:"history,omitempty"`
}

// SessionReadParams are the params of session/read.
type SessionReadParams struct {
	SessionID    string `json:"sessionId"`
	ExcludeItems *bool  `json:"excludeItems,omitempty"`
}

// SessionSnapshot is the result of session/resume and session/read.
// Config (mspd's additive member) is the session's configuration as
// session/start took it: its instructions; never its MCP servers.
type SessionSnapshot struct {
	Config *SessionConfig `json:"config,omitempty"`
	// ContextUsage (mspd's additive member) is the latest
	// session/contextUsage triple; nil before any.
	ContextUsage    *ContextUsage    `json:"contextUsage,omitempty"`
	History         SessionHistory   `json:"history"`
	PendingRequests []PendingRequest `json:"pendingRequests"`
	Session         Session          `json:"session"`
	ViewCursor      string           `json:"viewCursor"`
}

// PendingRequest points at a pending approval (mspd asks for no user
// input): its approval/requested event's cursor.
type PendingRequest struct {
	ApprovalID string `json:"approvalId,omitempty"`
	Kind       string `json:"kind"`
	ViewCursor string `json:"viewCursor"`
}

// PendingApproval is PendingRequest's kind for an approval.
const PendingApproval = "approval"

// SessionHistory is the history member of resume and read results.
type SessionHistory struct {
	Items      []Item          `json:"items"`
	Mode       string          `json:"mode"`
	NoneReason string          `json:"noneReason,omitempty"`
	Snapshot   json.RawMessage `json:"snapshot"`
}

// History modes and none reasons.
const (
	HistoryInline     = "inline"
	HistoryNone       = "none"
	NoneExcluded      = "excluded"
	NoneCursorSuffix  = "cursorSuffix"
	NoneHistoryBudget = "historyBudget"
)

// SessionListParams are the params of session/list.
type SessionListParams struct {
	Cursor *string `json:"cursor,omitempty"`
	// Filter selects sessions inside the listing's index query, before
	// paging; nil lists them all.
	Filter *SessionListFilter `json:"filter,omitempty"`
	Limit  *int               `json:"limit,omitempty"`
}

// SessionListResult is the result of session/list.
type SessionListResult struct {
	// AppliedFilter is the canonical filter applied, present exactly when
	// the request had one; a member left out was not applied.
	AppliedFilter *SessionListFilter `json:"appliedFilter,omitempty"`
	NextCursor    *string            `json:"nextCursor"`
	Sessions      []Session          `json:"sessions"`
}

// SessionListFilter is session/list's filter; its members are ANDed.
type SessionListFilter struct {
	// Branch is upstream's; mspd derives no branch, so it is never
	// applied, nor echoed.
	Branch    json.RawMessage             `json:"branch,omitempty"`
	SessionID *SessionListSessionIDFilter `json:"sessionId,omitempty"`
	Text      *SessionListTextFilter      `json:"text,omitempty"`
	// Content (mspd extension) matches the text of the session's
	// messages: the user's and the answers.
	Content *SessionListContentFilter `json:"content,omitempty"`
}

// SessionListSessionIDFilter keeps the sessions of these ids.
type SessionListSessionIDFilter struct {
	AnyOf []string `json:"anyOf"`
}

// SessionListTextFilter is a token-prefix search of the served name and
// title.
type SessionListTextFilter struct {
	AllOf  []string `json:"allOf,omitempty"`
	AnyOf  []string `json:"anyOf,omitempty"`
	Fields []string `json:"fields"`
}

// The served fields SessionListTextFilter reads.
const (
	TextFieldName  = "name"
	TextFieldTitle = "title"
)

// SessionListContentFilter (mspd extension) is a token-prefix search of
// a session's messages, terms as SessionListTextFilter's; each term may
// match a different message.
type SessionListContentFilter struct {
	AllOf []string `json:"allOf,omitempty"`
	AnyOf []string `json:"anyOf,omitempty"`
}

// SessionMatch (mspd extension) says where a session/list row matched
// its content filter.
type SessionMatch struct {
	// Snippet is plain text from the matching message, at most 160
	// characters, around the first matching word.
	Snippet string `json:"snippet"`
}

// SessionForkParams are the params of session/fork.
type SessionForkParams struct {
	CommandID    string        `json:"commandId"`
	CutPoint     *ForkCutPoint `json:"cutPoint,omitempty"`
	ExcludeItems bool          `json:"excludeItems,omitempty"`
	SessionID    string        `json:"sessionId"`
}

// ForkCutPoint names the last completed turn a fork copies.
type ForkCutPoint struct {
	LastTurnID string `json:"lastTurnId"`
}

// SessionRenameParams are the params of session/rename.
type SessionRenameParams struct {
	CommandID string `json:"commandId"`
	Name      string `json:"name"`
	SessionID string `json:"sessionId"`
}

// SessionRenameResult is the ack of session/rename.
type SessionRenameResult struct {
	CommandID string `json:"commandId"`
	Name      string `json:"name,omitempty"`
	Status    string `json:"status"`
}

// SessionDeleteParams are the params of session/delete.
type SessionDeleteParams struct {
	CommandID string `json:"commandId"`
	SessionID string `json:"sessionId"`
}

// CommandAcceptedResult is the ack of a command whose effect is reported
// by a later notification (session/delete).
type CommandAcceptedResult struct {
	CommandID string `json:"commandId"`
	Status    string `json:"status"`
}

// SessionDeleteCompletedParams are the params of session/deleteCompleted.
type SessionDeleteCompletedParams struct {
	CommandID      string `json:"commandId"`
	Outcome        string `json:"outcome"`
	PhysicalChange string `json:"physicalChange,omitempty"`
	Reason         string `json:"reason,omitempty"`
	SessionID      string `json:"sessionId"`
}

// Deletion outcomes.
const (
	DeleteCompleted = "completed"
	DeleteFailed    = "failed"
)

// SessionSetModelParams are the params of session/setModel.
type SessionSetModelParams struct {
	CommandID string         `json:"commandId"`
	Model     ModelSelection `json:"model"`
	SessionID string         `json:"sessionId"`
}

// ModelSelection is a model picked for a session.
type ModelSelection struct {
	DisplayLabel string `json:"displayLabel,omitempty"`
	ModelID      string `json:"modelId"`
	ProviderID   string `json:"providerId,omitempty"`
}

// SessionSetModelResult is the ack of session/setModel.
type SessionSetModelResult = CommandAcceptedResult

// SessionNameChangedParams are the params of session/nameChanged.
type SessionNameChangedParams struct {
	ViewHeader
	Name string `json:"name"`
}

// SessionModelChangedParams are the params of session/modelChanged.
type SessionModelChangedParams struct {
	ViewHeader
	ModelID    string `json:"modelId"`
	ProviderID string `json:"providerId,omitempty"`
	Source     string `json:"source"`
}

// SessionListChangedParams are the params of session/listChanged.
type SessionListChangedParams struct {
	Session Session `json:"session"`
}

// SessionStartedParams are the params of session/started.
type SessionStartedParams struct {
	Session Session `json:"session"`
}

// TurnInputPart is one part of a turn's input.
type TurnInputPart struct {
	Type       string `json:"type"`
	Text       string `json:"text,omitempty"`
	Base64Data string `json:"base64Data,omitempty"`
	MediaType  string `json:"mediaType,omitempty"`
	Width      *int   `json:"width,omitempty"`
	Height     *int   `json:"height,omitempty"`
	Selector   string `json:"selector,omitempty"`
	Arguments  string `json:"arguments,omitempty"`
}

// RetryPolicy is the RFC 0248 per-turn retry policy of turn/start.
type RetryPolicy struct {
	MaxAttempts   *int  `json:"maxAttempts,omitempty"`
	GrowMaxTokens *bool `json:"growMaxTokens,omitempty"`
}

// TurnStartParams are the params of turn/start. Retry, MaxTokens and
// ResponseSchema are mspd's additive RFC 0248 members.
type TurnStartParams struct {
	CommandID       string          `json:"commandId"`
	SessionID       string          `json:"sessionId"`
	Input           []TurnInputPart `json:"input"`
	DisplayText     string          `json:"displayText,omitempty"`
	IfBusy          string          `json:"ifBusy,omitempty"`
	ReasoningEffort string          `json:"reasoningEffort,omitempty"`
	Retry           *RetryPolicy    `json:"retry,omitempty"`
	MaxTokens       *int            `json:"maxTokens,omitempty"`
	ResponseSchema  json.RawMessage `json:"responseSchema,omitempty"`
	// MaxSteps (mspd addition) lowers the server's step limit
	// (--max-steps) for this turn: the model calls it may make before
	// the turn ends stepLimit. A higher value is the server's limit.
	MaxSteps *int `json:"maxSteps,omitempty"`
	// Regenerate (mspd addition) names the turn whose answer this turn
	// regenerates: it answers that turn's input again and replaces it in
	// what the model sees; the named turn stays in the log as an earlier
	// version of the answer.
	Regenerate string `json:"regenerate,omitempty"`
}

// IfBusy dispositions.
const (
	IfBusyQueue   = "queue"
	IfBusySteer   = "steer"
	IfBusyReplace = "replace"
)

// TurnStartResult is the ack of turn/start.
type TurnStartResult struct {
	CommandID      string `json:"commandId"`
	Disposition    string `json:"disposition"`
	StartedNewTurn bool   `json:"startedNewTurn"`
	Status         string `json:"status"`
	TurnID         string `json:"turnId"`
}

// Dispositions and command statuses.
const (
	DispositionStarted = "started"
	DispositionQueued  = "queued"
	StatusAccepted     = "accepted"
)

// TurnStopParams are the params of turn/interrupt, turn/cancel and turn/unqueue.
type TurnStopParams struct {
	CommandID string `json:"commandId"`
	SessionID string `json:"sessionId"`
	TurnID    string `json:"turnId,omitempty"`
	Retract   bool   `json:"retract,omitempty"`
}

// CommandAck is the ack of turn/interrupt, turn/cancel and turn/unqueue.
type CommandAck struct {
	CommandID string `json:"commandId"`
	Status    string `json:"status"`
	TurnID    string `json:"turnId"`
}

// SourceRange is the provenance of a durable view event.
type SourceRange struct {
	First  RecordPosition `json:"first"`
	Last   RecordPosition `json:"last"`
	Stream StreamRef      `json:"stream"`
}

// RecordPosition names one record of a stream.
type RecordPosition struct {
	ID       string `json:"id"`
	Sequence int64  `json:"sequence"`
}

// StreamRef names the stream a record lives on.
type StreamRef struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
}

// ViewHeader is embedded in every view notification's params.
type ViewHeader struct {
	SessionID   string       `json:"sessionId"`
	SourceRange *SourceRange `json:"sourceRange,omitempty"`
	ViewCursor  string       `json:"viewCursor"`
}

// Header returns the header itself, so that every params struct embedding a
// ViewHeader satisfies ViewParams.
func (h *ViewHeader) Header() *ViewHeader { return h }

// ViewParams are the params of a view notification: a struct embedding
// ViewHeader, whose header the session fills in when the event is appended.
type ViewParams interface {
	Header() *ViewHeader
}

// TurnStartedParams are the params of turn/started.
type TurnStartedParams struct {
	ViewHeader
	CommandID string `json:"commandId"`
	TurnID    string `json:"turnId"`
	// Regenerates (mspd addition) is the turn whose answer this one
	// regenerates (TurnStartParams.Regenerate).
	Regenerates string `json:"regenerates,omitempty"`
}

// TurnUnqueuedParams are the params of turn/unqueued.
type TurnUnqueuedParams = TurnStartedParams

// Turn terminals.
const (
	TerminalCompleted = "completed"
	TerminalFailed    = "failed"
	TerminalCancelled = "cancelled"
)

// TurnCompletedParams are the params of turn/completed.
type TurnCompletedParams struct {
	ViewHeader
	TurnID             string      `json:"turnId"`
	Terminal           string      `json:"terminal"`
	Error              *TurnError  `json:"error,omitempty"`
	Reason             string      `json:"reason,omitempty"`
	DurationMs         *int64      `json:"durationMs,omitempty"`
	TimeToFirstTokenMs *int64      `json:"timeToFirstTokenMs,omitempty"`
	Usage              *TokenUsage `json:"usage,omitempty"`
	Attempts           *Attempts   `json:"attempts,omitempty"`
}

// TurnError is the error of a failed turn.
type TurnError struct {
	Kind      string `json:"kind"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	// The provider failure behind a modelError, for UIs that explain it
	// in their own words (mspd's additive members).
	ErrorKind  string `json:"errorKind,omitempty"`
	HTTPStatus int    `json:"httpStatus,omitempty"`
	System     string `json:"system,omitempty"`
	StopReason string `json:"stopReason,omitempty"`
}

// Turn error kinds used by mspd.
const (
	TurnErrorModel         = "modelError"
	TurnErrorLaunch        = "launchError"
	TurnErrorHostRestarted = "hostRestarted"
	TurnErrorConfig        = "configError"
	TurnErrorLog           = "logError"
	// TurnErrorEnvironment fails a turn whose environment is not there: a
	// required session MCP server that cannot be reached.
	TurnErrorEnvironment = "environmentError"
	// TurnErrorStepLimit ends a turn whose model kept asking for tools
	// past its step limit.
	TurnErrorStepLimit = "stepLimit"
)

// Attempts is the RFC 0248 attempt accounting of a turn's model call.
type Attempts struct {
	Count            int    `json:"count"`
	OutputTokens     int64  `json:"outputTokens"`
	UsageComplete    bool   `json:"usageComplete"`
	StructuredOutput string `json:"structuredOutput,omitempty"`
}

// TurnRetryScheduledParams are the params of turn/retryScheduled (turn layer).
type TurnRetryScheduledParams struct {
	ViewHeader
	TurnID       string `json:"turnId"`
	Attempt      int    `json:"attempt"`
	NextAttempt  int    `json:"nextAttempt"`
	MaxAttempts  int    `json:"maxAttempts"`
	RetryDelayMs int64  `json:"retryDelayMs"`
	Reason       string `json:"reason"`
}

// TurnModelRetryScheduledParams are the params of turn/modelRetryScheduled
// (mspd's model-layer retry notice).
type TurnModelRetryScheduledParams struct {
	ViewHeader
	TurnID       string `json:"turnId"`
	Attempt      int    `json:"attempt"`
	NextAttempt  int    `json:"nextAttempt"`
	MaxAttempts  int    `json:"maxAttempts"`
	RetryDelayMs int64  `json:"retryDelayMs"`
	System       string `json:"system,omitempty"`
	ErrorKind    string `json:"errorKind,omitempty"`
	HTTPStatus   int    `json:"httpStatus,omitempty"`

	// A fallback: the failed attempt's provider cannot answer, and the
	// next attempt goes to another provider of its chain, at once
	// (retryDelayMs 0). Fallback is set, ProviderID names the configured
	// provider that failed (System alone cannot tell two of one API
	// apart), NextProviderID and NextModelID who answers next, and
	// FallbackReason why the step left (a stop reason:
	// attemptsExhausted, budgetExhausted, retryAfterTooLong,
	// notRetryable; or circuitOpen).
	Fallback       bool   `json:"fallback,omitempty"`
	ProviderID     string `json:"providerId,omitempty"`
	NextProviderID string `json:"nextProviderId,omitempty"`
	NextModelID    string `json:"nextModelId,omitempty"`
	FallbackReason string `json:"fallbackReason,omitempty"`
}

// FallbackCircuitOpen is the fallbackReason of a step that left its
// provider because the provider's circuit breaker opened meanwhile; the
// others are the stop reasons of turn/completed's error.
const FallbackCircuitOpen = "circuitOpen"

// TurnProviderSkippedParams are the params of turn/providerSkipped
// (mspd's): a provider of the turn's fallback chain is skipped, without a
// request, because its circuit breaker is open, and the next request goes
// to NextProviderID.
type TurnProviderSkippedParams struct {
	ViewHeader
	TurnID         string `json:"turnId"`
	ProviderID     string `json:"providerId"`
	ModelID        string `json:"modelId,omitempty"`
	System         string `json:"system,omitempty"`
	Breaker        string `json:"breaker"`
	NextProviderID string `json:"nextProviderId"`
	NextModelID    string `json:"nextModelId,omitempty"`
}

// Item kinds and statuses used by mspd.
const (
	ItemUserMessage  = "userMessage"
	ItemAgentMessage = "agentMessage"
	ItemToolCall     = "toolCall"

	ItemInProgress = "inProgress"
	ItemCompleted  = "completed"
	ItemFailed     = "failed"
	ItemCancelled  = "cancelled"
	ItemRejected   = "rejected"
	ItemTimedOut   = "timedOut"
)

// Item is a view item: a user message, an agent message, reasoning or a
// tool call.
type Item struct {
	ItemID      string  `json:"itemId"`
	Kind        string  `json:"kind"`
	Revision    int     `json:"revision"`
	Status      string  `json:"status"`
	TurnID      *string `json:"turnId,omitempty"`
	Text        *string `json:"text,omitempty"`
	CommandID   string  `json:"commandId,omitempty"`
	DisplayText string  `json:"displayText,omitempty"`
	RecordedAt  string  `json:"recordedAt,omitempty"`
	Truncated   bool    `json:"truncated,omitempty"`
	// Attachments are a userMessage's images, metadata only.
	Attachments []MessageAttachment `json:"attachments,omitempty"`
	// Regenerates (mspd addition) is, on a userMessage, the turn whose
	// answer its turn regenerates: the message repeats that turn's.
	Regenerates string `json:"regenerates,omitempty"`

	// toolCall items.

	// Tool is the tool's name as its server lists it.
	Tool string `json:"tool,omitempty"`
	// Server names the MCP server the tool is from (mspd's additive
	// member).
	Server string `json:"server,omitempty"`
	// CallID is the provider's call id, opaque.
	CallID string `json:"callId,omitempty"`
	// Args is the argument JSON exactly as the model wrote it.
	Args *string `json:"args,omitempty"`
	// VisibleOutput is the call's output, bounded (Truncated beyond).
	VisibleOutput *string `json:"visibleOutput,omitempty"`
	// FailureKind classifies a failed, rejected or timed-out call
	// (snake_case, e.g. "tool_error").
	FailureKind string `json:"failureKind,omitempty"`
	// FailureReason says why, in words.
	FailureReason string `json:"failureReason,omitempty"`
	// OutputRef names the whole output, kept when VisibleOutput was cut;
	// item/readOutput reads it.
	OutputRef *OutputRef `json:"outputRef,omitempty"`
	// ApprovalID is the approval that gated the call.
	ApprovalID string `json:"approvalId,omitempty"`
	// DurationMs is how long the call ran.
	DurationMs *int64 `json:"durationMs,omitempty"`

	// reasoning items.

	// Summary is the reasoning as the provider shows it, one entry per
	// part; part n streams as item/delta field SummaryField(n).
	Summary []string `json:"summary,omitempty"`
	// ProviderItemID is the provider's id of the reasoning, if any.
	ProviderItemID string `json:"providerItemId,omitempty"`

	// compaction items (compact.go). Text holds the summary.

	// TokensBefore and TokensAfter are the context's size, in tokens,
	// before and after the compaction.
	TokensBefore *int64 `json:"tokensBefore,omitempty"`
	TokensAfter  *int64 `json:"tokensAfter,omitempty"`
	// SummarizedThrough names the boundary: the last turn the summary
	// covers.
	SummarizedThrough string `json:"summarizedThrough,omitempty"`
	// Trigger says what began the compaction (manual, auto).
	Trigger string `json:"trigger,omitempty"`
	// Outcome is how it ended, on the terminal revision.
	Outcome string `json:"outcome,omitempty"`
}

// ItemParams are the params of item/started and item/completed.
type ItemParams struct {
	ViewHeader
	Item Item `json:"item"`
}

// ItemDeltaParams are the params of item/delta; never a sourceRange.
type ItemDeltaParams struct {
	SessionID  string `json:"sessionId"`
	ViewCursor string `json:"viewCursor"`
	ItemID     string `json:"itemId"`
	Field      string `json:"field,omitempty"`
	Delta      string `json:"delta"`
}

// ViewGapParams are the params of view/gap.
type ViewGapParams struct {
	SessionID string `json:"sessionId"`
	After     string `json:"after"`
	Next      string `json:"next"`
}

// TokenUsage are raw provider counters.
type TokenUsage struct {
	CachedTokens    int64 `json:"cachedTokens"`
	InputTokens     int64 `json:"inputTokens"`
	OutputTokens    int64 `json:"outputTokens"`
	ReasoningTokens int64 `json:"reasoningTokens"`
}

// CumulativeTokenUsage are a session's running totals.
type CumulativeTokenUsage struct {
	OutputTokens int64 `json:"outputTokens"`
	PromptTokens int64 `json:"promptTokens"`
	TotalTokens  int64 `json:"totalTokens"`
	// Cost is the session's estimated cost so far, absent while no
	// completion of it was priced.
	Cost *CumulativeCost `json:"cost,omitempty"`
}

// CumulativeCost is a session's estimated cost: the sum of its priced
// completions' costs (SessionTokenUsageParams.CostUSD).
type CumulativeCost struct {
	// USD is the estimated total, finite and non-negative.
	USD float64 `json:"usd"`
	// Partial says some completion's model had no price: USD leaves it out.
	Partial bool `json:"partial"`
}

// SessionTokenUsageParams are the params of session/tokenUsage.
type SessionTokenUsageParams struct {
	ViewHeader
	TurnID       string               `json:"turnId"`
	Cumulative   CumulativeTokenUsage `json:"cumulative"`
	PromptTokens int64                `json:"promptTokens"`
	TotalTokens  int64                `json:"totalTokens"`
	Usage        TokenUsage           `json:"usage"`
	DurationMs   *int64               `json:"durationMs,omitempty"`
	FinishReason string               `json:"finishReason,omitempty"`
	ModelID      string               `json:"modelId,omitempty"`
	// CostUSD is mspd's: this completion's estimated cost at the price
	// configured for the model that answered it when it was recorded,
	// absent when that model has none. A turn's cost is the sum over its
	// completions.
	CostUSD *float64 `json:"costUsd,omitempty"`
}

// ViewSubscribeParams are the params of view/subscribe.
type ViewSubscribeParams struct {
	SessionID string  `json:"sessionId"`
	After     *string `json:"after,omitempty"`
}

// ViewCursorResult is the result of view/subscribe.
type ViewCursorResult struct {
	ViewCursor string `json:"viewCursor"`
}

// ViewUnsubscribeParams are the params of view/unsubscribe.
type ViewUnsubscribeParams struct {
	SessionID string `json:"sessionId"`
}

// ViewPageParams are the params of view/page.
type ViewPageParams struct {
	SessionID string  `json:"sessionId"`
	Cursor    *string `json:"cursor,omitempty"`
	Direction string  `json:"direction,omitempty"`
	Limit     int     `json:"limit"`
	Anchor    string  `json:"anchor,omitempty"`
}

// Page directions.
const (
	Forward  = "forward"
	Backward = "backward"
)

// ViewEvent is one durable view event as view/page returns it: the live
// notification without jsonrpc and emittedAtMs.
type ViewEvent struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// ViewPageResult is the result of view/page.
type ViewPageResult struct {
	Events     []ViewEvent `json:"events"`
	NextCursor *string     `json:"nextCursor"`
}

// ModelListResult is the result of model/list.
type ModelListResult struct {
	Models     []ModelEntry `json:"models"`
	ProfileID  *string      `json:"profileId"`
	ProviderID string       `json:"providerId"`
	Source     string       `json:"source"`
}

// ModelEntry is one configured model.
type ModelEntry struct {
	ContextLimit *int64     `json:"contextLimit"`
	Cost         *ModelCost `json:"cost"` // null when the model has no configured price
	Description  *string    `json:"description"`
	DisplayLabel string     `json:"displayLabel"`
	IsActive     bool       `json:"isActive"`
	IsDefault    bool       `json:"isDefault"`
	ModelID      string     `json:"modelId"`
	OutputLimit  *int64     `json:"outputLimit"`
	ProfileID    *string    `json:"profileId"`
	ProviderID   string     `json:"providerId"`
	ReleaseDate  *string    `json:"releaseDate"`

	// BreakerState is mspd's: the circuit breaker of the row's provider
	// (closed, open, halfOpen), absent when it has none.
	BreakerState string `json:"breakerState,omitempty"`
	// Fallback is mspd's: the chain the row's provider falls back on, in
	// order, absent when it names none.
	Fallback []ModelRef `json:"fallback,omitempty"`
	// Images, Tools and Reasoning are mspd's: whether the model reads
	// images, takes tools and reasons, as the catalog knows it (so a
	// client can offer an attach button only where it is of use).
	Images    bool `json:"images"`
	Tools     bool `json:"tools"`
	Reasoning bool `json:"reasoning"`
}

// ModelCost is a model's configured price per million tokens, each a
// decimal string carried verbatim.
type ModelCost struct {
	Cached   string  `json:"cached"`
	Currency *string `json:"currency"`
	Input    string  `json:"input"`
	Output   string  `json:"output"`
}

// ModelRef names a configured model: a fallback chain's entry.
type ModelRef struct {
	ProviderID string `json:"providerId"`
	ModelID    string `json:"modelId"`
}
