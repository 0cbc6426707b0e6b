package session

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"mspd/schema/msp"
	"mspd/store"
)

// gatedErasure fails every erasure, each only once the test lets it go.
type gatedErasure struct {
	store.Store
	entered chan struct{}
	release chan struct{}
}

func (g gatedErasure) DeleteSession(context.Context, string) error {
	g.entered <- struct{}{}
	<-g.release
	return errors.New("sqlite: writes are failing: SQLITE_FULL")
}

// landedErasure erases the session and then reports a failure, as a
// SQLite commit whose answer is lost does.
type landedErasure struct{ store.Store }

func (l landedErasure) DeleteSession(ctx context.Context, id string) error {
	if err := l.Store.DeleteSession(ctx, id); err != nil {
		return err
	}
	return errors.New("sqlite: commit: disk I/O error")
}

// TestTwoFailedDeletesRunOneAfterTheOther: two session/delete commands
// acknowledged together erase one after the other, the second stopping
// the turn the first one's failure resumed. When both fail, the turn
// resumes once more, and no resumption is left over for a later turn to
// take as its own.
func TestTwoFailedDeletesRunOneAfterTheOther(t *testing.T) {
	g := gatedErasure{openStore(t), make(chan struct{}), make(chan struct{})}
	model := newHistModel()
	m := newManager(t, g, model, mgrOpts{})
	watcher := newRecSub()
	sid := startSession(t, m, watcher)
	ack := startTurn(t, m, textTurn(sid, "block one"))
	model.waitStarted(t, "block one")

	var erases []func(context.Context)
	for range 2 {
		_, erase, err := m.DeleteSession(context.Background(), nil, mustJSON(msp.SessionDeleteParams{CommandID: cmdID(), SessionID: sid}))
		if err != nil {
			t.Fatal(err)
		}
		erases = append(erases, erase)
	}
	var wg sync.WaitGroup
	for _, erase := range erases {
		wg.Add(1)
		go func() { defer wg.Done(); erase(context.Background()) }()
	}
	for i := range erases {
		<-g.entered // one erasure stopped the turn and is in the store, the other waits
		if told := len(of[msp.SessionDeleteCompletedParams](t, watcher, msp.NotifySessionDeleteCompleted)); told != i {
			t.Fatalf("erasure %d began with %d erasures over, want %d: they overlap", i+1, told, i)
		}
		g.release <- struct{}{}
	}
	wg.Wait()
	model.waitStarted(t, "block one") // both failed: the turn resumed

	interrupt(t, m, sid)
	watcher.waitTerminal(t, ack.TurnID)
	next := runTurn(t, m, watcher, textTurn(sid, "hello"))
	for _, p := range of[msp.TurnRetryScheduledParams](t, watcher, msp.NotifyTurnRetryScheduled) {
		if p.TurnID == next.TurnID {
			t.Errorf("a new turn got a resumption's retry notice: %q", p.Reason)
		}
	}
	if next.Attempts != nil && next.Attempts.Count != 1 {
		t.Errorf("a new turn, run once, ended with %d attempts", next.Attempts.Count)
	}
}

// failedNewsReaction calls back once it is told of a failed deletion: a
// client that acts on the news at once.
type failedNewsReaction struct {
	*recSub
	on   func()
	once sync.Once
}

func (r *failedNewsReaction) Deliver(n Notification) {
	r.recSub.Deliver(n)
	if n.Method == msp.NotifySessionDeleteCompleted && strings.Contains(string(n.Frame), string(msp.DeleteFailed)) {
		r.once.Do(r.on)
	}
}

// TestSessionTakesCommandsOnceToldDeletionFailed: a client acting on the
// news of a failed deletion at once (reading the session, deleting it
// again) finds the session.
func TestSessionTakesCommandsOnceToldDeletionFailed(t *testing.T) {
	st := failingErasure{openStore(t)}
	m := newManager(t, st, newHistModel(), mgrOpts{})
	var readErr error = errors.New("never read")
	r := &failedNewsReaction{recSub: newRecSub()}
	sid := startSession(t, m, r)
	r.on = func() {
		_, readErr = m.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid}))
	}
	deleteNow(t, m, sid)
	if readErr != nil {
		t.Fatalf("session/read sent on the news of the failed deletion: %v", readErr)
	}
}

// TestRevivedSessionAgreesWithTheStore: an erasure reported failed may
// have landed (physicalChange "possible"). The session is then not kept
// as memory has it: a later command answers that it is gone (it stays
// deleted until a deletion sent again finishes), not with an internal
// error on every write.
func TestRevivedSessionAgreesWithTheStore(t *testing.T) {
	model := newHistModel()
	m := newManager(t, landedErasure{openStore(t)}, model, mgrOpts{})
	watcher := newRecSub()
	sid := startSession(t, m, watcher)
	runTurn(t, m, watcher, textTurn(sid, "hello"))
	deleteNow(t, m, sid)
	_, _, err := m.StartTurn(context.Background(), nil, mustJSON(msp.TurnStartParams{CommandID: cmdID(), SessionID: sid,
		Input: []msp.TurnInputPart{{Type: "text", Text: "again"}}}))
	wantNotFound(t, "turn/start after a failed deletion that landed", err)
}

// failingErasure fails every session erasure, as a full disk would.
type failingErasure struct{ store.Store }

func (failingErasure) DeleteSession(context.Context, string) error {
	return errors.New("sqlite: writes are failing: SQLITE_FULL")
}

// TestFailedDeleteRevivesTheSession: a deletion the store fails leaves
// the session as the next start would find it: it takes commands again, a
// deletion among them, its subscriber stays, and the turn the deletion
// stopped resumes as a new attempt, its notice saying why, and completes.
func TestFailedDeleteRevivesTheSession(t *testing.T) {
	model := newHistModel()
	m := newManager(t, failingErasure{openStore(t)}, model, mgrOpts{})
	watcher := newRecSub()
	sid := startSession(t, m, watcher)
	ack := startTurn(t, m, textTurn(sid, "crash once"))
	model.waitStarted(t, "crash once")

	deleteNow(t, m, sid)
	if done := of[msp.SessionDeleteCompletedParams](t, watcher, msp.NotifySessionDeleteCompleted); len(done) != 1 || done[0].Outcome != msp.DeleteFailed {
		t.Fatalf("deletion news: %+v, want one failed", done)
	}
	end := watcher.waitTerminal(t, ack.TurnID)
	notices := of[msp.TurnRetryScheduledParams](t, watcher, msp.NotifyTurnRetryScheduled)
	if len(notices) != 1 || !strings.Contains(notices[0].Reason, "failed deletion") {
		t.Fatalf("the resumed turn's notices %+v, want one saying a failed deletion stopped it, not that the server restarted", notices)
	}
	if end.Terminal != msp.TerminalCompleted || end.Attempts == nil || end.Attempts.Count != 2 {
		t.Fatalf("the stopped turn ended %+v, want completed on its second attempt", end)
	}
	if _, err := m.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid})); err != nil {
		t.Fatalf("session/read after the failed deletion: %v", err)
	}
	runTurn(t, m, watcher, textTurn(sid, "still here?"))
	if _, _, err := m.DeleteSession(context.Background(), nil, mustJSON(msp.SessionDeleteParams{CommandID: cmdID(), SessionID: sid})); err != nil {
		t.Fatalf("session/delete tried again: %v", err)
	}
}

// TestInterruptOnFailedDeleteNewsStopsTheTurn: a client told that a
// deletion failed interrupts the turn the deletion stopped; the interrupt
// is accepted, so the turn must not then resume and complete.
func TestInterruptOnFailedDeleteNewsStopsTheTurn(t *testing.T) {
	model := newHistModel()
	m := newManager(t, failingErasure{openStore(t)}, model, mgrOpts{})
	r := &failedNewsReaction{recSub: newRecSub()}
	sid := startSession(t, m, r)
	ack := startTurn(t, m, textTurn(sid, "crash once"))
	model.waitStarted(t, "crash once")
	var stopErr error = errors.New("never sent")
	r.on = func() {
		_, stopErr = m.StopTurn(context.Background(), msp.MethodTurnInterrupt,
			mustJSON(msp.TurnStopParams{CommandID: cmdID(), SessionID: sid}))
	}
	deleteNow(t, m, sid)
	if stopErr != nil {
		t.Fatalf("turn/interrupt sent on the news: %v", stopErr)
	}
	end := r.waitTerminal(t, ack.TurnID)
	if end.Terminal == msp.TerminalCompleted {
		t.Fatalf("turn/interrupt was accepted, yet the turn resumed and ended %q (attempts %+v)", end.Terminal, end.Attempts)
	}
}

// flakyReadAfterFailedErasure fails the first erasure, and the next read
// of a session row after it once, as a store whose disk or network is
// failing does: the store cannot tell what the erasure did. Later
// erasures succeed.
type flakyReadAfterFailedErasure struct {
	store.Store
	failNext, failed *atomic.Bool
}

func (f flakyReadAfterFailedErasure) DeleteSession(ctx context.Context, id string) error {
	if f.failed.CompareAndSwap(false, true) {
		f.failNext.Store(true)
		return errors.New("jetstream: purge: context deadline exceeded")
	}
	return f.Store.DeleteSession(ctx, id)
}

func (f flakyReadAfterFailedErasure) Session(ctx context.Context, id string) (store.Session, error) {
	if f.failNext.CompareAndSwap(true, false) {
		return store.Session{}, errors.New("jetstream: get: context deadline exceeded")
	}
	return f.Store.Session(ctx, id)
}

// TestHalfErasedSessionWaitsForAnotherDeletion: a session whose failed
// erasure the store cannot vouch for stays deleted — nothing more is
// written to it, so none of its cursors is handed out twice — and a
// deletion sent again reaches it and finishes the erasure.
func TestHalfErasedSessionWaitsForAnotherDeletion(t *testing.T) {
	model := newHistModel()
	st := flakyReadAfterFailedErasure{openStore(t), new(atomic.Bool), new(atomic.Bool)}
	m := newManager(t, st, model, mgrOpts{})
	watcher := newRecSub()
	sid := startSession(t, m, watcher)
	startTurn(t, m, textTurn(sid, "block me"))
	model.waitStarted(t, "block me")
	deleteNow(t, m, sid)
	_, err := m.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid}))
	wantNotFound(t, "session/read of a half-erased session", err)
	_, _, err = m.StartTurn(context.Background(), nil, mustJSON(textTurn(sid, "hello?")))
	wantNotFound(t, "turn/start on a half-erased session", err)
	deleteNow(t, m, sid)
	done := of[msp.SessionDeleteCompletedParams](t, watcher, msp.NotifySessionDeleteCompleted)
	if len(done) != 2 || done[0].Outcome != msp.DeleteFailed || done[1].Outcome != msp.DeleteCompleted {
		t.Fatalf("deletion news %+v, want failed then completed", done)
	}
	if _, err := st.Store.Session(context.Background(), sid); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("stored row after the second deletion: %v", err)
	}
}

// deleteNow sends session/delete for sid and runs its erasure to the end,
// as the connection does once the ack is sent (a command forwarded to the
// session's leader has run it there).
func deleteNow(t *testing.T, m *Manager, sid string) {
	t.Helper()
	_, erase, err := m.DeleteSession(context.Background(), nil, mustJSON(msp.SessionDeleteParams{CommandID: cmdID(), SessionID: sid}))
	if err != nil {
		t.Fatalf("session/delete: %v", err)
	}
	if erase != nil {
		erase(context.Background())
	}
}
