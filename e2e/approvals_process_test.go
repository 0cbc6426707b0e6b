package e2e

// The approval promises (docs/tools.md, Approvals) held end to end with
// real mspd processes, killed with SIGKILL where a process matters, and
// the journaling tooltest server (see exactly_once_test.go): approved,
// denied, timed out, pending across a kill, approved and cut off by one,
// a decision replayed after one, a graceful shutdown that waits for no
// one.

import (
	"context"
	"encoding/json"
	"slices"
	"syscall"
	"testing"
	"time"

	"mspd/client"
	"mspd/provider/scripted"
	"mspd/schema/msp"
	"mspd/tool/tooltest"
	"mspd/turn"
)

// approvalRun is a turn on an mspd process, followed by a watcher, whose
// calls of the counting server all wait for a person.
type approvalRun struct {
	t       *testing.T
	h       *toolHost
	dataDir string
	flags   []string
	p       *process
	w       *watcher
	turn    msp.TurnStartParams
}

// approvalTurn is a turn whose model makes calls, then answers with what
// it was told (echoRequest).
func approvalTurn(sid string, calls ...scripted.Call) msp.TurnStartParams {
	return slowTurn(sid, 0, scripted.Step{Calls: calls}, scripted.Step{EchoRequest: true})
}

// startApprovalRun starts an mspd process over a new data directory (its
// flags the approval configuration and extra), a session, and a turn
// whose model makes calls, then answers with what it was told
// (echoRequest).
func startApprovalRun(ctx context.Context, t *testing.T, extra []string, calls ...scripted.Call) *approvalRun {
	t.Helper()
	r := &approvalRun{t: t, h: startToolHost(t), dataDir: t.TempDir()}
	r.flags = r.h.approvalConfig(t, extra...)
	r.p = startProcess(t, r.dataDir, r.flags...)
	r.w = watchNewSession(ctx, t, r.p.url)
	r.turn = approvalTurn(r.w.sid, calls...)
	if _, err := r.w.c.StartTurnWith(ctx, r.turn); err != nil {
		t.Fatal(err)
	}
	return r
}

// askedToAppend is startApprovalRun of one call, c1, of append, once the
// client was asked for it (and answered its receipt): it returns the
// approval and its params as sent.
func askedToAppend(ctx context.Context, t *testing.T, extra ...string) (*approvalRun, msp.ApprovalRequestParams, json.RawMessage) {
	t.Helper()
	r := startApprovalRun(ctx, t, extra, call("c1", tooltest.Append, `{"text":"a"}`))
	a, raw := r.w.asked(ctx)
	return r, a, raw
}

// kill kills the process (SIGKILL).
func (r *approvalRun) kill() { r.p.kill() }

// restart starts another process over the data directory, with the same
// flags, and attaches the watcher to it; it returns the resume's
// snapshot.
func (r *approvalRun) restart(ctx context.Context) msp.SessionSnapshot {
	r.t.Helper()
	r.p = startProcess(r.t, r.dataDir, r.flags...)
	return r.w.attach(ctx, r.p.url)
}

// done waits for the turn's terminal and checks it completed after count
// requests; it returns the session's log.
func (r *approvalRun) done(ctx context.Context, count int) []msp.ViewEvent {
	r.t.Helper()
	attemptsOf(r.t, r.w.terminal(ctx, r.turn.CommandID), count)
	return pageAll(r.t, ctx, r.w.c, r.w.sid)
}

// checkEnd checks that no approval is pending and that the log holds
// what the watcher was delivered.
func (r *approvalRun) checkEnd(ctx context.Context) {
	r.t.Helper()
	noPending(ctx, r.t, r.w.c, r.w.sid)
	r.w.checkLog(ctx)
}

// appendedOnce checks the end of an approved call c1 of append: run once
// (the journal), its item completed with the tool's output and carrying
// the approval, the approval resolved once (approved, by the user, by
// command commandID), the model told the result.
func (r *approvalRun) appendedOnce(events []msp.ViewEvent, a msp.ApprovalRequestParams, commandID string) {
	r.t.Helper()
	if n := r.h.count(r.t, tooltest.Append); n != 1 {
		r.t.Errorf("append ran %d times, want once", n)
	}
	it := checkCalls(r.t, events, "c1")[0]
	completedWith(r.t, it, "appended 1")
	if it.ApprovalID != a.ApprovalID {
		r.t.Errorf("the item's approvalId %q, want %q", it.ApprovalID, a.ApprovalID)
	}
	resolvedOnce(r.t, events, a, msp.DecisionApproved, msp.ResolvedByUser, commandID)
	r.told(events, map[string]scripted.Result{"c1": {Text: "appended 1"}})
}

// told checks what the model was last told of the turn's calls.
func (r *approvalRun) told(events []msp.ViewEvent, want map[string]scripted.Result) {
	r.t.Helper()
	checkTold(r.t, toldModel(r.t, events, r.turn.CommandID), want)
}

// asked takes notifications until the server asks for an approval,
// answers it with a receipt, and returns the approval and its params as
// sent.
func (w *watcher) asked(ctx context.Context) (msp.ApprovalRequestParams, json.RawMessage) {
	w.t.Helper()
	w.until(ctx, client.Notification.IsRequest)
	req := w.seen[len(w.seen)-1]
	return receipt(ctx, w.t, w.c, req), req.Params
}

// asks counts the server requests among ns.
func asks(ns []client.Notification) int {
	n := 0
	for _, x := range ns {
		if x.IsRequest() {
			n++
		}
	}
	return n
}

// resolutions are the approval/resolved records of a log.
func resolutions(t *testing.T, events []msp.ViewEvent) []msp.ApprovalResolvedParams {
	t.Helper()
	var out []msp.ApprovalResolvedParams
	for _, e := range events {
		if e.Method != msp.NotifyApprovalResolved {
			continue
		}
		var p msp.ApprovalResolvedParams
		if err := json.Unmarshal(e.Params, &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// resolvedOnce checks that a log resolves approval a once, with decision,
// by by, decided by command commandID ("" for none).
func resolvedOnce(t *testing.T, events []msp.ViewEvent, a msp.ApprovalRequestParams, decision, by, commandID string) {
	t.Helper()
	var of []msp.ApprovalResolvedParams
	for _, r := range resolutions(t, events) {
		if r.ApprovalID == a.ApprovalID {
			of = append(of, r)
		}
	}
	if len(of) != 1 {
		t.Fatalf("approval %s resolved %d times: %s", a.ApprovalID, len(of), jsonText(of))
	}
	if r := of[0]; r.Decision != decision || r.ResolvedBy != by || r.DecidedByCommandID != commandID || r.ItemID != a.ItemID || r.TurnID != a.TurnID {
		t.Errorf("approval/resolved %s; want %s by %s, command %q", jsonText(r), decision, by, commandID)
	}
}

// refused checks a call's final item: closed with status, failureKind
// kind and failureReason reason, and never run (no duration).
func refused(t *testing.T, it msp.Item, status, kind, reason string) {
	t.Helper()
	if it.Status != status || it.FailureKind != kind || it.FailureReason != reason || it.DurationMs != nil {
		t.Errorf("call %s: %s; want %s, %s, %q, no duration", it.CallID, jsonText(it), status, kind, reason)
	}
}

// noPending checks that the session has no pending approval.
func noPending(ctx context.Context, t *testing.T, c *checkedClient, sid string) {
	t.Helper()
	if pending, err := c.ListPending(ctx, sid); err != nil || len(pending) != 0 {
		t.Errorf("approval/listPending: %s, %v; want none", jsonText(pending), err)
	}
}

// decision is approval/decide's params for approval a, with choiceID,
// under a fresh commandId.
func decision(a msp.ApprovalRequestParams, choiceID string) msp.ApprovalDecideParams {
	return msp.ApprovalDecideParams{ApprovalID: a.ApprovalID, ChoiceID: choiceID, CommandID: client.NewCommandID(),
		RequirementID: a.CurrentRequirementID, SessionID: a.SessionID}
}

// mspError checks that err is the MSP error of code and kind, and returns
// it.
func mspError(t *testing.T, err error, code int, kind string) *msp.Error {
	t.Helper()
	var me *msp.Error
	if !asError(err, &me) || me.Code != code || me.Data.Kind != kind {
		t.Fatalf("got %v; want %s (%d)", err, kind, code)
	}
	return me
}

// TestApprovedOnAProcess: on an mspd process, a call of a marked tool is
// asked for (approval/request, its receipt) and not run; approved once,
// it runs exactly once (the journal), its item completes with the tool's
// output and carries the approval, the approval is resolved once
// (approved, by the user, by the decide's command), the model is told the
// result, and attempts counts both requests.
func TestApprovedOnAProcess(t *testing.T) {
	ctx := testCtx(t)
	r, a, _ := askedToAppend(ctx, t)
	h, w := r.h, r.w
	if a.ToolName != "t__append" || a.RawArgs != `{"text":"a"}` || a.TurnID != r.turn.CommandID || a.ToolCallID != "c1" {
		t.Fatalf("asked %s", jsonText(a))
	}
	if n := h.count(t, tooltest.Append); n != 0 {
		t.Fatalf("append ran %d times before a decision", n)
	}
	ack, err := w.c.Decide(ctx, a, turn.ChoiceApprove, "")
	if err != nil || !ack.Terminal || ack.Status != msp.StatusAccepted || ack.ApprovalID != a.ApprovalID {
		t.Fatalf("decide: %s, %v", jsonText(ack), err)
	}
	r.appendedOnce(r.done(ctx, 2), a, ack.CommandID)
	if n := asks(w.seen); n != 1 {
		t.Errorf("asked %d times, want once", n)
	}
	r.checkEnd(ctx)
}

// TestDeniedWithFeedbackOnAProcess: on an mspd process, a denied call
// never runs (the journal counts none); its item is rejected (denied, no
// duration), the approval resolved once (denied, by the user), and the
// model's next request carries the denial with the person's feedback.
func TestDeniedWithFeedbackOnAProcess(t *testing.T) {
	ctx := testCtx(t)
	r, a, _ := askedToAppend(ctx, t)
	h, w := r.h, r.w
	const feedback = "not that file; look it up first"
	ack, err := w.c.Decide(ctx, a, turn.ChoiceDeny, feedback)
	if err != nil || !ack.Terminal {
		t.Fatalf("decide: %s, %v", jsonText(ack), err)
	}
	events := r.done(ctx, 2)
	if n := h.count(t, tooltest.Append); n != 0 {
		t.Errorf("a denied call ran %d times", n)
	}
	refused(t, checkCalls(t, events, "c1")[0], msp.ItemRejected, turn.FailureDenied, "the user denied it")
	resolvedOnce(t, events, a, msp.DecisionDenied, msp.ResolvedByUser, ack.CommandID)
	r.told(events, map[string]scripted.Result{
		"c1": {Text: "the call was denied: the user denied it\nThe user said: " + feedback, IsError: true}})
	r.checkEnd(ctx)
}

// TestApprovalTimesOutOnAProcess: on an mspd process run with
// --approval-timeout 300ms, a call nobody decides is resolved timedOut
// (by policy, no command), its item rejected (approval_timed_out) and
// never run, the model told why; a decision that comes later is refused
// approvalAlreadyResolved, naming the timeout.
func TestApprovalTimesOutOnAProcess(t *testing.T) {
	ctx := testCtx(t)
	r, a, _ := askedToAppend(ctx, t, "--approval-timeout", "300ms")
	h, w := r.h, r.w
	events := r.done(ctx, 2)
	if n := h.count(t, tooltest.Append); n != 0 {
		t.Errorf("a timed-out call ran %d times", n)
	}
	const reason = "nobody approved it within 300ms"
	refused(t, checkCalls(t, events, "c1")[0], msp.ItemRejected, turn.FailureApprovalTimeout, reason)
	resolvedOnce(t, events, a, msp.DecisionTimedOut, msp.ResolvedByPolicy, "")
	r.told(events, map[string]scripted.Result{"c1": {Text: "the call was denied: " + reason, IsError: true}})
	_, err := w.c.Decide(ctx, a, turn.ChoiceApprove, "")
	if me := mspError(t, err, msp.CodeApprovalAlreadyResolved, msp.KindApprovalAlreadyResolved); me.Data.Resolution == nil ||
		me.Data.Resolution.Decision != msp.DecisionTimedOut {
		t.Errorf("a late decision's refusal: %s", jsonText(me.Data))
	}
	r.checkEnd(ctx)
}

// TestApprovalTimeoutSpansASIGKILL: the process is killed (SIGKILL) while
// a call waits for approval, and started again once its deadline (counted
// from when it was asked for) has passed: the call is resolved timedOut
// at once as the turn resumes — not a whole timeout later — and never
// runs; the model is told.
func TestApprovalTimeoutSpansASIGKILL(t *testing.T) {
	const timeout = 3 * time.Second
	ctx := testCtx(t)
	r, a, _ := askedToAppend(ctx, t, "--approval-timeout", timeout.String())
	h, w := r.h, r.w
	r.kill()

	// The restart comes after the deadline, counted from the item's
	// recording (as delivered): the condition is the time itself.
	i := slices.IndexFunc(w.seen, func(n client.Notification) bool {
		return n.Method == msp.NotifyItemStarted && decode[msp.ItemParams](t, n).Item.ItemID == a.ItemID
	})
	if i < 0 {
		t.Fatalf("no item/started of the approval's item %s", a.ItemID)
	}
	at, err := time.Parse(time.RFC3339Nano, decode[msp.ItemParams](t, w.seen[i]).Item.RecordedAt)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(at.Add(timeout + time.Millisecond)))

	// The turn resumes before the process listens; counted again, the
	// timeout would end it about a whole timeout after that. However long
	// the start takes, it ends well within half a timeout of it.
	restarted := time.Now()
	r.restart(ctx)
	started := time.Since(restarted)
	events := r.done(ctx, 2)
	if took := time.Since(restarted); took >= started+timeout/2 {
		t.Errorf("the turn ended %s after the restart, which took %s: its approval's timeout counted again", took, started)
	}
	if n := h.count(t, tooltest.Append); n != 0 {
		t.Errorf("a timed-out call ran %d times", n)
	}
	reason := "nobody approved it within " + timeout.String()
	refused(t, checkCalls(t, events, "c1")[0], msp.ItemRejected, turn.FailureApprovalTimeout, reason)
	resolvedOnce(t, events, a, msp.DecisionTimedOut, msp.ResolvedByPolicy, "")
	r.told(events, map[string]scripted.Result{"c1": {Text: "the call was denied: " + reason, IsError: true}})
	r.checkEnd(ctx)
}

// TestPendingApprovalSurvivesASIGKILL: the process is killed (SIGKILL)
// while a call waits for approval, and started again over the same data
// directory. The resuming client is pointed at the approval
// (pendingRequests), listPending shows it (same approvalId and
// requirementId), and the client is sent approval/request again, its
// params byte for byte the first ones; a stale requirementId is refused
// -32053, typed, naming the current one; the decision made with the
// requirementId of the first process's request runs the tool exactly once
// and the turn completes after two requests, the model told the result.
func TestPendingApprovalSurvivesASIGKILL(t *testing.T) {
	ctx := testCtx(t)
	r, a, first := askedToAppend(ctx, t)
	h, w := r.h, r.w
	r.kill()

	before := len(w.seen)
	snap := r.restart(ctx)
	if len(snap.PendingRequests) != 1 || snap.PendingRequests[0].ApprovalID != a.ApprovalID || snap.PendingRequests[0].Kind != msp.PendingApproval {
		t.Fatalf("resume's pendingRequests %s", jsonText(snap.PendingRequests))
	}
	pending, err := w.c.ListPending(ctx, w.sid)
	if err != nil || len(pending) != 1 || pending[0].ApprovalID != a.ApprovalID || pending[0].CurrentRequirementID != a.CurrentRequirementID {
		t.Fatalf("approval/listPending after the restart: %s, %v; want %s", jsonText(pending), err, jsonText(a))
	}
	_, again := w.asked(ctx)
	if string(again) != string(first) {
		t.Fatalf("asked again after the restart:\n%s\nwant\n%s", again, first)
	}
	if n := h.count(t, tooltest.Append); n != 0 {
		t.Fatalf("append ran %d times before a decision", n)
	}

	stale := decision(a, turn.ChoiceApprove)
	stale.RequirementID.SourceIndex++ // a stage mspd's approvals do not have
	err = w.c.Call(ctx, msp.MethodApprovalDecide, stale, nil)
	if me := mspError(t, err, msp.CodeApprovalRequirementStale, msp.KindApprovalRequirementStale); me.Data.CurrentRequirementID == nil ||
		*me.Data.CurrentRequirementID != a.CurrentRequirementID {
		t.Errorf("the stale decision's refusal: %s", jsonText(me.Data))
	}
	ack, err := w.c.Decide(ctx, a, turn.ChoiceApprove, "") // the first process's requirementId
	if err != nil || !ack.Terminal {
		t.Fatalf("decide: %s, %v", jsonText(ack), err)
	}
	r.appendedOnce(r.done(ctx, 2), a, ack.CommandID)
	if n := asks(w.seen[before:]); n != 1 {
		t.Errorf("asked %d times after the restart, want once", n)
	}
	r.checkEnd(ctx)
}

// TestApprovedCallCutOffBySIGKILL: of a step's three calls, two are
// approved and in flight (held by the server) and one is still pending
// when the process is killed (SIGKILL). After the restart the exactly-once
// rule settles the approved ones without asking again: the tool with no
// hints is not run again (failed, unknown_outcome, the model told so), the
// idempotent one runs again; the pending one is asked for again, and runs
// once approved. Each approval is resolved once; the turn completes after
// two requests.
func TestApprovedCallCutOffBySIGKILL(t *testing.T) {
	ctx := testCtx(t)
	r := startApprovalRun(ctx, t, nil, call("c1", tooltest.Slow, `{}`), call("c2", tooltest.SlowIdempotent, `{}`), call("c3", tooltest.Append, `{"text":"a"}`))
	h, w := r.h, r.w
	asked := map[string]msp.ApprovalRequestParams{}
	for range 3 {
		a, _ := w.asked(ctx)
		asked[a.ToolCallID] = a
	}
	decided := map[string]string{}
	for _, id := range []string{"c1", "c2"} {
		ack, err := w.c.Decide(ctx, asked[id], turn.ChoiceApprove, "")
		if err != nil {
			t.Fatal(err)
		}
		decided[id] = ack.CommandID
	}
	h.waitCount(ctx, t, tooltest.Slow, 1)
	h.waitCount(ctx, t, tooltest.SlowIdempotent, 1)
	r.kill()
	h.Release() // the call made again answers at once

	before := len(w.seen)
	snap := r.restart(ctx)
	if len(snap.PendingRequests) != 1 || snap.PendingRequests[0].ApprovalID != asked["c3"].ApprovalID {
		t.Errorf("resume's pendingRequests %s; want c3's approval alone", jsonText(snap.PendingRequests))
	}
	again, _ := w.asked(ctx)
	if again.ApprovalID != asked["c3"].ApprovalID {
		t.Fatalf("asked again for %s; want c3's approval", jsonText(again))
	}
	ack, err := w.c.Decide(ctx, asked["c3"], turn.ChoiceApprove, "")
	if err != nil {
		t.Fatal(err)
	}
	decided["c3"] = ack.CommandID
	events := r.done(ctx, 2)
	if n := asks(w.seen[before:]); n != 1 {
		t.Errorf("asked %d times after the restart; want once, for c3", n)
	}
	for name, want := range map[string]int{tooltest.Slow: 1, tooltest.SlowIdempotent: 2, tooltest.Append: 1} {
		if n := h.count(t, name); n != want {
			t.Errorf("%s ran %d times, want %d", name, n, want)
		}
	}
	items := checkCalls(t, events, "c1", "c2", "c3")
	cut := callByID(t, items, "c1")
	unknownOutcome(t, cut, "the server restarted")
	completedWith(t, callByID(t, items, "c2"), "done")
	completedWith(t, callByID(t, items, "c3"), "appended 1")
	for id, a := range asked {
		resolvedOnce(t, events, a, msp.DecisionApproved, msp.ResolvedByUser, decided[id])
	}
	r.told(events, map[string]scripted.Result{
		"c1": {Text: cut.FailureReason, IsError: true}, "c2": {Text: "done"}, "c3": {Text: "appended 1"}})
	r.checkEnd(ctx)
}

// TestDecideReplayedAfterASIGKILL: approval/decide is a command across a
// kill. On the first process a stale requirementId is refused -32053 and
// the approval is then approved; the tool runs once and the turn
// completes. The process is killed (SIGKILL) and started again: the same
// decide (same commandId) gets the same ack, byte for byte, the stale one
// the same refusal, and nothing is resolved or run again.
func TestDecideReplayedAfterASIGKILL(t *testing.T) {
	ctx := testCtx(t)
	r, a, _ := askedToAppend(ctx, t)
	w := r.w
	stale := decision(a, turn.ChoiceApprove)
	stale.RequirementID.SourceIndex++ // a stage mspd's approvals do not have
	staleErr := w.c.Call(ctx, msp.MethodApprovalDecide, stale, nil)
	mspError(t, staleErr, msp.CodeApprovalRequirementStale, msp.KindApprovalRequirementStale)
	decide := decision(a, turn.ChoiceApprove)
	var ack json.RawMessage
	if err := w.c.Call(ctx, msp.MethodApprovalDecide, decide, &ack); err != nil {
		t.Fatal(err)
	}
	r.done(ctx, 2)
	r.kill()

	r.p = startProcess(t, r.dataDir, r.flags...)
	c := dial(t, r.p.url, client.Options{})
	var replayed json.RawMessage
	if err := c.Call(ctx, msp.MethodApprovalDecide, decide, &replayed); err != nil {
		t.Fatalf("the replayed decision: %v", err)
	}
	if string(replayed) != string(ack) {
		t.Errorf("the replayed decision's ack\n%s\nwant\n%s", replayed, ack)
	}
	err := c.Call(ctx, msp.MethodApprovalDecide, stale, nil)
	if me := mspError(t, err, msp.CodeApprovalRequirementStale, msp.KindApprovalRequirementStale); me.Message != staleErr.(*msp.Error).Message {
		t.Errorf("the replayed stale decision: %v; want %v", err, staleErr)
	}
	events := pageAll(t, ctx, c, w.sid)
	r.appendedOnce(events, a, decide.CommandID)
	if n := len(slices.DeleteFunc(events, func(e msp.ViewEvent) bool { return e.Method != msp.NotifyTurnCompleted })); n != 1 {
		t.Errorf("%d turn/completed records, want 1", n)
	}
	noPending(ctx, t, c, w.sid)
}

// TestSIGTERMDoesNotWaitForAPerson: a graceful shutdown (SIGTERM, with a
// long --shutdown-timeout) does not wait for a call's approval: the
// process exits 0 at once, the turn not ended; the next process waits
// for the same approval, asks again, and runs the call once approved,
// the turn completing after two requests.
func TestSIGTERMDoesNotWaitForAPerson(t *testing.T) {
	ctx := testCtx(t)
	r, a, first := askedToAppend(ctx, t, "--shutdown-timeout", "20s")
	w := r.w
	sent := time.Now()
	if err := r.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := r.p.cmd.Wait(); err != nil {
		t.Fatalf("mspd exited with %v after SIGTERM, want status 0", err)
	}
	if took := time.Since(sent); took > 10*time.Second {
		t.Errorf("the shutdown took %s: it waited for a person", took)
	}
	w.readToClose(ctx, "the shutdown")

	snap := r.restart(ctx)
	if len(snap.PendingRequests) != 1 || snap.PendingRequests[0].ApprovalID != a.ApprovalID {
		t.Fatalf("resume's pendingRequests %s", jsonText(snap.PendingRequests))
	}
	if _, again := w.asked(ctx); string(again) != string(first) {
		t.Fatalf("asked again after the restart:\n%s\nwant\n%s", again, first)
	}
	ack, err := w.c.Decide(ctx, a, turn.ChoiceApprove, "")
	if err != nil {
		t.Fatal(err)
	}
	r.appendedOnce(r.done(ctx, 2), a, ack.CommandID)
	r.checkEnd(ctx)
}
