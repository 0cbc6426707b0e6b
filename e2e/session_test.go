package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// TestWholeSession drives a session end to end: handshake, start, two
// streamed turns, list, read, a disconnect mid-turn and a resume by cursor
// that delivers exactly the missed durable events, in order.
func TestWholeSession(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})

	init := c.Init
	if init.SessionDurability != "durable" || init.Schema.Version != 1 || !strings.HasPrefix(init.Schema.Fingerprint, "sha256:") {
		t.Fatalf("initialize result: %+v", init)
	}
	if init.AIProviders == nil || !init.AIProviders.CallAccounting.Attempts || !init.AIProviders.CallAccounting.RetryPolicy {
		t.Fatalf("initialize does not advertise RFC 0248: %+v", init.AIProviders)
	}

	start, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID
	if start.Session.ActiveTurnID != nil || start.Session.Status != msp.SessionIdle {
		t.Fatalf("new session: %+v", start.Session)
	}
	n, err := c.Next(ctx)
	if err != nil || n.Method != msp.NotifySessionStarted {
		t.Fatalf("want session/started broadcast, got %v %v", n.Method, err)
	}

	// Turn 1: exactly the scripted text in three deltas.
	script := scripted.Script(scripted.Step{Text: "Hello from the script", Chunks: 3, OutputTokens: new(5)})
	ack, err := c.StartTurn(ctx, sid, script)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Disposition != msp.DispositionStarted || !ack.StartedNewTurn || ack.Status != msp.StatusAccepted {
		t.Fatalf("ack: %+v", ack)
	}
	events, err := c.WaitTurn(ctx, ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	// The first message also names the session.
	want := "turn/started, item/completed, session/nameChanged, item/started, item/delta ×3, item/completed, session/tokenUsage, turn/completed"
	if got := compact(methods(events)); got != want {
		t.Fatalf("turn 1 events:\n got %s\nwant %s", got, want)
	}
	assertCursorsIncrease(t, events)
	user := decode[msp.ItemParams](t, events[1]).Item
	if user.Kind != msp.ItemUserMessage || user.CommandID != ack.TurnID || *user.TurnID != ack.TurnID || *user.Text != script {
		t.Errorf("userMessage item: %+v", user)
	}
	var text strings.Builder
	for _, e := range only(events, msp.NotifyItemDelta) {
		p := decode[msp.ItemDeltaParams](t, e)
		if strings.Contains(string(e.Params), "sourceRange") {
			t.Errorf("item/delta carries a sourceRange: %s", e.Params)
		}
		text.WriteString(p.Delta)
	}
	if text.String() != "Hello from the script" {
		t.Errorf("deltas spell %q", text.String())
	}
	items := only(events, msp.NotifyItemCompleted)
	agent := decode[msp.ItemParams](t, items[len(items)-1]).Item
	if agent.Status != msp.ItemCompleted || *agent.Text != "Hello from the script" || agent.Revision != 2 {
		t.Errorf("agent item: %+v", agent)
	}
	done := decode[msp.TurnCompletedParams](t, events[len(events)-1])
	if done.Terminal != msp.TerminalCompleted || done.Usage == nil || done.Usage.OutputTokens != 5 ||
		done.DurationMs == nil || done.TimeToFirstTokenMs == nil || done.Attempts == nil ||
		done.Attempts.Count != 1 || done.Attempts.OutputTokens != 5 || !done.Attempts.UsageComplete {
		t.Errorf("turn/completed: %s", events[len(events)-1].Params)
	}
	for _, e := range events {
		if e.Method == msp.NotifyItemDelta {
			continue
		}
		var h msp.ViewHeader
		json.Unmarshal(e.Params, &h)
		if e.Method == msp.NotifyItemStarted {
			// The answer opens on an ephemeral event: no record, no
			// sourceRange, a sub-position of the head.
			if h.SessionID != sid || h.SourceRange != nil || cursorPos(t, h.ViewCursor)[1] == 0 {
				t.Errorf("the answer's item/started header: %+v", h)
			}
			continue
		}
		if h.SessionID != sid || h.SourceRange == nil || h.SourceRange.First != h.SourceRange.Last {
			t.Errorf("%s header: %+v", e.Method, h)
		}
	}

	// Turn 2: the echo reply.
	ack2, err := c.StartTurn(ctx, sid, "second question")
	if err != nil {
		t.Fatal(err)
	}
	events2, err := c.WaitTurn(ctx, ack2.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	assertCursorsIncrease(t, append(events, events2...))
	last := decode[msp.TurnCompletedParams](t, events2[len(events2)-1])
	if last.Terminal != msp.TerminalCompleted {
		t.Fatalf("turn 2: %+v", last)
	}

	// List and read.
	var list msp.SessionListResult
	if err := c.Call(ctx, msp.MethodSessionList, map[string]any{}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Sessions) != 1 || list.Sessions[0].SessionID != sid || list.Sessions[0].TurnCount != 2 || list.NextCursor != nil {
		t.Fatalf("session/list: %+v", list)
	}
	var read msp.SessionSnapshot
	if err := c.Call(ctx, msp.MethodSessionRead, map[string]any{"sessionId": sid, "excludeItems": false}, &read); err != nil {
		t.Fatal(err)
	}
	if read.History.Mode != msp.HistoryInline || len(read.History.Items) != 4 || read.ViewCursor != last.ViewCursor {
		t.Fatalf("session/read: %+v", read)
	}

	// Turn 3 streams slowly; the client drops after the first delta.
	slow := scripted.Script(scripted.Step{Text: strings.Repeat("word ", 40), Chunks: 40, ChunkDelayMs: 10})
	ack3, err := c.StartTurn(ctx, sid, slow)
	if err != nil {
		t.Fatal(err)
	}
	var seen []client.Notification
	for {
		n, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, n)
		if n.Method == msp.NotifyItemDelta {
			break
		}
	}
	c.Close()
	lastSeen := seen[len(seen)-1].Cursor()

	c2 := dial(t, d.URL(), client.Options{})
	res, err := c2.Resume(ctx, sid, &lastSeen)
	if err != nil {
		t.Fatal(err)
	}
	if res.History.Mode != msp.HistoryNone || res.History.NoneReason != msp.NoneCursorSuffix || res.History.Items != nil {
		t.Fatalf("resume by cursor: %+v", res.History)
	}
	missed, err := c2.WaitTurn(ctx, ack3.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	assertCursorsIncrease(t, append(seen, missed...))

	// Exactly the durable events after the cursor, in order: compare with
	// view/page.
	var page msp.ViewPageResult
	if err := c2.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Cursor: &lastSeen, Limit: 1000}, &page); err != nil {
		t.Fatal(err)
	}
	var durable []client.Notification
	for _, n := range missed {
		if n.Method != msp.NotifyItemDelta {
			durable = append(durable, n)
		}
	}
	if len(durable) != len(page.Events) {
		t.Fatalf("resume delivered %d durable events, the log has %d after the cursor", len(durable), len(page.Events))
	}
	for i, e := range page.Events {
		if e.Method != durable[i].Method || string(e.Params) != string(durable[i].Params) {
			t.Errorf("event %d: live %s %s, page %s %s", i, durable[i].Method, durable[i].Params, e.Method, e.Params)
		}
	}
	if page.NextCursor != nil {
		t.Errorf("page reached the head but nextCursor = %q", *page.NextCursor)
	}
	final := decode[msp.TurnCompletedParams](t, missed[len(missed)-1])
	if final.Terminal != msp.TerminalCompleted {
		t.Errorf("turn 3 ended %s", final.Terminal)
	}
}
