package turn_test

import (
	"context"
	"sync"
	"testing"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/turn"
)

// TestGateFor: what each approval mode makes of a call, by whether the
// server's configuration marks its tool, whether its server calls it
// read-only, and whether the session approved the tool for itself.
func TestGateFor(t *testing.T) {
	marked := turn.ToolInfo{NeedsApproval: true}
	markedRO := turn.ToolInfo{NeedsApproval: true, ReadOnly: true}
	open := turn.ToolInfo{}
	openRO := turn.ToolInfo{ReadOnly: true}
	for _, tt := range []struct {
		mode    string
		info    turn.ToolInfo
		granted bool
		want    turn.Gate
	}{
		{msp.ApprovalAllowAll, marked, false, turn.GateRun},
		{msp.ApprovalAllowAll, open, false, turn.GateRun},
		{msp.ApprovalPromptUnmatched, marked, false, turn.GateAsk},
		{msp.ApprovalPromptUnmatched, markedRO, false, turn.GateAsk},
		{msp.ApprovalPromptUnmatched, open, false, turn.GateRun},
		{msp.ApprovalPromptUnmatched, marked, true, turn.GateRun},
		{"", marked, false, turn.GateAsk}, // an unknown mode is the default
		{msp.ApprovalOnRequest, marked, false, turn.GateAsk},
		{msp.ApprovalOnRequest, open, false, turn.GateAsk},
		{msp.ApprovalOnRequest, openRO, false, turn.GateRun},
		{msp.ApprovalOnRequest, open, true, turn.GateRun},
		{msp.ApprovalDenyUnmatched, marked, false, turn.GateDeny},
		{msp.ApprovalDenyUnmatched, open, false, turn.GateRun},
		{msp.ApprovalDenyUnmatched, marked, true, turn.GateRun},
	} {
		if got := turn.GateFor(tt.mode, tt.info, tt.granted); got != tt.want {
			t.Errorf("%s %+v granted %v: gate %d, want %d", tt.mode, tt.info, tt.granted, got, tt.want)
		}
	}
}

// TestApprovalIDIsTheItems: a call's approval id follows from its item's,
// so any process that takes the turn up names the same approval.
func TestApprovalIDIsTheItems(t *testing.T) {
	a, b := turn.ApprovalID("item-1"), turn.ApprovalID("item-1")
	if a != b || a == turn.ApprovalID("item-2") || len(a) != 36 {
		t.Fatalf("ids %q %q", a, b)
	}
}

// fakeApprovals is a session's approvals in memory: resolved ones by id,
// pending ones resolved as approve when awaited.
type fakeApprovals struct {
	mu       sync.Mutex
	resolved map[string]turn.Resolution
	pending  map[string]bool
	awaited  []string
}

func (f *fakeApprovals) Gate(string, turn.ToolInfo) turn.Gate { return turn.GateAsk }

func (f *fakeApprovals) Await(_ context.Context, id string) (turn.Resolution, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.awaited = append(f.awaited, id)
	if f.pending[id] {
		delete(f.pending, id)
		f.resolved[id] = turn.Resolution{Decision: msp.DecisionApproved, By: msp.ResolvedByUser}
	}
	return f.resolved[id], nil
}

func (f *fakeApprovals) Settle(_ context.Context, id, decision string) (turn.Resolution, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resolved[id], nil
}

func (f *fakeApprovals) Lookup(id string) (turn.Resolution, bool, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending[id] {
		return turn.Resolution{}, false, true
	}
	r, ok := f.resolved[id]
	return r, ok, ok
}

// TestResumeSettlesCallsByTheirApproval: a resumed turn's open calls go on
// by their approval: one still pending never ran, so it waits again and
// runs once approved; one approved before the process stopped may have
// run, so it is not run twice (unknown_outcome); one denied closes
// rejected, and one whose approval was never recorded closes unrun.
func TestResumeSettlesCallsByTheirApproval(t *testing.T) {
	h := newHarness(t, nil, ok("after the restart"))
	box := newToolbox(h.sink, echoTool("s", "wait", false), echoTool("s", "approved", false),
		echoTool("s", "denied", false), echoTool("s", "unknown", false))
	open := func(tool string) msp.Item {
		turnID, args := "t1", `{}`
		return msp.Item{ItemID: "item-" + tool, Kind: msp.ItemToolCall, Revision: 1, Status: msp.ItemInProgress,
			TurnID: &turnID, Tool: tool, Server: "s", CallID: tool, Args: &args, ApprovalID: "approval-" + tool}
	}
	approvals := &fakeApprovals{pending: map[string]bool{"approval-wait": true}, resolved: map[string]turn.Resolution{
		"approval-approved": {Decision: msp.DecisionApproved, By: msp.ResolvedByUser},
		"approval-denied":   {Decision: msp.DecisionDenied, By: msp.ResolvedByUser},
	}}
	sp := spec()
	sp.Tools, sp.Approvals = box, approvals
	var calls []msp.Item
	for _, tool := range []string{"wait", "approved", "denied", "unknown"} {
		calls = append(calls, open(tool))
		sp.History = append(sp.History, provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{call(tool, "s", tool, `{}`)}})
	}
	sp.Resume = &turn.Resumption{Attempts: 1, Step: 1, StepBase: 1, StartedAt: t0, OpenCalls: calls,
		Unapproved: map[string]bool{"item-wait": true}}
	o := h.run(t, context.Background(), sp, nil)
	if o.Completed.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %+v", o.Completed)
	}
	if got := box.made(); len(got) != 1 || got[0] != `s__wait{}` {
		t.Fatalf("calls made %q: only the call whose approval was pending may run", got)
	}
	byTool := map[string]msp.Item{}
	for _, it := range toolItems(h, msp.NotifyItemCompleted) {
		byTool[it.Tool] = it
	}
	for tool, want := range map[string]string{"wait": msp.ItemCompleted, "approved": msp.ItemFailed, "denied": msp.ItemRejected, "unknown": msp.ItemCancelled} {
		if it := byTool[tool]; it.Status != want || it.ApprovalID != "approval-"+tool {
			t.Errorf("%s item %+v, want %s", tool, it, want)
		}
	}
	if k := byTool["approved"].FailureKind; k != turn.FailureUnknownOutcome {
		t.Errorf("the approved call's failure %q", k)
	}
	if len(approvals.awaited) != 1 || approvals.awaited[0] != "approval-wait" {
		t.Errorf("awaited %q", approvals.awaited)
	}
}
