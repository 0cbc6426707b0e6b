package e2e

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"mspd/client"
	"mspd/daemon"
	"mspd/internal/testlane"
	"mspd/observe/observetest"
	"mspd/provider/scripted"
	"mspd/schema/msp"
	"mspd/tool/tooltest"
	"mspd/turn"
)

// approvalDaemon runs a daemon over dataDir whose turns are scripted and
// may call the counting MCP server at url, configured approval = "always".
func approvalDaemon(t *testing.T, dataDir, url string) *daemon.Daemon {
	t.Helper()
	return startDaemon(t, daemon.Config{DataDir: dataDir, ConfigFile: toolConfig(t, url, "always"), Tools: daemon.Tools{NoBuiltin: true}})
}

// nextRequest consumes c's notifications until the server sends a
// request, and returns it with the notifications before it.
func nextRequest(ctx context.Context, t *testing.T, c *checkedClient) (client.Notification, []client.Notification) {
	t.Helper()
	var seen []client.Notification
	for {
		n, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for a server request: %v; got %s", err, compact(methods(seen)))
		}
		if n.IsRequest() {
			return n, seen
		}
		seen = append(seen, n)
	}
}

// receipt answers a server request as a client that shows it does, and
// returns its approval.
func receipt(ctx context.Context, t *testing.T, c *checkedClient, req client.Notification) msp.ApprovalRequestParams {
	t.Helper()
	if req.Method != msp.RequestApproval {
		t.Fatalf("the server asked %s", req.Method)
	}
	if err := c.Respond(ctx, req.ID, msp.RequestReceipt{}); err != nil {
		t.Fatal(err)
	}
	return decode[msp.ApprovalRequestParams](t, req)
}

// TestApprovalOverWebSocket: over real WebSockets, every frame both ways
// validated against the schema: a subscribed connection gets the
// approval/requested event and the approval/request request (the same
// params), answers its receipt; a connection that subscribes while it is
// pending is asked too, and answers that it cannot show it, which leaves
// it pending; the daemon restarts over the same data directory
// with the approval pending and a client that resumes is pointed at it and
// asked again; its decision on the new daemon runs the tool exactly once,
// and approval/resolved reaches the client, which opted out of it in vain
// (it is protected).
func TestApprovalOverWebSocket(t *testing.T) {
	counting := tooltest.New("")
	mcp := httptest.NewServer(counting.HTTPHandler())
	t.Cleanup(mcp.Close)
	dataDir := t.TempDir()
	d := approvalDaemon(t, dataDir, mcp.URL)
	ctx := testCtx(t)

	c := dial(t, d.URL(), client.Options{})
	start, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID
	if am := start.Session.ApprovalMode; am == nil || am.Mode != msp.ApprovalPromptUnmatched {
		t.Fatalf("a new session's approval mode: %+v", am)
	}
	ack, err := c.StartTurn(ctx, sid, scripted.Script(
		scripted.Step{Calls: []scripted.Call{{ID: "c1", Name: "t__append", Args: `{"text":"a"}`}}},
		scripted.Step{Text: "Appended."}))
	if err != nil {
		t.Fatal(err)
	}
	req, before := nextRequest(ctx, t, c)
	requested := only(before, msp.NotifyApprovalRequested)
	if len(requested) != 1 || string(requested[0].Params) != string(req.Params) {
		t.Fatalf("before the request: %s; the request's params must be approval/requested's:\n%s", compact(methods(before)), req.Params)
	}
	asked := receipt(ctx, t, c, req)
	if asked.ToolName != "t__append" || asked.RawArgs != `{"text":"a"}` || asked.TurnID != ack.TurnID {
		t.Fatalf("asked %+v", asked)
	}

	late := dial(t, d.URL(), client.Options{})
	if err := late.Call(ctx, msp.MethodViewSubscribe, msp.ViewSubscribeParams{SessionID: sid}, nil); err != nil {
		t.Fatal(err)
	}
	again, _ := nextRequest(ctx, t, late)
	if string(again.Params) != string(req.Params) {
		t.Fatalf("the late subscriber was asked\n%s", again.Params)
	}
	// A client that cannot show it says so; the approval stays pending and
	// the connection open.
	refusal := `{"jsonrpc":"2.0","id":` + string(again.ID) + `,"error":{"code":-32603,"message":"no room for a card","data":{"kind":"internal"}}}`
	if err := late.SendRaw(ctx, []byte(refusal)); err != nil {
		t.Fatal(err)
	}
	if pending, err := late.ListPending(ctx, sid); err != nil || len(pending) != 1 {
		t.Fatalf("after a client's refusal to show it: %+v, %v", pending, err)
	}
	if n := counting.Count(tooltest.Append); n != 0 {
		t.Fatalf("the tool ran %d times before a decision", n)
	}

	metric(t, d, "mspd_approvals_requested_total", nil, 1)

	// The daemon stops with the approval pending and starts again.
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	d = approvalDaemon(t, dataDir, mcp.URL)
	// approval/resolved is protected: a client cannot opt out of it.
	c2 := dial(t, d.URL(), client.Options{OptOut: []string{msp.NotifyApprovalResolved, msp.NotifyItemDelta}})
	snap, err := c2.Resume(ctx, sid, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.PendingRequests) != 1 || snap.PendingRequests[0].ApprovalID != asked.ApprovalID || snap.PendingRequests[0].Kind != msp.PendingApproval {
		t.Fatalf("resume's pendingRequests %+v", snap.PendingRequests)
	}
	pending, err := c2.ListPending(ctx, sid)
	if err != nil || len(pending) != 1 || pending[0].ApprovalID != asked.ApprovalID {
		t.Fatalf("listPending: %+v, %v", pending, err)
	}
	third, _ := nextRequest(ctx, t, c2)
	reasked := receipt(ctx, t, c2, third)
	if reasked.ApprovalID != asked.ApprovalID || reasked.CurrentRequirementID != asked.CurrentRequirementID {
		t.Fatalf("asked again for %+v, want %+v", reasked, asked)
	}
	res, err := c2.Decide(ctx, reasked, turn.ChoiceApprove, "")
	if err != nil || !res.Terminal || res.ApprovalID != asked.ApprovalID {
		t.Fatalf("decide: %+v, %v", res, err)
	}
	events, err := c2.WaitTurn(ctx, ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	resolved := only(events, msp.NotifyApprovalResolved)
	if len(resolved) != 1 || decode[msp.ApprovalResolvedParams](t, resolved[0]).Decision != msp.DecisionApproved {
		t.Fatalf("after the decision: %s", compact(methods(events)))
	}
	if done := decode[msp.TurnCompletedParams](t, events[len(events)-1]); done.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %+v", done)
	}
	if n := counting.Count(tooltest.Append); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}
	metric(t, d, "mspd_approvals_resolved_total", observetest.Labels{"decision": msp.DecisionApproved, "resolved_by": msp.ResolvedByUser}, 1)
	metric(t, d, "mspd_tool_calls_total", observetest.Labels{"server": "t", "tool": "append", "result": msp.ItemCompleted}, 1)
	// A refusal is a typed error on an open connection.
	_, err = c2.Decide(ctx, reasked, turn.ChoiceApprove, "")
	var me *msp.Error
	if !asError(err, &me) || me.Code != msp.CodeApprovalAlreadyResolved || me.Data.Kind != msp.KindApprovalAlreadyResolved {
		t.Fatalf("a second decision: %v", err)
	}
	if _, err := c2.ListPending(ctx, sid); err != nil {
		t.Fatalf("the connection after a refusal: %v", err)
	}
}

// metric checks a counter of d's /metrics.
func metric(t *testing.T, d *daemon.Daemon, name string, sel observetest.Labels, want float64) {
	t.Helper()
	f, text, err := observetest.Scrape("http://" + d.Addr() + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v\n%s", err, text)
	}
	if v := f.Value(name, sel); v != want {
		t.Errorf("%s%v = %v, want %v", name, sel, v, want)
	}
}

// asError is errors.As for an *msp.Error.
func asError(err error, target **msp.Error) bool {
	e, ok := err.(*msp.Error)
	if ok {
		*target = e
	}
	return ok
}

// TestSetApprovalModeOverWebSocket: session/setApprovalMode's change
// reaches the client as session/approvalModeChanged naming its clientInfo
// name; the session then calls the marked tool without asking.
func TestSetApprovalModeOverWebSocket(t *testing.T) {
	counting := tooltest.New("")
	mcp := httptest.NewServer(counting.HTTPHandler())
	t.Cleanup(mcp.Close)
	d := approvalDaemon(t, t.TempDir(), mcp.URL)
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{ClientName: "approval_test"})
	start, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID
	res, err := c.SetApprovalMode(ctx, sid, msp.ApprovalAllowAll)
	if err != nil || res.ApplyOutcome != msp.ApplyCompleted || res.EffectiveMode.Mode != msp.ApprovalAllowAll {
		t.Fatalf("setApprovalMode: %+v, %v", res, err)
	}
	var n client.Notification
	for n.Method != msp.NotifySessionApprovalModeChanged {
		if n, err = c.Next(ctx); err != nil {
			t.Fatalf("waiting for session/approvalModeChanged: %v", err)
		}
	}
	var changed msp.SessionApprovalModeChangedParams
	if err := json.Unmarshal(n.Params, &changed); err != nil || changed.ClientName != "approval_test" || changed.Mode != msp.ApprovalAllowAll {
		t.Fatalf("approvalModeChanged %+v, %v", changed, err)
	}
	ack, err := c.StartTurn(ctx, sid, scripted.Script(
		scripted.Step{Calls: []scripted.Call{{ID: "c1", Name: "t__append", Args: `{"text":"a"}`}}},
		scripted.Step{Text: "Appended."}))
	if err != nil {
		t.Fatal(err)
	}
	events, err := c.WaitTurn(ctx, ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.IsRequest() || e.Method == msp.NotifyApprovalRequested {
			t.Fatalf("allowAll asked: %s", compact(methods(events)))
		}
	}
	if n := counting.Count(tooltest.Append); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}
}

// clusterApproval is a turn waiting for approval on three mspd processes
// sharing JetStream: its session led by node 1, whose client c1 was
// asked, and followed on node 2 by c2, asked too, with the same params,
// and shown it pending there.
type clusterApproval struct {
	h      *toolHost
	nodes  []*clusterNode
	c1, c2 *checkedClient
	sid    string
	turn   msp.TurnStartParams
	a      msp.ApprovalRequestParams
}

func startClusterApproval(ctx context.Context, t *testing.T) *clusterApproval {
	t.Helper()
	ca := &clusterApproval{h: startToolHost(t)}
	ca.nodes = startClusterNodes(t, ca.h.approvalConfig(t)...)
	ca.c1 = dial(t, ca.nodes[0].proc.url, client.Options{})
	ca.sid = newSession(t, ca.c1)
	ca.turn = approvalTurn(ca.sid, call("c1", tooltest.Append, `{"text":"a"}`))
	if _, err := ca.c1.StartTurnWith(ctx, ca.turn); err != nil {
		t.Fatal(err)
	}
	first, _ := nextRequest(ctx, t, ca.c1)
	ca.a = receipt(ctx, t, ca.c1, first)

	ca.c2 = dial(t, ca.nodes[1].proc.url, client.Options{})
	if _, err := ca.c2.Resume(ctx, ca.sid, nil); err != nil {
		t.Fatal(err)
	}
	asked, _ := nextRequest(ctx, t, ca.c2)
	if string(asked.Params) != string(first.Params) {
		t.Fatalf("the follower's client was asked\n%s\nwant\n%s", asked.Params, first.Params)
	}
	receipt(ctx, t, ca.c2, asked)
	if pending, err := ca.c2.ListPending(ctx, ca.sid); err != nil || len(pending) != 1 || pending[0].ApprovalID != ca.a.ApprovalID {
		t.Fatalf("listPending on the follower: %s, %v", jsonText(pending), err)
	}
	return ca
}

// completed checks, once the turn ended, what clients cs saw of it (the
// approval resolved once, approved by the user with decide's command; the
// turn completed after two requests), the journal (the tool ran once),
// and the log read on c2 (the item, the resolution, what the model was
// told).
func (ca *clusterApproval) completed(ctx context.Context, t *testing.T, decide msp.ApprovalDecideParams, cs ...*checkedClient) {
	t.Helper()
	for _, c := range cs {
		events, err := c.WaitTurn(ctx, ca.turn.CommandID)
		if err != nil {
			t.Fatal(err)
		}
		resolved := only(events, msp.NotifyApprovalResolved)
		if len(resolved) != 1 {
			t.Fatalf("a client saw %s", compact(methods(events)))
		}
		if r := decode[msp.ApprovalResolvedParams](t, resolved[0]); r.Decision != msp.DecisionApproved || r.ResolvedBy != msp.ResolvedByUser ||
			r.DecidedByCommandID != decide.CommandID {
			t.Errorf("approval/resolved %s", jsonText(r))
		}
		attemptsOf(t, decode[msp.TurnCompletedParams](t, events[len(events)-1]), 2)
	}
	if n := ca.h.count(t, tooltest.Append); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}
	noPending(ctx, t, ca.c2, ca.sid)
	events := pageAll(t, ctx, ca.c2, ca.sid)
	completedWith(t, checkCalls(t, events, "c1")[0], "appended 1")
	resolvedOnce(t, events, ca.a, msp.DecisionApproved, msp.ResolvedByUser, decide.CommandID)
	checkTold(t, toldModel(t, events, ca.turn.CommandID), map[string]scripted.Result{"c1": {Text: "appended 1"}})
}

// TestClusterApprovalDecidedOnAFollower: on three mspd processes sharing
// JetStream, a turn on the node leading its session waits for approval;
// a client of another node resumes the session, is asked too (the same
// params) and lists it pending there, and its decision, sent to that
// node, is forwarded to the leader, where the tool runs exactly once (the
// journal) and the turn completes after two requests, the model told the
// result. Both clients see the approval resolved once, approved by the
// user with the decision's command; the same decision replayed to the
// third node gets the same ack and resolves nothing again.
func TestClusterApprovalDecidedOnAFollower(t *testing.T) {
	testlane.Slow(t, "a cluster of three mspd processes")
	ctx := testCtx(t)
	ca := startClusterApproval(ctx, t)
	decide := decision(ca.a, turn.ChoiceApprove)
	var ack json.RawMessage
	if err := ca.c2.Call(ctx, msp.MethodApprovalDecide, decide, &ack); err != nil {
		t.Fatal(err)
	}
	ca.completed(ctx, t, decide, ca.c1, ca.c2)

	c3 := dial(t, ca.nodes[2].proc.url, client.Options{})
	var replayed json.RawMessage
	if err := c3.Call(ctx, msp.MethodApprovalDecide, decide, &replayed); err != nil || string(replayed) != string(ack) {
		t.Errorf("the decision replayed to the third node: %s, %v; want %s", replayed, err, ack)
	}
	if n := ca.h.count(t, tooltest.Append); n != 1 {
		t.Errorf("after the replay the tool ran %d times, want once", n)
	}
	resolvedOnce(t, pageAll(t, ctx, ca.c2, ca.sid), ca.a, msp.DecisionApproved, msp.ResolvedByUser, decide.CommandID)
}

// TestClusterApprovalAcrossATakeover: the node leading a session is
// killed (SIGKILL) while a call waits for approval. The client of another
// node sends its decision until it is accepted — while the lease lapses
// and a node takes the session over, each refusal is a typed retryable
// one (overloaded), never an internal error — and the node that took the
// session over runs the tool exactly once; the turn completes after two
// requests, the approval resolved once.
func TestClusterApprovalAcrossATakeover(t *testing.T) {
	testlane.Slow(t, "a cluster of three mspd processes and a lease to lapse")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ca := startClusterApproval(ctx, t)
	ca.nodes[0].proc.kill()

	decide := decision(ca.a, turn.ChoiceApprove)
	for {
		err := ca.c2.Call(ctx, msp.MethodApprovalDecide, decide, nil)
		if err == nil {
			break
		}
		var me *msp.Error
		if !asError(err, &me) || me.Data.Retryable == nil || !*me.Data.Retryable {
			t.Fatalf("a decision during the takeover: %v; want accepted, or a retryable refusal", err)
		}
		select { // a client's backoff between retries
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("no node took the session over: %v", err)
		}
	}
	ca.completed(ctx, t, decide, ca.c2)
}
