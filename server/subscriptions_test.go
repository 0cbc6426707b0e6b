package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"mspd/client"
	"mspd/schema/msp"
	"mspd/session"
)

// dialCapped serves m over WebSocket, each connection following at most
// limit sessions, and connects a client to it.
func dialCapped(t *testing.T, m *session.Manager, limit int) *client.Client {
	t.Helper()
	return dialCappedN(t, m, limit, 1)[0]
}

// dialCappedN is dialCapped connecting n clients of one principal.
func dialCappedN(t *testing.T, m *session.Manager, limit, n int) []*client.Client {
	t.Helper()
	srv, err := New(m, Config{MaxSubscriptions: limit, PingInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	cs := make([]*client.Client, n)
	for i := range cs {
		c, err := client.Dial(t.Context(), "ws"+strings.TrimPrefix(ts.URL, "http")+"/msp", client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return cs
}

// wantCapped fails unless err refuses a subscription past a cap of limit:
// backpressured, its capacity named, not to be retried as it is.
func wantCapped(t *testing.T, err error, limit int, what string) {
	t.Helper()
	var me *msp.Error
	if !errors.As(err, &me) {
		t.Fatalf("%s: %v, want it refused as backpressured", what, err)
	}
	if me.Code != msp.CodeBackpressured || me.Data.Kind != msp.KindBackpressured || me.Data.Capacity != limit ||
		me.Data.Retryable == nil || *me.Data.Retryable || !strings.Contains(me.Message, "view/unsubscribe") {
		t.Fatalf("%s: %+v (%s), want -32031 backpressured, capacity %d, retryable false, saying to unsubscribe", what, me.Data, me.Message, limit)
	}
}

func viewSubscribe(ctx context.Context, c *client.Client, sid string) error {
	return c.Call(ctx, msp.MethodViewSubscribe, msp.ViewSubscribeParams{SessionID: sid}, nil)
}

func viewUnsubscribe(t *testing.T, ctx context.Context, c *client.Client, sid string) {
	t.Helper()
	if err := c.Call(ctx, msp.MethodViewUnsubscribe, msp.ViewUnsubscribeParams{SessionID: sid}, nil); err != nil {
		t.Fatalf("view/unsubscribe: %v", err)
	}
}

// TestSubscriptionsPastTheCapAreRefused: a connection follows at most
// MaxSubscriptions sessions. The one past it is refused (view/subscribe,
// session/resume) and the connection goes on; following again a session
// it follows is no new subscription; view/unsubscribe and deleting a
// followed session each free a place. Without the cap a connection could
// make the server hold view state and a loaded session for any number.
func TestSubscriptionsPastTheCapAreRefused(t *testing.T) {
	m, head := testManager(t)
	var sids [3]string
	for i := range sids {
		sids[i] = startWithTurns(t, m, head, nopSub{}, 0)
	}
	c := dialCapped(t, m, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, sid := range sids[:2] {
		if err := viewSubscribe(ctx, c, sid); err != nil {
			t.Fatalf("view/subscribe within the cap: %v", err)
		}
	}
	wantCapped(t, viewSubscribe(ctx, c, sids[2]), 2, "view/subscribe to a third session")
	_, err := c.Resume(ctx, sids[2], nil)
	wantCapped(t, err, 2, "session/resume of a third session")

	// Still usable, and following again takes no new place.
	if err := viewSubscribe(ctx, c, sids[0]); err != nil {
		t.Fatalf("view/subscribe to a session followed already: %v", err)
	}
	if _, err := c.Resume(ctx, sids[1], nil); err != nil {
		t.Fatalf("session/resume of a session followed already: %v", err)
	}

	viewUnsubscribe(t, ctx, c, sids[0])
	if err := viewSubscribe(ctx, c, sids[2]); err != nil {
		t.Fatalf("view/subscribe after a view/unsubscribe: %v", err)
	}
	wantCapped(t, viewSubscribe(ctx, c, sids[0]), 2, "view/subscribe past the cap again")

	if err := c.Call(ctx, msp.MethodSessionDelete, msp.SessionDeleteParams{CommandID: client.NewCommandID(), SessionID: sids[1]}, nil); err != nil {
		t.Fatalf("session/delete: %v", err)
	}
	waitDeleteCompleted(t, ctx, c, sids[1])
	if err := viewSubscribe(ctx, c, sids[0]); err != nil {
		t.Fatalf("view/subscribe after deleting a followed session: %v", err)
	}
}

// waitDeleteCompleted reads c's notifications until session sid's
// session/deleteCompleted.
func waitDeleteCompleted(t *testing.T, ctx context.Context, c *client.Client, sid string) {
	t.Helper()
	for {
		n, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for session/deleteCompleted: %v", err)
		}
		var p msp.SessionDeleteCompletedParams
		if n.Method == msp.NotifySessionDeleteCompleted && n.Decode(&p) == nil && p.SessionID == sid {
			return
		}
	}
}

// TestStartPastTheCapCreatesNothing: session/start and session/fork
// subscribe their caller to a new session, so past the cap they are
// refused before anything is made: the session list does not grow, and
// the refused command was not recorded, so it starts a session once a
// place is free.
func TestStartPastTheCapCreatesNothing(t *testing.T) {
	m, _ := testManager(t)
	c := dialCapped(t, m, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var started [2]string
	for i := range started {
		res, err := c.StartSession(ctx)
		if err != nil {
			t.Fatalf("session/start within the cap: %v", err)
		}
		started[i] = res.Session.SessionID
	}
	start := msp.SessionStartParams{CommandID: client.NewCommandID()}
	wantCapped(t, c.Call(ctx, msp.MethodSessionStart, start, nil), 2, "session/start of a third session")
	fork := msp.SessionForkParams{CommandID: client.NewCommandID(), SessionID: started[0]}
	wantCapped(t, c.Call(ctx, msp.MethodSessionFork, fork, nil), 2, "session/fork into a third session")
	listed := func() int {
		t.Helper()
		var res msp.SessionListResult
		if err := c.Call(ctx, msp.MethodSessionList, msp.SessionListParams{}, &res); err != nil {
			t.Fatalf("session/list: %v", err)
		}
		return len(res.Sessions)
	}
	if n := listed(); n != 2 {
		t.Fatalf("%d sessions listed after the refusals, want the 2 started", n)
	}

	viewUnsubscribe(t, ctx, c, started[1])
	var res msp.SessionStartResult
	if err := c.Call(ctx, msp.MethodSessionStart, start, &res); err != nil {
		t.Fatalf("the refused session/start, sent again with a place free: %v", err)
	}
	if id := res.Session.SessionID; id == started[0] || id == started[1] {
		t.Fatalf("session/start answered with session %s started before", id)
	}
	if n := listed(); n != 3 {
		t.Fatalf("%d sessions listed, want 3", n)
	}
}

// TestResubscribeDuringHoleKeepsCursorOrder: a connection fell behind
// (a hole whose newest durable event is kept as the tail) and re-anchors
// with view/subscribe {after} on the same connection, as §4.3 allows.
// session.subscribe detaches and replays through pushReplay, but the
// outbox still holds the old hole's tail: the writer flushes it (and a
// view/gap) in front of the replay, so after the subscribe response the
// client sees c3, view/gap, then c1, c2, c3 — cursors going backwards and a
// stale live event before the replay (§5 items 13 and 22).
func TestResubscribeDuringHoleKeepsCursorOrder(t *testing.T) {
	m, head := testManager(t)
	srv := &Server{cfg: Config{QueueFrames: 2, QueueBytes: 1 << 20}}
	c := newConn(srv, newWedged(), slog.New(slog.DiscardHandler))
	sid := startWithTurns(t, m, head, c, 1) // c1, c2 queued; the rest dropped, the newest kept as the tail

	// What the handler does: admit the subscription, reply, then attach.
	after := cursorAt(t, m, sid, 0)
	_, attach, err := m.Subscribe(context.Background(), c, sid, &after)
	if err != nil {
		t.Fatal(err)
	}
	c.out.pushProtected([]byte(`{"response":"view/subscribe"}`))
	subDone := make(chan error, 1)
	go func() { attach(context.Background()); subDone <- nil }()

	var got []string
	for len(got) < 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		f, err := c.out.next(ctx)
		cancel()
		if err != nil {
			break
		}
		var fr struct {
			Method string `json:"method"`
			Params struct {
				ViewCursor string `json:"viewCursor"`
				After      string `json:"after"`
				Next       string `json:"next"`
			} `json:"params"`
			Response string `json:"response"`
		}
		json.Unmarshal(f, &fr)
		switch {
		case fr.Response != "":
			got = append(got, "RESPONSE")
		case fr.Method == msp.NotifyViewGap:
			got = append(got, "gap("+short(fr.Params.After)+"→"+short(fr.Params.Next)+")")
		default:
			got = append(got, short(fr.Params.ViewCursor))
		}
	}
	if err := <-subDone; err != nil {
		t.Fatal(err)
	}
	// After the response only the replay (1 … head) may follow.
	var replay []string
	for seq := int64(1); seq <= head(sid); seq++ {
		replay = append(replay, itoa(int(seq)))
	}
	i := 0
	for i < len(got) && got[i] != "RESPONSE" {
		i++
	}
	if want := strings.Join(replay, " "); strings.Join(got[i+1:], " ") != want {
		t.Fatalf("frames %v: after the subscribe response want exactly the replay [%s]", got, want)
	}
}
