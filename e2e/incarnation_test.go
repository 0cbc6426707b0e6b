package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/schema/msp"
)

// bothStores runs check against an mspd on SQLite (in process) and one on
// JetStream (an embedded NATS server, a real process).
func bothStores(t *testing.T, check func(t *testing.T, ctx context.Context, url string)) {
	t.Run("sqlite", func(t *testing.T) {
		d := startDaemon(t, daemon.Config{})
		check(t, testCtx(t), d.URL())
	})
	t.Run("jetstream", func(t *testing.T) {
		p := startProcess(t, t.TempDir(), "--store", "jetstream", "--nats-embedded", "--nats-listen", "127.0.0.1:0")
		check(t, testCtx(t), p.url)
	})
}

// deleteOverTheWire deletes sid on c and waits for its erasure's news.
func deleteOverTheWire(t *testing.T, ctx context.Context, c *checkedClient, sid string) {
	t.Helper()
	if _, err := c.CallRaw(ctx, msp.MethodSessionDelete, msp.SessionDeleteParams{CommandID: client.NewCommandID(), SessionID: sid}); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Method == msp.NotifySessionDeleteCompleted {
			if p := decode[msp.SessionDeleteCompletedParams](t, n); p.SessionID == sid && p.Outcome == msp.DeleteCompleted {
				return
			}
		}
	}
}

// wantErr checks that err is the typed MSP error of kind and reason.
func wantErr(t *testing.T, what string, err error, kind, reason string) {
	t.Helper()
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != kind || me.Data.Reason != reason {
		t.Errorf("%s: got %v, want %s %s", what, err, kind, reason)
	}
}

// TestCursorOfADeletedIncarnationOverTheWire: a client-chosen session id
// started, deleted and started again is a new incarnation. Its cursors
// repeat none of the first's, and the first's last cursor is refused
// notFound missingAnchor by session/resume, view/subscribe and view/page
// (it used to be taken as a position in the new session, whose first turn
// the resume then silently skipped).
func TestCursorOfADeletedIncarnationOverTheWire(t *testing.T) {
	bothStores(t, incarnationCursors)
}

func incarnationCursors(t *testing.T, ctx context.Context, url string) {
	c := dial(t, url, client.Options{})
	sid := client.NewCommandID() // a UUID
	start := func() {
		t.Helper()
		if _, err := c.CallRaw(ctx, msp.MethodSessionStart, msp.SessionStartParams{CommandID: client.NewCommandID(), SessionID: sid}); err != nil {
			t.Fatal(err)
		}
	}
	start()
	first, _ := answerTurn(t, c, sid, "one")
	old := first[len(first)-1].Cursor()
	seen := map[string]bool{}
	for _, n := range first {
		seen[n.Cursor()] = true
	}
	deleteOverTheWire(t, ctx, c, sid)

	start()
	answerRepeatingNone(t, c, sid, seen, "of the deleted incarnation", "two", "three")
	refusedThenPagesWhole(t, ctx, url, sid, old, 2*5)
}

// answerRepeatingNone runs a turn of each text and fails the test if any
// of their events repeats a cursor of gone (a set of cursors no longer
// valid, described by what).
func answerRepeatingNone(t *testing.T, c *checkedClient, sid string, gone map[string]bool, what string, texts ...string) {
	t.Helper()
	for _, text := range texts {
		events, _ := answerTurn(t, c, sid, text)
		for _, n := range events {
			if cur := n.Cursor(); cur != "" && gone[cur] {
				t.Errorf("%s repeats cursor %s %s", n.Method, cur, what)
			}
		}
	}
}

// refusedThenPagesWhole checks, on a new connection, that session/resume,
// view/subscribe and view/page refuse the cursor gone with missingAnchor,
// and that the connection then pages at least events of the session.
func refusedThenPagesWhole(t *testing.T, ctx context.Context, url, sid, gone string, events int) {
	t.Helper()
	other := dial(t, url, client.Options{})
	_, err := other.Resume(ctx, sid, &gone)
	wantErr(t, "session/resume after "+gone, err, msp.KindNotFound, msp.ReasonMissingAnchor)
	_, err = other.CallRaw(ctx, msp.MethodViewSubscribe, msp.ViewSubscribeParams{SessionID: sid, After: &gone})
	wantErr(t, "view/subscribe after "+gone, err, msp.KindNotFound, msp.ReasonMissingAnchor)
	_, err = other.CallRaw(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Cursor: &gone, Limit: 10})
	wantErr(t, "view/page from "+gone, err, msp.KindNotFound, msp.ReasonMissingAnchor)
	if got := pageAll(t, ctx, other, sid); len(got) < events {
		t.Errorf("the session pages %d events after the refusals, want at least %d", len(got), events)
	}
}

// TestStartReplayedAfterDeleteOverTheWire: a session/start replayed once
// its session was deleted is refused commandRejected session_deleted,
// naming the session, and makes no session — neither one of a new id (a
// server-minted id) nor the named one again (a client-chosen id).
func TestStartReplayedAfterDeleteOverTheWire(t *testing.T) {
	bothStores(t, startReplayedAfterDelete)
}

func startReplayedAfterDelete(t *testing.T, ctx context.Context, url string) {
	c := dial(t, url, client.Options{})
	for name, p := range map[string]msp.SessionStartParams{
		"server-minted id": {CommandID: client.NewCommandID()},
		"client-chosen id": {CommandID: client.NewCommandID(), SessionID: client.NewCommandID()},
	} {
		t.Run(name, func(t *testing.T) {
			raw, err := c.CallRaw(ctx, msp.MethodSessionStart, p)
			if err != nil {
				t.Fatal(err)
			}
			var res msp.SessionStartResult
			if err := json.Unmarshal(raw, &res); err != nil {
				t.Fatal(err)
			}
			sid := res.Session.SessionID
			deleteOverTheWire(t, ctx, c, sid)
			_, err = c.CallRaw(ctx, msp.MethodSessionStart, p)
			wantErr(t, "the replayed session/start", err, msp.KindCommandRejected, msp.ReasonSessionDeleted)
			var me *msp.Error
			if errors.As(err, &me) && me.Data.SessionID != sid {
				t.Errorf("the refusal names session %q, want %s", me.Data.SessionID, sid)
			}
			var list msp.SessionListResult
			if err := c.Call(ctx, msp.MethodSessionList, msp.SessionListParams{}, &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Sessions) != 0 {
				t.Errorf("the replay made a session: %+v", list.Sessions)
			}
		})
	}
}
