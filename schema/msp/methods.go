package msp

// JSONRPCVersion is the value of every frame's "jsonrpc" member.
const JSONRPCVersion = "2.0"

// Client-to-server request methods served by mspd.
const (
	MethodInitialize      = "initialize"
	MethodSessionStart    = "session/start"
	MethodSessionResume   = "session/resume"
	MethodSessionRead     = "session/read"
	MethodSessionList     = "session/list"
	MethodSessionFork     = "session/fork"
	MethodSessionRename   = "session/rename"
	MethodSessionDelete   = "session/delete"
	MethodSessionSetModel = "session/setModel"
	MethodTurnStart       = "turn/start"
	MethodTurnInterrupt   = "turn/interrupt"
	MethodTurnCancel      = "turn/cancel"
	MethodTurnUnqueue     = "turn/unqueue"
	MethodViewSubscribe   = "view/subscribe"
	MethodViewUnsubscribe = "view/unsubscribe"
	MethodViewPage        = "view/page"
	MethodModelList       = "model/list"
	MethodItemReadOutput  = "item/readOutput"

	MethodSessionSetApprovalMode = "session/setApprovalMode"
	MethodApprovalDecide         = "approval/decide"
	MethodApprovalListPending    = "approval/listPending"
)

// Server-to-client request methods: must-answer requests a client answers
// with a RequestReceipt.
const (
	// RequestApproval presents a pending approval; the decision travels as
	// approval/decide.
	RequestApproval = "approval/request"
)

// NotifyInitialized is the only client-to-server notification.
const NotifyInitialized = "initialized"

// Server-to-client notification methods.
const (
	NotifySessionStarted          = "session/started"
	NotifyTurnStarted             = "turn/started"
	NotifyTurnCompleted           = "turn/completed"
	NotifyTurnUnqueued            = "turn/unqueued"
	NotifyTurnRetryScheduled      = "turn/retryScheduled"
	NotifyTurnModelRetryScheduled = "turn/modelRetryScheduled"
	NotifyTurnProviderSkipped     = "turn/providerSkipped"
	NotifyItemStarted             = "item/started"
	NotifyItemDelta               = "item/delta"
	NotifySessionNameChanged      = "session/nameChanged"
	NotifySessionModelChanged     = "session/modelChanged"
	NotifySessionDeleteCompleted  = "session/deleteCompleted"
	NotifySessionListChanged      = "session/listChanged"
	NotifyItemUpdated             = "item/updated"
	NotifyItemCompleted           = "item/completed"
	NotifyViewGap                 = "view/gap"
	NotifySessionTokenUsage       = "session/tokenUsage"

	NotifyApprovalRequested          = "approval/requested"
	NotifyApprovalResolved           = "approval/resolved"
	NotifySessionApprovalModeChanged = "session/approvalModeChanged"
)

// Protected reports whether a server notification may never be dropped,
// gapped or opted out of (MSP §4.5): view/gap, and approval/resolved, the
// settlement of a server-to-client request.
func Protected(method string) bool {
	return method == NotifyViewGap || method == NotifyApprovalResolved
}
