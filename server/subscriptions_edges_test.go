package server

// Tests of the subscription cap's edges, first written by a review of
// 21d0af2: a session erased while a connection attached, a replayed
// command that made a session, a failed erasure.

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"mspd/client"
	"mspd/schema/msp"
	"mspd/store"
)

// pausingStore holds the first Records read of one session, after it has
// read them, until release is closed: a subscription's replay is caught
// between reading the log and registering its subscriber.
type pausingStore struct {
	store.Store
	mu      sync.Mutex
	session string
	entered chan struct{}
	release chan struct{}
}

func (p *pausingStore) arm(sid string) {
	p.mu.Lock()
	p.session, p.entered, p.release = sid, make(chan struct{}), make(chan struct{})
	p.mu.Unlock()
}

func (p *pausingStore) Records(ctx context.Context, sid string, after int64, limit store.Limit) ([]store.Record, error) {
	recs, err := p.Store.Records(ctx, sid, after, limit)
	p.mu.Lock()
	hold := p.session != "" && p.session == sid
	entered, release := p.entered, p.release
	if hold {
		p.session = ""
	}
	p.mu.Unlock()
	if hold {
		close(entered)
		<-release
	}
	return recs, err
}

// TestSubscribeRacingDeleteKeepsNoSlot: a connection's view/subscribe
// (with after) replays the log after its response; when another
// connection of the same principal deletes the session meanwhile, this
// one is not told (erase told the subscribers it had). Its view/unsubscribe
// answers sessionNotFound and must still let go of the view, or the slot
// is lost for the connection's life: at the cap it could follow nothing
// again.
func TestSubscribeRacingDeleteKeepsNoSlot(t *testing.T) {
	var ps *pausingStore
	m, head := testManagerOver(t, func(st store.Store) store.Store { ps = &pausingStore{Store: st}; return ps })
	x := startWithTurns(t, m, head, nopSub{}, 1)
	y := startWithTurns(t, m, head, nopSub{}, 0)

	cs := dialCappedN(t, m, 1, 2)
	a, b := cs[0], cs[1]
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var page msp.ViewPageResult
	if err := a.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: x, Limit: 1}, &page); err != nil || page.NextCursor == nil {
		t.Fatalf("view/page: %v %+v", err, page)
	}

	ps.arm(x)
	if err := a.Call(ctx, msp.MethodViewSubscribe, msp.ViewSubscribeParams{SessionID: x, After: page.NextCursor}, nil); err != nil {
		t.Fatalf("view/subscribe: %v", err)
	}
	select {
	case <-ps.entered:
	case <-ctx.Done():
		t.Fatal("the replay never read the log")
	}
	if err := b.Call(ctx, msp.MethodSessionDelete, msp.SessionDeleteParams{CommandID: client.NewCommandID(), SessionID: x}, nil); err != nil {
		t.Fatalf("session/delete: %v", err)
	}
	waitDeleteCompleted(t, ctx, b, x)
	close(ps.release)

	// Frames are handled in order: this answer comes once the attach ended.
	var list msp.SessionListResult
	if err := a.Call(ctx, msp.MethodSessionList, msp.SessionListParams{}, &list); err != nil {
		t.Fatalf("session/list after the attach: %v", err)
	}
	// The client does what it can to let go of the deleted session.
	err := a.Call(ctx, msp.MethodViewUnsubscribe, msp.ViewUnsubscribeParams{SessionID: x}, nil)
	if me := (*msp.Error)(nil); !errors.As(err, &me) || me.Data.Kind != msp.KindSessionNotFound {
		t.Fatalf("view/unsubscribe of the deleted session: %v, want sessionNotFound", err)
	}
	if err := viewSubscribe(ctx, a, y); err != nil {
		t.Fatalf("view/subscribe of a live session, following no live session (the only one it followed was deleted): %v", err)
	}
}

// TestStartReplayAtTheCapGetsItsAck: a session/start replayed (same
// commandId, same payload) on the connection that follows the session it
// made gets its recorded ack (MSP §4.6: first ack and replay ack are
// indistinguishable). It follows no new session, so the cap does not
// refuse it. Same for session/fork.
func TestStartReplayAtTheCapGetsItsAck(t *testing.T) {
	m, _ := testManager(t)
	c := dialCapped(t, m, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := msp.SessionStartParams{CommandID: client.NewCommandID()}
	var first msp.SessionStartResult
	if err := c.Call(ctx, msp.MethodSessionStart, start, &first); err != nil {
		t.Fatalf("session/start: %v", err)
	}
	fork := msp.SessionForkParams{CommandID: client.NewCommandID(), SessionID: first.Session.SessionID, ExcludeItems: true}
	var forked msp.SessionSnapshot
	if err := c.Call(ctx, msp.MethodSessionFork, fork, &forked); err != nil {
		t.Fatalf("session/fork: %v", err)
	}
	// At the cap: both sessions made are followed.
	var again msp.SessionStartResult
	if err := c.Call(ctx, msp.MethodSessionStart, start, &again); err != nil {
		var me *msp.Error
		errors.As(err, &me)
		t.Fatalf("session/start replayed on the connection following its session: %v (%+v), want its recorded ack", err, me)
	}
	if again.Session.SessionID != first.Session.SessionID {
		t.Fatalf("replay answered session %s, want %s", again.Session.SessionID, first.Session.SessionID)
	}
	var forkedAgain msp.SessionSnapshot
	if err := c.Call(ctx, msp.MethodSessionFork, fork, &forkedAgain); err != nil {
		t.Fatalf("session/fork replayed on the connection following its fork: %v, want its recorded ack", err)
	}
}

// failingErasure fails every session erasure, as a full disk would.
type failingErasure struct{ store.Store }

func (failingErasure) DeleteSession(context.Context, string) error {
	return errors.New("sqlite: writes are failing: SQLITE_FULL")
}

// TestFailedDeleteKeepsTheSlot: a deletion that fails leaves the session
// and this connection among its subscribers, so its slot stays taken
// until the client lets go of it, which it can: the session is there, and
// its deletion can be tried again.
func TestFailedDeleteKeepsTheSlot(t *testing.T) {
	m, head := testManagerOver(t, func(st store.Store) store.Store { return failingErasure{st} })
	x := startWithTurns(t, m, head, nopSub{}, 0)
	y := startWithTurns(t, m, head, nopSub{}, 0)
	c := dialCapped(t, m, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := viewSubscribe(ctx, c, x); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, msp.MethodSessionDelete, msp.SessionDeleteParams{CommandID: client.NewCommandID(), SessionID: x}, nil); err != nil {
		t.Fatalf("session/delete: %v", err)
	}
	for {
		n, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for session/deleteCompleted: %v", err)
		}
		var p msp.SessionDeleteCompletedParams
		if n.Method != msp.NotifySessionDeleteCompleted || json.Unmarshal(n.Params, &p) != nil {
			continue
		}
		if p.Outcome != msp.DeleteFailed {
			t.Fatalf("deletion outcome %q, want %q", p.Outcome, msp.DeleteFailed)
		}
		break
	}
	wantCapped(t, viewSubscribe(ctx, c, y), 1, "view/subscribe while the session whose deletion failed is followed")
	if err := c.Call(ctx, msp.MethodViewUnsubscribe, msp.ViewUnsubscribeParams{SessionID: x}, nil); err != nil {
		t.Fatalf("view/unsubscribe of the session whose deletion failed: %v", err)
	}
	if err := viewSubscribe(ctx, c, y); err != nil {
		t.Fatalf("view/subscribe after letting go of the session whose deletion failed: %v", err)
	}
	if err := c.Call(ctx, msp.MethodSessionDelete, msp.SessionDeleteParams{CommandID: client.NewCommandID(), SessionID: x}, nil); err != nil {
		t.Fatalf("session/delete tried again after it failed: %v", err)
	}
}
