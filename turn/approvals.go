package turn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"mspd/provider"
	"mspd/schema/msp"
)

// Approvals is the session's side of tool-call approvals (docs/tools.md):
// its approval mode and the tools it approved for itself decide which
// calls wait for a person, and its log holds each approval's request and
// resolution. A Spec without one runs every call without asking.
type Approvals interface {
	// Gate decides, before a call is recorded, whether it runs, waits for
	// a person or is denied without asking; name is the tool's
	// model-facing name.
	Gate(name string, info ToolInfo) Gate
	// Await waits until approval id is resolved and returns how. It
	// returns ctx's cause when ctx ends first, the approval still pending.
	Await(ctx context.Context, id string) (Resolution, error)
	// Settle resolves a pending approval on the turn's behalf (timedOut,
	// abort) with a durable approval/resolved, and returns the resolution
	// that holds: a person's decision that came first wins.
	Settle(ctx context.Context, id, decision string) (Resolution, error)
	// Lookup tells where approval id stands: resolved (and how) or
	// pending; known is false for an approval the session never opened.
	Lookup(id string) (res Resolution, resolved, known bool)
}

// Gate is what becomes of a tool call before it runs.
type Gate uint8

const (
	// GateRun runs the call without asking.
	GateRun Gate = iota
	// GateAsk makes the call wait for a person's decision.
	GateAsk
	// GateDeny denies the call without asking (the session's mode).
	GateDeny
)

// GateFor is what a session's approval mode makes of a call (see
// msp.ApprovalMode's description and docs/tools.md): the server's
// configuration marks some tools as needing a person (info.NeedsApproval);
// a tool the session approved for itself (granted) needs none.
//
//   - allowAll: every call runs.
//   - promptUnmatched (also an unknown or empty mode): a marked call waits.
//   - onRequest: a marked call waits, and so does a call of a tool its
//     server does not annotate read-only.
//   - denyUnmatched: a marked call is denied without asking.
func GateFor(mode string, info ToolInfo, granted bool) Gate {
	if granted {
		return GateRun
	}
	switch mode {
	case msp.ApprovalAllowAll:
		return GateRun
	case msp.ApprovalDenyUnmatched:
		if info.NeedsApproval {
			return GateDeny
		}
		return GateRun
	case msp.ApprovalOnRequest:
		if info.NeedsApproval || !info.ReadOnly {
			return GateAsk
		}
		return GateRun
	}
	if info.NeedsApproval {
		return GateAsk
	}
	return GateRun
}

// Resolution is how an approval was resolved.
type Resolution struct {
	// Decision is an msp.Decision*.
	Decision string
	// By is who resolved it (msp.ResolvedBy*).
	By string
	// Feedback is what a person said with a denial, for the model: live
	// only, never stored.
	Feedback string
}

// Allows tells whether the resolution lets the call run.
func (r Resolution) Allows() bool {
	return r.Decision == msp.DecisionApproved || r.Decision == msp.DecisionApprovedForSession
}

// The choices of every approval, by choiceId.
const (
	ChoiceApprove           = "approve"
	ChoiceApproveForSession = "approveForSession"
	ChoiceDeny              = "deny"
)

// approvalSpace is the UUID namespace of approval ids.
var approvalSpace = uuid.MustParse("3f0e6c1a-8d2b-4b7e-9a55-61c2d4e8f019")

// ApprovalID is the id of the approval gating the toolCall item itemID:
// derived from it, so a call has one approval, whatever process asks.
func ApprovalID(itemID string) string {
	return uuid.NewSHA1(approvalSpace, []byte(itemID)).String()
}

// approvalChoices are the choices offered for a call of tool (its
// model-facing name).
func approvalChoices(tool string) []msp.ApprovalChoice {
	return []msp.ApprovalChoice{
		{ChoiceID: ChoiceApprove, Decision: msp.DecisionApproved, Label: "Approve", Scope: msp.ScopeOnce},
		{ChoiceID: ChoiceApproveForSession, Decision: msp.DecisionApprovedForSession, Label: "Approve for this session",
			Scope: msp.ScopeSession, RulePreview: "run " + tool + " without asking for the rest of this session"},
		{ChoiceID: ChoiceDeny, Decision: msp.DecisionDenied, Label: "Deny", Scope: msp.ScopeOnce, AcceptsFeedback: true},
	}
}

// approvalRequested is the approval/requested that opens p's approval,
// written with its item/started.
func (t *run) approvalRequested(p pendingCall) *msp.ApprovalRequestParams {
	id := p.item.ApprovalID
	return &msp.ApprovalRequestParams{
		ApprovalID: id, ItemID: p.item.ItemID, TaskID: p.item.ItemID, ToolCallID: p.call.ID,
		ToolName: p.call.Name, RawArgs: p.call.Args, TurnID: t.spec.TurnID,
		Subject:              msp.ApprovalSubject{Kind: msp.SubjectTool, ToolName: p.call.Name},
		AvailableChoices:     approvalChoices(p.call.Name),
		CurrentRequirementID: msp.ApprovalRequirementRef{ApprovalID: id},
	}
}

// ApprovalResolved is the approval/resolved of approval id, which gates
// item itemID of turn turnID; commandID is the approval/decide that
// resolved it, "" for none.
func ApprovalResolved(id, itemID, turnID string, res Resolution, commandID string) *msp.ApprovalResolvedParams {
	policy := msp.PolicyDeny
	if res.Allows() {
		policy = msp.PolicyAllow
	}
	return &msp.ApprovalResolvedParams{ApprovalID: id, ItemID: itemID, TurnID: turnID, Decision: res.Decision,
		ResolvedBy: res.By, PolicyResult: policy, DecidedByCommandID: commandID, StageEvidence: []msp.ApprovalStageEvidence{}}
}

// gateCalls decides each call's gate and, for those not simply run, gives
// its item the approval's id and the time it stops waiting.
func (t *run) gateCalls(calls []pendingCall) {
	if t.spec.Approvals == nil {
		return
	}
	for i := range calls {
		p := &calls[i]
		if p.gate = t.spec.Approvals.Gate(p.call.Name, p.info); p.gate == GateRun {
			continue
		}
		p.item.ApprovalID = ApprovalID(p.item.ItemID)
		if d := t.r.cfg.ApprovalTimeout; d > 0 && p.gate == GateAsk {
			p.deadline = t.r.clock.Now().Add(d)
		}
	}
}

// approvalEvents are what opens the approvals of a step's gated calls,
// after their item/started in the same write: approval/requested, and for
// a call denied without asking its approval/resolved too.
func (t *run) approvalEvents(p pendingCall) []Event {
	if p.gate == GateRun {
		return nil
	}
	evs := []Event{{Method: msp.NotifyApprovalRequested, Params: t.approvalRequested(p)}}
	if p.gate == GateDeny {
		res := Resolution{Decision: msp.DecisionDenied, By: msp.ResolvedByPolicy}
		evs = append(evs, Event{Method: msp.NotifyApprovalResolved, Params: ApprovalResolved(p.item.ApprovalID, p.item.ItemID, t.spec.TurnID, res, "")})
	}
	return evs
}

// errApprovalTimeout is the cause of an approval's wait that ran past the
// runner's ApprovalTimeout.
var errApprovalTimeout = errors.New("turn: nobody decided the approval in time")

// errLeftOpen says a call's approval is still pending because the host
// stops: the call stays open for the next process to wait for again.
var errLeftOpen = errors.New("turn: the host stops while the call waits for approval")

// await waits for the approval of an asked call: a person's decision, or
// the turn's own when the wait times out (timedOut) or the user stops the
// turn (abort). A stopping host leaves it pending (errLeftOpen).
func (t *run) await(ctx context.Context, p pendingCall) (Resolution, error) {
	id := p.item.ApprovalID
	wait := ctx
	if !p.deadline.IsZero() {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeoutCause(ctx, p.deadline.Sub(t.r.clock.Now()), errApprovalTimeout)
		defer cancel()
	}
	t.obs.approvalAwaited(p.info, id)
	res, err := t.spec.Approvals.Await(wait, id)
	if err == nil {
		return res, nil
	}
	var decision string
	switch {
	case stopping(ctx):
		return Resolution{}, errLeftOpen
	case ctx.Err() != nil:
		decision = msp.DecisionAbort
	case errors.Is(context.Cause(wait), errApprovalTimeout):
		decision = msp.DecisionTimedOut
	default:
		return Resolution{}, err
	}
	return t.spec.Approvals.Settle(t.emitCtx, id, decision)
}

// Failure kinds of calls an approval kept from running.
const (
	FailureDenied          = "denied"
	FailureApprovalTimeout = "approval_timed_out"
)

// refuse closes a call its approval did not let run, and says why to the
// model: a denial (with the person's feedback, which only the running
// turn hears), a timeout, or a stop.
func (t *run) refuse(p pendingCall, res Resolution) (msp.Item, provider.ToolResult) {
	status, kind, reason := msp.ItemRejected, FailureDenied, "the user denied it"
	switch {
	case res.Decision == msp.DecisionTimedOut:
		kind, reason = FailureApprovalTimeout, fmt.Sprintf("nobody approved it within %s", t.r.cfg.ApprovalTimeout)
	case res.Decision == msp.DecisionAbort:
		status, kind, reason = msp.ItemCancelled, FailureCancelled, "the turn was stopped while the call waited for approval"
	case res.By == msp.ResolvedByPolicy:
		reason = "the session's approval mode denies this tool without asking"
	}
	it, out := t.closeCall(p, 0, status, kind, reason, "")
	it.DurationMs = nil // it never ran
	if res.Feedback != "" && res.Decision == msp.DecisionDenied {
		out.Text += "\nThe user said: " + res.Feedback
	}
	t.obs.callRefused(p.info, status)
	return it, out
}

// deadlineOf is when a call asked by an earlier process stops waiting:
// its approval was requested when its item was recorded.
func (t *run) deadlineOf(it msp.Item) time.Time {
	d := t.r.cfg.ApprovalTimeout
	if d <= 0 {
		return time.Time{}
	}
	at, err := time.Parse(time.RFC3339Nano, it.RecordedAt)
	if err != nil {
		at = t.r.clock.Now()
	}
	return at.Add(d)
}
