package session

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"mspd/schema/msp"
	"mspd/store"
)

// startAs starts a session of the given id as ctx's principal.
func startAs(t *testing.T, m *Manager, ctx context.Context, id string) (msp.SessionStartResult, error) {
	t.Helper()
	raw, _, err := m.StartSession(ctx, newRecSub(), mustJSON(msp.SessionStartParams{CommandID: cmdID(), SessionID: id}))
	var res msp.SessionStartResult
	if err == nil {
		err = json.Unmarshal(raw, &res)
	}
	return res, err
}

// turnAs runs one turn of session id as ctx's principal to its end.
func turnAs(t *testing.T, m *Manager, ctx context.Context, id, text string) {
	t.Helper()
	sub := newRecSub()
	_, attach, err := m.ResumeSession(ctx, sub, mustJSON(msp.SessionResumeParams{SessionID: id}))
	if err != nil {
		t.Fatal(err)
	}
	attach(ctx)
	p := textTurn(id, text)
	p.CommandID = cmdID()
	ack, launch, err := m.StartTurn(ctx, nil, mustJSON(p))
	if err != nil {
		t.Fatal(err)
	}
	launch()
	var res msp.TurnStartResult
	if err := json.Unmarshal(ack, &res); err != nil {
		t.Fatal(err)
	}
	sub.waitTerminal(t, res.TurnID)
}

// userTexts is what a session's history holds of its user messages.
func userTexts(t *testing.T, m *Manager, ctx context.Context, id string) []string {
	t.Helper()
	raw, _, err := m.ResumeSession(ctx, newRecSub(), mustJSON(msp.SessionResumeParams{SessionID: id}))
	if err != nil {
		t.Fatalf("resume %s: %v", id, err)
	}
	var snap msp.SessionSnapshot
	if err := json.Unmarshal(raw, &snap); err != nil {
		t.Fatal(err)
	}
	if snap.Session.SessionID != id {
		t.Fatalf("resume of %s answers for session %s", id, snap.Session.SessionID)
	}
	var texts []string
	for _, it := range snap.History.Items {
		if it.Kind == msp.ItemUserMessage {
			texts = append(texts, deref(it.Text))
		}
	}
	return texts
}

// TestSessionIDsAreScopedByPrincipal: a sessionId names a session of the
// caller's own. Bob's session/start of the id alice's session has is
// answered as for an id nobody uses — his own session of that id — and
// the two never meet: turns, resume, list, delete.
func TestSessionIDsAreScopedByPrincipal(t *testing.T) {
	m := newManager(t, openStore(t), newHistModel(), mgrOpts{})
	alice := WithPrincipal(context.Background(), "alice")
	bob := WithPrincipal(context.Background(), "bob")
	x, fresh := uuid.NewString(), uuid.NewString()
	if _, err := startAs(t, m, alice, x); err != nil {
		t.Fatal(err)
	}
	// Her key, named as an id by the principal whose ids are keys, is
	// refused as her session's id is.
	_, _, err := m.ResumeSession(context.Background(), newRecSub(), mustJSON(msp.SessionResumeParams{SessionID: sessionKey("alice", x)}))
	wantNotFound(t, "resume by key", err)
	// Bob starts alice's id as he starts one nobody has.
	for _, id := range []string{x, fresh} {
		res, err := startAs(t, m, bob, id)
		var at cursor
		if err == nil {
			at, err = parseCursor(res.ViewCursor)
		}
		if err != nil || res.Session.SessionID != id || at.session != id || at.seq != 0 || at.sub != 0 {
			t.Fatalf("bob's start of %s: %+v, %v; want his new session of that id", id, res, err)
		}
	}
	// Each principal's own id, started again, is refused alike.
	for _, ctx := range []context.Context{alice, bob} {
		_, err := startAs(t, m, ctx, x)
		var me *msp.Error
		if !errors.As(err, &me) || me.Data.Kind != msp.KindCommandRejected {
			t.Fatalf("%s's second start of %s: %v, want session_id_conflict", PrincipalFrom(ctx), x, err)
		}
	}
	turnAs(t, m, alice, x, "alice's")
	turnAs(t, m, bob, x, "bob's")
	if got := userTexts(t, m, alice, x); len(got) != 1 || got[0] != "alice's" {
		t.Fatalf("alice's %s holds %q", x, got)
	}
	if got := userTexts(t, m, bob, x); len(got) != 1 || got[0] != "bob's" {
		t.Fatalf("bob's %s holds %q", x, got)
	}
	list := func(ctx context.Context) []string {
		res, err := m.ListSessions(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range res.Sessions {
			ids = append(ids, s.SessionID)
		}
		return ids
	}
	if got := list(alice); len(got) != 1 || got[0] != x {
		t.Fatalf("alice lists %v, want [%s]", got, x)
	}
	if got := list(bob); len(got) != 2 {
		t.Fatalf("bob lists %v, want %s and %s", got, x, fresh)
	}
	// Bob deletes his: alice's stays whole, his reads as an id nobody uses.
	_, erase, err := m.DeleteSession(bob, nil, mustJSON(msp.SessionDeleteParams{CommandID: cmdID(), SessionID: x}))
	if err != nil {
		t.Fatal(err)
	}
	erase(bob)
	_, _, err = m.ResumeSession(bob, newRecSub(), mustJSON(msp.SessionResumeParams{SessionID: x}))
	wantNotFound(t, "resume of a deleted session", err)
	if got := userTexts(t, m, alice, x); len(got) != 1 || got[0] != "alice's" {
		t.Fatalf("alice's %s after bob's deletion holds %q", x, got)
	}
	// A fork is the forker's: kept under its scope, listed for it alone.
	raw, _, err := m.ForkSession(alice, newRecSub(), mustJSON(msp.SessionForkParams{CommandID: cmdID(), SessionID: x}))
	if err != nil {
		t.Fatal(err)
	}
	var forked msp.SessionSnapshot
	if err := json.Unmarshal(raw, &forked); err != nil {
		t.Fatal(err)
	}
	if got := userTexts(t, m, alice, forked.Session.SessionID); len(got) != 1 || got[0] != "alice's" {
		t.Fatalf("alice's fork holds %q", got)
	}
	_, _, err = m.ResumeSession(bob, newRecSub(), mustJSON(msp.SessionResumeParams{SessionID: forked.Session.SessionID}))
	wantNotFound(t, "bob's resume of alice's fork", err)
}

// TestUnscopedSessionsStayTheirOwners: a session started before sessions
// were scoped is kept under its bare id; its owner still reaches it there
// (and cannot start its id again), lists it under that id, and another
// principal is answered as for an id nobody uses.
func TestUnscopedSessionsStayTheirOwners(t *testing.T) {
	st := openStore(t)
	x := uuid.NewString()
	now := time.Now()
	raw, err := json.Marshal(state{CreatedAt: now, UpdatedAt: now, Owner: "alice", Name: "old"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(context.Background(), store.Batch{SessionID: x, Session: &store.Session{ID: x, Owner: "alice", CreatedAt: now, UpdatedAt: now, State: raw}}); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, st, newHistModel(), mgrOpts{})
	alice := WithPrincipal(context.Background(), "alice")
	bob := WithPrincipal(context.Background(), "bob")

	_, _, err = m.ResumeSession(bob, newRecSub(), mustJSON(msp.SessionResumeParams{SessionID: x}))
	wantNotFound(t, "resume", err)
	turnAs(t, m, alice, x, "still mine")
	if got := userTexts(t, m, alice, x); len(got) != 1 || got[0] != "still mine" {
		t.Fatalf("alice's old session holds %q", got)
	}
	if _, err := startAs(t, m, alice, x); err == nil {
		t.Fatal("alice started her old session's id again")
	}
	res, err := m.ListSessions(alice, nil)
	if err != nil || len(res.Sessions) != 1 || res.Sessions[0].SessionID != x || res.Sessions[0].Name != "old" {
		t.Fatalf("alice lists %+v, %v; want her old session %s", res.Sessions, err, x)
	}
	if _, err := m.store.Session(context.Background(), x); err != nil {
		t.Fatalf("the old session moved: %v", err)
	}
	if res, err := startAs(t, m, bob, x); err != nil || res.Session.SessionID != x {
		t.Fatalf("bob's start of alice's old id: %+v, %v; want his own", res, err)
	}
	_, erase, err := m.DeleteSession(alice, nil, mustJSON(msp.SessionDeleteParams{CommandID: cmdID(), SessionID: x}))
	if err != nil {
		t.Fatal(err)
	}
	erase(alice)
	if _, err := m.store.Session(context.Background(), x); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("alice's old session after its deletion: %v", err)
	}
	if got := userTexts(t, m, bob, x); len(got) != 0 {
		t.Fatalf("bob's session %s holds %q", x, got)
	}
}

// TestClusterKeepsPrincipalsSessionsApart: on two nodes, alice's session
// X and bob's are leased, led and followed apart: each has its own
// leader, a turn forwarded to bob's leader runs on his, and a follower's
// reader of one hears that session's events alone, named by X.
func TestClusterKeepsPrincipalsSessionsApart(t *testing.T) {
	st := openStore(t)
	h, a, b := twoNodes(t, st, newHistModel())
	alice := WithPrincipal(context.Background(), "alice")
	bob := WithPrincipal(context.Background(), "bob")
	x := uuid.NewString()
	if _, err := startAs(t, a, alice, x); err != nil {
		t.Fatal(err)
	}
	if _, err := startAs(t, b, bob, x); err != nil {
		t.Fatal(err)
	}
	turnAs(t, a, alice, x, "alice's") // a leads alice's X
	turnAs(t, b, bob, x, "bob's")     // b leads bob's
	for who, want := range map[string]string{"alice": "a", "bob": "b"} {
		if leader, _ := (memNode{h, "a"}).Leader(context.Background(), sessionKey(who, x)); leader != want {
			t.Fatalf("%s's %s is led by %q, want %q", who, x, leader, want)
		}
	}
	// Alice's reader on b follows her session; bob's turn, forwarded
	// from a to b, reaches it not.
	onB := newRecSub()
	from := cursorAs(t, st, "alice", x, 0)
	if err := b.attach(alice, onB, x, from); err != nil {
		t.Fatal(err)
	}
	turnAs(t, a, bob, x, "bob's again")
	turnAs(t, b, alice, x, "alice's again")
	if got := userTexts(t, a, bob, x); !slices.Equal(got, []string{"bob's", "bob's again"}) {
		t.Fatalf("bob's %s holds %q", x, got)
	}
	if got := userTexts(t, b, alice, x); !slices.Equal(got, []string{"alice's", "alice's again"}) {
		t.Fatalf("alice's %s holds %q", x, got)
	}
	for _, n := range onB.all() {
		if n.SessionID != x || strings.Contains(string(n.Frame), "bob's") {
			t.Fatalf("alice's reader on b got %s of session %q: %s", n.Method, n.SessionID, n.Frame)
		}
	}
}

// TestScopedSessionResumesAfterRestart: a principal's busy session, kept
// under its scoped key, is recovered by the next process under its own
// sessionId: its turn resumes, and its events name it as before.
func TestScopedSessionResumesAfterRestart(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	alice := WithPrincipal(context.Background(), "alice")
	m1 := newManager(t, st, model, mgrOpts{})
	x := uuid.NewString()
	if _, err := startAs(t, m1, alice, x); err != nil {
		t.Fatal(err)
	}
	p := textTurn(x, "crash")
	p.CommandID = cmdID()
	raw, launch, err := m1.StartTurn(alice, nil, mustJSON(p))
	if err != nil {
		t.Fatal(err)
	}
	launch()
	var ack msp.TurnStartResult
	if err := json.Unmarshal(raw, &ack); err != nil {
		t.Fatal(err)
	}
	model.waitStarted(t, "crash")
	m1.Close()

	m2 := newManager(t, st, model, mgrOpts{})
	sub := newRecSub()
	from := cursorAs(t, st, "alice", x, 0)
	if err := m2.attach(alice, sub, x, from); err != nil {
		t.Fatal(err)
	}
	if c := sub.waitTerminal(t, ack.TurnID); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("the resumed turn ended %+v", c)
	}
	for _, n := range sub.all() {
		if n.SessionID != x || !strings.HasPrefix(n.Cursor, "v:"+x+":") {
			t.Fatalf("%s names session %q at %s, want %s", n.Method, n.SessionID, n.Cursor, x)
		}
	}
}
