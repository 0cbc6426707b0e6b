package turn_test

import (
	"testing"

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
