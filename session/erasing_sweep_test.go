package session

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/store"
)

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
