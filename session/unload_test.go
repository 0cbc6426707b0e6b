package session

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/store/sqlite"
)

// TestIdleSessionsUnload: a session with no subscriber and no turn leaves
// memory after IdleUnload and comes back whole from the store; one with a
// subscriber or a running turn stays.
func TestIdleSessionsUnload(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	model := newHistModel()
	m := newManager(t, st, model, mgrOpts{now: clock})

	watched := newRecSub()
	startSession(t, m, watched)
	sub := newRecSub()
	idle := startSession(t, m, sub)
	ack := startTurn(t, m, msp.TurnStartParams{SessionID: idle, Input: []msp.TurnInputPart{{Type: "text", Text: "hello"}}})
	sub.waitTerminal(t, ack.TurnID)
	if err := m.Unsubscribe(context.Background(), sub, idle); err != nil {
		t.Fatal(err)
	}
	if err := m.WaitIdle(context.Background()); err != nil { // its worker has let go
		t.Fatal(err)
	}

	if n := m.sweep(); n != 0 {
		t.Fatalf("unloaded %d sessions before they were idle long enough", n)
	}
	advance(m.cfg.IdleUnload + time.Second)
	if n := m.sweep(); n != 1 {
		t.Fatalf("unloaded %d sessions, want only the unwatched one", n)
	}
	if got := m.Stats().LoadedSessions; got != 1 {
		t.Fatalf("%d sessions loaded, want the watched one", got)
	}
	// The unloaded session comes back whole: its history reaches the model.
	again := newRecSub()
	subscribe(t, m, again, idle)
	ack = startTurn(t, m, msp.TurnStartParams{SessionID: idle, Input: []msp.TurnInputPart{{Type: "text", Text: "again"}}})
	again.waitTerminal(t, ack.TurnID)
	h := model.historyOf(t, "again")
	if len(h) != 3 || h[0].Text != "hello" || h[1].Text != "re: hello" {
		t.Fatalf("history after reload: %+v", h)
	}
}
