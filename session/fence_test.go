package session

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/store"
)

// holdBegunStore holds back the row-only commit that marks a retried
// request begun until release is closed (its node paused before the write
// landed), and reports how that commit ended.
type holdBegunStore struct {
	store.Store
	held    chan struct{}
	release chan struct{}
	landed  chan error
}

func (h *holdBegunStore) Commit(ctx context.Context, b store.Batch) error {
	if len(b.Records) == 0 && b.Session != nil {
		var st state
		if json.Unmarshal(b.Session.State, &st) == nil && st.Active != nil && st.Active.Checkpoint != nil &&
			st.Active.Checkpoint.Begun != nil && *st.Active.Checkpoint.Begun {
			close(h.held)
			<-h.release
			err := h.Store.Commit(ctx, b)
			h.landed <- err
			return err
		}
	}
	return h.Store.Commit(ctx, b)
}

// TestStaleLeaderCannotOverwriteTheRow: node a, paused in a retry's
// backoff past its lease, loses the session to b, which resumes the turn
// and ends it. a's row-only commit (marking its retried request begun)
// then lands on a log that moved on: it is refused, and the row b wrote
// stays, with no turn active. Before the fence, a's row put the finished
// turn back, and the next node to adopt the session ran it again.
func TestStaleLeaderCannotOverwriteTheRow(t *testing.T) {
	st := openStore(t)
	h := newMemHub()
	model := newHistModel()
	hold := &holdBegunStore{Store: st, held: make(chan struct{}), release: make(chan struct{}), landed: make(chan error, 1)}
	a := h.startNode(t, "a", hold, model)
	sid := startSession(t, a, newRecSub())
	// Attempt 1 gets a 503 and is retried. The mark is held with the
	// session's lock, so the ack's release (which takes it) must not be
	// waited for here.
	p := textTurn(sid, "busy now")
	p.CommandID = cmdID()
	raw, launch, err := a.StartTurn(context.Background(), nil, mustJSON(p))
	if err != nil {
		t.Fatal(err)
	}
	go launch()
	var ack msp.TurnStartResult
	if err := json.Unmarshal(raw, &ack); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hold.held:
	case <-time.After(10 * time.Second):
		t.Fatal("a never marked its retried request begun")
	}
	h.kill("a") // paused: its leases lapse, and it claims nothing more

	b := h.startNode(t, "b", st, model)
	onB := newRecSub()
	subscribe(t, b, onB, sid)
	if c := onB.waitTerminal(t, ack.TurnID); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("b's terminal %+v", c)
	}
	if act := activeOf(t, st, sid); act != nil {
		t.Fatalf("after b's terminal the row has an active turn %+v", act)
	}
	close(hold.release)
	if err := <-hold.landed; !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a's row-only commit after b's terminal: %v, want ErrConflict", err)
	}
	if act := activeOf(t, st, sid); act != nil {
		t.Fatalf("a's stale row put turn %s back: %+v", act.TurnID, act)
	}
}
