package session

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"mspd/schema/msp"
	"mspd/store"
)

// wantSessionDeleted checks that err answers a replay of the command that
// made session sid, now deleted, as such.
func wantSessionDeleted(t *testing.T, what, sid string, err error) {
	t.Helper()
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindCommandRejected || me.Data.Reason != msp.ReasonSessionDeleted || me.Data.SessionID != sid {
		t.Fatalf("%s replayed after its session was deleted: got %v, want commandRejected session_deleted naming %s", what, err, sid)
	}
}

// sessionCount is how many sessions the store lists.
func sessionCount(t *testing.T, st store.Store) int {
	t.Helper()
	rows, err := st.Sessions(context.Background(), "", nil, 100) // the unnamed principal's
	if err != nil {
		t.Fatal(err)
	}
	return len(rows)
}

// TestStartReplayedAfterDeleteMakesNoSession: a session/start replayed
// once the session it made is deleted is answered session_deleted (its
// recorded answer is gone with the session) rather than admitted again,
// which made a new session — of another id when the server minted it —
// and so ran the command twice. This holds for a client-chosen id too,
// even once that id has been started again by another command, and for
// session/fork; the answer the deletion leaves holds nothing of the
// session's content.
func TestStartReplayedAfterDeleteMakesNoSession(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	m := newManager(t, st, newHistModel(), mgrOpts{})
	start := func(p msp.SessionStartParams) (msp.SessionStartResult, error) {
		raw, attach, err := m.StartSession(ctx, newRecSub(), mustJSON(p))
		if err != nil {
			return msp.SessionStartResult{}, err
		}
		attach(ctx)
		var res msp.SessionStartResult
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		return res, nil
	}

	t.Run("server-minted id", func(t *testing.T) {
		p := msp.SessionStartParams{CommandID: cmdID(), WorkspaceRoot: "/private/workspace"}
		res, err := start(p)
		if err != nil {
			t.Fatal(err)
		}
		sid, before := res.Session.SessionID, sessionCount(t, st)
		deleteSession(t, m, sid)
		_, err = start(p)
		wantSessionDeleted(t, "session/start", sid, err)
		if got := sessionCount(t, st); got != before-1 {
			t.Errorf("%d sessions after the replay, want %d", got, before-1)
		}
		left, err := st.Command(ctx, erasedKey(ledgerKey("", p.CommandID)))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(left.Response), "/private/workspace") {
			t.Errorf("the answer left for the replay keeps the session's content: %s", left.Response)
		}
	})

	t.Run("client-chosen id", func(t *testing.T) {
		sid := newID()
		p := msp.SessionStartParams{CommandID: cmdID(), SessionID: sid}
		if _, err := start(p); err != nil {
			t.Fatal(err)
		}
		deleteSession(t, m, sid)
		_, err := start(p)
		wantSessionDeleted(t, "session/start", sid, err)
		if _, err := st.Session(ctx, sid); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the replay made session %s again (%v)", sid, err)
		}
		// Started again by another command: a new incarnation, which the
		// first command's replay does not answer with.
		again, err := start(msp.SessionStartParams{CommandID: cmdID(), SessionID: sid})
		if err != nil || again.Session.SessionID != sid {
			t.Fatalf("starting %s again: %+v, %v", sid, again, err)
		}
		_, err = start(p)
		wantSessionDeleted(t, "session/start", sid, err)
		// A second deletion (of the new incarnation) leaves its own.
		deleteSession(t, m, sid)
	})

	t.Run("session/fork", func(t *testing.T) {
		sub := newRecSub()
		src := startSession(t, m, sub)
		runTurn(t, m, sub, textTurn(src, "one"))
		p := mustJSON(msp.SessionForkParams{CommandID: cmdID(), SessionID: src})
		raw, attach, err := m.ForkSession(ctx, newRecSub(), p)
		if err != nil {
			t.Fatal(err)
		}
		attach(ctx)
		var fork msp.SessionSnapshot
		if err := json.Unmarshal(raw, &fork); err != nil {
			t.Fatal(err)
		}
		before := sessionCount(t, st)
		deleteSession(t, m, fork.Session.SessionID)
		_, _, err = m.ForkSession(ctx, newRecSub(), p)
		wantSessionDeleted(t, "session/fork", fork.Session.SessionID, err)
		if got := sessionCount(t, st); got != before-1 {
			t.Errorf("%d sessions after the replay, want %d", got, before-1)
		}
	})
}
