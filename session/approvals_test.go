package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/store"
	"mspd/tool"
	"mspd/tool/tooltest"
	"mspd/turn"
)

// toolModel calls tools as its turn's text says: "call TOOL ARGS" (parts
// joined by " | " make one call each, of the server s's tool TOOL) asks
// for the calls, and once their results are in it answers "got: " and
// the results' texts. Any other text is answered "re: TEXT". It records
// every request's messages.
type toolModel struct {
	server string
	mu     sync.Mutex
	reqs   [][]provider.Message
}

func (m *toolModel) System() string { return "tools" }

func (m *toolModel) Stream(_ context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, slices.Clone(req.Messages))
	m.mu.Unlock()
	done := provider.Response{FinishReason: provider.FinishStop, Usage: &provider.Usage{InputTokens: 10, OutputTokens: 5}}
	last := req.Messages[len(req.Messages)-1]
	if last.Role == provider.RoleTool {
		var texts []string
		for _, r := range last.ToolResults {
			texts = append(texts, r.Text)
		}
		onText("got: " + strings.Join(texts, "; "))
		return done, nil
	}
	if !strings.HasPrefix(last.Text, "call ") {
		onText("re: " + last.Text)
		return done, nil
	}
	var calls []provider.ToolCall
	for i, part := range strings.Split(last.Text, " | ") {
		spec := strings.TrimPrefix(part, "call ")
		name, args, _ := strings.Cut(spec, " ")
		server, toolName, ok := strings.Cut(name, "/")
		if !ok {
			server, toolName = m.server, name
		}
		calls = append(calls, provider.ToolCall{ID: fmt.Sprintf("c%d", i+1), Name: tool.ModelName(server, toolName), Args: args})
	}
	return provider.Response{FinishReason: provider.FinishToolCalls, ToolCalls: calls, Usage: done.Usage}, nil
}

// toolResults are the tool results the model was last told.
func (m *toolModel) toolResults() []provider.ToolResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.reqs) - 1; i >= 0; i-- {
		if h := m.reqs[i]; h[len(h)-1].Role == provider.RoleTool {
			return h[len(h)-1].ToolResults
		}
	}
	return nil
}

// toolServers are two counting MCP servers reached over HTTP, as an
// operator configures them: "t" with approval = "always" (its every tool
// marked), "u" with approval = "never".
type toolServers struct {
	marked, open *tooltest.Server
	box          turn.Toolbox
}

func newToolServers(t *testing.T) *toolServers {
	t.Helper()
	ts := &toolServers{marked: tooltest.New(""), open: tooltest.New("")}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var clients []*tool.Client
	for _, s := range []struct {
		name, approval string
		srv            *tooltest.Server
	}{{"t", tool.ApprovalAlways, ts.marked}, {"u", tool.ApprovalNever, ts.open}} {
		h := httptest.NewServer(s.srv.HTTPHandler())
		t.Cleanup(h.Close)
		c, err := tool.Start(tool.ServerConfig{Name: s.name, URL: h.URL, Approval: s.approval}, tool.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	reg, err := tool.NewRegistry(clients...)
	if err != nil {
		t.Fatal(err)
	}
	ts.box = turn.Registry(reg)
	return ts
}

// askSub is a recSub that presents approvals: it records each
// approval/request's params.
type askSub struct {
	*recSub
	amu  sync.Mutex
	asks []json.RawMessage
}

func newAskSub() *askSub { return &askSub{recSub: newRecSub()} }

func (a *askSub) Ask(_ string, method string, params json.RawMessage) {
	if method != msp.RequestApproval {
		panic("asked " + method)
	}
	a.amu.Lock()
	a.asks = append(a.asks, params)
	a.amu.Unlock()
	select {
	case a.signal <- struct{}{}:
	default:
	}
}

func (a *askSub) asked() []json.RawMessage {
	a.amu.Lock()
	defer a.amu.Unlock()
	return slices.Clone(a.asks)
}

// waitAsked waits until sub has been asked n times and returns the n-th
// approval/request's params.
func (a *askSub) waitAsked(t *testing.T, n int) (msp.ApprovalRequestParams, json.RawMessage) {
	t.Helper()
	waitFor(t, a.recSub, fmt.Sprintf("approval/request #%d", n), func() bool { return len(a.asked()) >= n })
	raw := a.asked()[n-1]
	var p msp.ApprovalRequestParams
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	return p, raw
}

// waitFor waits until cond holds, checking it whenever r is delivered
// something.
func waitFor(t *testing.T, r *recSub, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-r.signal:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; got %v", what, methodsOf(r.all()))
		}
	}
}

// batchStore records the methods of each commit that succeeded.
type batchStore struct {
	store.Store
	mu      sync.Mutex
	batches [][]string
}

func (b *batchStore) Commit(ctx context.Context, batch store.Batch) error {
	if err := b.Store.Commit(ctx, batch); err != nil {
		return err
	}
	var ms []string
	for _, r := range batch.Records {
		ms = append(ms, r.Method)
	}
	b.mu.Lock()
	b.batches = append(b.batches, ms)
	b.mu.Unlock()
	return nil
}

// batchWith returns the first commit that wrote method.
func (b *batchStore) batchWith(method string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ms := range b.batches {
		if slices.Contains(ms, method) {
			return ms
		}
	}
	return nil
}

// decide sends approval/decide for req with choice, under commandID.
func decide(m *Manager, req msp.ApprovalRequestParams, commandID, choice string, feedback *string) (json.RawMessage, error) {
	return m.DecideApproval(context.Background(), mustJSON(msp.ApprovalDecideParams{ApprovalID: req.ApprovalID, ChoiceID: choice,
		CommandID: commandID, Feedback: feedback, RequirementID: req.CurrentRequirementID, SessionID: req.SessionID}))
}

// mspKind is the data.kind of an MSP error, or "" for another error.
func mspKind(err error) string {
	var me *msp.Error
	if errors.As(err, &me) {
		return me.Data.Kind
	}
	return ""
}

// toolItem is the last state of the toolCall item the sub was told of.
func toolItem(t *testing.T, r *recSub) msp.Item {
	t.Helper()
	var it msp.Item
	for _, p := range of[msp.ItemParams](t, r, msp.NotifyItemCompleted) {
		if p.Item.Kind == msp.ItemToolCall {
			it = p.Item
		}
	}
	return it
}

// approvalHarness is a manager whose turns call the tool servers, over a
// store that records its commits.
type approvalHarness struct {
	st    *batchStore
	tools *toolServers
	model *toolModel
	opts  mgrOpts
	m     *Manager
}

func newApprovalHarness(t *testing.T, runner func(*turn.Config)) *approvalHarness {
	t.Helper()
	h := &approvalHarness{st: &batchStore{Store: openStore(t)}, tools: newToolServers(t), model: &toolModel{server: "t"}}
	h.opts = mgrOpts{tools: h.tools.box, runner: runner}
	h.m = newManager(t, h.st, h.model, h.opts)
	return h
}

// restart closes the manager and starts another over the same store.
func (h *approvalHarness) restart(t *testing.T) {
	t.Helper()
	h.m.Close()
	h.m = newManager(t, h.st, h.model, h.opts)
}

// TestApproveOnceRunsTheToolOnce: a call of a marked tool is recorded with
// its approval in one commit before anyone is asked, then presented to the
// subscriber, and does not run until approved; approved once, it runs
// once, its item completes and the model gets its result. A replayed
// decision gets the same ack and resolves nothing again; a later decision
// is told the approval is resolved.
func TestApproveOnceRunsTheToolOnce(t *testing.T) {
	h := newApprovalHarness(t, nil)
	sub := newAskSub()
	sid := startSession(t, h.m, sub)
	ack := startTurn(t, h.m, textTurn(sid, `call append {"text":"a"}`))

	req, raw := sub.waitAsked(t, 1)
	requested := of[msp.ApprovalRequestParams](t, sub.recSub, msp.NotifyApprovalRequested)
	if len(requested) != 1 || !strings.Contains(string(sub.all()[len(sub.all())-1].Frame), string(raw)) {
		t.Fatalf("approval/requested %+v; the request's params must be its params, byte for byte:\n%s", requested, raw)
	}
	if b := h.st.batchWith(msp.NotifyApprovalRequested); !slices.Contains(b, msp.NotifyItemStarted) {
		t.Fatalf("approval/requested was written in %v, not with its call's item/started", b)
	}
	started := of[msp.ItemParams](t, sub.recSub, msp.NotifyItemStarted)
	call := started[len(started)-1].Item
	if req.ItemID != call.ItemID || call.ApprovalID != req.ApprovalID || req.TaskID != call.ItemID || req.ToolName != "t__append" ||
		req.RawArgs != `{"text":"a"}` || req.ToolCallID != "c1" || req.TurnID != ack.TurnID || req.Subject.Kind != msp.SubjectTool ||
		req.CurrentRequirementID != (msp.ApprovalRequirementRef{ApprovalID: req.ApprovalID}) || len(req.AvailableChoices) != 3 {
		t.Fatalf("request %+v for call %+v", req, call)
	}
	if n := h.tools.marked.Count(tooltest.Append); n != 0 {
		t.Fatalf("the tool ran %d times before anyone approved", n)
	}

	cmd := cmdID()
	first, err := decide(h.m, req, cmd, turn.ChoiceApprove, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := sub.waitTerminal(t, ack.TurnID)
	if c.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %+v", c)
	}
	if it := toolItem(t, sub.recSub); it.Status != msp.ItemCompleted || it.ApprovalID != req.ApprovalID || deref(it.VisibleOutput) != "appended 1" {
		t.Fatalf("item %+v", it)
	}
	if got := h.model.toolResults(); len(got) != 1 || got[0].Text != "appended 1" {
		t.Fatalf("the model was told %+v", got)
	}
	resolved := of[msp.ApprovalResolvedParams](t, sub.recSub, msp.NotifyApprovalResolved)
	if len(resolved) != 1 || resolved[0].Decision != msp.DecisionApproved || resolved[0].ResolvedBy != msp.ResolvedByUser ||
		resolved[0].DecidedByCommandID != cmd || resolved[0].PolicyResult != msp.PolicyAllow || resolved[0].ItemID != call.ItemID ||
		resolved[0].TurnID != ack.TurnID || resolved[0].StageEvidence == nil {
		t.Fatalf("resolved %+v", resolved)
	}

	again, err := decide(h.m, req, cmd, turn.ChoiceApprove, nil)
	if err != nil || string(again) != string(first) {
		t.Fatalf("replay: %s, %v; want %s", again, err, first)
	}
	if _, err := decide(h.m, req, cmdID(), turn.ChoiceDeny, nil); mspKind(err) != msp.KindApprovalAlreadyResolved {
		t.Fatalf("a decision after the resolution: %v", err)
	} else if e := err.(*msp.Error); e.Code != msp.CodeApprovalAlreadyResolved || e.Data.Resolution == nil ||
		e.Data.Resolution.Decision != msp.DecisionApproved || e.Data.Resolution.ViewCursor != resolved[0].ViewCursor {
		t.Fatalf("already resolved: %+v %+v", e, e.Data.Resolution)
	}
	n := 0
	for _, r := range records(t, h.st, sid) {
		if r.Method == msp.NotifyApprovalResolved {
			n++
		}
	}
	if n != 1 || h.tools.marked.Count(tooltest.Append) != 1 {
		t.Fatalf("%d resolutions in the log, the tool ran %d times; want 1 and 1", n, h.tools.marked.Count(tooltest.Append))
	}
}

// TestApproveForSessionAsksOnce: a tool approved for the session runs
// without asking in the session's later turns, after a restart too (the
// grant is folded from the log); another tool still asks.
func TestApproveForSessionAsksOnce(t *testing.T) {
	h := newApprovalHarness(t, nil)
	sub := newAskSub()
	sid := startSession(t, h.m, sub)
	ack := startTurn(t, h.m, textTurn(sid, `call append {"text":"a"}`))
	req, _ := sub.waitAsked(t, 1)
	if _, err := decide(h.m, req, cmdID(), turn.ChoiceApproveForSession, nil); err != nil {
		t.Fatal(err)
	}
	sub.waitTerminal(t, ack.TurnID)

	if c := runTurn(t, h.m, sub.recSub, textTurn(sid, `call append {"text":"b"}`)); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("second turn %+v", c)
	}
	h.restart(t)
	sub2 := newAskSub()
	subscribe(t, h.m, sub2, sid)
	if c := runTurn(t, h.m, sub2.recSub, textTurn(sid, `call append {"text":"c"}`)); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("turn after the restart %+v", c)
	}
	if n := h.tools.marked.Count(tooltest.Append); n != 3 {
		t.Fatalf("append ran %d times, want 3", n)
	}
	if got := len(of[msp.ApprovalRequestParams](t, sub2.recSub, msp.NotifyApprovalRequested)); got != 1 || len(sub.asked()) != 1 || len(sub2.asked()) != 0 {
		t.Fatalf("%d approvals in the log, %d and %d asked; want only the first", got, len(sub.asked()), len(sub2.asked()))
	}
	// Another tool of the same server is not granted.
	ack = startTurn(t, h.m, textTurn(sid, `call lookup {"key":"k"}`))
	if r, _ := sub2.waitAsked(t, 1); r.ToolName != "t__lookup" {
		t.Fatalf("asked for %s", r.ToolName)
	}
	interrupt(t, h.m, sid)
	sub2.waitTerminal(t, ack.TurnID)
}

// TestDenyWithFeedback: a denied call never runs; its item is rejected and
// the model's next request tells it the call was denied, with the
// person's words, which are stored nowhere. Feedback with a choice that
// takes none is refused.
func TestDenyWithFeedback(t *testing.T) {
	h := newApprovalHarness(t, nil)
	sub := newAskSub()
	sid := startSession(t, h.m, sub)
	ack := startTurn(t, h.m, textTurn(sid, `call append {"text":"a"}`))
	req, _ := sub.waitAsked(t, 1)

	words := "write to notes.txt instead"
	if _, err := decide(h.m, req, cmdID(), turn.ChoiceApprove, &words); mspKind(err) != msp.KindInvalidParams {
		t.Fatalf("feedback with approve: %v", err)
	}
	if _, err := decide(h.m, req, cmdID(), turn.ChoiceDeny, &words); err != nil {
		t.Fatal(err)
	}
	if c := sub.waitTerminal(t, ack.TurnID); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %+v", c)
	}
	it := toolItem(t, sub.recSub)
	if it.Status != msp.ItemRejected || it.FailureKind != turn.FailureDenied || it.DurationMs != nil {
		t.Fatalf("item %+v", it)
	}
	got := h.model.toolResults()
	if len(got) != 1 || !got[0].IsError || !strings.Contains(got[0].Text, "denied") || !strings.Contains(got[0].Text, words) {
		t.Fatalf("the model was told %+v", got)
	}
	if n := h.tools.marked.Count(tooltest.Append); n != 0 {
		t.Fatalf("a denied call ran %d times", n)
	}
	for _, r := range records(t, h.st, sid) {
		// The model's own answer repeats what it was told; nothing of
		// mspd's keeps it.
		if strings.Contains(string(r.Params), words) && !strings.Contains(string(r.Params), `"kind":"agentMessage"`) {
			t.Fatalf("the feedback was stored in %s: %s", r.Method, r.Params)
		}
	}
	if r := of[msp.ApprovalResolvedParams](t, sub.recSub, msp.NotifyApprovalResolved); len(r) != 1 || r[0].Decision != msp.DecisionDenied || r[0].PolicyResult != msp.PolicyDeny {
		t.Fatalf("resolved %+v", r)
	}
}

// TestApprovalTimesOut: nobody decides within the approval timeout: the
// approval is resolved timedOut by policy, the call never runs, its item
// is rejected and the turn goes on.
func TestApprovalTimesOut(t *testing.T) {
	h := newApprovalHarness(t, func(c *turn.Config) { c.ApprovalTimeout = 50 * time.Millisecond })
	sub := newAskSub()
	sid := startSession(t, h.m, sub)
	ack := startTurn(t, h.m, textTurn(sid, `call append {"text":"a"}`))
	if c := sub.waitTerminal(t, ack.TurnID); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %+v", c)
	}
	r := of[msp.ApprovalResolvedParams](t, sub.recSub, msp.NotifyApprovalResolved)
	if len(r) != 1 || r[0].Decision != msp.DecisionTimedOut || r[0].ResolvedBy != msp.ResolvedByPolicy || r[0].DecidedByCommandID != "" {
		t.Fatalf("resolved %+v", r)
	}
	if it := toolItem(t, sub.recSub); it.Status != msp.ItemRejected || it.FailureKind != turn.FailureApprovalTimeout {
		t.Fatalf("item %+v", it)
	}
	if n := h.tools.marked.Count(tooltest.Append); n != 0 {
		t.Fatalf("a call nobody approved ran %d times", n)
	}
	if got := h.model.toolResults(); len(got) != 1 || !strings.Contains(got[0].Text, "nobody approved it within 50ms") {
		t.Fatalf("the model was told %+v", got)
	}
}

// TestStopWhileApprovalPending: a user's stop resolves the pending approval
// abort; the call never runs, its item is cancelled, the turn cancelled.
func TestStopWhileApprovalPending(t *testing.T) {
	h := newApprovalHarness(t, nil)
	sub := newAskSub()
	sid := startSession(t, h.m, sub)
	ack := startTurn(t, h.m, textTurn(sid, `call append {"text":"a"}`))
	req, _ := sub.waitAsked(t, 1)
	interrupt(t, h.m, sid)
	if c := sub.waitTerminal(t, ack.TurnID); c.Terminal != msp.TerminalCancelled {
		t.Fatalf("terminal %+v", c)
	}
	r := of[msp.ApprovalResolvedParams](t, sub.recSub, msp.NotifyApprovalResolved)
	if len(r) != 1 || r[0].Decision != msp.DecisionAbort || r[0].ApprovalID != req.ApprovalID {
		t.Fatalf("resolved %+v", r)
	}
	if it := toolItem(t, sub.recSub); it.Status != msp.ItemCancelled {
		t.Fatalf("item %+v", it)
	}
	if n := h.tools.marked.Count(tooltest.Append); n != 0 {
		t.Fatalf("a stopped call ran %d times", n)
	}
	if _, err := decide(h.m, req, cmdID(), turn.ChoiceApprove, nil); mspKind(err) != msp.KindApprovalAlreadyResolved {
		t.Fatalf("a decision after the stop: %v", err)
	}
}

// TestDecisionRefusals: each refusal is a typed error with its code and
// data, the approval stays pending, and a refusal replays as it was.
func TestDecisionRefusals(t *testing.T) {
	h := newApprovalHarness(t, nil)
	sub := newAskSub()
	sid := startSession(t, h.m, sub)
	ack := startTurn(t, h.m, textTurn(sid, `call append {"text":"a"}`))
	req, _ := sub.waitAsked(t, 1)

	stale := req
	stale.CurrentRequirementID.SourceIndex = 1
	unknown := req
	unknown.ApprovalID = "0198f0aa-0000-7000-8000-00000000dead"
	unknown.CurrentRequirementID.ApprovalID = unknown.ApprovalID
	for _, tt := range []struct {
		name   string
		req    msp.ApprovalRequestParams
		choice string
		code   int
		kind   string
		check  func(*msp.Error) bool
	}{
		{"stale requirement", stale, turn.ChoiceApprove, msp.CodeApprovalRequirementStale, msp.KindApprovalRequirementStale,
			func(e *msp.Error) bool {
				return e.Data.CurrentRequirementID != nil && *e.Data.CurrentRequirementID == req.CurrentRequirementID
			}},
		{"choice not offered", req, "approveForever", msp.CodeApprovalChoiceInvalid, msp.KindApprovalChoiceInvalid,
			func(e *msp.Error) bool {
				return e.Data.ChoiceID == "approveForever" && e.Data.ApprovalID == req.ApprovalID
			}},
		{"unknown approval", unknown, turn.ChoiceApprove, msp.CodeApprovalNotFound, msp.KindApprovalNotFound,
			func(e *msp.Error) bool { return e.Data.ApprovalID == unknown.ApprovalID && e.Data.SessionID == sid }},
	} {
		cmd := cmdID()
		_, err := decide(h.m, tt.req, cmd, tt.choice, nil)
		var e *msp.Error
		if !errors.As(err, &e) || e.Code != tt.code || e.Data.Kind != tt.kind || !tt.check(e) {
			t.Errorf("%s: %v (%+v)", tt.name, err, e)
			continue
		}
		if _, again := decide(h.m, tt.req, cmd, tt.choice, nil); mspKind(again) != tt.kind {
			t.Errorf("%s: replayed, %v", tt.name, again)
		}
	}
	if list, err := h.m.ListPendingApprovals(context.Background(), mustJSON(msp.ApprovalListPendingParams{SessionID: sid})); err != nil || len(list.Approvals) != 1 {
		t.Fatalf("after the refusals: %+v, %v", list, err)
	}
	if _, err := decide(h.m, req, cmdID(), turn.ChoiceApprove, nil); err != nil {
		t.Fatal(err)
	}
	sub.waitTerminal(t, ack.TurnID)
	if _, err := decide(h.m, req, cmdID(), turn.ChoiceApprove, nil); mspKind(err) != msp.KindApprovalAlreadyResolved {
		t.Fatalf("already resolved: %v", err)
	}
}

// TestApprovalModes: denyUnmatched denies a marked call without asking
// (resolved by policy, in the commit that records the call) and runs an
// unmarked one; allowAll runs a marked call without an approval; onRequest
// also asks for an unmarked tool its server does not call read-only, and
// runs one it does.
func TestApprovalModes(t *testing.T) {
	h := newApprovalHarness(t, nil)
	ctx := context.Background()
	start := func(mode string) (*askSub, string) {
		sub := newAskSub()
		raw, attach, err := h.m.StartSession(ctx, sub, mustJSON(msp.SessionStartParams{CommandID: cmdID(), ApprovalMode: &mode}))
		if err != nil {
			t.Fatal(err)
		}
		var res msp.SessionStartResult
		json.Unmarshal(raw, &res)
		attach(ctx)
		if am := res.Session.ApprovalMode; am == nil || am.Mode != mode || am.Source != msp.ApprovalSourceStartup || am.LastCommandID == nil {
			t.Fatalf("started %s: %+v", mode, am)
		}
		return sub, res.Session.SessionID
	}

	sub, sid := start(msp.ApprovalDenyUnmatched)
	runTurn(t, h.m, sub.recSub, textTurn(sid, `call t/append {"text":"a"} | call u/append {"text":"b"}`))
	if len(sub.asked()) != 0 || h.tools.marked.Count(tooltest.Append) != 0 || h.tools.open.Count(tooltest.Append) != 1 {
		t.Fatalf("denyUnmatched: asked %d, ran %d marked and %d unmarked; want 0, 0, 1", len(sub.asked()),
			h.tools.marked.Count(tooltest.Append), h.tools.open.Count(tooltest.Append))
	}
	r := of[msp.ApprovalResolvedParams](t, sub.recSub, msp.NotifyApprovalResolved)
	if len(r) != 1 || r[0].Decision != msp.DecisionDenied || r[0].ResolvedBy != msp.ResolvedByPolicy {
		t.Fatalf("denyUnmatched resolved %+v", r)
	}
	if b := h.st.batchWith(msp.NotifyApprovalResolved); !slices.Contains(b, msp.NotifyItemStarted) || !slices.Contains(b, msp.NotifyApprovalRequested) {
		t.Fatalf("the policy's denial was written in %v, not with the call", b)
	}
	var rejected int
	for _, p := range of[msp.ItemParams](t, sub.recSub, msp.NotifyItemCompleted) {
		if p.Item.Kind == msp.ItemToolCall && p.Item.Status == msp.ItemRejected && p.Item.Tool == "append" && p.Item.Server == "t" {
			rejected++
		}
	}
	if rejected != 1 {
		t.Fatalf("denyUnmatched: %d rejected items", rejected)
	}

	sub, sid = start(msp.ApprovalAllowAll)
	runTurn(t, h.m, sub.recSub, textTurn(sid, `call t/append {"text":"c"}`))
	if len(sub.asked()) != 0 || h.tools.marked.Count(tooltest.Append) != 1 || len(of[msp.ApprovalRequestParams](t, sub.recSub, msp.NotifyApprovalRequested)) != 0 {
		t.Fatalf("allowAll: asked %d, ran %d", len(sub.asked()), h.tools.marked.Count(tooltest.Append))
	}

	sub, sid = start(msp.ApprovalOnRequest)
	ack := startTurn(t, h.m, textTurn(sid, `call u/lookup {"key":"k"} | call u/append {"text":"d"}`))
	req, _ := sub.waitAsked(t, 1)
	if req.ToolName != "u__append" {
		t.Fatalf("onRequest asked for %s", req.ToolName)
	}
	waitFor(t, sub.recSub, "the read-only call's result", func() bool { return h.tools.open.Count(tooltest.Lookup) == 1 })
	if _, err := decide(h.m, req, cmdID(), turn.ChoiceApprove, nil); err != nil {
		t.Fatal(err)
	}
	sub.waitTerminal(t, ack.TurnID)
	if h.tools.open.Count(tooltest.Append) != 2 || len(sub.asked()) != 1 {
		t.Fatalf("onRequest: unmarked append ran %d times in all, asked %d", h.tools.open.Count(tooltest.Append), len(sub.asked()))
	}
}

// TestSetApprovalMode: session/setApprovalMode is exactly-once: the change
// is durable with session/approvalModeChanged naming the client, a replay
// gets the same ack and writes nothing, selecting the mode in effect is a
// noop; the session reports the mode, after a restart too, and its calls
// follow it.
func TestSetApprovalMode(t *testing.T) {
	h := newApprovalHarness(t, nil)
	sub := newAskSub()
	sid := startSession(t, h.m, sub)
	ctx := WithClientName(context.Background(), "test_client")
	set := func(cmd, mode string) (msp.SessionSetApprovalModeResult, json.RawMessage) {
		t.Helper()
		raw, err := h.m.SetApprovalMode(ctx, mustJSON(msp.SessionSetApprovalModeParams{CommandID: cmd, Mode: mode, SessionID: sid}))
		if err != nil {
			t.Fatal(err)
		}
		var res msp.SessionSetApprovalModeResult
		json.Unmarshal(raw, &res)
		return res, raw
	}
	read := func() *msp.EffectiveApprovalModeState {
		snap, err := h.m.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid}))
		if err != nil {
			t.Fatal(err)
		}
		return snap.Session.ApprovalMode
	}
	if am := read(); am == nil || am.Mode != msp.ApprovalPromptUnmatched || am.Source != msp.ApprovalSourceStartup || am.LastCommandID != nil {
		t.Fatalf("the default: %+v", am)
	}

	cmd := cmdID()
	res, first := set(cmd, msp.ApprovalAllowAll)
	want := msp.EffectiveApprovalModeState{LastCommandID: &cmd, Mode: msp.ApprovalAllowAll, Source: msp.ApprovalSourceReconfigure}
	if res.ApplyOutcome != msp.ApplyCompleted || res.CommandID != cmd || res.Status != msp.StatusAccepted || *res.EffectiveMode.LastCommandID != cmd ||
		res.EffectiveMode.Mode != want.Mode || res.EffectiveMode.Source != want.Source {
		t.Fatalf("ack %s", first)
	}
	if _, again := set(cmd, msp.ApprovalAllowAll); string(again) != string(first) {
		t.Fatalf("replay %s, want %s", again, first)
	}
	changed := of[msp.SessionApprovalModeChangedParams](t, sub.recSub, msp.NotifySessionApprovalModeChanged)
	if len(changed) != 1 || changed[0].ClientName != "test_client" || changed[0].CommandID != cmd || changed[0].Mode != msp.ApprovalAllowAll ||
		changed[0].Source != msp.ApprovalSourceReconfigure || changed[0].SourceRange == nil {
		t.Fatalf("approvalModeChanged %+v", changed)
	}
	if res, _ := set(cmdID(), msp.ApprovalAllowAll); res.ApplyOutcome != msp.ApplyNoop || *res.EffectiveMode.LastCommandID != cmd {
		t.Fatalf("the same mode again: %+v", res)
	}
	if n := len(of[msp.SessionApprovalModeChangedParams](t, sub.recSub, msp.NotifySessionApprovalModeChanged)); n != 1 {
		t.Fatalf("%d approvalModeChanged events, want 1", n)
	}
	runTurn(t, h.m, sub.recSub, textTurn(sid, `call append {"text":"a"}`))
	if len(sub.asked()) != 0 || h.tools.marked.Count(tooltest.Append) != 1 {
		t.Fatalf("allowAll: asked %d, ran %d", len(sub.asked()), h.tools.marked.Count(tooltest.Append))
	}

	h.restart(t)
	if am := read(); am == nil || am.Mode != msp.ApprovalAllowAll || am.LastCommandID == nil || *am.LastCommandID != cmd {
		t.Fatalf("after a restart: %+v", am)
	}
	if _, err := h.m.SetApprovalMode(ctx, mustJSON(msp.SessionSetApprovalModeParams{CommandID: cmdID(), Mode: "askNicely", SessionID: sid})); mspKind(err) != msp.KindInvalidParams {
		t.Fatalf("a mode that is none of the server's: %v", err)
	}
}

// TestPendingApprovalSurvivesRestart: a call waiting for its approval when
// its process stops (gracefully, or dying) never ran, so the next process
// waits for the same approval again rather than counting its outcome
// unknown: listPending shows it, the first subscriber is asked again, and
// the decision runs the tool exactly once.
func TestPendingApprovalSurvivesRestart(t *testing.T) {
	for _, dies := range []bool{false, true} {
		t.Run(map[bool]string{false: "graceful", true: "dies"}[dies], func(t *testing.T) {
			h := newApprovalHarness(t, nil)
			cs := &crashStore{Store: h.st}
			h.m.Close()
			h.m = newManager(t, cs, h.model, h.opts)
			sub := newAskSub()
			sid := startSession(t, h.m, sub)
			ack := startTurn(t, h.m, textTurn(sid, `call append {"text":"a"}`))
			req, raw := sub.waitAsked(t, 1)
			cs.dead.Store(dies)
			h.m.Close()
			h.m = newManager(t, h.st, h.model, h.opts)

			list, err := h.m.ListPendingApprovals(context.Background(), mustJSON(msp.ApprovalListPendingParams{SessionID: sid}))
			if err != nil || len(list.Approvals) != 1 || string(list.Approvals[0]) != string(raw) || len(list.UserInputs) != 0 {
				t.Fatalf("listPending after the restart: %+v, %v; want exactly\n%s", list, err, raw)
			}
			sub2 := newAskSub()
			subscribe(t, h.m, sub2, sid)
			again, _ := sub2.waitAsked(t, 1)
			if again.ApprovalID != req.ApprovalID || again.CurrentRequirementID != req.CurrentRequirementID {
				t.Fatalf("asked again for %+v, want %+v", again, req)
			}
			if _, err := decide(h.m, again, cmdID(), turn.ChoiceApprove, nil); err != nil {
				t.Fatal(err)
			}
			if c := sub2.waitTerminal(t, ack.TurnID); c.Terminal != msp.TerminalCompleted {
				t.Fatalf("terminal %+v", c)
			}
			if it := toolItem(t, sub2.recSub); it.Status != msp.ItemCompleted || it.ApprovalID != req.ApprovalID {
				t.Fatalf("item %+v", it)
			}
			if n := h.tools.marked.Count(tooltest.Append); n != 1 {
				t.Fatalf("the tool ran %d times, want once", n)
			}
			if n := len(of[msp.ApprovalRequestParams](t, sub2.recSub, msp.NotifyApprovalRequested)); n != 1 {
				t.Fatalf("%d approval/requested in the log, want 1", n)
			}
		})
	}
}

// TestApprovedCallCutOffIsUnknown: a call that was approved and had not
// closed when its process died may have run: the next process does not
// run it again (the tool is neither read-only nor idempotent) and fails
// it unknown_outcome, unlike a call whose approval was never granted.
func TestApprovedCallCutOffIsUnknown(t *testing.T) {
	h := newApprovalHarness(t, func(c *turn.Config) { c.ToolTimeout = 200 * time.Millisecond })
	cs := &crashStore{Store: h.st}
	h.m.Close()
	h.m = newManager(t, cs, h.model, h.opts)
	sub := newAskSub()
	sid := startSession(t, h.m, sub)
	ack := startTurn(t, h.m, textTurn(sid, `call slow {}`))
	req, _ := sub.waitAsked(t, 1)
	if _, err := decide(h.m, req, cmdID(), turn.ChoiceApprove, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.tools.marked.WaitCount(ctx, tooltest.Slow, 1); err != nil {
		t.Fatal(err)
	}
	cs.dead.Store(true) // nothing more of this process is written
	h.m.Close()
	h.m = newManager(t, h.st, h.model, h.opts)
	sub2 := newAskSub()
	subscribe(t, h.m, sub2, sid)
	if c := sub2.waitTerminal(t, ack.TurnID); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %+v", c)
	}
	if it := toolItem(t, sub2.recSub); it.Status != msp.ItemFailed || it.FailureKind != turn.FailureUnknownOutcome {
		t.Fatalf("item %+v", it)
	}
	if n := h.tools.marked.Count(tooltest.Slow); n != 1 || len(sub2.asked()) != 0 {
		t.Fatalf("slow ran %d times and %d were asked again; want once and none", n, len(sub2.asked()))
	}
}

// TestLateSubscriberIsAskedAgain: a connection that subscribes, or
// resumes, while an approval is pending is presented it, and the resume
// points at it; once resolved nobody is asked for it.
func TestLateSubscriberIsAskedAgain(t *testing.T) {
	h := newApprovalHarness(t, nil)
	sub := newAskSub()
	sid := startSession(t, h.m, sub)
	ack := startTurn(t, h.m, textTurn(sid, `call append {"text":"a"}`))
	req, raw := sub.waitAsked(t, 1)

	late := newAskSub()
	if err := attachAtHead(context.Background(), h.m, late, sid); err != nil {
		t.Fatal(err)
	}
	if _, got := late.waitAsked(t, 1); string(got) != string(raw) {
		t.Fatalf("the late subscriber was asked\n%s\nwant\n%s", got, raw)
	}
	resumer := newAskSub()
	res, attach, err := h.m.ResumeSession(context.Background(), resumer, mustJSON(msp.SessionResumeParams{CommandID: cmdID(), SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	var snap msp.SessionSnapshot
	json.Unmarshal(res, &snap)
	requested := of[msp.ApprovalRequestParams](t, sub.recSub, msp.NotifyApprovalRequested)
	if len(snap.PendingRequests) != 1 || snap.PendingRequests[0] != (msp.PendingRequest{ApprovalID: req.ApprovalID, Kind: msp.PendingApproval, ViewCursor: requested[0].ViewCursor}) {
		t.Fatalf("resume's pendingRequests %+v", snap.PendingRequests)
	}
	if len(resumer.asked()) != 0 {
		t.Fatal("asked before the resume's response")
	}
	attach(context.Background())
	resumer.waitAsked(t, 1)

	if _, err := decide(h.m, req, cmdID(), turn.ChoiceApprove, nil); err != nil {
		t.Fatal(err)
	}
	sub.waitTerminal(t, ack.TurnID)
	last := newAskSub()
	if err := attachAtHead(context.Background(), h.m, last, sid); err != nil {
		t.Fatal(err)
	}
	if len(last.asked()) != 0 {
		t.Fatal("a resolved approval was presented")
	}
	snap2, _ := h.m.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid}))
	if len(snap2.PendingRequests) != 0 {
		t.Fatalf("read after the resolution: %+v", snap2.PendingRequests)
	}
}

// TestClusterDecisionOnAFollower: on two nodes, a reader of the node that
// follows the session is asked too, and a decision sent to that node is
// forwarded to the leader, where the waiting turn runs the tool once; a
// replay there gets the same ack.
func TestClusterDecisionOnAFollower(t *testing.T) {
	st := openStore(t)
	ts := newToolServers(t)
	model := &toolModel{server: "t"}
	h := newMemHub()
	h.tools = ts.box
	a := h.startNode(t, "a", st, model)
	t.Cleanup(a.Close)
	b := h.startNode(t, "b", st, model)
	t.Cleanup(b.Close)

	onA := newAskSub()
	sid := startSession(t, a, onA)
	ack := startTurn(t, a, textTurn(sid, `call append {"text":"a"}`))
	req, raw := onA.waitAsked(t, 1)
	if leader, _ := (memNode{h, "a"}).Leader(context.Background(), sid); leader != "a" {
		t.Fatalf("leader %q, want a", leader)
	}
	onB := newAskSub()
	subscribe(t, b, onB, sid)
	if _, got := onB.waitAsked(t, 1); string(got) != string(raw) {
		t.Fatalf("the follower's reader was asked\n%s\nwant\n%s", got, raw)
	}
	if list, err := b.ListPendingApprovals(context.Background(), mustJSON(msp.ApprovalListPendingParams{SessionID: sid})); err != nil || len(list.Approvals) != 1 {
		t.Fatalf("listPending on the follower: %+v, %v", list, err)
	}

	cmd := cmdID()
	first, err := decide(b, req, cmd, turn.ChoiceApprove, nil)
	if err != nil {
		t.Fatal(err)
	}
	onA.waitTerminal(t, ack.TurnID)
	onB.waitTerminal(t, ack.TurnID)
	if again, err := decide(b, req, cmd, turn.ChoiceApprove, nil); err != nil || string(again) != string(first) {
		t.Fatalf("replay on the follower: %s, %v; want %s", again, err, first)
	}
	if n := ts.marked.Count(tooltest.Append); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}
	if r := of[msp.ApprovalResolvedParams](t, onB.recSub, msp.NotifyApprovalResolved); len(r) != 1 || r[0].DecidedByCommandID != cmd {
		t.Fatalf("the follower's reader saw %+v", r)
	}
	if leader, _ := (memNode{h, "a"}).Leader(context.Background(), sid); leader != "a" {
		t.Fatalf("leader %q after the decision, want a still", leader)
	}
}

// deadLeader is a call waiting for approval on node a, whose session node
// b follows (its reader onB asked too), and then a's death: nothing more
// of it is written or published, and its lease lapses.
type deadLeader struct {
	h      *memHub
	tools  *toolServers
	a, b   *Manager
	onB    *askSub
	sid    string
	turnID string
	req    msp.ApprovalRequestParams
}

// leaderDiesWhileAsked sets a deadLeader up; startB starts node b on the
// hub over the store.
func leaderDiesWhileAsked(t *testing.T, startB func(h *memHub, st store.Store, model provider.Model) *Manager) *deadLeader {
	t.Helper()
	st := openStore(t)
	d := &deadLeader{h: newMemHub(), tools: newToolServers(t)}
	model := &toolModel{server: "t"}
	d.h.tools = d.tools.box
	deadA := &crashStore{Store: st}
	d.a = d.h.startNode(t, "a", deadA, model)
	d.b = startB(d.h, st, model)

	onA := newAskSub()
	d.sid = startSession(t, d.a, onA)
	d.turnID = startTurn(t, d.a, textTurn(d.sid, `call append {"text":"a"}`)).TurnID
	d.req, _ = onA.waitAsked(t, 1)
	d.onB = newAskSub()
	subscribe(t, d.b, d.onB, d.sid)
	d.onB.waitAsked(t, 1)

	deadA.dead.Store(true)
	d.h.kill("a")
	return d
}

// ranOnceOnB checks that the turn completed, its call run once on b.
func (d *deadLeader) ranOnceOnB(t *testing.T) {
	t.Helper()
	if c := d.onB.waitTerminal(t, d.turnID); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal after the takeover %+v", c)
	}
	if it := toolItem(t, d.onB.recSub); it.Status != msp.ItemCompleted || it.ApprovalID != d.req.ApprovalID {
		t.Fatalf("item %+v", it)
	}
	if n := d.tools.marked.Count(tooltest.Append); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}
	if leader, _ := (memNode{d.h, "b"}).Leader(context.Background(), d.sid); leader != "b" {
		t.Fatalf("leader %q after the takeover, want b", leader)
	}
}

// TestClusterTakeoverKeepsThePendingApproval: when the node leading a
// session dies while a call waits for approval, the node that takes it
// over waits for the same approval, and a decision there runs the tool
// once.
func TestClusterTakeoverKeepsThePendingApproval(t *testing.T) {
	d := leaderDiesWhileAsked(t, func(h *memHub, st store.Store, model provider.Model) *Manager {
		b := h.startNode(t, "b", st, model)
		t.Cleanup(b.Close)
		return b
	})
	if _, err := decide(d.b, d.req, cmdID(), turn.ChoiceApprove, nil); err != nil {
		t.Fatal(err)
	}
	d.ranOnceOnB(t)
	d.a.Close()
}

// headlessStore fails its next Head once armed, as a store that times out
// while a node takes a session over.
type headlessStore struct {
	store.Store
	armed atomic.Bool
}

func (h *headlessStore) Head(ctx context.Context, sessionID string) (int64, error) {
	if h.armed.CompareAndSwap(true, false) {
		return 0, errors.New("the store timed out")
	}
	return h.Store.Head(ctx, sessionID)
}

// TestDecisionDuringAFailedTakeover: a decision sent to a node that
// claims the session of a dead leader, and fails to take it over (its
// store times out), is refused retryable (overloaded), not as an internal
// error of a write on a follower, and the lease is let go; the same
// decision sent again takes the session over and runs the tool once.
func TestDecisionDuringAFailedTakeover(t *testing.T) {
	flaky := &headlessStore{}
	d := leaderDiesWhileAsked(t, func(h *memHub, st store.Store, model provider.Model) *Manager {
		flaky.Store = st
		return startQuietNodeWith(t, memNode{h, "b"}, flaky, model, h.tools)
	})
	flaky.armed.Store(true)
	cmd := cmdID()
	_, err := decide(d.b, d.req, cmd, turn.ChoiceApprove, nil)
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindOverloaded || me.Data.Retryable == nil || !*me.Data.Retryable {
		t.Fatalf("a decision during a failed takeover: %v; want a retryable overloaded", err)
	}
	if leader, _ := (memNode{d.h, "b"}).Leader(context.Background(), d.sid); leader != "" {
		t.Fatalf("leader %q after the failed takeover, want none", leader)
	}
	if _, err := decide(d.b, d.req, cmd, turn.ChoiceApprove, nil); err != nil {
		t.Fatalf("the decision sent again: %v", err)
	}
	d.ranOnceOnB(t)
	d.a.Close()
}

// TestWaitingCallsHoldNoSlot: calls waiting for their approval take none
// of the step's parallel slots: a call that needs no approval runs while
// more calls than there are slots wait.
func TestWaitingCallsHoldNoSlot(t *testing.T) {
	h := newApprovalHarness(t, nil)
	sub := newAskSub()
	sid := startSession(t, h.m, sub)
	text := strings.Repeat(`call t/append {"text":"x"} | `, 5) + `call u/append {"text":"y"}`
	ack := startTurn(t, h.m, textTurn(sid, text))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.tools.open.WaitCount(ctx, tooltest.Append, 1); err != nil {
		t.Fatal(err)
	}
	sub.waitAsked(t, 5)
	if n := h.tools.marked.Count(tooltest.Append); n != 0 {
		t.Fatalf("%d waiting calls ran", n)
	}
	interrupt(t, h.m, sid)
	sub.waitTerminal(t, ack.TurnID)
	if r := of[msp.ApprovalResolvedParams](t, sub.recSub, msp.NotifyApprovalResolved); len(r) != 5 {
		t.Fatalf("%d approvals resolved by the stop, want 5", len(r))
	}
}

// TestDrainDoesNotWaitForAPerson: a host shutting down (Drain, then
// StopWaiting) stops a turn waiting for approval at once, as its own stop,
// not the user's: the approval stays pending for the next process.
func TestDrainDoesNotWaitForAPerson(t *testing.T) {
	h := newApprovalHarness(t, nil)
	sub := newAskSub()
	sid := startSession(t, h.m, sub)
	ack := startTurn(t, h.m, textTurn(sid, `call append {"text":"a"}`))
	sub.waitAsked(t, 1)
	h.m.Drain()
	h.m.StopWaiting()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.m.WaitIdle(ctx); err != nil {
		t.Fatalf("the drain waited for a person: %v", err)
	}
	list, err := h.m.ListPendingApprovals(context.Background(), mustJSON(msp.ApprovalListPendingParams{SessionID: sid}))
	if err != nil || len(list.Approvals) != 1 {
		t.Fatalf("after the drain: %+v, %v", list, err)
	}
	if a := activeOf(t, h.st, sid); a == nil || a.TurnID != ack.TurnID || a.Checkpoint == nil || !a.Checkpoint.Stopped {
		t.Fatalf("the stopped turn: %+v", a)
	}
	if r := of[msp.ApprovalResolvedParams](t, sub.recSub, msp.NotifyApprovalResolved); len(r) != 0 {
		t.Fatalf("the drain resolved %+v", r)
	}
}

// TestCancelRunningAbortsTheWait: a stdio client that closes its input
// (Drain, then CancelRunning) ends a turn waiting for approval cancelled,
// its approval aborted, as a user's stop does.
func TestCancelRunningAbortsTheWait(t *testing.T) {
	h := newApprovalHarness(t, nil)
	sub := newAskSub()
	sid := startSession(t, h.m, sub)
	ack := startTurn(t, h.m, textTurn(sid, `call append {"text":"a"}`))
	sub.waitAsked(t, 1)
	h.m.Drain()
	h.m.CancelRunning()
	if c := sub.waitTerminal(t, ack.TurnID); c.Terminal != msp.TerminalCancelled {
		t.Fatalf("terminal %+v", c)
	}
	if r := of[msp.ApprovalResolvedParams](t, sub.recSub, msp.NotifyApprovalResolved); len(r) != 1 || r[0].Decision != msp.DecisionAbort {
		t.Fatalf("resolved %+v", r)
	}
	if list, _ := h.m.ListPendingApprovals(context.Background(), mustJSON(msp.ApprovalListPendingParams{SessionID: sid})); len(list.Approvals) != 0 {
		t.Fatalf("still pending: %+v", list)
	}
}
