package session

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"mspd/schema/msp"
	"mspd/store"
)

// logReads counts the reads of session logs made through it.
type logReads struct {
	store.Store
	n atomic.Int64
}

func (c *logReads) Records(ctx context.Context, id string, after int64, limit store.Limit) ([]store.Record, error) {
	c.n.Add(1)
	return c.Store.Records(ctx, id, after, limit)
}

func (c *logReads) RecordsBefore(ctx context.Context, id string, before int64, limit store.Limit) ([]store.Record, error) {
	c.n.Add(1)
	return c.Store.RecordsBefore(ctx, id, before, limit)
}

func (c *logReads) Head(ctx context.Context, id string) (int64, error) {
	c.n.Add(1)
	return c.Store.Head(ctx, id)
}

// startSessionAs starts a session on m as ctx's principal.
func startSessionAs(t *testing.T, m *Manager, ctx context.Context) string {
	t.Helper()
	raw, _, err := m.StartSession(ctx, nil, mustJSON(msp.SessionStartParams{CommandID: cmdID()}))
	if err != nil {
		t.Fatal(err)
	}
	var started msp.SessionStartResult
	if err := json.Unmarshal(raw, &started); err != nil {
		t.Fatal(err)
	}
	return started.Session.SessionID
}

// Another principal's request for a session that is not in memory is
// refused from the session's row: its log is not read and replayed, and
// the session is not loaded, so the request costs what one for a session
// that does not exist costs (it loaded the whole session, then refused).
func TestAnotherPrincipalLoadsNothing(t *testing.T) {
	st := openStore(t)
	alice := WithPrincipal(context.Background(), "alice")
	bob := WithPrincipal(context.Background(), "bob")
	sid := startSessionAs(t, newManager(t, st, newHistModel(), mgrOpts{}), alice)

	counted := &logReads{Store: st}
	m := newManager(t, counted, newHistModel(), mgrOpts{})
	before := counted.n.Load()
	_, err := m.ReadSession(bob, mustJSON(msp.SessionReadParams{SessionID: sid}))
	wantNotFound(t, "session/read", err)
	if n := counted.n.Load() - before; n != 0 {
		t.Errorf("refusing bob read alice's log %d times", n)
	}
	m.mu.Lock()
	_, loaded := m.sessions[sid]
	m.mu.Unlock()
	if loaded {
		t.Error("refusing bob loaded alice's session")
	}
	if _, err := m.ReadSession(alice, mustJSON(msp.SessionReadParams{SessionID: sid})); err != nil {
		t.Fatalf("alice's own read: %v", err)
	}
}

// On a cluster, another principal's request is refused before its node
// claims the session's lease, whether or not the node has the session in
// memory as a follower: it made that node the session's leader (a load, a
// catch-up, a turn resumed), on behalf of someone who may not see it.
func TestAnotherPrincipalClaimsNoLease(t *testing.T) {
	for _, followed := range []bool{false, true} {
		st := openStore(t)
		h := newMemHub()
		model := newHistModel()
		alice := WithPrincipal(context.Background(), "alice")
		bob := WithPrincipal(context.Background(), "bob")
		sid := startSessionAs(t, h.startNode(t, "a", st, model), alice)
		h.kill("a") // its lease lapses: the next claim takes the session
		b := startQuietNode(t, memNode{h, "b"}, st, model)
		if followed {
			if _, err := b.ReadSession(alice, mustJSON(msp.SessionReadParams{SessionID: sid})); err != nil {
				t.Fatal(err)
			}
		}
		rename := func(who context.Context) error {
			_, err := b.RenameSession(who, mustJSON(msp.SessionRenameParams{CommandID: cmdID(), SessionID: sid, Name: "mine"}))
			return err
		}
		h.mu.Lock()
		before := h.leases[sid]
		h.mu.Unlock()
		wantNotFound(t, "session/rename", rename(bob))
		h.mu.Lock()
		after := h.leases[sid]
		h.mu.Unlock()
		if after != before {
			t.Errorf("followed %v: bob's request moved the lease of alice's session from %q to %q", followed, before, after)
		}
		if err := rename(alice); err != nil {
			t.Fatalf("followed %v: alice's own rename: %v", followed, err)
		}
	}
}

// On a cluster, a replayed session/delete (its ack lost) gets its recorded
// ack after the erasure: the session's row is gone, and the owner check
// must leave the answer to the ledger rather than refuse it.
func TestClusterDeleteReplayGetsItsAck(t *testing.T) {
	h := newMemHub()
	alice := WithPrincipal(context.Background(), "alice")
	a := h.startNode(t, "a", openStore(t), newHistModel())
	sid := startSessionAs(t, a, alice)
	params := mustJSON(msp.SessionDeleteParams{CommandID: cmdID(), SessionID: sid})
	ack, erase, err := a.DeleteSession(alice, nil, params)
	if err != nil {
		t.Fatal(err)
	}
	erase(context.Background())
	again, _, err := a.DeleteSession(alice, nil, params)
	if err != nil || string(again) != string(ack) {
		t.Fatalf("replayed delete on a cluster: %s, %v; want %s", again, err, ack)
	}
}
