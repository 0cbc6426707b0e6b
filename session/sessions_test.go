package session

// Tests of starting and resuming sessions (sessions.go).

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"mspd/schema/msp"
)

// TestSessionIDConflictUnderConcurrency: §5 item 10 — a session/start
// naming an existing sessionId is refused session_id_conflict. The check
// (store.Session) and the write (an upsert) are not atomic and hold no
// lock keyed by sessionId, so concurrent starts of one id with different
// commandIds all succeed: each is acked, each broadcasts session/started,
// and the last upsert silently overwrites the others' session row.
func TestSessionIDConflictUnderConcurrency(t *testing.T) {
	st := openStore(t)
	m := newManager(t, st, newHistModel(), mgrOpts{})
	for round := 0; round < 10; round++ {
		sid := uuid.Must(uuid.NewV7()).String()
		const n = 8
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := 0
		start := make(chan struct{})
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				raw := mustJSON(msp.SessionStartParams{CommandID: uuid.Must(uuid.NewV7()).String(), SessionID: sid})
				if _, _, err := m.StartSession(context.Background(), newRecSub(), raw); err == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		if ok != 1 {
			t.Fatalf("round %d: %d concurrent session/start calls for sessionId %s succeeded, want exactly 1 (the rest session_id_conflict)", round, ok, sid)
		}
	}
}

// TestRefusedResumeKeepsTheSubscription: a request that is refused has no
// effect. ResumeSession detaches the caller from the session before it
// asks the ledger (manager.go: `s.detach(sub)` ahead of ledger.run), so a
// resume refused as command_id_conflict (or failing to record) silently
// ends the connection's existing subscription: the error tells the client
// nothing about it, and the session's later events never reach it.
func TestRefusedResumeKeepsTheSubscription(t *testing.T) {
	m := newManager(t, openStore(t), newHistModel(), mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub) // auto-subscribed

	// A resume refused for its cursor (one from another session).
	bad := durableCursor(newID(), newEpoch(), 1)
	_, _, err := m.ResumeSession(context.Background(), sub, mustJSON(msp.SessionResumeParams{CommandID: cmdID(), SessionID: sid, Cursor: &bad}))
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Reason != msp.ReasonMissingAnchor {
		t.Fatalf("resume with a foreign cursor: %v", err)
	}
	startTurn(t, m, textTurn(sid, "x"))
	deadline := time.After(2 * time.Second)
	for {
		for _, n := range sub.all() {
			if n.Method == msp.NotifyTurnCompleted {
				return
			}
		}
		select {
		case <-sub.signal:
		case <-deadline:
			t.Fatal("after a refused session/resume the connection no longer receives the session's events")
		}
	}
}
