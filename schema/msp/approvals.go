package msp

import "encoding/json"

// The approval plane (MSP §5): a tool call that needs a person's consent
// waits for it. approval/requested opens an approval durably and
// approval/request presents it to each connection that can decide;
// approval/decide decides it and approval/resolved records the outcome.

// Approval modes (ApprovalMode, closed): a client selects one of them,
// never makes one. What each means for mspd's tools is in docs/tools.md.
const (
	ApprovalAllowAll        = "allowAll"
	ApprovalPromptUnmatched = "promptUnmatched"
	ApprovalOnRequest       = "onRequest"
	ApprovalDenyUnmatched   = "denyUnmatched"
)

// ApprovalModes lists the approval modes.
var ApprovalModes = []string{ApprovalAllowAll, ApprovalPromptUnmatched, ApprovalOnRequest, ApprovalDenyUnmatched}

// How an approval mode took effect (ApprovalModeSource).
const (
	ApprovalSourceStartup     = "startup"
	ApprovalSourceReconfigure = "approvalReconfigure"
)

// Outcomes of session/setApprovalMode (ApprovalModeApplyOutcome).
const (
	ApplyCompleted = "completed"
	ApplyNoop      = "noop"
)

// EffectiveApprovalModeState is the approval mode in effect: Session's
// approvalMode and session/setApprovalMode's effectiveMode.
type EffectiveApprovalModeState struct {
	// LastCommandID is the command that set it; nil when none did.
	LastCommandID *string `json:"lastCommandId"`
	Mode          string  `json:"mode"`
	Source        string  `json:"source"`
}

// SessionSetApprovalModeParams are the params of session/setApprovalMode.
type SessionSetApprovalModeParams struct {
	CommandID string `json:"commandId"`
	Mode      string `json:"mode"`
	SessionID string `json:"sessionId"`
}

// SessionSetApprovalModeResult is the ack of session/setApprovalMode.
type SessionSetApprovalModeResult struct {
	ApplyOutcome  string                     `json:"applyOutcome"`
	CommandID     string                     `json:"commandId"`
	EffectiveMode EffectiveApprovalModeState `json:"effectiveMode"`
	Status        string                     `json:"status"`
}

// SessionApprovalModeChangedParams are the params of
// session/approvalModeChanged.
type SessionApprovalModeChangedParams struct {
	ViewHeader
	ClientName string `json:"clientName"`
	CommandID  string `json:"commandId"`
	Mode       string `json:"mode"`
	Source     string `json:"source"`
}

// Approval decisions (ApprovalDecision).
const (
	DecisionApproved           = "approved"
	DecisionApprovedForSession = "approvedForSession"
	DecisionDenied             = "denied"
	DecisionTimedOut           = "timedOut"
	DecisionAbort              = "abort"
)

// Who resolved an approval (ApprovalResolvedBy).
const (
	ResolvedByUser   = "user"
	ResolvedByPolicy = "policy"
)

// Policy results (ApprovalPolicyResult).
const (
	PolicyAllow = "allow"
	PolicyDeny  = "deny"
)

// Choice scopes (ApprovalChoiceScope).
const (
	ScopeOnce    = "once"
	ScopeSession = "session"
)

// SubjectTool is the ApprovalSubject kind of a tool call.
const SubjectTool = "tool"

// ApprovalRequestParams are the params of approval/requested and, byte for
// byte, of approval/request.
type ApprovalRequestParams struct {
	ViewHeader
	ApprovalID           string                 `json:"approvalId"`
	AvailableChoices     []ApprovalChoice       `json:"availableChoices"`
	CurrentRequirementID ApprovalRequirementRef `json:"currentRequirementId"`
	// ItemID is the toolCall item the approval gates; TaskID is the same
	// (the item's id is its task id).
	ItemID         string          `json:"itemId"`
	JudgeEscalated bool            `json:"judgeEscalated"`
	ProtectedWrite bool            `json:"protectedWrite"`
	RawArgs        string          `json:"rawArgs"`
	Subject        ApprovalSubject `json:"subject"`
	TaskID         string          `json:"taskId"`
	// ToolCallID is the model's call id (the item's callId).
	ToolCallID string `json:"toolCallId"`
	// ToolName is the tool as the model calls it (server__tool).
	ToolName string `json:"toolName"`
	TurnID   string `json:"turnId"`
}

// ApprovalChoice is one way to decide an approval.
type ApprovalChoice struct {
	AcceptsFeedback bool   `json:"acceptsFeedback,omitempty"`
	ChoiceID        string `json:"choiceId"`
	Decision        string `json:"decision"`
	Label           string `json:"label"`
	RulePreview     string `json:"rulePreview,omitempty"`
	Scope           string `json:"scope"`
}

// ApprovalRequirementRef names the stage of an approval a decision is
// aimed at; mspd's approvals have one stage, sourceIndex 0.
type ApprovalRequirementRef struct {
	ApprovalID  string `json:"approvalId"`
	SourceIndex int    `json:"sourceIndex"`
}

// ApprovalSubject is what an approval is about: for mspd, a tool call.
type ApprovalSubject struct {
	Kind     string `json:"kind"`
	ToolName string `json:"toolName,omitempty"`
}

// ApprovalDecideParams are the params of approval/decide.
type ApprovalDecideParams struct {
	ApprovalID string `json:"approvalId"`
	ChoiceID   string `json:"choiceId"`
	CommandID  string `json:"commandId"`
	// Feedback goes to the model with a denial; never stored.
	Feedback      *string                `json:"feedback,omitempty"`
	RequirementID ApprovalRequirementRef `json:"requirementId"`
	SessionID     string                 `json:"sessionId"`
}

// ApprovalDecideResult is the ack of approval/decide.
type ApprovalDecideResult struct {
	ApprovalID string `json:"approvalId"`
	CommandID  string `json:"commandId"`
	Status     string `json:"status"`
	// Terminal is true: mspd's approvals have one stage, so a decision
	// resolves them.
	Terminal bool `json:"terminal"`
}

// ApprovalResolvedParams are the params of approval/resolved.
type ApprovalResolvedParams struct {
	ViewHeader
	ApprovalID string `json:"approvalId"`
	// DecidedByCommandID is the approval/decide that resolved it; empty
	// when a policy, a timeout or a stop did.
	DecidedByCommandID string                  `json:"decidedByCommandId,omitempty"`
	Decision           string                  `json:"decision"`
	ItemID             string                  `json:"itemId"`
	PolicyResult       string                  `json:"policyResult"`
	ResolvedBy         string                  `json:"resolvedBy"`
	StageEvidence      []ApprovalStageEvidence `json:"stageEvidence"`
	TurnID             string                  `json:"turnId"`
}

// ApprovalStageEvidence records a stage of a multi-stage approval; mspd's
// have one stage, so its stageEvidence is always empty.
type ApprovalStageEvidence struct {
	Argv          []string                `json:"argv"`
	Position      int                     `json:"position"`
	RequirementID ApprovalRequirementRef  `json:"requirementId"`
	Resolution    ApprovalStageResolution `json:"resolution"`
	TotalStages   int                     `json:"totalStages"`
}

// ApprovalStageResolution is how a stage was resolved.
type ApprovalStageResolution struct {
	Kind string `json:"kind"`
}

// ApprovalResolutionSummary is the winning resolution, told to a decision
// that came too late (approvalAlreadyResolved).
type ApprovalResolutionSummary struct {
	Decision   string `json:"decision"`
	ResolvedBy string `json:"resolvedBy"`
	ViewCursor string `json:"viewCursor"`
}

// ApprovalListPendingParams are the params of approval/listPending.
type ApprovalListPendingParams struct {
	SessionID string `json:"sessionId"`
}

// ApprovalListPendingResult is the result of approval/listPending: the
// approval/request params of each pending approval, by opening cursor.
type ApprovalListPendingResult struct {
	Approvals []json.RawMessage `json:"approvals"`
	// UserInputs is always empty: mspd asks for no user input.
	UserInputs []json.RawMessage `json:"userInputs"`
}

// RequestReceipt is a client's answer to a server-to-client request: the
// request was or will be shown. It changes nothing.
type RequestReceipt struct{}
