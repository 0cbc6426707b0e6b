package session

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"mspd/schema/msp"
)

// bcastSub is a recSub past its handshake: it takes broadcasts.
type bcastSub struct{ *recSub }

func (bcastSub) Broadcasts() bool { return true }

func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindSessionNotFound {
		t.Fatalf("%s as another principal: got %v, want sessionNotFound", what, err)
	}
}

// TestPrincipalsSeeOnlyTheirOwnSessions: a session belongs to the principal
// that started it; every method answers sessionNotFound to anyone else,
// session/list lists only one's own, and session/started reaches only the
// owner's connections.
func TestPrincipalsSeeOnlyTheirOwnSessions(t *testing.T) {
	m := newManager(t, openStore(t), newHistModel(), mgrOpts{})
	alice := WithPrincipal(context.Background(), "alice")
	bob := WithPrincipal(context.Background(), "bob")
	aliceConn, bobConn := bcastSub{newRecSub()}, bcastSub{newRecSub()}
	m.Listen(aliceConn, "alice")
	m.Listen(bobConn, "bob")

	raw, attach, err := m.StartSession(alice, aliceConn, mustJSON(msp.SessionStartParams{CommandID: cmdID()}))
	if err != nil {
		t.Fatal(err)
	}
	attach(alice)
	var started msp.SessionStartResult
	if err := json.Unmarshal(raw, &started); err != nil {
		t.Fatal(err)
	}
	sid := started.Session.SessionID
	turnAck, launch, err := m.StartTurn(alice, nil, mustJSON(textTurn(sid, "hello")))
	if err != nil {
		t.Fatal(err)
	}
	launch()
	var ack msp.TurnStartResult
	json.Unmarshal(turnAck, &ack)
	aliceConn.waitTerminal(t, ack.TurnID)

	if got := of[msp.SessionStartedParams](t, aliceConn.recSub, msp.NotifySessionStarted); len(got) != 1 {
		t.Fatalf("alice got %d session/started, want 1", len(got))
	}
	if got := of[msp.SessionStartedParams](t, bobConn.recSub, msp.NotifySessionStarted); len(got) != 0 {
		t.Fatalf("bob got alice's session/started: %+v", got)
	}

	from := cursorAs(t, m.store, "alice", sid, 0)
	_, _, err = m.ResumeSession(bob, bobConn, mustJSON(msp.SessionResumeParams{CommandID: cmdID(), SessionID: sid}))
	wantNotFound(t, "session/resume", err)
	_, err = m.ReadSession(bob, mustJSON(msp.SessionReadParams{SessionID: sid}))
	wantNotFound(t, "session/read", err)
	_, _, err = m.Subscribe(bob, bobConn, sid, &from)
	wantNotFound(t, "view/subscribe", err)
	wantNotFound(t, "subscribe", m.attach(bob, bobConn, sid, from))
	wantNotFound(t, "view/unsubscribe", m.Unsubscribe(bob, bobConn, sid))
	_, err = m.Page(bob, msp.ViewPageParams{SessionID: sid, Limit: 10})
	wantNotFound(t, "view/page", err)
	_, _, err = m.SessionModel(bob, sid)
	wantNotFound(t, "model/list", err)
	_, err = m.Head(bob, sid)
	wantNotFound(t, "head", err)
	_, _, err = m.StartTurn(bob, nil, mustJSON(textTurn(sid, "intrude")))
	wantNotFound(t, "turn/start", err)
	_, err = m.StopTurn(bob, msp.MethodTurnInterrupt, mustJSON(msp.TurnStopParams{CommandID: cmdID(), SessionID: sid}))
	wantNotFound(t, "turn/interrupt", err)
	_, err = m.Unqueue(bob, mustJSON(msp.TurnStopParams{CommandID: cmdID(), SessionID: sid, TurnID: ack.TurnID}))
	wantNotFound(t, "turn/unqueue", err)
	if got := bobConn.all(); len(got) != 0 {
		t.Fatalf("bob received %d notifications of alice's session, first %s", len(got), got[0].Frame)
	}

	// Listing: each sees exactly its own.
	if _, _, err := m.StartSession(bob, bobConn, mustJSON(msp.SessionStartParams{CommandID: cmdID()})); err != nil {
		t.Fatal(err)
	}
	for who, ctx := range map[string]context.Context{"alice": alice, "bob": bob} {
		list, err := m.ListSessions(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Sessions) != 1 {
			t.Fatalf("%s lists %d sessions, want 1", who, len(list.Sessions))
		}
		if who == "alice" && list.Sessions[0].SessionID != sid {
			t.Fatalf("alice lists %s, want %s", list.Sessions[0].SessionID, sid)
		}
		if who == "bob" && list.Sessions[0].SessionID == sid {
			t.Fatal("bob lists alice's session")
		}
	}
	// The anonymous principal (a server without per-user auth) sees neither.
	if list, _ := m.ListSessions(context.Background(), nil); len(list.Sessions) != 0 {
		t.Fatalf("the anonymous principal lists %d sessions", len(list.Sessions))
	}

	// The same principal sees everything, as before.
	if _, err := m.ReadSession(alice, mustJSON(msp.SessionReadParams{SessionID: sid})); err != nil {
		t.Fatal(err)
	}
}

// TestListPagesPastOtherPrincipals: a page of one principal's sessions is
// filled even when other principals' sessions lie in between.
func TestListPagesPastOtherPrincipals(t *testing.T) {
	m := newManager(t, openStore(t), newHistModel(), mgrOpts{})
	alice := WithPrincipal(context.Background(), "alice")
	bob := WithPrincipal(context.Background(), "bob")
	var mine []string
	for i := range 150 {
		ctx := bob
		if i%10 == 0 {
			ctx = alice
		}
		raw, _, err := m.StartSession(ctx, newRecSub(), mustJSON(msp.SessionStartParams{CommandID: cmdID()}))
		if err != nil {
			t.Fatal(err)
		}
		if ctx == alice {
			var res msp.SessionStartResult
			json.Unmarshal(raw, &res)
			mine = append(mine, res.Session.SessionID)
		}
	}
	var got []string
	var cursor *string
	for {
		limit := 4
		list, err := m.ListSessions(alice, mustJSON(msp.SessionListParams{Limit: &limit, Cursor: cursor}))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Sessions {
			got = append(got, s.SessionID)
		}
		if list.NextCursor == nil {
			break
		}
		if len(list.Sessions) != limit {
			t.Fatalf("a page with a next cursor holds %d sessions, want %d", len(list.Sessions), limit)
		}
		cursor = list.NextCursor
	}
	if len(got) != len(mine) {
		t.Fatalf("alice paged %d sessions, want %d", len(got), len(mine))
	}
	seen := map[string]bool{}
	for _, id := range got {
		if seen[id] {
			t.Fatalf("session %s listed twice", id)
		}
		seen[id] = true
	}
	for _, id := range mine {
		if !seen[id] {
			t.Fatalf("alice's session %s missing from her list", id)
		}
	}
}

// TestCommandIDsAreScopedByPrincipal: a commandId one principal used is
// neither replayed to nor refused for another.
func TestCommandIDsAreScopedByPrincipal(t *testing.T) {
	m := newManager(t, openStore(t), newHistModel(), mgrOpts{})
	alice := WithPrincipal(context.Background(), "alice")
	bob := WithPrincipal(context.Background(), "bob")
	params := mustJSON(msp.SessionStartParams{CommandID: cmdID()})
	a, _, err := m.StartSession(alice, newRecSub(), params)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := m.StartSession(bob, newRecSub(), params)
	if err != nil {
		t.Fatalf("bob's start with alice's commandId: %v", err)
	}
	if string(a) == string(b) {
		t.Fatal("bob got alice's recorded session/start result")
	}
	again, _, err := m.StartSession(alice, newRecSub(), params)
	if err != nil || string(again) != string(a) {
		t.Fatalf("alice's replay: %s, %v; want her recorded result", again, err)
	}
}
