package turn

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"mspd/observe"
	"mspd/provider"
	"mspd/schema/msp"
	"mspd/tool"
)

// Toolbox is the set of tools a turn may offer the model; package tool's
// registry is one. Implementations are safe for concurrent use.
type Toolbox interface {
	// Specs lists the tools as the model sees them.
	Specs() []provider.ToolSpec
	// Lookup finds a tool by its model-facing name.
	Lookup(name string) (ToolInfo, bool)
	// Check tells whether args satisfy the tool's input schema; its error
	// names the failing field. A call that fails it is never made.
	Check(name, args string) error
	// Call runs the tool. A tool that ran and reported an error is a
	// result with IsError, not an error; an error says the call did not
	// give a result (the server unreachable, ctx ended).
	Call(ctx context.Context, name, args string) (ToolOutput, error)
}

// ToolInfo describes a tool for its items and the replay rule.
type ToolInfo struct {
	// Server and Tool name it as its MCP server does.
	Server, Tool string
	// ReplaySafe says a call may run again when its outcome is unknown:
	// the server annotates the tool read-only or idempotent.
	ReplaySafe bool
	// ReadOnly says the server annotates the tool read-only.
	ReadOnly bool
	// NeedsApproval says the server's configuration makes the tool's
	// calls wait for a person (approval, approval_tools).
	NeedsApproval bool
}

// ToolOutput is what a call returned.
type ToolOutput struct {
	// Text is the whole output, as far as the toolbox keeps it: its item
	// (and so the model) shows the first MaxVisibleOutput bytes, and a
	// Sink that is an OutputSink keeps the rest for item/readOutput.
	Text string
	// Incomplete says the output was longer still: Text is its first part.
	Incomplete bool
	// IsError says the tool reported a failure; Text says which.
	IsError bool
}

// OutputSink is a Sink that keeps a call's whole output beside its item:
// a call whose output its item cuts (Truncated) is written through
// EmitCall, which records the item (as item/completed, with an outputRef
// it sets) and the output in one write.
type OutputSink interface {
	Sink
	EmitCall(ctx context.Context, p *msp.ItemParams, out ToolOutput) error
}

// ErrToolTimeout is the cause of a call's context when it ran past the
// runner's ToolTimeout.
var ErrToolTimeout = errors.New("turn: the tool call timed out")

// Tool-call failure kinds on toolCall items (failureKind, snake_case).
const (
	FailureToolError      = "tool_error"
	FailureTimedOut       = "timed_out"
	FailureCancelled      = "cancelled"
	FailureUnavailable    = "unavailable"
	FailureUnknownOutcome = "unknown_outcome"
)

// Tool-call bounds.
const (
	// MaxVisibleOutput bounds a call's output in its item and, as the item
	// is the history, what the model reads of it.
	MaxVisibleOutput = 32 << 10
	// maxParallelCalls bounds the calls of one step that run at once.
	maxParallelCalls = 4
)

// toolSpace is the UUID namespace of tool call item ids.
var toolSpace = uuid.MustParse("0b7d5c3e-9a41-4f62-8d1e-3c5a7f9e2b64")

// ToolCallItemID is the id of the toolCall item for call i (0-based, in
// the order the model asked) of the response to request n of turn turnID.
func ToolCallItemID(turnID string, n, i int) string {
	return uuid.NewSHA1(toolSpace, []byte(turnID+"/"+strconv.Itoa(n)+"/"+strconv.Itoa(i))).String()
}

// pendingCall is one tool call of a step, from its item's opening to its
// result.
type pendingCall struct {
	call provider.ToolCall
	info ToolInfo
	item msp.Item
	gate Gate
	// deadline is when an asked call stops waiting for its approval;
	// zero: never.
	deadline time.Time
}

// checkCalls vets a response's tool calls before any is recorded: each
// names a tool the turn offered, with arguments its schema accepts. The
// error is the turn-layer retry's reason.
func (t *run) checkCalls(calls []provider.ToolCall) error {
	if t.spec.Tools == nil {
		return fmt.Errorf("the model called tool %q, but this turn offers no tools", calls[0].Name)
	}
	for _, c := range calls {
		if _, ok := t.spec.Tools.Lookup(c.Name); !ok {
			return fmt.Errorf("the model called unknown tool %q", c.Name)
		}
		if !json.Valid([]byte(c.Args)) {
			return fmt.Errorf("tool %q: arguments are not JSON", c.Name)
		}
		if err := t.spec.Tools.Check(c.Name, c.Args); err != nil {
			return fmt.Errorf("tool %q: %w", c.Name, err)
		}
	}
	return nil
}

// openCalls builds the items of request n's tool calls, in the model's
// order.
func (t *run) openCalls(n int, calls []provider.ToolCall) []pendingCall {
	turnID := t.spec.TurnID
	out := make([]pendingCall, len(calls))
	for i, c := range calls {
		info, _ := t.spec.Tools.Lookup(c.Name)
		args := c.Args
		out[i] = pendingCall{call: c, info: info, item: msp.Item{
			ItemID: ToolCallItemID(turnID, n, i), Kind: msp.ItemToolCall, Revision: 1,
			Status: msp.ItemInProgress, TurnID: &turnID, Tool: info.Tool, Server: info.Server,
			CallID: c.ID, Args: &args, RecordedAt: t.stamp(),
		}}
	}
	return out
}

// runCalls runs a step's calls, at most maxParallelCalls at once, each
// after its approval when it needs one, each result durable as it comes,
// and returns the results in the model's order; settled[i] is false for a
// call left open because the host stops while it waits for approval. A
// user's stop cancels the calls (and aborts their waits); a stopping host
// lets running calls finish, since a call cut off has an unknown effect.
// It fails only when the log refuses a result or a resolution.
func (t *run) runCalls(ctx context.Context, calls []pendingCall) (results []provider.ToolResult, settled []bool, err error) {
	callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stopWatch := context.AfterFunc(ctx, func() {
		if !stopping(ctx) {
			cancel()
		}
	})
	defer stopWatch()

	results, settled = make([]provider.ToolResult, len(calls)), make([]bool, len(calls))
	errs := make([]error, len(calls))
	slots := make(chan struct{}, maxParallelCalls)
	var wg sync.WaitGroup
	var emit sync.Mutex // one result written at a time, whole
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done, res, err := t.runOne(ctx, callCtx, slots, calls[i])
			if err != nil {
				if !errors.Is(err, errLeftOpen) {
					errs[i] = err
				}
				return
			}
			emit.Lock()
			defer emit.Unlock()
			errs[i] = t.emitCall(done)
			results[i], settled[i] = res, errs[i] == nil
		}()
	}
	wg.Wait()
	return results, settled, errors.Join(errs...)
}

// runOne takes one call to its closed item: it waits for the call's
// approval first when it needs one (taking no slot meanwhile, so that
// waiting calls hold up none that may run), then makes it in a slot, or
// closes it unmade. errLeftOpen leaves it open for the next process.
func (t *run) runOne(ctx, callCtx context.Context, slots chan struct{}, p pendingCall) (msp.Item, provider.ToolResult, error) {
	switch p.gate {
	case GateDeny:
		it, res := t.refuse(p, Resolution{Decision: msp.DecisionDenied, By: msp.ResolvedByPolicy})
		return it, res, nil
	case GateAsk:
		res, err := t.await(ctx, p)
		if err != nil {
			return msp.Item{}, provider.ToolResult{}, err
		}
		if !res.Allows() || callCtx.Err() != nil {
			if res.Allows() { // approved as the user stopped the turn: not run
				res = Resolution{Decision: msp.DecisionAbort}
			}
			it, out := t.refuse(p, res)
			return it, out, nil
		}
	}
	slots <- struct{}{}
	defer func() { <-slots }()
	it, res := t.callTool(callCtx, p)
	return it, res, nil
}

// settledOnly keeps the results of the calls that settled.
func settledOnly(results []provider.ToolResult, settled []bool) []provider.ToolResult {
	out := results[:0:0]
	for i, r := range results {
		if settled[i] {
			out = append(out, r)
		}
	}
	return out
}

// emitCall writes a closed call's item (item/completed); one whose output
// it cut goes with the whole output, kept by callTool, to a sink that
// keeps it.
func (t *run) emitCall(it msp.Item) error {
	p := &msp.ItemParams{Item: it}
	if keeper, ok := t.sink.(OutputSink); ok {
		if out, ok := t.outputs.LoadAndDelete(it.ItemID); ok {
			return keeper.EmitCall(t.emitCtx, p, out.(ToolOutput))
		}
	}
	return t.sink.Emit(t.emitCtx, msp.NotifyItemCompleted, p)
}

// callTool makes one call and returns its closed item and the result the
// model is told. The whole output of one whose item cuts it is kept for
// emitCall, when the sink keeps outputs.
func (t *run) callTool(ctx context.Context, p pendingCall) (msp.Item, provider.ToolResult) {
	ctx, span := t.obs.startTool(ctx, p.info, p.call.ID)
	began := t.r.clock.Now()
	var out ToolOutput
	it, res := t.makeCall(ctx, p, began, &out)
	if _, keeps := t.sink.(OutputSink); keeps && it.Truncated {
		t.outputs.Store(it.ItemID, out)
	}
	t.obs.endTool(span, p.info, it.Status, t.r.clock.Now().Sub(began))
	return it, res
}

// makeCall calls the tool under the runner's ToolTimeout; kept receives
// what it returned.
func (t *run) makeCall(ctx context.Context, p pendingCall, began time.Time, kept *ToolOutput) (msp.Item, provider.ToolResult) {
	ctx, stop := context.WithTimeoutCause(ctx, t.r.cfg.ToolTimeout, ErrToolTimeout)
	out, err := t.spec.Tools.Call(ctx, p.call.Name, p.call.Args)
	if err == nil {
		*kept = out
	}
	ended, cause := ctx.Err() != nil, context.Cause(ctx) // before stop ends ctx
	stop()
	took := t.r.clock.Now().Sub(began)
	switch {
	case err != nil && errors.Is(cause, ErrToolTimeout):
		return t.closeCall(p, took, msp.ItemTimedOut, FailureTimedOut,
			fmt.Sprintf("the call ran past %s", t.r.cfg.ToolTimeout), "")
	case err != nil && ended:
		return t.closeCall(p, took, msp.ItemCancelled, FailureCancelled, "the turn was stopped during the call", "")
	case err != nil:
		return t.closeCall(p, took, msp.ItemFailed, FailureUnavailable, clip(err.Error(), 500), "")
	case out.IsError:
		return t.closeCall(p, took, msp.ItemFailed, FailureToolError, "the tool reported an error", out.Text)
	}
	return t.closeCall(p, took, msp.ItemCompleted, "", "", out.Text)
}

// closeCall builds a call's final item and what the model is told of it:
// the output, or the failure in words.
func (t *run) closeCall(p pendingCall, took time.Duration, status, kind, reason, output string) (msp.Item, provider.ToolResult) {
	it := p.item
	it.Revision++
	it.Status, it.FailureKind, it.FailureReason = status, kind, reason
	it.RecordedAt = t.stamp()
	ms := max(took.Milliseconds(), 0)
	it.DurationMs = &ms
	visible, cut := boundText(output, MaxVisibleOutput)
	it.VisibleOutput, it.Truncated = &visible, cut
	res := CallResult(it)
	res.Name = p.call.Name
	return it, res
}

// CallResult is what the model is told of a closed toolCall item: its
// output, or why there is none. A session's history and a running turn
// tell it alike.
func CallResult(it msp.Item) provider.ToolResult {
	res := provider.ToolResult{CallID: it.CallID, Text: deref(it.VisibleOutput)}
	switch it.Status {
	case msp.ItemCompleted:
	case msp.ItemRejected:
		res.IsError = true
		res.Text = "the call was denied: " + it.FailureReason
	default:
		res.IsError = true
		if it.FailureKind != FailureToolError || res.Text == "" {
			res.Text = it.FailureReason
		}
	}
	if it.Truncated {
		res.Text += "\n[output truncated]"
	}
	return res
}

// boundText cuts s to at most n bytes on a rune boundary.
func boundText(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// stamp is the time a record is written, as items carry it.
func (t *run) stamp() string {
	return t.r.clock.Now().UTC().Format("2006-01-02T15:04:05.000Z")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// toolStep runs the calls a step's answer asked for: recorded before any
// is made (with the checkpoint of the step that follows, so a process
// that dies meanwhile knows the calls were asked for and no request of
// the next step was sent), then made, each result durable as it comes.
// It returns the turn's end when the turn cannot go on.
func (t *run) toolStep(ctx context.Context, res attemptResult, maxTokens int) *Outcome {
	t.obs.endAttempt(observe.OutcomeSuccess, "")
	calls := t.openCalls(t.attempts, res.calls)
	t.gateCalls(calls)
	t.messages = append(t.messages, provider.Message{Role: provider.RoleAssistant, Text: res.text, ToolCalls: res.calls,
		Provider: t.hop.providerID, Reasoning: res.reasoning.blocks})
	events := append(t.takeHeld(), res.reasoning.record()...)
	for _, c := range calls {
		events = append(events, Event{Method: msp.NotifyItemStarted, Params: &msp.ItemParams{Item: c.item}})
		events = append(events, t.approvalEvents(c)...)
	}
	t.step, t.stepBase = t.step+1, t.attempts
	t.hop.base = t.attempts // the next step starts on the entry this one ended on
	cp := t.checkpointAt(t.attempts, t.r.clock.Now(), maxTokens)
	cp.Begun = new(false)
	if err := t.sink.EmitRetry(t.emitCtx, cp, events); err != nil {
		o := t.fail(msp.TurnErrorLog, fmt.Sprintf("writing the session log: %v", err), true)
		return &o
	}
	t.checkpoint = cp
	results, settled, err := t.runCalls(ctx, calls)
	if err != nil {
		o := t.fail(msp.TurnErrorLog, fmt.Sprintf("writing the session log: %v", err), true)
		return &o
	}
	t.messages = append(t.messages, provider.Message{Role: provider.RoleTool, ToolResults: settledOnly(results, settled)})
	if ctx.Err() != nil {
		o := t.interrupted(ctx, false, maxTokens)
		return &o
	}
	return nil
}

// settleOpenCalls closes the calls a lost process recorded and did not
// close; the history it resumes with holds the calls, and their results
// follow them there. A call whose approval was never granted never ran:
// it waits for its approval again (or closes as its resolution says). A
// call that was approved, or needed no approval, may have run, so its
// effect is unknown: a tool its server calls read-only or idempotent runs
// again; any other is not run twice, its item fails, saying what stopped
// the process (stoppedBy, see Resumption.StoppedBy), and the model is
// told the outcome is unknown.
func (t *run) settleOpenCalls(ctx context.Context, open []msp.Item, stoppedBy string) error {
	if len(open) == 0 {
		return nil
	}
	results := make([]provider.ToolResult, len(open))
	settled := make([]bool, len(open))
	var again []pendingCall
	var at []int
	for i, it := range open {
		p := t.reopen(it)
		done, res, refused := t.resumeApproval(&p)
		switch {
		case refused:
		case p.gate == GateAsk || p.info.ReplaySafe:
			again, at = append(again, p), append(at, i)
			continue
		default:
			done, res = t.closeCall(p, 0, msp.ItemFailed, FailureUnknownOutcome,
				cmp.Or(stoppedBy, "the server stopped")+" during the call, so whether it took effect is unknown; it was not run again", "")
			done.DurationMs = nil
		}
		if err := t.sink.Emit(t.emitCtx, msp.NotifyItemCompleted, &msp.ItemParams{Item: done}); err != nil {
			return err
		}
		results[i], settled[i] = res, true
	}
	if len(again) > 0 {
		rerun, ok, err := t.runCalls(ctx, again)
		if err != nil {
			return err
		}
		for j, i := range at {
			results[i], settled[i] = rerun[j], ok[j]
		}
	}
	t.messages = append(t.messages, provider.Message{Role: provider.RoleTool, ToolResults: settledOnly(results, settled)})
	return nil
}

// reopen is the pending call an open toolCall item records, described as
// the toolbox describes its tool today.
func (t *run) reopen(it msp.Item) pendingCall {
	name := tool.ModelName(it.Server, it.Tool)
	p := pendingCall{call: provider.ToolCall{ID: it.CallID, Name: name, Args: deref(it.Args)}, item: it,
		info: ToolInfo{Server: it.Server, Tool: it.Tool}}
	if t.spec.Tools != nil {
		if info, ok := t.spec.Tools.Lookup(name); ok && info.Server == it.Server && info.Tool == it.Tool {
			p.info = info
		}
	}
	return p
}

// resumeApproval decides how an open call of a lost process goes on, by
// its approval. Still pending, the call never ran: it waits again (its
// gate GateAsk, its deadline counted from when it was asked for).
// Approved, or needing none, it may have run, and its gate stays
// GateRun. Kept from running (denied, timed out, stopped), it is closed
// unrun: refused, with the item and what the model is told.
func (t *run) resumeApproval(p *pendingCall) (done msp.Item, res provider.ToolResult, refused bool) {
	if p.item.ApprovalID == "" || t.spec.Approvals == nil {
		return msp.Item{}, provider.ToolResult{}, false
	}
	r, resolved, known := t.spec.Approvals.Lookup(p.item.ApprovalID)
	if t.spec.Resume != nil && t.spec.Resume.Unapproved[p.item.ItemID] {
		resolved = false // decided since the process stopped: the wait returns at once
	}
	switch {
	case !known:
		// Its approval was never recorded, so never granted: the call
		// did not run, and is not run now.
		r = Resolution{Decision: msp.DecisionAbort}
	case !resolved:
		p.gate, p.deadline = GateAsk, t.deadlineOf(p.item)
		return msp.Item{}, provider.ToolResult{}, false
	case r.Allows():
		return msp.Item{}, provider.ToolResult{}, false
	}
	done, res = t.refuse(*p, r)
	return done, res, true
}
