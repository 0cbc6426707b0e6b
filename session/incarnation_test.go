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

// startIncarnation starts a session of the client-chosen id sid with
// command cmd and subscribes sub to it; it returns the result.
func startIncarnation(t *testing.T, m *Manager, sub Subscriber, sid, cmd string) msp.SessionStartResult {
	t.Helper()
	ctx := context.Background()
	raw, attach, err := m.StartSession(ctx, sub, mustJSON(msp.SessionStartParams{CommandID: cmd, SessionID: sid}))
	if err != nil {
		t.Fatalf("session/start %s: %v", sid, err)
	}
	var res msp.SessionStartResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	attach(ctx)
	return res
}

// deleteSession deletes sid and waits for its erasure.
func deleteSession(t *testing.T, m *Manager, sid string) {
	t.Helper()
	ctx := context.Background()
	_, erase, err := m.DeleteSession(ctx, nil, mustJSON(msp.SessionDeleteParams{CommandID: cmdID(), SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	erase(ctx)
}

// wantMissingAnchor checks that err refuses a cursor as unknown.
func wantMissingAnchor(t *testing.T, what string, err error) {
	t.Helper()
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindNotFound || me.Data.Reason != msp.ReasonMissingAnchor {
		t.Errorf("%s with a cursor of the deleted incarnation: got %v, want notFound missingAnchor", what, err)
	}
}

// TestCursorsOfAnEarlierIncarnationAreRefused: a session id started,
// deleted and started again is a new incarnation. None of its cursors
// repeats one of the first, and a cursor of the first is refused
// missingAnchor by session/resume, view/subscribe and view/page rather
// than taken as a position in the second (which skipped its first turn).
func TestCursorsOfAnEarlierIncarnationAreRefused(t *testing.T) {
	m := newManager(t, openStore(t), newHistModel(), mgrOpts{})
	sid := newID()
	first := newRecSub()
	startIncarnation(t, m, first, sid, cmdID())
	runTurn(t, m, first, textTurn(sid, "one"))
	seen := map[string]bool{}
	for _, n := range first.all() {
		seen[n.Cursor] = true
	}
	old := first.all()[len(first.all())-1].Cursor
	deleteSession(t, m, sid)

	second := newRecSub()
	res := startIncarnation(t, m, second, sid, cmdID())
	if seen[res.ViewCursor] {
		t.Errorf("the second incarnation starts at %s, a cursor of the first", res.ViewCursor)
	}
	runTurn(t, m, second, textTurn(sid, "two"))
	runTurn(t, m, second, textTurn(sid, "three"))
	for _, n := range second.all() {
		if n.Cursor != "" && seen[n.Cursor] {
			t.Errorf("%s of the second incarnation repeats cursor %s of the first", n.Method, n.Cursor)
		}
	}

	ctx := context.Background()
	_, _, err := m.ResumeSession(ctx, newRecSub(), mustJSON(msp.SessionResumeParams{CommandID: cmdID(), SessionID: sid, Cursor: &old}))
	wantMissingAnchor(t, "session/resume", err)
	_, _, err = m.Subscribe(ctx, newRecSub(), sid, &old)
	wantMissingAnchor(t, "view/subscribe", err)
	_, err = m.Page(ctx, msp.ViewPageParams{SessionID: sid, Cursor: &old, Limit: 10})
	wantMissingAnchor(t, "view/page", err)
	_, err = m.Page(ctx, msp.ViewPageParams{SessionID: sid, Cursor: &old, Limit: 10, Direction: msp.Backward})
	wantMissingAnchor(t, "view/page backward", err)

	// The second incarnation's own cursors are served.
	mine := second.all()[len(second.all())-1].Cursor
	if _, _, err := m.Subscribe(ctx, newRecSub(), sid, &mine); err != nil {
		t.Errorf("view/subscribe after the second incarnation's last cursor: %v", err)
	}
}

// TestAForkHasItsOwnEpoch: a fork's copied records carry the fork's
// cursors, of an epoch of its own, and the source's cursors are refused
// by the fork.
func TestAForkHasItsOwnEpoch(t *testing.T) {
	st := openStore(t)
	m := newManager(t, st, newHistModel(), mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	runTurn(t, m, sub, textTurn(sid, "one"))
	raw, attach, err := m.ForkSession(context.Background(), newRecSub(), mustJSON(msp.SessionForkParams{CommandID: cmdID(), SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	attach(context.Background())
	var fork msp.SessionSnapshot
	if err := json.Unmarshal(raw, &fork); err != nil {
		t.Fatal(err)
	}
	src, dst := cursorIn(t, st, sid, 1), cursorIn(t, st, fork.Session.SessionID, 1)
	if at, _ := parseCursor(src); at.epoch == "" {
		t.Fatalf("the source's cursor %s has no epoch", src)
	}
	if a, b := mustParse(t, src), mustParse(t, dst); a.epoch == b.epoch {
		t.Errorf("the fork shares its source's epoch %s", a.epoch)
	}
	for _, r := range records(t, st, fork.Session.SessionID) {
		var h msp.ViewHeader
		if err := json.Unmarshal(r.Params, &h); err != nil {
			t.Fatal(err)
		}
		if want := cursorIn(t, st, fork.Session.SessionID, r.Seq); h.ViewCursor != want {
			t.Errorf("copied record %d: cursor %s, want %s", r.Seq, h.ViewCursor, want)
		}
	}
	foreign := "v:" + fork.Session.SessionID + ":" + mustParse(t, src).epoch + "-1"
	_, err = m.Page(context.Background(), msp.ViewPageParams{SessionID: fork.Session.SessionID, Cursor: &foreign, Limit: 10})
	wantMissingAnchor(t, "view/page of the fork", err)
}

func mustParse(t *testing.T, c string) cursor {
	t.Helper()
	at, err := parseCursor(c)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// TestASessionWithoutAnEpochKeepsItsCursors: a session an older build made
// has no epoch in its state; its cursors keep the old form and are served.
func TestASessionWithoutAnEpochKeepsItsCursors(t *testing.T) {
	st := openStore(t)
	sid := newID()
	now := time.Now()
	old, _ := json.Marshal(map[string]any{"createdAt": now, "updatedAt": now, "turnCount": 0})
	if err := st.Commit(context.Background(), store.Batch{SessionID: sid, Session: &store.Session{ID: sid, CreatedAt: now, UpdatedAt: now, State: old}}); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, st, newHistModel(), mgrOpts{})
	sub := newRecSub()
	start := "v:" + sid + ":0"
	if _, _, err := m.Subscribe(context.Background(), sub, sid, &start); err != nil {
		t.Fatal(err)
	}
	subscribe(t, m, sub, sid)
	runTurn(t, m, sub, textTurn(sid, "one"))
	for _, n := range sub.all() {
		if c := mustParse(t, n.Cursor); c.epoch != "" {
			t.Fatalf("%s of a session without an epoch got cursor %s", n.Method, n.Cursor)
		}
	}
	last := "v:" + sid + ":4"
	if _, err := m.Page(context.Background(), msp.ViewPageParams{SessionID: sid, Cursor: &last, Limit: 10}); err != nil {
		t.Errorf("view/page after %s: %v", last, err)
	}
}
