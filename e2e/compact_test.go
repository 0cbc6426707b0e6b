package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/anthropic/anthropictest"
	"mspd/provider/openai/openaitest"
	"mspd/provider/providertest"
	"mspd/schema/msp"
	"mspd/turn"
)

// compactWire is one provider API's fake and how it answers.
type compactWire struct {
	id      string // the provider's id in the configuration
	answer  func(text string, in, out int) providertest.Reply
	tooLong providertest.Reply // the API's refusal of a prompt too long
	fake    *providertest.Server
}

var compactWires = []compactWire{
	{id: "chat",
		answer: func(text string, in, out int) providertest.Reply {
			return openaitest.Stream(openaitest.AnswerUsage(int64(in), int64(out), text)...)
		},
		tooLong: openaitest.Error(http.StatusBadRequest, openaitest.ContextLengthBody)},
	{id: "resp",
		answer: func(text string, in, out int) providertest.Reply {
			return openaitest.Stream(openaitest.RAnswer(text, int64(in), int64(out))...)
		},
		tooLong: openaitest.Error(http.StatusBadRequest, openaitest.ResponsesContextLengthBody)},
	{id: "claude",
		answer:  func(text string, in, out int) providertest.Reply { return anthropictest.AnswerUsage(in, out, text) },
		tooLong: anthropictest.PromptTooLong(208310, 200000)},
}

// compactFakes starts each wire's fake with the script its wire's
// answer and tooLong make, and writes a configuration of the three, each
// with a context window of 2000 tokens.
func compactFakes(t *testing.T, dir string, script func(w compactWire) []providertest.Reply) ([]compactWire, daemon.Config) {
	t.Helper()
	wires := make([]compactWire, len(compactWires))
	copy(wires, compactWires)
	var urls [3]string
	for i := range wires {
		replies := script(wires[i])
		if wires[i].id == "claude" {
			s := anthropictest.New(t, replies...)
			wires[i].fake, urls[i] = s.Server, s.URL()
		} else {
			s := openaitest.New(t, "/v1", replies...)
			wires[i].fake, urls[i] = s.Server, s.URL()
		}
	}
	file := filepath.Join(t.TempDir(), "mspd.toml")
	conf := fmt.Sprintf(`default = "chat"
[[providers]]
id = "chat"
type = "openai"
base_url = %q
model = "gpt-4o-mini"
api_key_env = "TEST_KEY"
context_window = 2000
[[providers]]
id = "resp"
type = "openai"
api = "responses"
base_url = %q
model = "gpt-4.1"
api_key_env = "TEST_KEY"
context_window = 2000
[[providers]]
id = "claude"
type = "anthropic"
base_url = %q
model = "claude-sonnet-4-5"
api_key_env = "TEST_ANTHROPIC_KEY"
context_window = 2000
`, urls[0], urls[1], urls[2])
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return wires, daemon.Config{ConfigFile: file, DataDir: dir, Env: mapEnv(map[string]string{"TEST_KEY": "sk-e2e", "TEST_ANTHROPIC_KEY": anthropictest.Key})}
}

// mentions tells whether a recorded request body carries s (as JSON
// encodes it).
func mentions(t *testing.T, body map[string]any, s string) bool {
	t.Helper()
	q, _ := json.Marshal(s)
	return strings.Contains(bodyJSON(t, body), string(q[1:len(q)-1]))
}

// onEachWire starts a daemon on compactFakes' wires, each scripted with
// replies, and runs fn in a new session on each wire.
func onEachWire(t *testing.T, replies func(compactWire) []providertest.Reply, fn func(t *testing.T, c *checkedClient, url string, w compactWire, sid string)) {
	t.Helper()
	wires, cfg := compactFakes(t, "", replies)
	d := startDaemon(t, cfg)
	c := dial(t, d.URL(), client.Options{})
	ctx := testCtx(t)
	for _, w := range wires {
		t.Run(w.id, func(t *testing.T) {
			start, err := c.StartSessionWith(ctx, msp.SessionStartParams{ProviderID: new(w.id)})
			if err != nil {
				t.Fatal(err)
			}
			fn(t, c, d.URL(), w, start.Session.SessionID)
		})
	}
}

// onEachWireCompacted runs, on each wire's fake, a chat of three turns
// whose third compacts the first two (automatically, at the warning
// level) before its request and answers, and hands fn the daemon's URL,
// each turn's events and terminal.
func onEachWireCompacted(t *testing.T, fn func(t *testing.T, c *checkedClient, url string, w compactWire, sid string, ev [3][]client.Notification, done [3]msp.TurnCompletedParams)) {
	t.Helper()
	replies := func(w compactWire) []providertest.Reply {
		return []providertest.Reply{w.answer("Paris.", 900, 100), w.answer("Lyon.", 1500, 200),
			w.answer("They asked about Paris and Lyon.", 1650, 40), w.answer("Marseille.", 300, 20)}
	}
	onEachWire(t, replies, func(t *testing.T, c *checkedClient, url string, w compactWire, sid string) {
		var ev [3][]client.Notification
		var done [3]msp.TurnCompletedParams
		for i, text := range []string{"What is the capital of France?", "And its second city?", "And the third?"} {
			ev[i], done[i] = runTurnOn(t, c, sid, text)
		}
		fn(t, c, url, w, sid, ev, done)
	})
}

// runTurnOn runs one turn on sid and returns its events and terminal.
func runTurnOn(t *testing.T, c *checkedClient, sid, text string) ([]client.Notification, msp.TurnCompletedParams) {
	t.Helper()
	events, done := answerTurn(t, c, sid, text)
	if done.Terminal != msp.TerminalCompleted {
		t.Fatalf("turn %q: %+v %+v", text, done, done.Error)
	}
	return events, done
}

// itemsOf are the items of the item/completed events among ns.
func itemsOf(t *testing.T, ns []client.Notification, kind string) []msp.Item {
	t.Helper()
	var out []msp.Item
	for _, n := range only(ns, msp.NotifyItemCompleted) {
		if it := decode[msp.ItemParams](t, n).Item; it.Kind == kind {
			out = append(out, it)
		}
	}
	return out
}

// TestCompactionAtWarningOnEachWire: over the WebSocket, on Chat
// Completions, the Responses API and Anthropic, each with a 2000-token
// window: the first turn's usage (1000 tokens, normal) and the second's
// (1700, warning) are told once each by session/contextUsage; the third
// turn compacts before its request — a summarising request with mspd's
// instructions quoting the first turns, then the turn's request carrying
// the summary and not the older turns — and answers; its attempts count
// both requests, its compaction item says auto, compacted, through the
// second turn; the context is told to have shrunk.
func TestCompactionAtWarningOnEachWire(t *testing.T) {
	onEachWireCompacted(t, func(t *testing.T, c *checkedClient, _ string, w compactWire, sid string, ev [3][]client.Notification, done [3]msp.TurnCompletedParams) {
		ev1, ev2, ev3 := ev[0], ev[1], ev[2]
		second, third := done[1], done[2]
		var usages []msp.SessionContextUsageParams
		for _, n := range only(append(append(ev1, ev2...), ev3...), msp.NotifySessionContextUsage) {
			usages = append(usages, decode[msp.SessionContextUsageParams](t, n))
		}
		items := itemsOf(t, ev3, msp.ItemCompaction)
		if len(items) != 1 {
			t.Fatalf("third turn's events: %s", compact(methods(ev3)))
		}
		it := items[0]
		if it.Trigger != msp.CompactionAuto || it.Outcome != msp.CompactionCompacted || it.SummarizedThrough != second.TurnID ||
			*it.Text != "They asked about Paris and Lyon." || *it.TokensBefore != 1700 || *it.TokensAfter >= 1700 || *it.TurnID != third.TurnID {
			t.Fatalf("compaction item %s", bodyJSON(t, it))
		}
		want := []struct {
			used     int64
			pressure string
		}{{1000, msp.PressureNormal}, {1700, msp.PressureWarning}, {*it.TokensAfter, msp.PressureNormal}, {320, msp.PressureNormal}}
		if len(usages) != len(want) {
			t.Fatalf("session/contextUsage %s", bodyJSON(t, usages))
		}
		for i, u := range usages {
			if u.UsedTokens != want[i].used || u.Pressure != want[i].pressure || u.WindowTokens == nil || *u.WindowTokens != 2000 {
				t.Errorf("session/contextUsage %d: %s, want %d %s", i, bodyJSON(t, u), want[i].used, want[i].pressure)
			}
		}
		if third.Attempts.Count != 2 {
			t.Errorf("the third turn counted %d attempts, want 2 (the summary and its answer)", third.Attempts.Count)
		}
		reqs := w.fake.Requests()
		if len(reqs) != 4 {
			t.Fatalf("%d requests", len(reqs))
		}
		sum, next := reqs[2].Body, reqs[3].Body
		if !mentions(t, sum, turn.SummaryInstructions) || !mentions(t, sum, "<conversation>\nUser: What is the capital of France?\nAssistant: Paris.\nUser: And its second city?\nAssistant: Lyon.\n</conversation>") ||
			mentions(t, sum, "And the third?") || sum["tools"] != nil {
			t.Fatalf("the summarising request %s", bodyJSON(t, sum))
		}
		if !mentions(t, next, turn.SummaryPreamble+"They asked about Paris and Lyon.") || !mentions(t, next, "And the third?") ||
			mentions(t, next, "What is the capital of France?") || mentions(t, next, "Lyon.\"") {
			t.Fatalf("the request after the compaction %s", bodyJSON(t, next))
		}
	})
}

// TestCompactionWhenThePromptIsTooLong: each API refuses the second
// turn's request as too long, as it words it; mspd compacts (one
// summarising request) and re-runs the attempt with the summary, after a
// turn/retryScheduled whose reason names the compaction; the turn's
// attempts count the three requests.
func TestCompactionWhenThePromptIsTooLong(t *testing.T) {
	replies := func(w compactWire) []providertest.Reply {
		return []providertest.Reply{w.answer("Paris.", 100, 10), w.tooLong, w.answer("They asked about Paris.", 120, 20), w.answer("Lyon.", 90, 5)}
	}
	onEachWire(t, replies, func(t *testing.T, c *checkedClient, _ string, w compactWire, sid string) {
		_, first := runTurnOn(t, c, sid, "What is the capital of France?")
		events, done := runTurnOn(t, c, sid, "And its second city?")
		if done.Attempts.Count != 3 {
			t.Errorf("attempts %d, want 3 (refused, summary, re-run)", done.Attempts.Count)
		}
		notices := only(events, msp.NotifyTurnRetryScheduled)
		if len(notices) != 1 {
			t.Fatalf("events %s", compact(methods(events)))
		}
		n := decode[msp.TurnRetryScheduledParams](t, notices[0])
		before := "130k"
		switch w.id {
		case "resp":
			before = "" // the Responses API names no size: mspd's own measure
		case "claude":
			before = "208k"
		}
		if n.Attempt != 1 || n.NextAttempt != 2 || !strings.HasPrefix(n.Reason, "context compacted: "+before) || !strings.HasSuffix(n.Reason, " tokens") {
			t.Errorf("notice %s", bodyJSON(t, n))
		}
		items := itemsOf(t, events, msp.ItemCompaction)
		if len(items) != 1 || items[0].Outcome != msp.CompactionCompacted || items[0].SummarizedThrough != first.TurnID {
			t.Fatalf("compaction items %s", bodyJSON(t, items))
		}
		if got := compact(methods(events)); !strings.Contains(got, "item/started, session/tokenUsage, item/completed, session/contextUsage, turn/retryScheduled") {
			t.Errorf("events %s", got)
		}
		reqs := w.fake.Requests()
		if !mentions(t, reqs[1].Body, "What is the capital of France?") || !mentions(t, reqs[2].Body, turn.SummaryInstructions) ||
			!mentions(t, reqs[3].Body, turn.SummaryPreamble+"They asked about Paris.") || mentions(t, reqs[3].Body, "What is the capital of France?") {
			t.Fatalf("requests %s", bodyJSON(t, []any{reqs[1].Body, reqs[2].Body, reqs[3].Body}))
		}
	})
}

// rawItems are the items of a session/read or session/fork result,
// as the server encoded them.
func rawItems(t *testing.T, raw json.RawMessage) []json.RawMessage {
	t.Helper()
	var res struct {
		History struct {
			Items []json.RawMessage `json:"items"`
		} `json:"history"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	return res.History.Items
}

// liveItems are the items of the item/completed events among ns, as
// delivered, in order.
func liveItems(t *testing.T, ns []client.Notification) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	for _, n := range only(ns, msp.NotifyItemCompleted) {
		var p struct {
			Item json.RawMessage `json:"item"`
		}
		if err := json.Unmarshal(n.Params, &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Item)
	}
	return out
}

func sameItems(t *testing.T, what string, got, want []json.RawMessage) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d items, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("%s item %d\n%s\nwant\n%s", what, i, got[i], want[i])
		}
	}
}

// TestManualCompaction: session/compact on a session with nothing to
// compact answers noop; after two turns it is accepted, and the same
// command sent again gets the same ack and runs nothing more; the
// compaction runs as a turn of its own (turn/started, the compaction
// item, turn/completed with one attempt); the next turn's request
// carries the summary and not the older turns; session/read and a fork
// hold every item byte-equal as delivered; a daemon started again on the
// same data folds the compaction from the log, and its next request
// carries the summary too.
func TestManualCompaction(t *testing.T) {
	dir := t.TempDir()
	wires, cfg := compactFakes(t, dir, func(w compactWire) []providertest.Reply {
		return []providertest.Reply{w.answer("Paris.", 100, 10), w.answer("Lyon.", 150, 10),
			w.answer("They asked about Paris and Lyon.", 200, 20), w.answer("Marseille.", 60, 5), w.answer("Toulouse.", 80, 5)}
	})
	chat := wires[0]
	d := startDaemon(t, cfg)
	c := dial(t, d.URL(), client.Options{})
	ctx := testCtx(t)
	sid := newSession(t, c)

	if ack, err := c.Compact(ctx, msp.SessionCompactParams{SessionID: sid}); err != nil || ack.Status != msp.CompactNoop || ack.Reason != msp.ReasonNoCompactableHistory {
		t.Fatalf("compacting an empty session: %+v, %v", ack, err)
	}
	ev1, first := runTurnOn(t, c, sid, "What is the capital of France?")
	ev2, _ := runTurnOn(t, c, sid, "And its second city?")
	p := msp.SessionCompactParams{CommandID: client.NewCommandID(), SessionID: sid}
	ack, err := c.CallRaw(ctx, msp.MethodSessionCompact, p)
	if err != nil || string(ack) != `{"commandId":"`+p.CommandID+`","status":"accepted"}` {
		t.Fatalf("session/compact: %s, %v", ack, err)
	}
	evc, err := c.WaitTurn(ctx, p.CommandID)
	if err != nil {
		t.Fatal(err)
	}
	if got := compact(methods(evc)); got != "turn/started, item/started, session/tokenUsage, item/completed, session/contextUsage, turn/completed" {
		t.Fatalf("the compaction's events: %s", got)
	}
	done := decode[msp.TurnCompletedParams](t, evc[len(evc)-1])
	if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 1 || done.TurnID != p.CommandID {
		t.Fatalf("the compaction's terminal %s", bodyJSON(t, done))
	}
	if again, err := c.CallRaw(ctx, msp.MethodSessionCompact, p); err != nil || !bytes.Equal(again, ack) {
		t.Fatalf("session/compact sent again: %s, %v", again, err)
	}
	// Bad input gets a typed error and compacts nothing (a frame the
	// schema refuses goes on a connection that does not check its own).
	unchecked, err := client.Dial(ctx, d.URL(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer unchecked.Close()
	for _, bad := range []struct {
		p    msp.SessionCompactParams
		kind string
	}{
		{msp.SessionCompactParams{SessionID: sid, TurnID: "not-a-turn"}, msp.KindInvalidParams},
		{msp.SessionCompactParams{SessionID: sid, TurnID: first.TurnID}, msp.KindCommandRejected},
		{msp.SessionCompactParams{SessionID: client.NewCommandID()}, msp.KindSessionNotFound},
	} {
		var me *msp.Error
		if _, err := unchecked.Compact(ctx, bad.p); !errors.As(err, &me) || me.Data.Kind != bad.kind {
			t.Errorf("session/compact %+v: %v, want %s", bad.p, err, bad.kind)
		}
	}
	ev3, _ := runTurnOn(t, c, sid, "And the third?")
	reqs := chat.fake.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests: the replay ran another compaction", len(reqs))
	}
	if !mentions(t, reqs[3].Body, turn.SummaryPreamble+"They asked about Paris and Lyon.") || mentions(t, reqs[3].Body, "What is the capital of France?") {
		t.Fatalf("the request after the compaction %s", bodyJSON(t, reqs[3].Body))
	}

	live := liveItems(t, append(append(append(ev1, ev2...), evc...), ev3...))
	read, err := c.CallRaw(ctx, msp.MethodSessionRead, msp.SessionReadParams{SessionID: sid, ExcludeItems: new(false)})
	if err != nil {
		t.Fatal(err)
	}
	sameItems(t, "session/read", rawItems(t, read), live)
	fork, err := c.CallRaw(ctx, msp.MethodSessionFork, msp.SessionForkParams{CommandID: client.NewCommandID(), SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	sameItems(t, "session/fork", rawItems(t, fork), live)
	forkBefore, err := c.CallRaw(ctx, msp.MethodSessionFork, msp.SessionForkParams{CommandID: client.NewCommandID(), SessionID: sid,
		CutPoint: &msp.ForkCutPoint{LastTurnID: first.TurnID}})
	if err != nil {
		t.Fatal(err)
	}
	sameItems(t, "a fork before the compaction", rawItems(t, forkBefore), liveItems(t, ev1))

	// The next process folds the compaction from the log.
	d.Close(ctx)
	d2 := startDaemon(t, cfg)
	c2 := dial(t, d2.URL(), client.Options{})
	var snap msp.SessionSnapshot
	if err := c2.Call(ctx, msp.MethodSessionResume, msp.SessionResumeParams{CommandID: client.NewCommandID(), SessionID: sid}, &snap); err != nil {
		t.Fatal(err)
	}
	if u := snap.ContextUsage; u == nil || u.UsedTokens != 65 || u.Pressure != msp.PressureNormal {
		t.Fatalf("contextUsage after a restart %s", bodyJSON(t, u))
	}
	runTurnOn(t, c2, sid, "And the fourth?")
	reqs = chat.fake.Requests()
	last := reqs[len(reqs)-1].Body
	if !mentions(t, last, turn.SummaryPreamble+"They asked about Paris and Lyon.") || !mentions(t, last, "And the third?") ||
		!mentions(t, last, "Marseille.") || mentions(t, last, "What is the capital of France?") {
		t.Fatalf("the request after a restart %s", bodyJSON(t, last))
	}
}

// TestAutoCompactionReplaysAndForksAsRecorded: on each wire, a chat
// pushed to the warning level of its 2000-token window is compacted
// automatically before its third turn's request, which answers. view/page
// replays every durable event of the three turns, the compaction item's
// item/started and item/completed among them, byte-equal to the frames
// the live client received; so does a session/resume from the cursor
// before the compaction (the second turn's turn/completed). A fork
// copies the log as recorded (but for its own session id and cursors),
// the compaction item in its history byte-equal as delivered, and sends
// no provider request.
func TestAutoCompactionReplaysAndForksAsRecorded(t *testing.T) {
	onEachWireCompacted(t, func(t *testing.T, c *checkedClient, url string, w compactWire, sid string, ev [3][]client.Notification, done [3]msp.TurnCompletedParams) {
		ev1, ev2, ev3 := ev[0], ev[1], ev[2]
		third := done[2]
		ctx := testCtx(t)
		var compaction []client.Notification
		for _, n := range ev3 {
			if (n.Method == msp.NotifyItemStarted || n.Method == msp.NotifyItemCompleted) && decode[msp.ItemParams](t, n).Item.Kind == msp.ItemCompaction {
				compaction = append(compaction, n)
			}
		}
		if len(compaction) != 2 || decode[msp.ItemParams](t, compaction[1]).Item.Trigger != msp.CompactionAuto {
			t.Fatalf("the third turn's events: %s", compact(methods(ev3)))
		}
		live := append(append(ev1, ev2...), ev3...)
		for _, n := range compaction {
			if _, ok := durableEvents(live)[n.Cursor()]; !ok {
				t.Fatalf("the compaction's %s has no durable cursor: %s", n.Method, n.Params)
			}
		}

		page := pagedAsLive(t, ctx, c, sid, live)
		before := ev2[len(ev2)-1].Cursor()
		resumedAsLive(t, ctx, url, sid, before, third.TurnID, ev3)

		requests := len(w.fake.Requests())
		copied := forkedAsRecorded(t, ctx, c, sid, page, liveItems(t, live))
		var forked int
		for _, e := range copied {
			if (e.Method == msp.NotifyItemStarted || e.Method == msp.NotifyItemCompleted) && strings.Contains(string(e.Params), `"kind":"compaction"`) {
				forked++
			}
		}
		if forked != 2 {
			t.Errorf("the fork holds %d of the compaction item's 2 events", forked)
		}
		if n := len(w.fake.Requests()); n != requests {
			t.Errorf("forking sent %d provider requests", n-requests)
		}
	})
}
