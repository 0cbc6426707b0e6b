package session

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/store"
)

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
