package session

// Tests of session/delete (lifecycle.go): a replayed deletion, a
// subscription racing one, an erasure under way, a failed one and a
// half-erased session, on one node and on a cluster.

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/store"
)

// wantSessionDeleted checks that err answers a replay of the command that
// made session sid, now deleted, as such.
func wantSessionDeleted(t *testing.T, what, sid string, err error) {
	t.Helper()
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindCommandRejected || me.Data.Reason != msp.ReasonSessionDeleted || me.Data.SessionID != sid {
		t.Fatalf("%s replayed after its session was deleted: got %v, want commandRejected session_deleted naming %s", what, err, sid)
	}
}

// sessionCount is how many sessions the store lists.
func sessionCount(t *testing.T, st store.Store) int {
	t.Helper()
	rows, err := st.Sessions(context.Background(), "", nil, 100) // the unnamed principal's
	if err != nil {
		t.Fatal(err)
	}
	return len(rows)
}

// TestStartReplayedAfterDeleteMakesNoSession: a session/start replayed
// once the session it made is deleted is answered session_deleted (its
// recorded answer is gone with the session) rather than admitted again,
// which made a new session — of another id when the server minted it —
// and so ran the command twice. This holds for a client-chosen id too,
// even once that id has been started again by another command, and for
// session/fork; the answer the deletion leaves holds nothing of the
// session's content.
func TestStartReplayedAfterDeleteMakesNoSession(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	m := newManager(t, st, newHistModel(), mgrOpts{})
	start := func(p msp.SessionStartParams) (msp.SessionStartResult, error) {
		raw, attach, err := m.StartSession(ctx, newRecSub(), mustJSON(p))
		if err != nil {
			return msp.SessionStartResult{}, err
		}
		attach(ctx)
		var res msp.SessionStartResult
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		return res, nil
	}

	t.Run("server-minted id", func(t *testing.T) {
		p := msp.SessionStartParams{CommandID: cmdID(), WorkspaceRoot: "/private/workspace"}
		res, err := start(p)
		if err != nil {
			t.Fatal(err)
		}
		sid, before := res.Session.SessionID, sessionCount(t, st)
		deleteSession(t, m, sid)
		_, err = start(p)
		wantSessionDeleted(t, "session/start", sid, err)
		if got := sessionCount(t, st); got != before-1 {
			t.Errorf("%d sessions after the replay, want %d", got, before-1)
		}
		left, err := st.Command(ctx, erasedKey(ledgerKey("", p.CommandID)))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(left.Response), "/private/workspace") {
			t.Errorf("the answer left for the replay keeps the session's content: %s", left.Response)
		}
	})

	t.Run("client-chosen id", func(t *testing.T) {
		sid := newID()
		p := msp.SessionStartParams{CommandID: cmdID(), SessionID: sid}
		if _, err := start(p); err != nil {
			t.Fatal(err)
		}
		deleteSession(t, m, sid)
		_, err := start(p)
		wantSessionDeleted(t, "session/start", sid, err)
		if _, err := st.Session(ctx, sid); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the replay made session %s again (%v)", sid, err)
		}
		// Started again by another command: a new incarnation, which the
		// first command's replay does not answer with.
		again, err := start(msp.SessionStartParams{CommandID: cmdID(), SessionID: sid})
		if err != nil || again.Session.SessionID != sid {
			t.Fatalf("starting %s again: %+v, %v", sid, again, err)
		}
		_, err = start(p)
		wantSessionDeleted(t, "session/start", sid, err)
		// A second deletion (of the new incarnation) leaves its own.
		deleteSession(t, m, sid)
	})

	t.Run("session/fork", func(t *testing.T) {
		sub := newRecSub()
		src := startSession(t, m, sub)
		runTurn(t, m, sub, textTurn(src, "one"))
		p := mustJSON(msp.SessionForkParams{CommandID: cmdID(), SessionID: src})
		raw, attach, err := m.ForkSession(ctx, newRecSub(), p)
		if err != nil {
			t.Fatal(err)
		}
		attach(ctx)
		var fork msp.SessionSnapshot
		if err := json.Unmarshal(raw, &fork); err != nil {
			t.Fatal(err)
		}
		before := sessionCount(t, st)
		deleteSession(t, m, fork.Session.SessionID)
		_, _, err = m.ForkSession(ctx, newRecSub(), p)
		wantSessionDeleted(t, "session/fork", fork.Session.SessionID, err)
		if got := sessionCount(t, st); got != before-1 {
			t.Errorf("%d sessions after the replay, want %d", got, before-1)
		}
	})
}

// TestAttachRacingADeletionHearsIt: a resume is answered before its
// subscription registers, so a deletion can run in between. The resumed
// subscriber hears session/deleteCompleted exactly once, as the other
// subscribers do, and is not cut off: whether the erasure ended before
// its subscription began or while it was catching up, whether it takes
// list news (which tell of the deletion too), and on a node that follows
// the session as on its leader, even when that node finds the log gone
// before the leader's news arrives.
func TestAttachRacingADeletionHearsIt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		during   bool // the erasure runs during the subscriber's replay
		follower bool // the subscriber resumes on a node that follows the session
		listens  bool // the subscriber takes its principal's list news
		logGone  bool // the follower's replay finds the log erased before the news arrives
	}{
		{name: "erased before the attach"},
		{name: "erased during the replay", during: true},
		{name: "erased before the attach of a list-taker", listens: true},
		{name: "erased during the replay of a list-taker", during: true, listens: true},
		{name: "erased before a follower's attach", follower: true},
		{name: "erased before a follower's attach of a list-taker", follower: true, listens: true},
		{name: "log gone before a follower's attach", follower: true, logGone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t)
			var m, on *Manager
			if tc.follower {
				_, m, on = twoNodes(t, st, newHistModel())
			} else {
				m = newManager(t, st, newHistModel(), mgrOpts{})
				on = m
			}
			ctx := context.Background()
			owner := newRecSub()
			sid := startSession(t, m, owner)
			first := runTurn(t, m, owner, textTurn(sid, "hello")) // m leads now
			other := newRecSub()                                  // a subscriber of the node the watcher resumes on
			subscribe(t, on, other, sid)
			other.waitTerminal(t, first.TurnID)

			del := msp.SessionDeleteParams{CommandID: cmdID(), SessionID: sid}
			deleteIt := func() {
				_, erase, err := m.DeleteSession(ctx, nil, mustJSON(del))
				if err != nil {
					t.Error(err)
					return
				}
				erase(ctx)
			}
			watcher := &lateSub{recSub: newRecSub(), listens: tc.listens}
			if tc.listens {
				on.Listen(watcher, PrincipalFrom(ctx))
			}
			if tc.during {
				watcher.hook = deleteIt
			}
			from := cursorIn(t, on.store, sid, 0)
			_, attach, err := on.ResumeSession(ctx, watcher, mustJSON(msp.SessionResumeParams{CommandID: cmdID(), SessionID: sid, Cursor: &from}))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.logGone:
				if err := st.DeleteSession(ctx, sid); err != nil {
					t.Fatal(err)
				}
			case !tc.during:
				deleteIt() // the nodes hear of it before this returns
			}
			attach(ctx)
			if tc.logGone {
				deleteIt()
			}

			// Every delivery has been made by now (the hub delivers as it
			// is published); waitCount guards against one that was not.
			got := watcher.waitCount(t, msp.NotifySessionDeleteCompleted, 1)
			if len(got) != 1 {
				t.Fatalf("the resumed subscriber heard the deletion %d times", len(got))
			}
			if p := params[msp.SessionDeleteCompletedParams](t, got[0].Frame); p.Outcome != msp.DeleteCompleted || p.CommandID != del.CommandID || p.SessionID != sid {
				t.Fatalf("the resumed subscriber heard %s", got[0].Frame)
			}
			if watcher.aborted.Load() {
				t.Fatal("the resumed subscriber was cut off")
			}
			if n := len(other.waitCount(t, msp.NotifySessionDeleteCompleted, 1)); n != 1 {
				t.Fatalf("the node's other subscriber heard the deletion %d times", n)
			}
		})
	}
}

// lateSub is a recSub that can be cut off, may take list news, and runs
// hook during its first replayed notification.
type lateSub struct {
	*recSub
	listens bool
	aborted atomic.Bool
	once    sync.Once
	hook    func()
}

func (l *lateSub) Abort(string)     { l.aborted.Store(true) }
func (l *lateSub) Broadcasts() bool { return l.listens }
func (l *lateSub) Replay(ctx context.Context, n Notification) error {
	if l.hook != nil {
		l.once.Do(l.hook)
	}
	return l.recSub.Replay(ctx, n)
}

// blockingErasure holds DeleteSession until release is closed, then fails
// it (the store still whole), as a slow store that times out would.
type blockingErasure struct {
	store.Store
	entered, release chan struct{}
}

func (b blockingErasure) DeleteSession(ctx context.Context, id string) error {
	close(b.entered)
	<-b.release
	return errors.New("delete session: context deadline exceeded")
}

// A session is not unloaded as idle while an erasure runs on it: one that
// failed would take back the deletion of a session no longer in memory.
func TestSessionIsNotUnloadedWhileItsErasureRuns(t *testing.T) {
	var now atomic.Int64
	base := time.Now()
	clock := func() time.Time { return base.Add(time.Duration(now.Load())) }
	st := blockingErasure{Store: openStore(t), entered: make(chan struct{}), release: make(chan struct{})}
	m := newManager(t, st, newHistModel(), mgrOpts{now: clock})
	w := newRecSub()
	sid := startSession(t, m, w)
	m.Detach(w)
	_, erase, err := m.DeleteSession(context.Background(), nil, mustJSON(msp.SessionDeleteParams{CommandID: cmdID(), SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); erase(context.Background()) }()
	<-st.entered
	now.Store(int64(m.cfg.IdleUnload + time.Second))
	n := m.sweep()
	close(st.release)
	<-done
	if n != 0 {
		t.Fatalf("sweep unloaded %d sessions while an erasure ran on one", n)
	}
	m.mu.Lock()
	l := m.sessions[sid]
	m.mu.Unlock()
	if l == nil {
		t.Fatal("the session whose deletion failed is no longer in memory")
	}
}

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

// cutShortErasure cuts its first erasure short after the log's purge, as
// the JetStream store's purges can be: the row reads back Erasing (the
// store's tombstone), the log is gone. A later erasure finishes.
type cutShortErasure struct {
	store.Store
	cut, finished *atomic.Bool
	logKept       bool // cut short before the log's purge
}

func newCutShortErasure(t *testing.T) cutShortErasure {
	return cutShortErasure{Store: openStore(t), cut: new(atomic.Bool), finished: new(atomic.Bool)}
}

func (c cutShortErasure) halfErased() bool { return c.cut.Load() && !c.finished.Load() }

func (c cutShortErasure) logPurged() bool { return c.halfErased() && !c.logKept }

func (c cutShortErasure) DeleteSession(ctx context.Context, id string) error {
	if c.cut.CompareAndSwap(false, true) {
		return errors.New("jetstream: delete session: purge row: context deadline exceeded")
	}
	if err := c.Store.DeleteSession(ctx, id); err != nil {
		return err
	}
	c.finished.Store(true)
	return nil
}

func (c cutShortErasure) Session(ctx context.Context, id string) (store.Session, error) {
	row, err := c.Store.Session(ctx, id)
	row.Erasing = row.Erasing || err == nil && c.halfErased()
	return row, err
}

func (c cutShortErasure) Head(ctx context.Context, id string) (int64, error) {
	if c.logPurged() {
		return 0, nil
	}
	return c.Store.Head(ctx, id)
}

func (c cutShortErasure) Records(ctx context.Context, id string, after int64, limit store.Limit) ([]store.Record, error) {
	if c.logPurged() {
		return nil, nil
	}
	return c.Store.Records(ctx, id, after, limit)
}

// wantGoneUntilErased checks that sid, half-erased, answers
// sessionNotFound on m to a read, a subscription and a turn, and that a
// deletion sent again to m finishes the erasure.
func wantGoneUntilErased(t *testing.T, m *Manager, st cutShortErasure, sid, when string) {
	t.Helper()
	ctx := context.Background()
	_, err := m.ReadSession(ctx, mustJSON(msp.SessionReadParams{SessionID: sid}))
	wantNotFound(t, "session/read "+when, err)
	from := durableCursor(sid, "", 0) // refused before its epoch matters
	wantNotFound(t, "view/subscribe "+when, m.attach(ctx, newRecSub(), sid, from))
	_, _, err = m.StartTurn(ctx, nil, mustJSON(textTurn(sid, "again")))
	wantNotFound(t, "turn/start "+when, err)
	deleteNow(t, m, sid)
	if !st.finished.Load() {
		t.Fatalf("a deletion sent again %s did not finish the erasure", when)
	}
	if _, err := st.Store.Session(ctx, sid); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the row after the erasure finished: %v", err)
	}
}

// TestHalfErasedSessionStaysDeletedAcrossUnloadAndRestart: a session whose
// erasure was cut short, unloaded as idle or read by the next process, is
// read back from its tombstone as half-erased, never as a live session
// with an empty log that would hand out its cursors again.
func TestHalfErasedSessionStaysDeletedAcrossUnloadAndRestart(t *testing.T) {
	for _, restart := range []bool{false, true} {
		var mu sync.Mutex
		now := time.Now()
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		st := newCutShortErasure(t)
		m := newManager(t, st, newHistModel(), mgrOpts{now: clock})
		watcher := newRecSub()
		sid := startSession(t, m, watcher)
		runTurn(t, m, watcher, textTurn(sid, "hello"))
		deleteNow(t, m, sid)
		_, err := m.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid}))
		wantNotFound(t, "session/read of a half-erased session", err)
		m.Detach(watcher)
		if restart {
			m.Close()
			m = newManager(t, st, newHistModel(), mgrOpts{now: clock})
			wantGoneUntilErased(t, m, st, sid, "after a restart")
			continue
		}
		if err := m.WaitIdle(context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		now = now.Add(m.cfg.IdleUnload + time.Second)
		mu.Unlock()
		if n := m.sweep(); n != 1 {
			t.Fatalf("sweep unloaded %d sessions, want the half-erased one", n)
		}
		wantGoneUntilErased(t, m, st, sid, "after an idle unload")
	}
}

// followedTurn starts a session on node a, runs a turn there (a leads it)
// and has node b follow it to the turn's end, with text as the user's.
func followedTurn(t *testing.T, a, b *Manager, text string) (sid string, onB *recSub) {
	t.Helper()
	onA := newRecSub()
	sid = startSession(t, a, onA)
	done := runTurn(t, a, onA, textTurn(sid, text))
	onB = newRecSub()
	subscribe(t, b, onB, sid)
	onB.waitTerminal(t, done.TurnID)
	return sid, onB
}

// halfEraseOnLeader cuts short on node a the erasure of a session that
// node b follows.
func halfEraseOnLeader(t *testing.T) (a, b *Manager, st cutShortErasure, sid string) {
	t.Helper()
	st = newCutShortErasure(t)
	_, a, b = twoNodes(t, st, newHistModel())
	sid, onB := followedTurn(t, a, b, "hello")
	deleteNow(t, a, sid)
	_, err := a.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid}))
	wantNotFound(t, "session/read of a half-erased session on its leader", err)
	if got := onB.waitCount(t, msp.NotifySessionDeleteCompleted, 1); params[msp.SessionDeleteCompletedParams](t, got[0].Frame).Outcome != msp.DeleteFailed {
		t.Fatalf("the follower's reader was told %s, want a failed deletion", got[0].Frame)
	}
	return a, b, st, sid
}

// TestHalfErasedSessionIsGoneOnAFollower: a follower told of a failed
// deletion reads the row, as the leader did, before it serves the
// session again, and finds it half-erased too.
func TestHalfErasedSessionIsGoneOnAFollower(t *testing.T) {
	_, b, st, sid := halfEraseOnLeader(t)
	wantGoneUntilErased(t, b, st, sid, "on a follower")
}

// TestHalfErasedSessionStaysDeletedAcrossHandover: the node that takes a
// half-erased session over from its leader reads it back half-erased.
func TestHalfErasedSessionStaysDeletedAcrossHandover(t *testing.T) {
	a, b, st, sid := halfEraseOnLeader(t)
	a.Close() // lets go of its lease
	wantGoneUntilErased(t, b, st, sid, "after its leader handed it over")
}

// TestTombstonedSessionIsNotRevived: an erasure cut short after the
// store's tombstone but before anything was purged leaves the log whole,
// yet the session stays deleted: the store reads it back Erasing.
func TestTombstonedSessionIsNotRevived(t *testing.T) {
	st := newCutShortErasure(t)
	st.logKept = true
	m := newManager(t, st, newHistModel(), mgrOpts{})
	watcher := newRecSub()
	sid := startSession(t, m, watcher)
	runTurn(t, m, watcher, textTurn(sid, "hello"))
	deleteNow(t, m, sid)
	wantGoneUntilErased(t, m, st, sid, "after a tombstone")
}

// A follower holding a session half-erased hears that a deletion sent
// again finished the erasure: its readers are told, and it forgets the
// session, following included.
func TestFollowerHearsTheHalfErasedSessionFinished(t *testing.T) {
	st := newCutShortErasure(t)
	_, a, b := twoNodes(t, st, newHistModel())
	sid, onB := followedTurn(t, a, b, "hello")
	deleteNow(t, a, sid) // cut short: half-erased
	onB.waitCount(t, msp.NotifySessionDeleteCompleted, 1)
	// The follower finds it half-erased (as settle would, at once).
	_, err := b.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid}))
	wantNotFound(t, "session/read on the follower", err)

	deleteNow(t, b, sid) // forwarded to a, which finishes the erasure
	if !st.finished.Load() {
		t.Fatal("the deletion sent again did not finish the erasure")
	}
	var outcomes []string
	for _, n := range onB.all() {
		if n.Method == msp.NotifySessionDeleteCompleted {
			outcomes = append(outcomes, string(params[msp.SessionDeleteCompletedParams](t, n.Frame).Outcome))
		}
	}
	if len(outcomes) != 2 || outcomes[1] != string(msp.DeleteCompleted) {
		t.Errorf("the follower's reader got deleteCompleted outcomes %v, want [failed completed]", outcomes)
	}
	waitForgotten(t, b, sid)
}

// flakyRows fails Session reads while fail is set, as a store that has
// just failed an erasure may; failed is closed at the first such failure.
type flakyRows struct {
	cutShortErasure
	fail   *atomic.Bool
	failed chan struct{}
	once   *atomic.Bool
}

func (f flakyRows) Session(ctx context.Context, id string) (store.Session, error) {
	if f.fail.Load() {
		if f.once.CompareAndSwap(false, true) {
			defer close(f.failed)
		}
		return store.Session{}, errors.New("store unavailable")
	}
	return f.cutShortErasure.Session(ctx, id)
}

// A follower told of a failed deletion whose first read of the row fails
// (the store has just failed the erasure; it may fail this read too)
// serves nothing of the session until a read says it is whole: not
// view/subscribe, nor its head, nor session/fork, which would copy the log
// the user asked to erase into a new, live session.
func TestFollowerServesNothingOfASessionItIsUnsureIsWhole(t *testing.T) {
	st := newCutShortErasure(t)
	st.logKept = true // tombstoned, nothing purged yet
	_, b, sid, _ := unsettledFollower(t, st)

	ctx := context.Background()
	from := durableCursor(sid, "", 0) // refused before its epoch matters
	if err := b.attach(ctx, newRecSub(), sid, from); err == nil {
		t.Errorf("view/subscribe of the half-erased session on the follower was served")
	}
	if head, err := b.Head(ctx, sid); err == nil {
		t.Errorf("the follower handed out the half-erased session's head %s", head)
	}
	raw, _, err := b.ForkSession(ctx, nil, mustJSON(msp.SessionForkParams{CommandID: cmdID(), SessionID: sid}))
	if err == nil {
		var snap msp.SessionSnapshot
		_ = json.Unmarshal(raw, &snap)
		items, _ := json.Marshal(snap.History.Items)
		t.Errorf("session/fork of the half-erased session on the follower made live session %s holding %s", snap.Session.SessionID, items)
	}
	// The store itself says Erasing all along.
	if row, err := st.Session(ctx, sid); err != nil || !row.Erasing {
		t.Fatalf("the row: %+v, %v; want Erasing", row, err)
	}
}

// A half-erased session whose turn was running when it was deleted is
// loaded from its tombstone with that turn active, and the turn never
// ends (nothing more is written to it): it is unloaded when idle all the
// same, rather than held (with its lease or following) for good.
func TestLoadedTombstoneIsUnloadedWhenIdle(t *testing.T) {
	var mu = new(atomic.Int64)
	base := time.Now()
	clock := func() time.Time { return base.Add(time.Duration(mu.Load())) }
	st := newCutShortErasure(t)
	model := newHistModel()
	m := newManager(t, st, model, mgrOpts{now: clock})
	watcher := newRecSub()
	sid := startSession(t, m, watcher)
	startTurn(t, m, textTurn(sid, "block one"))
	model.waitStarted(t, "block one")
	deleteNow(t, m, sid) // stops the turn, then is cut short
	m.Detach(watcher)
	m.Close()

	m = newManager(t, st, newHistModel(), mgrOpts{now: clock})
	_, err := m.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid}))
	wantNotFound(t, "session/read of the half-erased session", err) // loads it
	if err := m.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Store(int64(m.cfg.IdleUnload + time.Second))
	if n := m.sweep(); n != 1 {
		t.Errorf("sweep unloaded %d sessions, want the idle half-erased one", n)
	}
}

// An erased session leaves no lease held by its leader and no following
// open on its followers.
func TestErasedSessionLeavesNoLeaseNorFollow(t *testing.T) {
	st := openStore(t)
	h, a, b := twoNodes(t, st, newHistModel())
	sid, onB := followedTurn(t, a, b, "hello")
	deleteNow(t, a, sid)
	onB.waitCount(t, msp.NotifySessionDeleteCompleted, 1)
	waitForgotten(t, a, sid)
	waitForgotten(t, b, sid)
	h.mu.Lock()
	lease, follows := h.leases[sid], len(h.followers[sid])
	h.mu.Unlock()
	if lease != "" || follows != 0 {
		t.Errorf("after the erasure: lease held by %q, %d follows open; want none", lease, follows)
	}
}

// waitForgotten waits until m no longer holds session sid (a follower
// forgets an erased session on a goroutine of its own).
func waitForgotten(t *testing.T, m *Manager, sid string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		_, held := m.sessions[sid]
		m.mu.Unlock()
		if !held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still holds the erased session", m.cfg.Cluster.Node())
		}
		runtime.Gosched()
	}
}

// TestDeletionSentAgainToAnUnsettledFollowerFinishes: a follower whose
// read of the row failed when it was told of a failed deletion is unsure
// the session is whole. When its leader has gone, a deletion sent to it
// again is its to run, and it finishes the erasure rather than answer
// that the session is not found.
func TestDeletionSentAgainToAnUnsettledFollowerFinishes(t *testing.T) {
	st := newCutShortErasure(t)
	a, b, sid, onB := unsettledFollower(t, st)
	a.Close() // the leader gone

	ctx := context.Background()
	del := msp.SessionDeleteParams{CommandID: cmdID(), SessionID: sid}
	_, erase, err := b.DeleteSession(ctx, nil, mustJSON(del))
	if err != nil {
		t.Fatalf("session/delete sent again to the follower: %v", err)
	}
	if erase != nil {
		erase(ctx)
	}
	if !st.finished.Load() {
		t.Fatal("the deletion sent again did not finish the erasure")
	}
	got := onB.waitCount(t, msp.NotifySessionDeleteCompleted, 2)
	if p := params[msp.SessionDeleteCompletedParams](t, got[1].Frame); p.Outcome != msp.DeleteCompleted || p.CommandID != del.CommandID {
		t.Fatalf("the follower's reader was told %s, want the deletion completed", got[1].Frame)
	}
	waitForgotten(t, b, sid)
}

// unsettledFollower has node a lead and node b follow a session, then cuts
// its erasure on a short while b's read of the row, on the news, fails:
// b is unsure the session is whole. The store is back when it returns.
func unsettledFollower(t *testing.T, st cutShortErasure) (a, b *Manager, sid string, onB *recSub) {
	t.Helper()
	bStore := flakyRows{cutShortErasure: st, fail: new(atomic.Bool), failed: make(chan struct{}), once: new(atomic.Bool)}
	h := newMemHub()
	a = h.startNode(t, "a", st, newHistModel())
	t.Cleanup(a.Close)
	b = h.startNode(t, "b", bStore, newHistModel())
	t.Cleanup(b.Close)
	sid, onB = followedTurn(t, a, b, "a secret the user erases")
	bStore.fail.Store(true)
	deleteNow(t, a, sid) // cut short: half-erased; b's settle read fails
	<-bStore.failed
	bStore.fail.Store(false)
	return a, b, sid, onB
}
