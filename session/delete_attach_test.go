package session

import (
	"context"
	"testing"

	"mspd/schema/msp"
)

// TestAttachRacingADeletionHearsIt: a resume is answered before its
// subscription registers, so a deletion can run in between. The resumed
// subscriber hears session/deleteCompleted as the other subscribers do,
// and is not cut off, whether the erasure ended before its subscription
// began or while it was catching up, and on a node that follows the
// session as on its leader.
func TestAttachRacingADeletionHearsIt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		during   bool // the erasure runs during the subscriber's replay
		follower bool // the subscriber resumes on a node that follows the session
	}{
		{"erased before the attach", false, false},
		{"erased during the replay", true, false},
		{"erased before a follower's attach", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m, on *Manager
			if tc.follower {
				_, m, on = twoNodes(t, openStore(t), newHistModel())
			} else {
				m = newManager(t, openStore(t), newHistModel(), mgrOpts{})
				on = m
			}
			owner := newRecSub()
			sid := startSession(t, m, owner)
			first := runTurn(t, m, owner, textTurn(sid, "hello")) // m leads now
			other := newRecSub()                                  // a subscriber of the node the watcher resumes on
			subscribe(t, on, other, sid)
			other.waitTerminal(t, first.TurnID)

			del := msp.SessionDeleteParams{CommandID: cmdID(), SessionID: sid}
			deleteNow := func() {
				_, erase, err := m.DeleteSession(context.Background(), nil, mustJSON(del))
				if err != nil {
					t.Error(err)
					return
				}
				erase(context.Background())
			}
			watcher := &abortSub{recSub: newRecSub()}
			var sub Subscriber = watcher
			if tc.during {
				sub = &abortingHookSub{hookSub: &hookSub{recSub: watcher.recSub, hook: deleteNow}, abortSub: watcher}
			}
			from := durableCursor(sid, 0)
			_, attach, err := on.ResumeSession(context.Background(), sub, mustJSON(msp.SessionResumeParams{CommandID: cmdID(), SessionID: sid, Cursor: &from}))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.during {
				deleteNow()
				other.waitCount(t, msp.NotifySessionDeleteCompleted, 1) // the node the watcher is on has heard
			}
			attach(context.Background())

			got := watcher.waitCount(t, msp.NotifySessionDeleteCompleted, 1)
			if p := params[msp.SessionDeleteCompletedParams](t, got[0].Frame); p.Outcome != msp.DeleteCompleted || p.CommandID != del.CommandID || p.SessionID != sid {
				t.Fatalf("the resumed subscriber heard %s", got[0].Frame)
			}
			if watcher.aborted.Load() {
				t.Fatal("the resumed subscriber was cut off")
			}
			if n := len(owner.waitCount(t, msp.NotifySessionDeleteCompleted, 1)); n != 1 {
				t.Fatalf("the session's own subscriber heard the deletion %d times", n)
			}
		})
	}
}

// abortingHookSub is a hookSub that can be cut off.
type abortingHookSub struct {
	*hookSub
	*abortSub
}

func (a *abortingHookSub) Deliver(n Notification) { a.hookSub.Deliver(n) }
func (a *abortingHookSub) Replay(ctx context.Context, n Notification) error {
	return a.hookSub.Replay(ctx, n)
}
func (a *abortingHookSub) Subscribed(id, from string) { a.hookSub.Subscribed(id, from) }
func (a *abortingHookSub) Broadcasts() bool           { return false }
