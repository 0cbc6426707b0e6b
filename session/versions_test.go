package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"mspd/provider"
	"mspd/schema/msp"
)

// versionModel answers each request "answer N", N counting its requests,
// so that every version of an answer differs; "call TOOL ARGS" turns go
// to toolModel, which records the requests.
type versionModel struct {
	toolModel
	n sync.Mutex
	k int
}

func (m *versionModel) Stream(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == provider.RoleTool || strings.HasPrefix(last.Text, "call ") {
		return m.toolModel.Stream(ctx, req, onText)
	}
	m.mu.Lock()
	m.reqs = append(m.reqs, slices.Clone(req.Messages))
	m.mu.Unlock()
	m.n.Lock()
	m.k++
	k := m.k
	m.n.Unlock()
	onText(fmt.Sprintf("answer %d", k))
	return provider.Response{FinishReason: provider.FinishStop, Usage: &provider.Usage{InputTokens: 10, OutputTokens: 5}}, nil
}

// lastRequest is the messages of the model's latest request.
func (m *versionModel) lastRequest() []provider.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reqs[len(m.reqs)-1]
}

func regenerate(sid, turnID, text string) msp.TurnStartParams {
	p := textTurn(sid, text)
	p.Regenerate = turnID
	return p
}

// startErr sends a turn/start that must be refused, and returns its error.
func startErr(t *testing.T, m *Manager, p msp.TurnStartParams) *msp.Error {
	t.Helper()
	if p.CommandID == "" {
		p.CommandID = cmdID()
	}
	_, _, err := m.StartTurn(context.Background(), nil, mustJSON(p))
	var me *msp.Error
	if !errors.As(err, &me) {
		t.Fatalf("turn/start %+v: %v, want an MSP error", p, err)
	}
	return me
}

func wantRefusal(t *testing.T, me *msp.Error, kind, reason string) {
	t.Helper()
	if me.Data.Kind != kind || me.Data.Reason != reason {
		t.Fatalf("refused %s (%s): %s; want %s (%s)", me.Data.Kind, me.Data.Reason, me.Message, kind, reason)
	}
}

// TestRegenerateReplacesTheAnswer: a regenerate answers the same input
// again, and what the model is sent drops the turn it regenerates — its
// message, answer, tool calls and their results; a chain of three
// versions sends the message once and no earlier answer; the next turn
// follows the latest version; the turn/started and userMessage say which
// turn each regenerates; a replay of the command gets its ack and runs
// nothing; and the next process folds the same history from the log.
func TestRegenerateReplacesTheAnswer(t *testing.T) {
	st := openStore(t)
	tools := newToolServers(t)
	model := &versionModel{toolModel: toolModel{server: "u"}}
	m := newManager(t, st, model, mgrOpts{tools: tools.box})
	sub := newRecSub()
	sid := startSession(t, m, sub)

	runTurn(t, m, sub, textTurn(sid, "hello"))                               // answer 1
	first := runTurn(t, m, sub, textTurn(sid, `call u/append {"text":"a"}`)) // a tool call, then "got: …"
	if first.Terminal != msp.TerminalCompleted {
		t.Fatalf("the tool turn ended %+v", first)
	}
	prompt := `call u/append {"text":"a"}`
	// Regenerating the tool turn: the model sees the message once, not the
	// call nor its result.
	p2 := regenerate(sid, first.TurnID, prompt)
	p2.CommandID = cmdID()
	v2 := startTurn(t, m, p2)
	sub.waitTerminal(t, v2.TurnID)
	got := model.toolModel.reqs[len(model.toolModel.reqs)-2] // the call's request; the last is its results'
	wantHistory(t, got, []provider.Message{user("hello"), agent("answer 1"), user(prompt)})

	// Replayed: the same ack, nothing run.
	requests := len(model.reqs)
	raw, launch, err := m.StartTurn(context.Background(), nil, mustJSON(p2))
	if err != nil {
		t.Fatal(err)
	}
	launch()
	var again msp.TurnStartResult
	if err := json.Unmarshal(raw, &again); err != nil || again != v2 {
		t.Fatalf("replayed regenerate: %+v, %v; want %+v", again, err, v2)
	}

	// A third version of a plain answer: "v" asked, then regenerated twice.
	ask := runTurn(t, m, sub, textTurn(sid, "v"))
	v := ask.TurnID
	for i := range 2 {
		done := runTurn(t, m, sub, regenerate(sid, v, "v"))
		if done.Terminal != msp.TerminalCompleted {
			t.Fatalf("version %d ended %+v", i+2, done)
		}
		v = done.TurnID
	}
	if n := len(model.reqs); n != requests+3 {
		t.Fatalf("the replay or the versions made %d requests, want 3", n-requests)
	}
	// The tool turn's latest version and the third version of "v".
	// Sent once: the message of "v", and the tool call of the tool turn's
	// second version (the first version's call and result are gone).
	count := func(h []provider.Message, f func(provider.Message) bool) int {
		n := 0
		for _, m := range h {
			if f(m) {
				n++
			}
		}
		return n
	}
	isV := func(m provider.Message) bool { return m.Role == provider.RoleUser && m.Text == "v" }
	isCall := func(m provider.Message) bool { return len(m.ToolCalls) > 0 }
	isAnswer := func(m provider.Message) bool { return strings.HasPrefix(m.Text, "answer ") }
	third := model.lastRequest()
	if count(third, isV) != 1 || !isV(third[len(third)-1]) || count(third, isCall) != 1 || count(third, isAnswer) != 1 {
		t.Fatalf("the third version sent %+v", third)
	}
	runTurn(t, m, sub, textTurn(sid, "next"))
	after := model.lastRequest()
	if count(after, isV) != 1 || after[len(after)-2].Text != "answer 4" || count(after, isAnswer) != 2 {
		t.Fatalf("after three versions the next turn sent %+v", after)
	}

	// What a client rebuilds versions from.
	var regen []string
	for _, p := range of[msp.TurnStartedParams](t, sub, msp.NotifyTurnStarted) {
		if p.Regenerates != "" {
			regen = append(regen, p.Regenerates)
		}
	}
	if len(regen) != 3 || regen[0] != first.TurnID || regen[1] != ask.TurnID {
		t.Fatalf("turn/started regenerates %v", regen)
	}
	var copies int
	for _, p := range of[msp.ItemParams](t, sub, msp.NotifyItemCompleted) {
		if p.Item.Kind == msp.ItemUserMessage && p.Item.Regenerates != "" {
			copies++
		}
	}
	if copies != 3 {
		t.Fatalf("%d userMessages say what they regenerate, want 3", copies)
	}

	// The next process folds the same history.
	m.Close()
	m2 := newManager(t, st, model, mgrOpts{tools: tools.box})
	sub2 := newRecSub()
	subscribe(t, m2, sub2, sid)
	runTurn(t, m2, sub2, textTurn(sid, "restarted"))
	folded := model.lastRequest()
	wantHistory(t, folded[:len(folded)-1], append(slices.Clone(after), agent("answer 5")))
}

// TestRegenerateRefusals: a turn that is running, is not the latest, is
// unknown, or that a compaction summarized is refused commandRejected
// with its reason, recorded (a replay after the state changed gets the
// same refusal); an input that does not repeat the prompt is
// invalidParams; none of them kills the session.
func TestRegenerateRefusals(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	m := newManager(t, st, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)

	older := runTurn(t, m, sub, textTurn(sid, "one"))
	latest := runTurn(t, m, sub, textTurn(sid, "two"))
	wantRefusal(t, startErr(t, m, regenerate(sid, older.TurnID, "one")), msp.KindCommandRejected, msp.ReasonNotLatestTurn)
	wantRefusal(t, startErr(t, m, regenerate(sid, cmdID(), "two")), msp.KindCommandRejected, msp.ReasonNotLatestTurn)
	wantRefusal(t, startErr(t, m, regenerate(sid, latest.TurnID, "other")), msp.KindInvalidParams, msp.ReasonRegenerateInputDiffers)
	withImage := regenerate(sid, latest.TurnID, "two")
	withImage.Input = append(withImage.Input, msp.TurnInputPart{Type: msp.InputImage, MediaType: "image/png", Base64Data: "AAAA"})
	wantRefusal(t, startErr(t, m, withImage), msp.KindInvalidParams, msp.ReasonRegenerateInputDiffers)

	// Running: refused; the same command once it ended gets the same.
	blocked := startTurn(t, m, textTurn(sid, "block"))
	model.waitStarted(t, "block")
	running := regenerate(sid, blocked.TurnID, "block")
	running.CommandID = cmdID()
	wantRefusal(t, startErr(t, m, running), msp.KindCommandRejected, msp.ReasonTurnNotEnded)
	interrupt(t, m, sid)
	if done := sub.waitTerminal(t, blocked.TurnID); done.Terminal != msp.TerminalCancelled {
		t.Fatalf("the stopped turn ended %+v", done)
	}
	wantRefusal(t, startErr(t, m, running), msp.KindCommandRejected, msp.ReasonTurnNotEnded)
	// A stopped turn is regenerated (the page's Retry), and once it runs
	// it is not regenerated again until it ends.
	retried := startTurn(t, m, regenerate(sid, blocked.TurnID, "block"))
	model.waitStarted(t, "block")
	wantRefusal(t, startErr(t, m, regenerate(sid, retried.TurnID, "block")), msp.KindCommandRejected, msp.ReasonTurnNotEnded)
	wantRefusal(t, startErr(t, m, regenerate(sid, blocked.TurnID, "block")), msp.KindCommandRejected, msp.ReasonNotLatestTurn)
	interrupt(t, m, sid)
	sub.waitTerminal(t, retried.TurnID)
	// The session goes on.
	if done := runTurn(t, m, sub, textTurn(sid, "three")); done.Terminal != msp.TerminalCompleted {
		t.Fatalf("the next turn ended %+v", done)
	}
}

// TestRegenerateAfterCompaction: a turn that a compaction summarized
// cannot be regenerated; a turn after the compaction can, and drops only
// itself from what the model sees (the summary stays).
func TestRegenerateAfterCompaction(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	m := newManager(t, st, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)

	runTurn(t, m, sub, textTurn(sid, "one"))
	two := runTurn(t, m, sub, textTurn(sid, "two"))
	cmd := msp.SessionCompactParams{CommandID: cmdID(), SessionID: sid}
	if _, err := compactSession(t, m, cmd); err != nil {
		t.Fatal(err)
	}
	sub.waitTerminal(t, cmd.CommandID)
	wantRefusal(t, startErr(t, m, regenerate(sid, two.TurnID, "two")), msp.KindCommandRejected, msp.ReasonTurnCompacted)

	three := runTurn(t, m, sub, textTurn(sid, "three"))
	summary := model.historyOf(t, "three")[0]
	runTurn(t, m, sub, regenerate(sid, three.TurnID, "three"))
	wantHistory(t, model.historyOf(t, "three"), []provider.Message{summary, user("three")})

	// After a restart the fold agrees.
	m.Close()
	m2 := newManager(t, st, model, mgrOpts{})
	sub2 := newRecSub()
	subscribe(t, m2, sub2, sid)
	runTurn(t, m2, sub2, textTurn(sid, "four"))
	wantHistory(t, model.historyOf(t, "four"), []provider.Message{summary, user("three"), agent("re: three"), user("four")})
}

// TestForkAtASupersededTurn: a fork cut at a turn a later one
// regenerated copies the conversation as it stood, that version's answer
// in it; a fork through the regeneration has the regeneration's only.
func TestForkAtASupersededTurn(t *testing.T) {
	st := openStore(t)
	model := &versionModel{}
	m := newManager(t, st, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)

	first := runTurn(t, m, sub, textTurn(sid, "q"))                  // answer 1
	second := runTurn(t, m, sub, regenerate(sid, first.TurnID, "q")) // answer 2
	for _, tc := range []struct {
		cut  string
		want string
	}{{first.TurnID, "answer 1"}, {second.TurnID, "answer 2"}} {
		forker := newRecSub()
		raw, attach, err := m.ForkSession(context.Background(), forker, mustJSON(msp.SessionForkParams{CommandID: cmdID(), SessionID: sid,
			CutPoint: &msp.ForkCutPoint{LastTurnID: tc.cut}}))
		if err != nil {
			t.Fatal(err)
		}
		attach(context.Background())
		var fork msp.SessionSnapshot
		if err := json.Unmarshal(raw, &fork); err != nil {
			t.Fatal(err)
		}
		runTurn(t, m, forker, textTurn(fork.Session.SessionID, "forked"))
		got := model.lastRequest()
		wantHistory(t, got[:2], []provider.Message{user("q"), agent(tc.want)})
		if len(got) != 3 {
			t.Fatalf("the fork at %s sent %+v", tc.want, got)
		}
	}
}
