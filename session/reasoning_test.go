package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/store"
	"mspd/turn"
)

// effortModel answers every request and records the effort each asked for.
type effortModel struct {
	mu      sync.Mutex
	efforts []string
}

func (m *effortModel) System() string { return "effort" }

func (m *effortModel) Stream(_ context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	m.mu.Lock()
	m.efforts = append(m.efforts, req.ReasoningEffort)
	m.mu.Unlock()
	onText("ok")
	return provider.Response{FinishReason: provider.FinishStop, Usage: &provider.Usage{InputTokens: 1, OutputTokens: 1}}, nil
}

func (m *effortModel) asked() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.efforts)
}

// TestSetReasoningEffort: session/setReasoningEffort is a command — its
// replay answers the recorded ack and writes nothing more — durable with
// one session/reasoningEffortChanged, carried by the Session object of a
// read (and after a restart, and into a fork); turns launched after it
// run with the default, a turn's own effort overrides it for that turn,
// and a tier outside the vocabulary is refused invalidParams naming the
// field, on the command and on turn/start.
func TestSetReasoningEffort(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	model := &effortModel{}
	m := newManager(t, st, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)

	runTurn(t, m, sub, textTurn(sid, "before any default"))
	set := mustJSON(msp.SessionSetReasoningEffortParams{CommandID: cmdID(), ReasoningEffort: msp.EffortHigh, SessionID: sid})
	ack, err := m.SetReasoningEffort(ctx, set)
	if err != nil {
		t.Fatal(err)
	}
	again, err := m.SetReasoningEffort(ctx, set)
	if err != nil || string(again) != string(ack) {
		t.Fatalf("replay: %s, %v; want the recorded %s", again, err, ack)
	}
	var res msp.SessionSetReasoningEffortResult
	if json.Unmarshal(ack, &res); res.Status != msp.StatusAccepted {
		t.Errorf("ack %s", ack)
	}
	changed := of[msp.SessionReasoningEffortChangedParams](t, sub, msp.NotifySessionReasoningEffortChanged)
	if len(changed) != 1 || changed[0].ReasoningEffort != msp.EffortHigh || changed[0].Source != msp.ReasoningSourceUser || changed[0].SourceRange == nil {
		t.Fatalf("session/reasoningEffortChanged: %+v; want exactly one, durable", changed)
	}
	runTurn(t, m, sub, textTurn(sid, "with the default"))
	own := textTurn(sid, "with its own")
	own.ReasoningEffort = msp.EffortNone
	runTurn(t, m, sub, own)
	runTurn(t, m, sub, textTurn(sid, "with the default again"))
	if got, want := model.asked(), []string{"", msp.EffortHigh, msp.EffortNone, msp.EffortHigh}; !slices.Equal(got, want) {
		t.Errorf("efforts asked %q, want %q", got, want)
	}

	wantDefault := func(s msp.Session, where string) {
		t.Helper()
		if s.ReasoningEffort == nil || *s.ReasoningEffort != (msp.ReasoningEffortState{ReasoningEffort: msp.EffortHigh, Source: msp.ReasoningSourceUser}) {
			t.Errorf("%s: session reasoningEffort %+v", where, s.ReasoningEffort)
		}
	}
	snap, err := m.ReadSession(ctx, mustJSON(msp.SessionReadParams{SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	wantDefault(snap.Session, "session/read")

	for _, bad := range []json.RawMessage{
		mustJSON(msp.SessionSetReasoningEffortParams{CommandID: cmdID(), ReasoningEffort: "extreme", SessionID: sid}),
	} {
		_, err := m.SetReasoningEffort(ctx, bad)
		wantFieldError(t, err, "reasoningEffort")
	}
	badTurn := textTurn(sid, "never runs")
	badTurn.CommandID, badTurn.ReasoningEffort = cmdID(), "HIGH"
	_, _, err = m.StartTurn(ctx, nil, mustJSON(badTurn))
	wantFieldError(t, err, "reasoningEffort")

	// Durable: a restarted manager reads it back, and a fork keeps it.
	m.Close()
	m2 := newManager(t, st, model, mgrOpts{})
	snap, err = m2.ReadSession(ctx, mustJSON(msp.SessionReadParams{SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	wantDefault(snap.Session, "after a restart")
	if again, err := m2.SetReasoningEffort(ctx, set); err != nil || string(again) != string(ack) {
		t.Fatalf("replay after a restart: %s, %v", again, err)
	}
	raw, _, err := m2.ForkSession(ctx, newRecSub(), mustJSON(msp.SessionForkParams{CommandID: cmdID(), SessionID: sid, ExcludeItems: true}))
	if err != nil {
		t.Fatal(err)
	}
	var fork msp.SessionSnapshot
	json.Unmarshal(raw, &fork)
	wantDefault(fork.Session, "the fork")
	if n := countRecords(t, st, sid, msp.NotifySessionReasoningEffortChanged); n != 1 {
		t.Errorf("%d session/reasoningEffortChanged records, want 1", n)
	}
}

func wantFieldError(t *testing.T, err error, field string) {
	t.Helper()
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindInvalidParams || me.Data.Details["field"] != field {
		t.Errorf("error %v, want invalidParams naming %s", err, field)
	}
}

// countRecords counts the records of method in a session's log.
func countRecords(t *testing.T, st store.Store, sid, method string) int {
	t.Helper()
	n := 0
	for _, r := range records(t, st, sid) {
		if r.Method == method {
			n++
		}
	}
	return n
}

// thinkingModel is a toolModel that reasons first: every response streams
// "I should <turn text>." as its reasoning and returns it as a thinking
// block signed "sig-<n>" (n counting responses), as Anthropic's are.
type thinkingModel struct {
	toolModel
	n atomic.Int32
}

func (m *thinkingModel) Stream(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	thought := "I should " + provider.LastUserText(req.Messages) + "."
	parts := provider.NewReasoningParts(req)
	for _, w := range provider.SplitWords(thought) {
		parts.Add("0", w)
	}
	resp, err := m.toolModel.Stream(ctx, req, onText)
	resp.Reasoning = []provider.Reasoning{{Kind: provider.ReasoningThinking, Text: thought, Signature: fmt.Sprintf("sig-%d", m.n.Add(1))}}
	return resp, err
}

// TestReasoningSurvivesARestartMidTurn: a step that reasoned and called a
// tool waiting for approval is cut off by its process stopping (gracefully,
// or dying); the next process resumes the turn and its next request sends
// the step back with its thinking block and signature, read from the log.
// The reasoning item streamed apart from the answer and is durable: the
// session's items read back the same after another restart, and a later
// turn sends no reasoning of the finished one.
func TestReasoningSurvivesARestartMidTurn(t *testing.T) {
	for _, dies := range []bool{false, true} {
		t.Run(map[bool]string{false: "graceful", true: "dies"}[dies], func(t *testing.T) {
			ctx := context.Background()
			tools := newToolServers(t)
			model := &thinkingModel{toolModel: toolModel{server: "t"}}
			st := openStore(t)
			cs := &crashStore{Store: st}
			opts := mgrOpts{tools: tools.box}
			m := newManager(t, cs, model, opts)
			sub := newAskSub()
			sid := startSession(t, m, sub)
			ack := startTurn(t, m, textTurn(sid, `call append {"text":"a"}`))
			sub.waitAsked(t, 1)
			cs.dead.Store(dies)
			m.Close()

			m = newManager(t, st, model, opts)
			sub2 := newAskSub()
			subscribe(t, m, sub2, sid)
			req, _ := sub2.waitAsked(t, 1)
			if _, err := decide(m, req, cmdID(), turn.ChoiceApprove, nil); err != nil {
				t.Fatal(err)
			}
			if c := sub2.waitTerminal(t, ack.TurnID); c.Terminal != msp.TerminalCompleted {
				t.Fatalf("terminal %+v", c)
			}
			model.mu.Lock()
			resumed := model.reqs[len(model.reqs)-1]
			model.mu.Unlock()
			want := []provider.Reasoning{{Kind: provider.ReasoningThinking, Text: `I should call append {"text":"a"}.`, Signature: "sig-1"}}
			steps := provider.Steps(resumed)
			if len(steps) != 3 || steps[1].Role != provider.RoleAssistant || len(steps[1].ToolCalls) != 1 || !reflect.DeepEqual(steps[1].Reasoning, want) {
				t.Fatalf("the resumed request's history %+v; want the step with %+v", steps, want)
			}

			// Durable, and read back alike after another restart.
			items := func() []msp.Item {
				t.Helper()
				raw, _, err := m.ResumeSession(ctx, newRecSub(), mustJSON(msp.SessionResumeParams{CommandID: cmdID(), SessionID: sid}))
				if err != nil {
					t.Fatal(err)
				}
				var snap msp.SessionSnapshot
				json.Unmarshal(raw, &snap)
				return snap.History.Items
			}
			before := items()
			var kinds []string
			var reasoning []msp.Item
			for _, it := range before {
				kinds = append(kinds, it.Kind+":"+it.Status)
				if it.Kind == msp.ItemReasoning {
					reasoning = append(reasoning, it)
				}
			}
			// The first process's reasoning item, then (resumed) the
			// call, then the answer step's reasoning and answer.
			wantKinds := []string{"userMessage:completed", "reasoning:completed", "toolCall:completed", "reasoning:completed", "agentMessage:completed"}
			if !slices.Equal(kinds, wantKinds) {
				t.Fatalf("items %q, want %q", kinds, wantKinds)
			}
			if !slices.Equal(reasoning[0].Summary, []string{want[0].Text}) || reasoning[0].Text != nil {
				t.Errorf("reasoning item %+v", reasoning[0])
			}
			m.Close()
			m = newManager(t, st, model, opts)
			if after := items(); !reflect.DeepEqual(after, before) {
				t.Errorf("items after a restart differ:\n got %+v\nwant %+v", after, before)
			}
			sub3 := newRecSub()
			subscribe(t, m, sub3, sid)
			runTurn(t, m, sub3, textTurn(sid, "thanks"))
			for _, msg := range model.toolModel.lastRequest() {
				if len(msg.Reasoning) > 0 {
					t.Errorf("a later turn sent the finished turn's reasoning: %+v", msg)
				}
			}
			if n := countRecords(t, st, sid, turn.MethodReasoning); n != 1 {
				t.Errorf("%d reasoning records, want 1 (the tool step's)", n)
			}
		})
	}
}

// lastRequest is the history of the last request.
func (m *toolModel) lastRequest() []provider.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reqs[len(m.reqs)-1]
}

// pacedThinker streams what it is fed: "r<n>:text" as reasoning part n,
// anything else as the answer's text; a closed feed ends the answer.
type pacedThinker struct{ feed chan string }

func (pacedThinker) System() string { return "paced" }

func (m pacedThinker) Stream(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	parts := provider.NewReasoningParts(req)
	for {
		select {
		case s, ok := <-m.feed:
			if !ok {
				return provider.Response{FinishReason: provider.FinishStop, Usage: &provider.Usage{InputTokens: 1, OutputTokens: 1}}, nil
			}
			if len(s) > 3 && s[0] == 'r' && s[2] == ':' {
				parts.Add(s[1:2], s[3:])
				continue
			}
			onText(s)
		case <-ctx.Done():
			return provider.Response{}, ctx.Err()
		}
	}
}

// TestStreamingReasoningSurvivesACrash: a reasoning item streams its
// summary parts as item/delta fields summary.n; a resume's inline items
// show it as far as it streamed, a text checkpoint saves its summary
// (item/updated), and a process that dies mid-reasoning leaves it to the
// next, which closes it failed with the summary saved.
func TestStreamingReasoningSurvivesACrash(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	cs := &crashStore{Store: st}
	clock := &fakeNow{t: time.Now()}
	model := pacedThinker{feed: make(chan string)}
	m := newManager(t, cs, model, mgrOpts{now: clock.now})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	startTurn(t, m, textTurn(sid, "think"))
	model.feed <- "r0:First "
	deltas := sub.waitCount(t, msp.NotifyItemDelta, 1)
	if d := params[msp.ItemDeltaParams](t, deltas[0].Frame); d.Field != "summary.0" || d.Delta != "First " {
		t.Fatalf("delta %+v", d)
	}
	raw, _, err := m.ResumeSession(ctx, newRecSub(), mustJSON(msp.SessionResumeParams{CommandID: cmdID(), SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	var snap msp.SessionSnapshot
	json.Unmarshal(raw, &snap)
	last := snap.History.Items[len(snap.History.Items)-1]
	if last.Kind != msp.ItemReasoning || last.Status != msp.ItemInProgress || !slices.Equal(last.Summary, []string{"First "}) || last.Text != nil {
		t.Fatalf("the open reasoning item as a resume shows it: %+v", last)
	}
	clock.advance(1500 * time.Millisecond)
	model.feed <- "r1:Second"
	updated := sub.waitCount(t, msp.NotifyItemUpdated, 1)
	it := params[msp.ItemParams](t, updated[0].Frame).Item
	if it.Kind != msp.ItemReasoning || it.Revision != 2 || !slices.Equal(it.Summary, []string{"First ", "Second"}) || it.Text != nil {
		t.Fatalf("item/updated %+v", it)
	}
	model.feed <- "r1: lost" // not saved: lost with the process
	sub.waitCount(t, msp.NotifyItemDelta, 3)
	cs.dead.Store(true)
	m.Close()

	m2 := newManager(t, st, pacedThinker{feed: make(chan string)}, mgrOpts{})
	defer m2.Close()
	var cut *msp.Item
	for _, r := range records(t, st, sid) {
		if r.Method == msp.NotifyItemCompleted {
			if p := recordParams[msp.ItemParams](t, r); p.Item.ItemID == it.ItemID {
				cut = &p.Item
			}
		}
	}
	if cut == nil || cut.Status != msp.ItemFailed || !slices.Equal(cut.Summary, []string{"First ", "Second"}) || cut.Text != nil || !cut.Truncated {
		t.Fatalf("the cut reasoning item after the restart: %+v", cut)
	}
}

// TestRebuildKeepsSummaryParts: a follower rebuilds an open reasoning
// item from its kept deltas field by field: the parts streamed after its
// saved record are appended to the saved summary, part by part, and no
// text member appears on it.
func TestRebuildKeepsSummaryParts(t *testing.T) {
	frame := func(method string, p any) []byte {
		raw, err := msp.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return msp.EncodeNotification(method, raw, 0)
	}
	delta := func(field, text string) []byte {
		return frame(msp.NotifyItemDelta, msp.ItemDeltaParams{ItemID: "r", Field: field, Delta: text})
	}
	f := folded{
		items:  []msp.Item{{ItemID: "r", Kind: msp.ItemReasoning, Revision: 2, Status: msp.ItemInProgress, Summary: []string{"saved "}}},
		openAt: map[string]int64{"r": 4},
	}
	var l deltaLog
	l.add(cursor{seq: 3, sub: 1}, msp.NotifyItemDelta, delta("summary.0", "in the saved text "))
	l.add(cursor{seq: 4, sub: 1}, msp.NotifyItemDelta, delta("summary.0", "after"))
	l.add(cursor{seq: 4, sub: 2}, msp.NotifyItemDelta, delta("summary.1", "next"))
	_, tails, ok := l.snapshot().rebuild(f)
	if !ok || tails["r"] == nil {
		t.Fatalf("rebuild: tails %v, %v", tails, ok)
	}
	it := f.items[0]
	tails["r"].appendTo(&it)
	if !slices.Equal(it.Summary, []string{"saved after", "next"}) || it.Text != nil {
		t.Errorf("rebuilt item %+v", it)
	}
	if !slices.Equal(f.items[0].Summary, []string{"saved "}) {
		t.Errorf("the folded item was changed in place: %+v", f.items[0])
	}
}

// TestFinishedTurnsReasoningIsDropped: once a turn that reasoned through
// a tool step ends, no later request carries its reasoning, and the
// history a restarted manager folds from the log is the one the live
// session kept (as the provider sees it: grouped by provider.Steps).
func TestFinishedTurnsReasoningIsDropped(t *testing.T) {
	tools := newToolServers(t)
	model := &thinkingModel{toolModel: toolModel{server: "t"}}
	st := openStore(t)
	opts := mgrOpts{tools: tools.box}
	m := newManager(t, st, model, opts)
	sub := newRecSub()
	sid := startSession(t, m, sub)
	if c := runTurn(t, m, sub, textTurn(sid, `call u/append {"text":"a"}`)); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %+v", c)
	}
	var step []provider.Message
	model.mu.Lock()
	step = model.reqs[1]
	model.mu.Unlock()
	if s := provider.Steps(step); len(s) != 3 || len(s[1].Reasoning) != 1 || s[1].Reasoning[0].Signature != "sig-1" {
		t.Fatalf("the step's own next request: %+v", s)
	}
	runTurn(t, m, sub, textTurn(sid, "live"))
	live := model.lastRequest()
	m.Close()
	m = newManager(t, st, model, opts)
	sub2 := newRecSub()
	subscribe(t, m, sub2, sid)
	runTurn(t, m, sub2, textTurn(sid, "reloaded"))
	reloaded := model.lastRequest()
	want := provider.Steps(append(slices.Clone(live), agent("re: live"), user("reloaded")))
	if got := provider.Steps(reloaded); !reflect.DeepEqual(got, want) {
		t.Fatalf("history after a restart\n got %+v\nwant %+v", got, want)
	}
	for _, msg := range append(live, reloaded...) {
		if len(msg.Reasoning) > 0 {
			t.Errorf("a later turn carries reasoning: %+v", msg)
		}
	}
}

// heldEffortModel is effortModel whose first request waits for held to
// close, so that turns queue behind it.
type heldEffortModel struct {
	effortModel
	held    chan struct{}
	started chan struct{}
	first   atomic.Bool
}

func (m *heldEffortModel) Stream(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	if m.first.CompareAndSwap(false, true) {
		m.started <- struct{}{}
		<-m.held
	}
	return m.effortModel.Stream(ctx, req, onText)
}

// TestQueuedTurnRunsWithTheDefault: a turn queued behind a running one,
// and launched by the worker when that one ends, runs with the session's
// reasoning-effort default, as a turn launched with its admission does
// (it ran with none: the worker built its request from the turn as
// queued, not as launched).
func TestQueuedTurnRunsWithTheDefault(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	model := &heldEffortModel{held: make(chan struct{}), started: make(chan struct{}, 1)}
	m := newManager(t, st, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	first := startTurn(t, m, textTurn(sid, "running"))
	<-model.started
	set := mustJSON(msp.SessionSetReasoningEffortParams{CommandID: cmdID(), ReasoningEffort: msp.EffortHigh, SessionID: sid})
	if _, err := m.SetReasoningEffort(ctx, set); err != nil {
		t.Fatal(err)
	}
	queued := startTurn(t, m, textTurn(sid, "queued"))
	close(model.held)
	sub.waitTerminal(t, first.TurnID)
	sub.waitTerminal(t, queued.TurnID)
	if got, want := model.asked(), []string{"", msp.EffortHigh}; !slices.Equal(got, want) {
		t.Errorf("efforts asked %q, want %q", got, want)
	}
}
