package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/scripted"
	"mspd/schema/msp"
	"mspd/server"
)

// runTurns starts a session and runs n quick turns, returning its id.
func runTurns(t *testing.T, ctx context.Context, c *checkedClient, n int) string {
	t.Helper()
	start, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		answerTurn(t, c, start.Session.SessionID, scripted.Script(scripted.Step{Text: "answer " + strings.Repeat("x", i)}))
	}
	return start.Session.SessionID
}

func TestViewPageBothWays(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})
	sid := runTurns(t, ctx, c, 3) // 5 durable events a turn, and the session's name

	page := func(cursor *string, dir string, limit int) msp.ViewPageResult {
		t.Helper()
		var res msp.ViewPageResult
		if err := c.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Cursor: cursor, Direction: dir, Limit: limit}, &res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	var all []msp.ViewEvent
	var cur *string
	for {
		res := page(cur, msp.Forward, 4)
		if len(res.Events) == 0 && res.NextCursor != nil {
			t.Fatal("empty page with a next cursor")
		}
		all = append(all, res.Events...)
		if res.NextCursor == nil {
			break
		}
		if cur != nil && *res.NextCursor == *cur {
			t.Fatal("page returned the request cursor")
		}
		cur = res.NextCursor
	}
	if len(all) != 16 {
		t.Fatalf("forward walk: %d events", len(all))
	}
	var back []msp.ViewEvent
	cur = nil
	for {
		res := page(cur, msp.Backward, 5)
		back = append(append([]msp.ViewEvent(nil), res.Events...), back...)
		if res.NextCursor == nil {
			break
		}
		cur = res.NextCursor
	}
	if jsonText(all) != jsonText(back) {
		t.Fatal("backward walk differs from forward walk")
	}
	for i, e := range all {
		var h msp.ViewHeader
		json.Unmarshal(e.Params, &h)
		if cursorPos(t, h.ViewCursor) != [2]int64{int64(i + 1), 0} || e.Method == msp.NotifyItemDelta || h.SourceRange == nil {
			t.Errorf("event %d: %s %s", i, e.Method, e.Params)
		}
	}
}

func TestSubscribeReplaysThenLive(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	ctx := testCtx(t)
	owner := dial(t, d.URL(), client.Options{})
	sid := runTurns(t, ctx, owner, 1)

	watcher := dial(t, d.URL(), client.Options{OptOut: []string{msp.NotifyItemDelta}})
	var snap msp.SessionSnapshot
	if err := watcher.Call(ctx, msp.MethodSessionRead, msp.SessionReadParams{SessionID: sid}, &snap); err != nil {
		t.Fatal(err)
	}
	after := withSeq(snap.ViewCursor, 2)
	var res msp.ViewCursorResult
	if err := watcher.Call(ctx, msp.MethodViewSubscribe, msp.ViewSubscribeParams{SessionID: sid, After: &after}, &res); err != nil {
		t.Fatal(err)
	}
	if res.ViewCursor != withSeq(snap.ViewCursor, 6) { // one turn and the session's name

		t.Fatalf("head %s", res.ViewCursor)
	}
	ack, err := owner.StartTurn(ctx, sid, scripted.Script(scripted.Step{Text: "live one", Chunks: 2}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := watcher.WaitTurn(ctx, ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	if len(only(got, msp.NotifyItemDelta)) != 0 {
		t.Error("opted-out deltas were delivered")
	}
	assertCursorsIncrease(t, got)
	if first := cursorPos(t, got[0].Cursor()); first != [2]int64{3, 0} {
		t.Fatalf("replay starts at %v", first)
	}
	// (2, 6] replayed, then the live turn's five durable events. Its
	// answer's ephemeral item/started comes too, unless the turn ended
	// while the replay was still under way: then the answer arrives whole.
	if n := len(durableOnly(got)); n != 4+5 {
		t.Fatalf("%d durable events: %s", n, compact(methods(got)))
	}
	var empty map[string]any
	for range 2 { // idempotent
		if err := watcher.Call(ctx, msp.MethodViewUnsubscribe, msp.ViewUnsubscribeParams{SessionID: sid}, &empty); err != nil {
			t.Fatal(err)
		}
	}
	ack, err = owner.StartTurn(ctx, sid, "after unsubscribe")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.WaitTurn(ctx, ack.TurnID); err != nil {
		t.Fatal(err)
	}
	// Subscribing again after the last event seen replays the turn that
	// ran meanwhile. Had any of it reached the unsubscribed watcher live,
	// it would come first, or twice.
	seen := got[len(got)-1].Cursor()
	if err := watcher.Call(ctx, msp.MethodViewSubscribe, msp.ViewSubscribeParams{SessionID: sid, After: &seen}, &res); err != nil {
		t.Fatal(err)
	}
	again, err := watcher.WaitTurn(ctx, ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	assertCursorsIncrease(t, again)
	if first, want := cursorPos(t, again[0].Cursor()), cursorPos(t, seen); first != [2]int64{want[0] + 1, 0} {
		t.Fatalf("unsubscribed watcher got %s %s", again[0].Method, again[0].Cursor())
	}
}

// TestSlowReaderGetsGap: a reader that stops reading costs bounded memory,
// does not stall the session or another reader, and on reading again gets
// one view/gap naming the hole, which view/page fills exactly.
func TestSlowReaderGetsGap(t *testing.T) {
	// The write timeout outlasts the test: a reader that has not read for
	// its length is closed as wedged, which a loaded machine could reach
	// before the turn ends.
	d := startDaemon(t, daemon.Config{Server: server.Config{QueueFrames: 16, QueueBytes: 64 << 10, WriteTimeout: 2 * time.Minute}})
	ctx := testCtx(t)
	// The other reader takes no deltas: with a budget this small, even a
	// reader that reads could fall behind on a loaded machine.
	fast := dial(t, d.URL(), client.Options{OptOut: []string{msp.NotifyItemDelta}})
	sid := newSession(t, fast)

	// The slow reader: a bare WebSocket with a small receive buffer that
	// handshakes, subscribes, then stops reading while 2 MB of events flow
	// (more than its 16 KiB window and the server's 64 KiB budget allow).
	ws, _, err := websocket.Dial(ctx, d.URL(), &websocket.DialOptions{HTTPClient: smallBufferClient()})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(-1)
	send := func(frame string) {
		if err := ws.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"slow","version":"1"}}}`)
	send(`{"jsonrpc":"2.0","method":"initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"view/subscribe","params":{"sessionId":"` + sid + `"}}`)
	for { // the subscription's result: it has landed before the flood
		_, frame, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			ID    json.RawMessage `json:"id"`
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(frame, &r); string(r.ID) == "2" {
			if r.Error != nil {
				t.Fatalf("view/subscribe: %s", frame)
			}
			break
		}
	}

	word := strings.Repeat("y", 16000)
	ack, err := fast.StartTurn(ctx, sid, scripted.Script(scripted.Step{Text: strings.Repeat(word, 125), Chunks: 125, ChunkDelayMs: 1}))
	if err != nil {
		t.Fatal(err)
	}
	live, err := fast.WaitTurn(ctx, ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	if gaps := only(live, msp.NotifyViewGap); len(gaps) != 0 {
		t.Fatalf("the reader that reads got a view/gap: %s", gaps[0].Params)
	}
	var answer msp.ItemParams
	for _, n := range only(live, msp.NotifyItemCompleted) {
		if p := decode[msp.ItemParams](t, n); p.Item.Kind == msp.ItemAgentMessage {
			answer = p
		}
	}
	if answer.Item.Text == nil || len(*answer.Item.Text) != 125*len(word) {
		t.Fatal("the session did not stream the whole answer")
	}
	finalCursor := live[len(live)-1].Cursor()

	// Now read the slow connection to the end of the turn.
	checker := validator.NewFrameChecker()
	var gaps []msp.ViewGapParams
	var got []client.Notification
	for {
		_, frame, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, fe := range checker.Check(frame) {
			t.Errorf("frame fails the schema at %s: %s", fe.Field, fe.Message)
		}
		var n struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		json.Unmarshal(frame, &n)
		if n.Method == msp.NotifyViewGap {
			var g msp.ViewGapParams
			json.Unmarshal(n.Params, &g)
			gaps = append(gaps, g)
			continue
		}
		if n.Method != "" {
			got = append(got, client.Notification{Method: n.Method, Params: n.Params})
		}
		if (client.Notification{Params: n.Params}).Cursor() == finalCursor {
			break
		}
	}
	if len(gaps) == 0 {
		t.Fatal("no view/gap after overflowing the slow reader")
	}
	if sent := len(live) + 125; len(got) >= sent { // the durable events and the deltas
		t.Fatalf("the slow reader lost nothing (%d of %d)", len(got), sent)
	}
	// Fill each hole with view/page from after until next: the durable
	// events then match what the fast reader saw.
	have := map[string]bool{}
	for _, n := range got {
		have[n.Cursor()] = true
	}
	for _, g := range gaps {
		if g.SessionID != sid || !have[g.Next] {
			t.Fatalf("gap %+v: next was not delivered", g)
		}
		cur := g.After
		for {
			var page msp.ViewPageResult
			if err := fast.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Cursor: &cur, Limit: 200}, &page); err != nil {
				t.Fatal(err)
			}
			done := false
			for _, e := range page.Events {
				n := client.Notification{Method: e.Method, Params: e.Params}
				have[n.Cursor()] = true
				if n.Cursor() == g.Next {
					done = true
				}
			}
			if done || page.NextCursor == nil {
				break
			}
			cur = *page.NextCursor
		}
	}
	for _, n := range live {
		if n.Method != msp.NotifyItemDelta && n.Cursor() != "" && !have[n.Cursor()] {
			t.Errorf("durable event %s %s is lost for the slow reader", n.Method, n.Cursor())
		}
	}
}

// smallBufferClient dials with a 16 KiB receive buffer, so a reader that
// stops reading pushes back on the server quickly.
func smallBufferClient() *http.Client {
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10)
		})
		return errors.Join(err, serr)
	}}
	return &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
}
