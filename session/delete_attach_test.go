package session

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"mspd/schema/msp"
)

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
