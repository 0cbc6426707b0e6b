package turn_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/tool"
	"mspd/turn"
	"mspd/turn/turntest"
)

// fakeTool is one tool of a fakeToolbox.
type fakeTool struct {
	info turn.ToolInfo
	// required are the argument fields Check insists on.
	required []string
	run      func(ctx context.Context, args string) (turn.ToolOutput, error)
}

// fakeToolbox is a turn.Toolbox that records every call and, at each
// call, whether its item was already durable in sink.
type fakeToolbox struct {
	sink  *turntest.Sink
	tools map[string]fakeTool

	mu      sync.Mutex
	calls   []string // name(args) of each call made
	durable []bool   // whether the call's item/started was in the sink when it was made
}

func newToolbox(sink *turntest.Sink, tools ...fakeTool) *fakeToolbox {
	b := &fakeToolbox{sink: sink, tools: map[string]fakeTool{}}
	for _, t := range tools {
		b.tools[tool.ModelName(t.info.Server, t.info.Tool)] = t
	}
	return b
}

func (b *fakeToolbox) Specs() []provider.ToolSpec {
	var out []provider.ToolSpec
	for name := range b.tools {
		out = append(out, provider.ToolSpec{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)})
	}
	return out
}

func (b *fakeToolbox) Lookup(name string) (turn.ToolInfo, bool) {
	t, ok := b.tools[name]
	return t.info, ok
}

func (b *fakeToolbox) Check(name, args string) error {
	var m map[string]any
	if err := json.Unmarshal([]byte(args), &m); err != nil {
		return err
	}
	for _, f := range b.tools[name].required {
		if _, ok := m[f]; !ok {
			return fmt.Errorf("missing property %q", f)
		}
	}
	return nil
}

func (b *fakeToolbox) Call(ctx context.Context, name, args string) (turn.ToolOutput, error) {
	durable := false
	for _, p := range turntest.Of[*msp.ItemParams](b.sink, msp.NotifyItemStarted) {
		if p.Item.Kind == msp.ItemToolCall && p.Item.Args != nil && *p.Item.Args == args {
			durable = true
		}
	}
	b.mu.Lock()
	b.calls = append(b.calls, name+args)
	b.durable = append(b.durable, durable)
	b.mu.Unlock()
	return b.tools[name].run(ctx, args)
}

func (b *fakeToolbox) made() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.calls...)
}

// echoTool returns its arguments prefixed with its name.
func echoTool(server, tool string, replaySafe bool) fakeTool {
	return fakeTool{info: turn.ToolInfo{Server: server, Tool: tool, ReplaySafe: replaySafe},
		run: func(_ context.Context, args string) (turn.ToolOutput, error) {
			return turn.ToolOutput{Text: tool + " got " + args}, nil
		}}
}

// calls answers with tool calls (and optional text), finishing toolCalls.
func calls(text string, cs ...provider.ToolCall) reply {
	return func(_ context.Context, _ provider.Request, onText func(string)) (provider.Response, error) {
		if text != "" {
			onText(text)
		}
		return provider.Response{FinishReason: provider.FinishToolCalls, ToolCalls: cs, Usage: usage(10, 3)}, nil
	}
}

func call(id, server, name, args string) provider.ToolCall {
	return provider.ToolCall{ID: id, Name: tool.ModelName(server, name), Args: args}
}

func toolItems(h *harness, method string) []msp.Item {
	var out []msp.Item
	for _, p := range turntest.Of[*msp.ItemParams](h.sink, method) {
		if p.Item.Kind == msp.ItemToolCall {
			out = append(out, p.Item)
		}
	}
	return out
}

func TestThreeStepTurnCountsEveryRequest(t *testing.T) {
	h := newHarness(t, nil,
		calls("Let me check.", call("c1", "files", "read", `{"path":"a"}`)),
		fail(status(429), nil),
		calls("", call("c2", "files", "read", `{"path":"b"}`)),
		answer("Both read.", provider.FinishStop, usage(30, 4)),
	)
	box := newToolbox(h.sink, echoTool("files", "read", true))
	sp := spec()
	sp.Tools = box
	o := h.run(t, context.Background(), sp, nil)

	c := o.Completed
	if c.Terminal != msp.TerminalCompleted || o.Answer != "Both read." {
		t.Fatalf("terminal %+v answer %q; events %s", c, o.Answer, h.sink.Methods())
	}
	if c.Attempts.Count != 4 {
		t.Errorf("attempts.count = %d, want 4 (every request of every step)", c.Attempts.Count)
	}
	if c.Attempts.OutputTokens != 3+3+4 || !c.Attempts.UsageComplete {
		t.Errorf("attempts %+v: want outputTokens 10, usage complete (a 429 generated nothing)", c.Attempts)
	}
	// The second step's retry is announced as that step's attempt 1 of
	// its own call.
	n := modelNotices(h)
	if len(n) != 1 || n[0].Attempt != 1 || n[0].NextAttempt != 2 || n[0].HTTPStatus != 429 {
		t.Fatalf("model notices %+v", n)
	}
	if got := box.made(); strings.Join(got, ";") != `files__read{"path":"a"};files__read{"path":"b"}` {
		t.Fatalf("calls made %q", got)
	}
	for i, d := range box.durable {
		if !d {
			t.Errorf("call %d was made before its toolCall item was durable", i)
		}
	}
	started, done := toolItems(h, msp.NotifyItemStarted), toolItems(h, msp.NotifyItemCompleted)
	if len(started) != 2 || len(done) != 2 {
		t.Fatalf("toolCall items: %d started, %d completed; events %s", len(started), len(done), h.sink.Methods())
	}
	first := started[0]
	if first.Status != msp.ItemInProgress || first.Tool != "read" || first.Server != "files" || first.CallID != "c1" || *first.Args != `{"path":"a"}` {
		t.Errorf("started item %+v", first)
	}
	if d := done[1]; d.Status != msp.ItemCompleted || *d.VisibleOutput != `read got {"path":"b"}` || d.DurationMs == nil {
		t.Errorf("completed item %+v", d)
	}
	if started[0].ItemID == started[1].ItemID {
		t.Error("two calls share an item id")
	}

	// Each request after a step carries that step's calls and results,
	// and the results were durable before it was sent.
	reqs := h.model.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	last := reqs[3].Messages
	want := []string{"user:hello", "assistant:Let me check.+c1", "tool:c1=read got {\"path\":\"a\"}", "assistant:+c2", "tool:c2=read got {\"path\":\"b\"}"}
	if got := describe(last); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("last request's history\n got %q\nwant %q", got, want)
	}
	if len(reqs[3].Tools) != 1 || reqs[3].Attempt != 4 {
		t.Errorf("last request: tools %+v attempt %d", reqs[3].Tools, reqs[3].Attempt)
	}
	// The turn's messages for the session's history, answer last.
	if got := describe(o.Messages); len(got) != 5 || got[4] != "assistant:Both read." {
		t.Errorf("outcome messages %q", got)
	}
	// Every attempt has its own answer item: no id repeats across steps.
	seen := map[string]bool{}
	for _, p := range turntest.Of[*msp.ItemParams](h.sink, msp.NotifyItemStarted) {
		if seen[p.Item.ItemID] {
			t.Errorf("item %s opened twice", p.Item.ItemID)
		}
		seen[p.Item.ItemID] = true
	}
}

// describe renders messages as role:text+callIDs, or tool:id=text.
func describe(msgs []provider.Message) []string {
	var out []string
	for _, m := range msgs {
		if m.Role == provider.RoleTool {
			for _, r := range m.ToolResults {
				out = append(out, fmt.Sprintf("tool:%s=%s", r.CallID, r.Text))
			}
			continue
		}
		s := m.Role + ":" + m.Text
		for _, c := range m.ToolCalls {
			s += "+" + c.ID
		}
		out = append(out, s)
	}
	return out
}

func TestInvalidToolArgumentsRetryTheStep(t *testing.T) {
	h := newHarness(t, nil,
		calls("", call("c1", "files", "read", `{"nope":1}`)),
		calls("", call("c2", "files", "read", `{"path":`)),
		calls("", call("c3", "files", "write", `{}`)),
		calls("", call("c4", "files", "read", `{"path":"a"}`)),
		ok("done"),
	)
	read := echoTool("files", "read", true)
	read.required = []string{"path"}
	box := newToolbox(h.sink, read)
	sp := spec()
	sp.Tools = box
	o := h.run(t, context.Background(), sp, nil)
	if o.Completed.Terminal != msp.TerminalCompleted || o.Completed.Attempts.Count != 5 {
		t.Fatalf("terminal %+v; events %s", o.Completed, h.sink.Methods())
	}
	n := turnNotices(h)
	if len(n) != 3 {
		t.Fatalf("%d turn notices, want 3", len(n))
	}
	for i, want := range []string{`tool "files__read": missing property "path"`, `tool "files__read": arguments are not JSON`, `unknown tool "files__write"`} {
		if !strings.Contains(n[i].Reason, want) {
			t.Errorf("notice %d reason %q, want it to say %q", i, n[i].Reason, want)
		}
	}
	if got := box.made(); len(got) != 1 || got[0] != `files__read{"path":"a"}` {
		t.Errorf("calls made %q: only the valid one may run", got)
	}
	if started := toolItems(h, msp.NotifyItemStarted); len(started) != 1 {
		t.Errorf("%d toolCall items: a rejected call is never recorded as made", len(started))
	}
}

func TestParallelCallsRunAtOnceAndAnswerInOrder(t *testing.T) {
	h := newHarness(t, nil,
		calls("", call("a", "s", "slow", `{"n":1}`), call("b", "s", "slow", `{"n":2}`), call("c", "s", "slow", `{"n":3}`)),
		ok("done"),
	)
	var started sync.WaitGroup
	started.Add(3)
	release := make(chan struct{})
	var order []string
	var mu sync.Mutex
	slow := fakeTool{info: turn.ToolInfo{Server: "s", Tool: "slow"}, run: func(_ context.Context, args string) (turn.ToolOutput, error) {
		started.Done()
		<-release // all three are running at once, or this never returns
		if args != `{"n":3}` {
			<-release
		}
		mu.Lock()
		order = append(order, args)
		mu.Unlock()
		return turn.ToolOutput{Text: "r" + args}, nil
	}}
	go func() {
		started.Wait()
		close(release)
	}()
	sp := spec()
	sp.Tools = newToolbox(h.sink, slow)
	o := h.run(t, context.Background(), sp, nil)
	if o.Completed.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %+v", o.Completed)
	}
	got := describe(h.model.requests()[1].Messages)
	want := []string{"user:hello", "assistant:+a+b+c", `tool:a=r{"n":1}`, `tool:b=r{"n":2}`, `tool:c=r{"n":3}`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("history\n got %q\nwant %q", got, want)
	}
}

func TestStepLimitEndsARunawayLoop(t *testing.T) {
	h := newHarness(t, nil, calls("", call("x", "s", "t", `{}`)))
	h.runner = turn.NewRunner(turn.Config{Model: h.model, Engine: h.engine(), Policy: h.policy(), MaxSteps: 3})
	box := newToolbox(h.sink, echoTool("s", "t", true))
	sp := spec()
	sp.Tools = box
	o := h.run(t, context.Background(), sp, nil)
	e := o.Completed.Error
	if o.Completed.Terminal != msp.TerminalFailed || e == nil || e.Kind != msp.TurnErrorStepLimit || !strings.Contains(e.Message, "3 steps") {
		t.Fatalf("terminal %+v error %+v", o.Completed, e)
	}
	if len(box.made()) != 2 || o.Completed.Attempts.Count != 3 {
		t.Errorf("%d calls, %d attempts: want 2 and 3 (the last step's calls are not run)", len(box.made()), o.Completed.Attempts.Count)
	}
}

func TestToolFailuresAreToldToTheModel(t *testing.T) {
	h := newHarness(t, nil,
		calls("", call("e", "s", "broken", `{}`), call("t", "s", "hang", `{}`), call("u", "s", "gone", `{}`)),
		ok("sorry"),
	)
	h.runner = turn.NewRunner(turn.Config{Model: h.model, Engine: h.engine(), Policy: h.policy(), ToolTimeout: 50 * time.Millisecond})
	sp := spec()
	sp.Tools = newToolbox(h.sink,
		fakeTool{info: turn.ToolInfo{Server: "s", Tool: "broken"}, run: func(context.Context, string) (turn.ToolOutput, error) {
			return turn.ToolOutput{Text: "disk full", IsError: true}, nil
		}},
		fakeTool{info: turn.ToolInfo{Server: "s", Tool: "hang"}, run: func(ctx context.Context, _ string) (turn.ToolOutput, error) {
			<-ctx.Done()
			return turn.ToolOutput{}, ctx.Err()
		}},
		fakeTool{info: turn.ToolInfo{Server: "s", Tool: "gone"}, run: func(context.Context, string) (turn.ToolOutput, error) {
			return turn.ToolOutput{}, errors.New("server s is not running")
		}},
	)
	o := h.run(t, context.Background(), sp, nil)
	if o.Completed.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %+v: a failed tool is the model's to handle, not the turn's", o.Completed)
	}
	done := toolItems(h, msp.NotifyItemCompleted)
	status := map[string]string{}
	for _, it := range done {
		status[it.Tool] = it.Status + "/" + it.FailureKind
	}
	want := map[string]string{"broken": "failed/tool_error", "hang": "timedOut/timed_out", "gone": "failed/unavailable"}
	for k, v := range want {
		if status[k] != v {
			t.Errorf("%s: %s, want %s", k, status[k], v)
		}
	}
	got := describe(h.model.requests()[1].Messages)
	if !strings.Contains(got[2], "disk full") || !strings.Contains(got[3], "ran past") || !strings.Contains(got[4], "not running") {
		t.Errorf("the model was told %q", got)
	}
	for _, r := range h.model.requests()[1].Messages[2].ToolResults {
		if !r.IsError {
			t.Errorf("result %+v not marked an error", r)
		}
	}
}

func TestStopDuringACallCancelsIt(t *testing.T) {
	h := newHarness(t, nil, calls("", call("x", "s", "hang", `{}`)))
	ctx, cancel := context.WithCancel(context.Background())
	sp := spec()
	sp.Tools = newToolbox(h.sink, fakeTool{info: turn.ToolInfo{Server: "s", Tool: "hang"}, run: func(cctx context.Context, _ string) (turn.ToolOutput, error) {
		cancel()
		<-cctx.Done()
		return turn.ToolOutput{}, cctx.Err()
	}})
	o := h.run(t, ctx, sp, nil)
	if o.Completed.Terminal != msp.TerminalCancelled {
		t.Fatalf("terminal %+v", o.Completed)
	}
	if done := toolItems(h, msp.NotifyItemCompleted); len(done) != 1 || done[0].Status != msp.ItemCancelled {
		t.Fatalf("items %+v", done)
	}
}

func TestHostStopLetsACallFinish(t *testing.T) {
	h := newHarness(t, nil, calls("", call("x", "s", "t", `{}`)))
	ctx, cancel := context.WithCancelCause(context.Background())
	sp := spec()
	sp.Tools = newToolbox(h.sink, fakeTool{info: turn.ToolInfo{Server: "s", Tool: "t"}, run: func(cctx context.Context, _ string) (turn.ToolOutput, error) {
		cancel(turn.ErrHostStopping)
		if cctx.Err() != nil {
			return turn.ToolOutput{}, cctx.Err()
		}
		return turn.ToolOutput{Text: "done"}, nil
	}})
	o := h.run(t, ctx, sp, nil)
	if o.Stopped == nil || o.Stopped.Attempts != 1 || o.Stopped.StepBase != 1 || o.Stopped.Step != 1 || o.Stopped.Lost {
		t.Fatalf("stopped %+v: want the checkpoint before step 2's first request", o.Stopped)
	}
	if done := toolItems(h, msp.NotifyItemCompleted); len(done) != 1 || done[0].Status != msp.ItemCompleted {
		t.Fatalf("items %+v: a stopping host lets the call finish and records it", done)
	}
}

func TestResumeSettlesOpenCallsByTheReplayRule(t *testing.T) {
	h := newHarness(t, nil, ok("after the restart"))
	box := newToolbox(h.sink, echoTool("s", "read", true), echoTool("s", "charge", false))
	open := func(id, tool string) msp.Item {
		turnID, args := "t1", `{"id":"`+id+`"}`
		return msp.Item{ItemID: "item-" + id, Kind: msp.ItemToolCall, Revision: 1, Status: msp.ItemInProgress,
			TurnID: &turnID, Tool: tool, Server: "s", CallID: id, Args: &args}
	}
	sp := spec()
	sp.Tools = box
	// The history a load folds holds the calls from their start.
	sp.History = append(sp.History,
		provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{call("r", "s", "read", `{"id":"r"}`)}},
		provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{call("c", "s", "charge", `{"id":"c"}`)}})
	sp.Resume = &turn.Resumption{Attempts: 2, Step: 1, StepBase: 2, StartedAt: t0, StoppedBy: "node n1 stopped",
		OpenCalls: []msp.Item{open("r", "read"), open("c", "charge")}}
	o := h.run(t, context.Background(), sp, nil)
	if o.Completed.Terminal != msp.TerminalCompleted || o.Completed.Attempts.Count != 3 {
		t.Fatalf("terminal %+v", o.Completed)
	}
	if got := box.made(); len(got) != 1 || got[0] != `s__read{"id":"r"}` {
		t.Fatalf("calls made %q: only the read-only call may run again", got)
	}
	done := toolItems(h, msp.NotifyItemCompleted)
	byTool := map[string]msp.Item{}
	for _, it := range done {
		byTool[it.Tool] = it
	}
	if c := byTool["charge"]; c.Status != msp.ItemFailed || c.FailureKind != turn.FailureUnknownOutcome || c.Revision != 2 ||
		!strings.HasPrefix(c.FailureReason, "node n1 stopped during the call") {
		t.Errorf("charge item %+v", c)
	}
	if r := byTool["read"]; r.Status != msp.ItemCompleted || r.Revision != 2 {
		t.Errorf("read item %+v", r)
	}
	got := describe(h.model.requests()[0].Messages)
	if len(got) != 4 || !strings.Contains(got[3], "c=node n1 stopped during the call") {
		t.Errorf("the model was told %q", got)
	}
	if n := turnNotices(h); len(n) != 0 {
		t.Errorf("notices %+v: nothing was lost, no request is retried", n)
	}
}

// keepingSink is a turntest.Sink that keeps whole outputs, as a session does.
type keepingSink struct {
	*turntest.Sink
	mu   sync.Mutex
	kept map[string]turn.ToolOutput // by item id
}

func (k *keepingSink) EmitCall(ctx context.Context, p *msp.ItemParams, out turn.ToolOutput) error {
	k.mu.Lock()
	k.kept[p.Item.ItemID] = out
	k.mu.Unlock()
	return k.Emit(ctx, msp.NotifyItemCompleted, p)
}

// TestAWholeOutputGoesToAnOutputSink: a call whose output its item cuts
// at MaxVisibleOutput is written through EmitCall with the whole output
// (and the toolbox's word that it was cut itself); one that fits is
// written as before. The model reads the item's part either way.
func TestAWholeOutputGoesToAnOutputSink(t *testing.T) {
	whole := strings.Repeat("é", 50<<10) // 100 KiB, every cut point inside a character but the even ones
	h := newHarness(t, nil,
		calls("", call("big", "s", "big", `{}`), call("small", "s", "echo", `{}`)),
		ok("done"),
	)
	sp := spec()
	sp.Tools = newToolbox(h.sink,
		fakeTool{info: turn.ToolInfo{Server: "s", Tool: "big"}, run: func(context.Context, string) (turn.ToolOutput, error) {
			return turn.ToolOutput{Text: whole, Incomplete: true}, nil
		}},
		echoTool("s", "echo", true))
	keeper := &keepingSink{Sink: h.sink, kept: map[string]turn.ToolOutput{}}
	o := h.runner.Run(context.Background(), sp, keeper)
	if o.Completed.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %+v", o.Completed)
	}
	done := toolItems(h, msp.NotifyItemCompleted)
	if len(done) != 2 || len(keeper.kept) != 1 {
		t.Fatalf("%d items completed, %d outputs kept", len(done), len(keeper.kept))
	}
	for _, it := range done {
		out, kept := keeper.kept[it.ItemID]
		switch it.Tool {
		case "big":
			if !kept || out.Text != whole || !out.Incomplete {
				t.Errorf("big: kept %v, %d bytes, incomplete %v", kept, len(out.Text), out.Incomplete)
			}
			if !it.Truncated || len(*it.VisibleOutput) != turn.MaxVisibleOutput || !strings.HasPrefix(whole, *it.VisibleOutput) {
				t.Errorf("big: item truncated %v, visible %d bytes", it.Truncated, len(*it.VisibleOutput))
			}
		case "echo":
			if kept || it.Truncated {
				t.Errorf("echo: kept %v, truncated %v", kept, it.Truncated)
			}
		}
	}
	told := h.model.requests()[1].Messages[2].ToolResults
	if len(told) != 2 || len(told[0].Text) > turn.MaxVisibleOutput+len("\n[output truncated]") || !strings.HasSuffix(told[0].Text, "[output truncated]") {
		t.Errorf("the model was told %d results, the first %d bytes", len(told), len(told[0].Text))
	}
}
