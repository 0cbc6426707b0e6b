package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/store"
	"mspd/store/sqlite"
	"mspd/turn"
)

// withoutIdentities drops the members a copy re-mints.
func withoutIdentities(t *testing.T, raw []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"sessionId", "viewCursor", "sourceRange"} {
		delete(m, k)
	}
	return m
}

// TestForkCopiesTheLogAsRecorded: a fork through a completed turn copies
// the source's events up to that turn's terminal, each equal byte for
// byte apart from the identities of the copy, asks no model, and goes on
// as a session of its own.
func TestForkCopiesTheLogAsRecorded(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	m := newManager(t, st, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	first := runTurn(t, m, sub, textTurn(sid, "cut")) // a retried turn: notice, failed item, attempts 2
	_ = runTurn(t, m, sub, textTurn(sid, "second"))   // not copied
	if first.Attempts.Count != 2 {
		t.Fatalf("the first turn ran %d attempts, want 2 (a stream cut, then an answer)", first.Attempts.Count)
	}
	requests := len(model.reqs)

	forker := newRecSub()
	cmd := cmdID()
	raw, attach, err := m.ForkSession(context.Background(), forker, mustJSON(msp.SessionForkParams{CommandID: cmd, SessionID: sid,
		CutPoint: &msp.ForkCutPoint{LastTurnID: first.TurnID}}))
	if err != nil {
		t.Fatal(err)
	}
	attach(context.Background())
	var res msp.SessionSnapshot
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	fork := res.Session
	if fork.SessionID == sid || fork.ForkedFrom == nil || fork.ForkedFrom.SessionID != sid || fork.ForkedFrom.CommandID != cmd ||
		!fork.ForkedFrom.CutExplicit || fork.TurnCount != 1 || fork.Status != msp.SessionIdle {
		t.Fatalf("fork %+v (from %+v)", fork, fork.ForkedFrom)
	}
	if res.History.Mode != msp.HistoryInline || len(res.History.Items) != 3 { // user, cut attempt, answer
		t.Fatalf("fork history %+v", res.History)
	}
	if got := of[msp.SessionStartedParams](t, forker, msp.NotifySessionStarted); len(got) != 1 || got[0].Session.SessionID != fork.SessionID {
		t.Fatalf("the forking connection got %+v", got)
	}

	src := records(t, st, sid)
	copied := records(t, st, fork.SessionID)
	cut := -1
	for i, r := range src {
		if r.Method == msp.NotifyTurnCompleted {
			cut = i
			break
		}
	}
	if len(copied) != cut+1 {
		t.Fatalf("the fork holds %d events, want the %d through the first terminal", len(copied), cut+1)
	}
	for i, c := range copied {
		s := src[i]
		if c.Seq != s.Seq || c.Method != s.Method || !maps.EqualFunc(withoutIdentities(t, c.Params), withoutIdentities(t, s.Params), func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
			t.Fatalf("copied event %d differs:\n fork   %s %s\n source %s %s", i, c.Method, c.Params, s.Method, s.Params)
		}
		var h msp.ViewHeader
		json.Unmarshal(c.Params, &h)
		if h.SessionID != fork.SessionID || h.ViewCursor != cursorIn(t, st, fork.SessionID, c.Seq) || h.SourceRange.Stream.ID != fork.SessionID {
			t.Fatalf("copied event %d keeps the source's identities: %s", i, c.Params)
		}
	}
	if len(model.reqs) != requests {
		t.Fatal("forking asked the model")
	}
	// A replay gets the same answer, and makes no second fork.
	again, _, err := m.ForkSession(context.Background(), newRecSub(), mustJSON(msp.SessionForkParams{CommandID: cmd, SessionID: sid,
		CutPoint: &msp.ForkCutPoint{LastTurnID: first.TurnID}}))
	if err != nil || string(again) != string(raw) {
		t.Fatalf("replayed fork: %s, %v", again, err)
	}
	// The fork goes on by itself: its next turn sees only the copied history.
	if c := runTurn(t, m, forker, textTurn(fork.SessionID, "in the fork")); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("turn in the fork: %+v", c)
	}
	wantHistory(t, model.historyOf(t, "in the fork"), []provider.Message{user("cut"), agent("re: cut"), user("in the fork")})

	// A cut at a turn that did not complete is refused.
	_, _, err = m.ForkSession(context.Background(), newRecSub(), mustJSON(msp.SessionForkParams{CommandID: cmdID(), SessionID: sid,
		CutPoint: &msp.ForkCutPoint{LastTurnID: "no-such-turn"}}))
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindForkBoundary || me.Code != msp.CodeForkBoundary {
		t.Fatalf("fork at an unknown turn: %v", err)
	}
}

// TestRenameAndAutomaticName: a session is named from its first message
// when that turn starts; session/rename replaces the name; both are
// recorded as session/nameChanged and reach list-taking connections as
// session/listChanged.
func TestRenameAndAutomaticName(t *testing.T) {
	m := newManager(t, openStore(t), newHistModel(), mgrOpts{})
	lister := bcastSub{newRecSub()}
	m.Listen(lister, "")
	sub := newRecSub()
	sid := startSession(t, m, sub)
	runTurn(t, m, sub, textTurn(sid, "  What is\tthe   capital of France?\nAnd why?"))
	names := of[msp.SessionNameChangedParams](t, sub, msp.NotifySessionNameChanged)
	if len(names) != 1 || names[0].Name != "What is the capital of France?" {
		t.Fatalf("automatic name %+v", names)
	}
	runTurn(t, m, sub, textTurn(sid, "another question"))
	if got := of[msp.SessionNameChangedParams](t, sub, msp.NotifySessionNameChanged); len(got) != 1 {
		t.Fatalf("a later turn renamed the session: %+v", got)
	}
	raw, err := m.RenameSession(context.Background(), mustJSON(msp.SessionRenameParams{CommandID: cmdID(), SessionID: sid, Name: " Paris  trip "}))
	if err != nil {
		t.Fatal(err)
	}
	var ack msp.SessionRenameResult
	json.Unmarshal(raw, &ack)
	if ack.Name != "Paris trip" || ack.Status != msp.StatusAccepted {
		t.Fatalf("rename ack %s", raw)
	}
	if got := of[msp.SessionNameChangedParams](t, sub, msp.NotifySessionNameChanged); len(got) != 2 || got[1].Name != "Paris trip" {
		t.Fatalf("renamed %+v", got)
	}
	read, err := m.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid}))
	if err != nil || read.Session.Name != "Paris trip" {
		t.Fatalf("session/read after rename: %+v, %v", read, err)
	}
	rows := of[msp.SessionListChangedParams](t, lister.recSub, msp.NotifySessionListChanged)
	if len(rows) == 0 || rows[len(rows)-1].Session.Name != "Paris trip" {
		t.Fatalf("list news %+v", rows)
	}
	_, err = m.RenameSession(context.Background(), mustJSON(msp.SessionRenameParams{CommandID: cmdID(), SessionID: sid, Name: " \t "}))
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindInvalidParams || me.Data.Details["field"] != "name" {
		t.Fatalf("empty name: %v", err)
	}
}

// TestSetModel: a selection is recorded and used from the next turn; an
// unknown provider or model is refused naming the field.
func TestSetModel(t *testing.T) {
	model := newHistModel()
	runner := &specRecorder{inner: newTestRunner(model)}
	m, err := New(context.Background(), Config{Store: openStore(t), Runner: runner, LogPath: "test.db",
		Catalog: fixedCatalog{"main": true, "extra": true}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	sub := newRecSub()
	sid := startSession(t, m, sub)
	if _, err := m.SetModel(context.Background(), mustJSON(msp.SessionSetModelParams{CommandID: cmdID(), SessionID: sid,
		Model: msp.ModelSelection{ProviderID: "extra", ModelID: "big-1"}})); err != nil {
		t.Fatal(err)
	}
	changed := of[msp.SessionModelChangedParams](t, sub, msp.NotifySessionModelChanged)
	if len(changed) != 1 || changed[0].ModelID != "big-1" || changed[0].ProviderID != "extra" || changed[0].Source != "user" {
		t.Fatalf("modelChanged %+v", changed)
	}
	runTurn(t, m, sub, textTurn(sid, "hello"))
	if spec := runner.last(); spec.ProviderID != "extra" || spec.Model != "big-1" {
		t.Fatalf("the next turn ran on %s/%s", spec.ProviderID, spec.Model)
	}
	_, err = m.SetModel(context.Background(), mustJSON(msp.SessionSetModelParams{CommandID: cmdID(), SessionID: sid,
		Model: msp.ModelSelection{ProviderID: "nowhere", ModelID: "x"}}))
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindInvalidParams || me.Data.Details["field"] != "model.providerId" {
		t.Fatalf("unknown provider: %v", err)
	}
}

// TestDeleteErasesEverything: session/delete stops the running turn,
// erases the session from the store (no trace of its text in the
// database files), tells its subscribers and the deleting connection, and
// every later command gets sessionNotFound; a replay of the delete gets
// its ack again.
func TestDeleteErasesEverything(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "mspd.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	model := newHistModel()
	m := newManager(t, st, model, mgrOpts{})
	watcher := newRecSub()
	sid := startSession(t, m, watcher)
	const marker = "Quokka-Marker-5519"
	runTurn(t, m, watcher, textTurn(sid, "remember "+marker))
	startTurn(t, m, textTurn(sid, "block "+marker))
	model.waitStarted(t, "block "+marker)

	deleter := newRecSub()
	cmd := cmdID()
	raw, erase, err := m.DeleteSession(context.Background(), deleter, mustJSON(msp.SessionDeleteParams{CommandID: cmd, SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	erase(context.Background())
	for who, r := range map[string]*recSub{"subscriber": watcher, "deleter": deleter} {
		done := of[msp.SessionDeleteCompletedParams](t, r, msp.NotifySessionDeleteCompleted)
		if len(done) != 1 || done[0].Outcome != msp.DeleteCompleted || done[0].SessionID != sid || done[0].CommandID != cmd {
			t.Fatalf("%s got %+v", who, done)
		}
	}
	for _, name := range []string{"mspd.db", "mspd.db-wal"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(marker)) {
			t.Errorf("%s still holds the deleted session's text", name)
		}
	}
	_, err = m.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid}))
	wantNotFound(t, "session/read after delete", err)
	_, _, err = m.StartTurn(context.Background(), nil, mustJSON(textTurn(sid, "hello?")))
	wantNotFound(t, "turn/start after delete", err)
	if list, _ := m.ListSessions(context.Background(), nil); len(list.Sessions) != 0 {
		t.Fatalf("session/list after delete: %+v", list.Sessions)
	}
	again, _, err := m.DeleteSession(context.Background(), deleter, mustJSON(msp.SessionDeleteParams{CommandID: cmd, SessionID: sid}))
	if err != nil || string(again) != string(raw) {
		t.Fatalf("replayed delete: %s, %v", again, err)
	}
	if _, err := st.Session(context.Background(), sid); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("store row after delete: %v", err)
	}
}

// specRecorder is a TurnRunner that remembers the specs it ran.
type specRecorder struct {
	inner TurnRunner
	mu    sync.Mutex
	specs []turn.Spec
}

func (r *specRecorder) Run(ctx context.Context, spec turn.Spec, sink turn.Sink) turn.Outcome {
	r.mu.Lock()
	r.specs = append(r.specs, spec)
	r.mu.Unlock()
	return r.inner.Run(ctx, spec, sink)
}

func (r *specRecorder) last() turn.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.specs[len(r.specs)-1]
}
