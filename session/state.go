package session

import (
	"encoding/json"
	"time"

	"mspd/schema/msp"
	"mspd/turn"
)

// state is a session's persisted bookkeeping: what the log alone cannot
// tell (turns admitted but not yet launched) plus the session's metadata.
type state struct {
	CreatedAt time.Time `json:"createdAt"`
	// Owner is the principal that started the session: the only one that
	// sees it.
	Owner string `json:"owner,omitempty"`
	// CursorSpans are the epochs its cursors carry, oldest first (see
	// epochSpan): the first is the incarnation's, minted when the session
	// is made. None for a session made before epochs.
	CursorSpans []epochSpan `json:"cursorSpans,omitempty"`
	// CursorEpoch is the incarnation's epoch as an older build kept it,
	// before spans: it reads as a single span from 0.
	CursorEpoch string `json:"cursorEpoch,omitempty"`
	// MadeBy is the command that made the session (nil for a session
	// an older build made): its deletion answers that command's replays.
	MadeBy     *maker    `json:"madeBy,omitempty"`
	UpdatedAt  time.Time `json:"updatedAt"`
	ModelID    *string   `json:"modelId,omitempty"`
	ProviderID *string   `json:"providerId,omitempty"`
	// StartProviderID is the provider the session's log began with: the
	// fold follows session/modelChanged from it to know which provider's
	// model made each tool call (nil for sessions of older builds:
	// unknown).
	StartProviderID *string `json:"startProviderId,omitempty"`
	WorkspaceRoot   *string `json:"workspaceRoot,omitempty"`
	FirstUserPrompt string  `json:"firstUserPrompt,omitempty"`
	// Name is set from the first user message, and by session/rename.
	Name string `json:"name,omitempty"`
	// ForkedFrom is where a fork was cut from.
	ForkedFrom *msp.ForkProvenance `json:"forkedFrom,omitempty"`
	TurnCount  int                 `json:"turnCount"`
	// ApprovalMode is the approval mode the session chose (at its start,
	// or by session/setApprovalMode); nil: the server default.
	ApprovalMode *approvalModeState `json:"approvalMode,omitempty"`
	Active       *pendingTurn       `json:"active,omitempty"`
	Queue        []pendingTurn      `json:"queue,omitempty"`

	// MCPServers are the MCP servers its client added (session/start's
	// config.mcpServers), secrets included: kept for its turns, never
	// returned to a client. Never changed once set.
	MCPServers map[string]msp.SessionMCPServerConfig `json:"mcpServers,omitempty"`
	// Instructions are the session's own system prompt (session/start's
	// config.instructions, at most msp.MaxInstructionsBytes): kept in the
	// row, which is small enough to carry them, and never changed once
	// set.
	Instructions string `json:"instructions,omitempty"`

	// ReasoningEffort is the default session/setReasoningEffort set; nil:
	// none (the provider's own).
	ReasoningEffort *msp.ReasoningEffortState `json:"reasoningEffort,omitempty"`
}

// pendingTurn is an admitted turn: everything needed to launch it, even
// after a restart.
type pendingTurn struct {
	TurnID    string `json:"turnId"`
	CommandID string `json:"commandId"`
	Text      string `json:"text"`
	// UserItemID is the id its userMessage item gets ("" for turns of
	// older builds: minted at launch), known at admission so that its
	// images' records name it.
	UserItemID string `json:"userItemId,omitempty"`
	// Images are the images it was given, stored in the log at its
	// admission (images.go).
	Images         []storedImage    `json:"images,omitempty"`
	DisplayText    string           `json:"displayText,omitempty"`
	MaxTokens      int              `json:"maxTokens,omitempty"`
	MaxSteps       int              `json:"maxSteps,omitempty"`
	ResponseSchema json.RawMessage  `json:"responseSchema,omitempty"`
	Retry          *msp.RetryPolicy `json:"retry,omitempty"`
	AdmittedAt     time.Time        `json:"admittedAt"`
	// StartedAt and StartSeq (its turn/started record) are set at launch.
	StartedAt time.Time `json:"startedAt,omitzero"`
	StartSeq  int64     `json:"startSeq,omitempty"`
	// Node is the cluster node that launched it ("" without a cluster).
	Node string `json:"node,omitempty"`
	// Checkpoint is where the running turn resumes should its process
	// stop: written with each retry notice, and by a stopping host.
	Checkpoint *turn.Checkpoint `json:"checkpoint,omitempty"`
	// ReasoningEffort is the turn's own from its admission, and from its
	// launch the one it runs with (the session's default filled in then).
	ReasoningEffort string `json:"reasoningEffort,omitempty"`
	// Compact marks a turn of session/compact (msp.CompactionManual): a
	// compaction alone, with no user message.
	Compact string `json:"compact,omitempty"`
	// Regenerates is the turn whose answer this one regenerates (its
	// input is that turn's, copied at admission): its launch takes that
	// turn out of the history (versions.go).
	Regenerates string `json:"regenerates,omitempty"`
}

// spans are the session's cursor epoch spans, an older build's
// CursorEpoch read as one.
func (st *state) spans() []epochSpan {
	if len(st.CursorSpans) == 0 && st.CursorEpoch != "" {
		return []epochSpan{{Epoch: st.CursorEpoch}}
	}
	return st.CursorSpans
}

// busy tells whether the session has a turn running or waiting.
func (st *state) busy() bool { return st.Active != nil || len(st.Queue) > 0 }

// wireTime is the RFC 3339 form mspd puts on the wire: UTC, milliseconds.
func wireTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// wire renders the MSP Session object.
func (st *state) wire(id, path string) msp.Session {
	s := msp.Session{
		CreatedAt:       wireTime(st.CreatedAt),
		FirstUserPrompt: st.FirstUserPrompt,
		ForkedFrom:      st.ForkedFrom,
		ModelID:         st.ModelID,
		Name:            st.Name,
		Path:            path,
		ProviderID:      st.ProviderID,
		SessionID:       id,
		Status:          msp.SessionIdle,
		TurnCount:       st.TurnCount,
		UpdatedAt:       wireTime(st.UpdatedAt),
		WorkspaceRoot:   st.WorkspaceRoot,
	}
	mode := st.approvalMode().wire()
	s.ApprovalMode = &mode
	if st.ReasoningEffort != nil {
		effort := *st.ReasoningEffort
		s.ReasoningEffort = &effort
	}
	if st.Active != nil {
		turnID := st.Active.TurnID
		s.ActiveTurnID = &turnID
		s.Status = msp.SessionRunning
	}
	return s
}

// config is the session's configuration as a client may read it back:
// its instructions, never its MCP servers; nil when it has none.
func (st *state) config() *msp.SessionConfig {
	if st.Instructions == "" {
		return nil
	}
	return &msp.SessionConfig{Instructions: st.Instructions}
}

func (st *state) clone() state {
	c := *st
	if st.Active != nil {
		a := *st.Active
		c.Active = &a
	}
	c.Queue = append([]pendingTurn(nil), st.Queue...)
	return c
}
