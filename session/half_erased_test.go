package session

import (
	"context"
	"errors"
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

func (c cutShortErasure) Records(ctx context.Context, id string, after int64, limit int) ([]store.Record, error) {
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
	from := durableCursor(sid, 0)
	wantNotFound(t, "view/subscribe "+when, m.Subscribe(ctx, newRecSub(), sid, &from))
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

// halfEraseOnLeader cuts short on node a the erasure of a session that
// node b follows.
func halfEraseOnLeader(t *testing.T) (a, b *Manager, st cutShortErasure, sid string) {
	t.Helper()
	st = newCutShortErasure(t)
	_, a, b = twoNodes(t, st, newHistModel())
	onA := newRecSub()
	sid = startSession(t, a, onA)
	done := runTurn(t, a, onA, textTurn(sid, "hello")) // a leads
	onB := newRecSub()
	subscribe(t, b, onB, sid)
	onB.waitTerminal(t, done.TurnID)
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
