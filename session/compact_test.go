package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"testing"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/turn"
)

// compactSession sends session/compact and returns its raw ack, the
// compaction's turn launched.
func compactSession(t *testing.T, m *Manager, p msp.SessionCompactParams) (json.RawMessage, error) {
	t.Helper()
	raw, launch, err := m.CompactSession(context.Background(), nil, mustJSON(p))
	if err == nil {
		launch()
	}
	return raw, err
}

func assistant(s string) provider.Message {
	return provider.Message{Role: provider.RoleAssistant, Text: s}
}

// TestCompactSession: session/compact on a session with nothing to
// compact answers noop (no_compactable_history), recorded; after two
// turns it runs one summarising request as a turn of its own (its id the
// command's, one attempt, the item compacted through the last turn), the
// same command replayed gets the same ack and runs nothing more, the next
// turn sends the summary and itself only, and so does the next process,
// which folds the compaction from the log; the log keeps every item; a
// turnId other than the latest is refused missing_run; a fork cut before
// the compaction sends the whole conversation.
func TestCompactSession(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	m := newManager(t, st, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)

	noop := msp.SessionCompactParams{CommandID: cmdID(), SessionID: sid}
	raw, err := compactSession(t, m, noop)
	if err != nil || string(raw) != `{"commandId":"`+noop.CommandID+`","status":"noop","reason":"no_compactable_history"}` {
		t.Fatalf("compacting an empty session: %s, %v", raw, err)
	}
	if again, err := compactSession(t, m, noop); err != nil || !bytes.Equal(again, raw) {
		t.Fatalf("replayed noop: %s, %v", again, err)
	}

	first := runTurn(t, m, sub, textTurn(sid, "one"))
	runTurn(t, m, sub, textTurn(sid, "two"))
	requests := len(model.reqs)
	cmd := msp.SessionCompactParams{CommandID: cmdID(), SessionID: sid}
	raw, err = compactSession(t, m, cmd)
	if err != nil || string(raw) != `{"commandId":"`+cmd.CommandID+`","status":"accepted"}` {
		t.Fatalf("session/compact: %s, %v", raw, err)
	}
	done := sub.waitTerminal(t, cmd.CommandID)
	if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 1 || len(model.reqs) != requests+1 {
		t.Fatalf("the compaction's turn %+v, %d requests", done, len(model.reqs)-requests)
	}
	if again, err := compactSession(t, m, cmd); err != nil || !bytes.Equal(again, raw) {
		t.Fatalf("replayed session/compact: %s, %v", again, err)
	}
	var item msp.Item
	for _, p := range of[msp.ItemParams](t, sub, msp.NotifyItemCompleted) {
		if p.Item.Kind == msp.ItemCompaction {
			item = p.Item
		}
	}
	if item.Outcome != msp.CompactionCompacted || item.Trigger != msp.CompactionManual || item.Text == nil ||
		*item.TurnID != cmd.CommandID {
		t.Fatalf("compaction item %+v", item)
	}
	summary := turn.SummaryMessage(*item.Text)

	runTurn(t, m, sub, textTurn(sid, "three"))
	if got, want := model.historyOf(t, "three"), []provider.Message{summary, user("three")}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the compaction the turn sent %+v, want %+v", got, want)
	}
	if len(model.reqs) != requests+2 {
		t.Fatalf("the replay ran another compaction: %d requests", len(model.reqs)-requests)
	}

	// The next process folds the compaction from the log.
	m.Close()
	m2 := newManager(t, st, model, mgrOpts{})
	sub2 := newRecSub()
	subscribe(t, m2, sub2, sid)
	runTurn(t, m2, sub2, textTurn(sid, "four"))
	if got, want := model.historyOf(t, "four"), []provider.Message{summary, user("three"), assistant("re: three"), user("four")}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after a restart the turn sent %+v, want %+v", got, want)
	}
	snap, err := m2.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid, ExcludeItems: new(false)}))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, it := range snap.History.Items {
		kinds = append(kinds, it.Kind)
	}
	// Every turn is still there: 4 turns of a user message and an
	// answer, and the compaction between the second and the third.
	if want := []string{"userMessage", "agentMessage", "userMessage", "agentMessage", "compaction", "userMessage", "agentMessage", "userMessage", "agentMessage"}; !reflect.DeepEqual(kinds, want) {
		t.Fatalf("session/read items %v, want %v", kinds, want)
	}

	_, err = compactSession(t, m2, msp.SessionCompactParams{CommandID: cmdID(), SessionID: sid, TurnID: first.TurnID})
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindCommandRejected || me.Data.Reason != msp.ReasonMissingRun {
		t.Fatalf("compacting an older turn: %v", err)
	}

	forker := newRecSub()
	raw, attach, err := m2.ForkSession(context.Background(), forker, mustJSON(msp.SessionForkParams{CommandID: cmdID(), SessionID: sid,
		CutPoint: &msp.ForkCutPoint{LastTurnID: first.TurnID}}))
	if err != nil {
		t.Fatal(err)
	}
	attach(context.Background())
	var fork msp.SessionSnapshot
	if err := json.Unmarshal(raw, &fork); err != nil {
		t.Fatal(err)
	}
	runTurn(t, m2, forker, textTurn(fork.Session.SessionID, "forked"))
	if got, want := model.historyOf(t, "forked"), []provider.Message{user("one"), assistant("re: one"), user("forked")}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the fork sent %+v, want %+v", got, want)
	}
}

// stallingSummary is histModel whose first summarising request streams a
// little and waits for its cancellation.
type stallingSummary struct {
	*histModel
	once    sync.Once
	stalled chan struct{}
}

func (m *stallingSummary) Stream(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	stall := false
	if req.Instructions == turn.SummaryInstructions {
		m.once.Do(func() { stall = true })
	}
	if !stall {
		return m.histModel.Stream(ctx, req, onText)
	}
	onText("Part of a summ")
	close(m.stalled)
	<-ctx.Done()
	return provider.Response{}, ctx.Err()
}

// TestCompactionAcrossAStop: a server stopping during session/compact's
// summarising request closes the compaction item (failed, outcome
// cancelled) and leaves the turn to the next process, which compacts
// again and completes it, counting the request cut off: 2 attempts. The
// next turn sends the second summary.
func TestCompactionAcrossAStop(t *testing.T) {
	st := openStore(t)
	model := &stallingSummary{histModel: newHistModel(), stalled: make(chan struct{})}
	m := newManager(t, st, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	runTurn(t, m, sub, textTurn(sid, "one"))
	cmd := msp.SessionCompactParams{CommandID: cmdID(), SessionID: sid}
	if _, err := compactSession(t, m, cmd); err != nil {
		t.Fatal(err)
	}
	<-model.stalled
	m.Close()

	m2 := newManager(t, st, model, mgrOpts{})
	sub2 := newRecSub()
	subscribe(t, m2, sub2, sid)
	done := sub2.waitTerminal(t, cmd.CommandID)
	if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 2 {
		t.Fatalf("the compaction's turn %+v", done)
	}
	var items []msp.Item
	for _, p := range of[msp.ItemParams](t, sub2, msp.NotifyItemCompleted) {
		if p.Item.Kind == msp.ItemCompaction {
			items = append(items, p.Item)
		}
	}
	if len(items) != 2 || items[0].Outcome != msp.CompactionCancelled || items[0].Status != msp.ItemFailed ||
		items[1].Outcome != msp.CompactionCompacted {
		t.Fatalf("compaction items %+v", items)
	}
	runTurn(t, m2, sub2, textTurn(sid, "two"))
	if got, want := model.historyOf(t, "two"), []provider.Message{turn.SummaryMessage(*items[1].Text), user("two")}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the compaction the turn sent %+v, want %+v", got, want)
	}
}
