package session

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/store"
	"mspd/turn"
)

func activeOf(t *testing.T, st store.Store, sid string) *pendingTurn {
	t.Helper()
	row, err := st.Session(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	var s state
	if err := json.Unmarshal(row.State, &s); err != nil {
		t.Fatal(err)
	}
	return s.Active
}

// TestGracefulStopResumesTheTurn: a manager that stops (a deploy) while a
// turn streams writes no terminal: the attempt's item fails with the text
// streamed so far, the turn stays active with an exact checkpoint, and the
// next manager resumes it, counting the attempt that was cut off.
func TestGracefulStopResumesTheTurn(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	m1 := newManager(t, st, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m1, sub)
	ack := startTurn(t, m1, textTurn(sid, "crash"))
	model.waitStarted(t, "crash")
	m1.Close()

	if got := of[msp.TurnCompletedParams](t, sub, msp.NotifyTurnCompleted); len(got) != 0 {
		t.Fatalf("a stopped turn got a terminal: %+v", got)
	}
	items := of[msp.ItemParams](t, sub, msp.NotifyItemCompleted)
	if cut := items[len(items)-1].Item; cut.Status != msp.ItemFailed || *cut.Text != "working" || cut.Truncated {
		t.Fatalf("cut attempt %+v: want failed with its text", cut)
	}
	a := activeOf(t, st, sid)
	if a == nil || a.Checkpoint == nil || !a.Checkpoint.Stopped || !a.Checkpoint.Lost || a.Checkpoint.Attempts != 1 {
		t.Fatalf("stored active turn %+v", a)
	}

	m2 := newManager(t, st, model, mgrOpts{})
	sub2 := newRecSub()
	subscribe(t, m2, sub2, sid)
	c := sub2.waitTerminal(t, ack.TurnID)
	if c.Terminal != msp.TerminalCompleted || c.Attempts.Count != 2 || c.Attempts.UsageComplete {
		t.Fatalf("resumed turn %+v %+v", c, c.Attempts)
	}
	notices := of[msp.TurnRetryScheduledParams](t, sub2, msp.NotifyTurnRetryScheduled)
	if len(notices) != 1 || notices[0].Reason != "the server restarted during attempt 1" {
		t.Fatalf("notices %+v", notices)
	}
	if c.Reason != "" && strings.Contains(c.Reason, "stopped") {
		t.Fatalf("a turn ended by a shutdown reads %q", c.Reason)
	}
}

// TestCrashingTurnRunsOutOfAttempts: a turn whose every attempt takes the
// process down is resumed once per restart and fails for good after
// maxAttempts, never looping.
func TestCrashingTurnRunsOutOfAttempts(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	cs := &crashStore{Store: st}
	m := newManager(t, cs, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	three := 3
	ack := startTurn(t, m, msp.TurnStartParams{SessionID: sid, Input: []msp.TurnInputPart{{Type: "text", Text: "block forever"}},
		Retry: &msp.RetryPolicy{MaxAttempts: &three}})
	for restart := 1; ; restart++ {
		model.waitStarted(t, "block forever")
		cs.dead.Store(true) // the process dies
		m.Close()
		cs = &crashStore{Store: st}
		m = newManager(t, cs, model, mgrOpts{})
		if restart == 3 {
			break
		}
	}
	sub = newRecSub()
	subscribe(t, m, sub, sid)
	c := sub.waitTerminal(t, ack.TurnID)
	if c.Terminal != msp.TerminalFailed || c.Error.Kind != msp.TurnErrorHostRestarted || c.Attempts.Count != 3 {
		t.Fatalf("terminal %+v %+v %+v", c, c.Error, c.Attempts)
	}
	var reasons []string
	for _, n := range of[msp.TurnRetryScheduledParams](t, sub, msp.NotifyTurnRetryScheduled) {
		reasons = append(reasons, n.Reason)
	}
	want := "the server restarted during attempt 1|the server restarted during attempt 2"
	if strings.Join(reasons, "|") != want {
		t.Fatalf("notices %q, want %q", reasons, want)
	}
}

// TestResumption decides how a lost turn goes on from what was stored.
func TestResumption(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	started := now.Add(-time.Minute)
	cp := func(c turn.Checkpoint) *turn.Checkpoint { return &c }
	for _, tt := range []struct {
		name     string
		cp       *turn.Checkpoint
		inFlight bool
		made     int
		delay    time.Duration
		reason   string
	}{
		{"died in attempt 1", nil, false, 1, 0, "the server restarted during attempt 1"},
		{"died streaming attempt 3", cp(turn.Checkpoint{Attempts: 2, NextAt: now.Add(time.Hour)}), true, 3, 0,
			"the server restarted during attempt 3"},
		{"died once attempt 3 was due", cp(turn.Checkpoint{Attempts: 2, NextAt: now.Add(-time.Second)}), false, 3, 0,
			"the server restarted during attempt 3"},
		{"died in the backoff before attempt 3", cp(turn.Checkpoint{Attempts: 2, NextAt: now.Add(2 * time.Second)}), false, 2,
			2 * time.Second, "the server restarted during the backoff before attempt 3"},
		// The begun mark, not this node's clock, decides: the clocks of
		// the node that died and of the one taking over can disagree.
		{"begun attempt 3, this clock behind", cp(turn.Checkpoint{Attempts: 2, NextAt: now.Add(time.Hour), Begun: new(true)}), false, 3, 0,
			"the server restarted during attempt 3"},
		{"request 1 begun after a stop before it", cp(turn.Checkpoint{NextAt: now.Add(time.Hour), Begun: new(true)}), false, 1, 0,
			"the server restarted during attempt 1"},
		{"attempt 3 not begun, this clock ahead", cp(turn.Checkpoint{Attempts: 2, NextAt: now.Add(-time.Hour), Begun: new(false)}), false, 2,
			-time.Hour, "the server restarted during the backoff before attempt 3"},
		{"stopped in attempt 2", cp(turn.Checkpoint{Attempts: 2, NextAt: now.Add(-time.Hour), Stopped: true, Lost: true}), false, 2, 0,
			"the server restarted during attempt 2"},
		{"stopped in the backoff", cp(turn.Checkpoint{Attempts: 1, NextAt: now.Add(-time.Hour), Stopped: true}), false, 1, -time.Hour,
			"the server restarted during the backoff before attempt 2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, lost := resumption(pendingTurn{Checkpoint: tt.cp, StartedAt: started}, tt.inFlight, now, "the server restarted")
			if r.Attempts != tt.made || r.Delay != tt.delay || r.Reason != tt.reason || !r.StartedAt.Equal(started) || r.StoppedBy != "the server restarted" {
				t.Fatalf("got %+v\nwant made %d, delay %v, reason %q", r, tt.made, tt.delay, tt.reason)
			}
			want := 0 // every case but those of a backoff cut an attempt in flight
			if tt.delay == 0 {
				want = tt.made
			}
			if lost != want {
				t.Fatalf("lost attempt %d, want %d", lost, want)
			}
		})
	}
}

// brokenStore refuses every commit once broken.
type brokenStore struct {
	store.Store
	broken chan struct{}
}

func (b *brokenStore) Commit(ctx context.Context, batch store.Batch) error {
	select {
	case <-b.broken:
		for _, r := range batch.Records {
			if r.Method == msp.NotifyTurnCompleted {
				return errors.New("disk on fire")
			}
		}
	default:
	}
	return b.Store.Commit(ctx, batch)
}

// TestTerminalRefusedForGoodEndsTheTurn: issue 7 defect 1 — a terminal the
// log refuses for good is tried a bounded number of times; then readers
// get a failed terminal (not durable) and the turn is left active for the
// next start, which resumes it. Nothing loops.
func TestTerminalRefusedForGoodEndsTheTurn(t *testing.T) {
	st := openStore(t)
	bs := &brokenStore{Store: st, broken: make(chan struct{})}
	model := newHistModel()
	m := newManager(t, bs, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	close(bs.broken)
	ack := startTurn(t, m, textTurn(sid, "hello"))
	c := sub.waitTerminal(t, ack.TurnID)
	if c.Terminal != msp.TerminalFailed || c.Error.Kind != msp.TurnErrorLog || c.SourceRange != nil {
		t.Fatalf("terminal %+v %+v: want a failed, non-durable logError", c, c.Error)
	}
	if err := m.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if activeOf(t, st, sid) == nil {
		t.Fatal("the turn was dropped from the stored row")
	}
	m2 := newManager(t, st, model, mgrOpts{})
	sub2 := newRecSub()
	subscribe(t, m2, sub2, sid)
	if c := sub2.waitTerminal(t, ack.TurnID); c.Terminal != msp.TerminalCompleted || c.SourceRange == nil {
		t.Fatalf("after a restart: %+v", c)
	}
}

// TestDrainRefusesNewTurnsAndWaits: while draining, a new turn/start is
// refused as overloaded (retryable) while its replay still gets the
// recorded ack, and WaitIdle returns once the running turn has ended.
func TestDrainRefusesNewTurnsAndWaits(t *testing.T) {
	model := newHistModel()
	m := newManager(t, openStore(t), model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	p := textTurn(sid, "block")
	p.CommandID = cmdID()
	ack := startTurn(t, m, p)
	model.waitStarted(t, "block")
	queued := startTurn(t, m, textTurn(sid, "queued behind"))
	m.Drain()

	_, _, err := m.StartTurn(context.Background(), nil, mustJSON(textTurn(sid, "late")))
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindOverloaded || me.Data.Retryable == nil || !*me.Data.Retryable {
		t.Fatalf("turn/start while draining: %v, want overloaded, retryable", err)
	}
	if raw, _, err := m.StartTurn(context.Background(), nil, mustJSON(p)); err != nil || !strings.Contains(string(raw), ack.TurnID) {
		t.Fatalf("replay while draining: %s, %v", raw, err)
	}
	wait, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := m.WaitIdle(wait); err == nil {
		t.Fatal("WaitIdle returned while a turn runs")
	}
	interrupt(t, m, sid)
	sub.waitTerminal(t, ack.TurnID)
	if err := m.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The queued turn did not launch: it is durable intake for the next
	// process.
	for _, c := range of[msp.TurnStartedParams](t, sub, msp.NotifyTurnStarted) {
		if c.TurnID == queued.TurnID {
			t.Fatal("a queued turn launched while draining")
		}
	}
}

// fakeNow is a clock a test moves by hand.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }

func (f *fakeNow) advance(d time.Duration) { f.mu.Lock(); f.t = f.t.Add(d); f.mu.Unlock() }

// TestStreamedTextSurvivesACrash: a streaming answer's text is saved to
// the log about once a second (item/updated at a higher revision), so a
// process that dies mid-answer keeps it: the item the next process closes
// as failed carries the text saved, and the page shows it struck through
// instead of an empty bubble.
func TestStreamedTextSurvivesACrash(t *testing.T) {
	st := openStore(t)
	cs := &crashStore{Store: st}
	clock := &fakeNow{t: time.Now()}
	model := pacedModel{feed: make(chan string)}
	m := newManager(t, cs, model, mgrOpts{now: clock.now})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	startTurn(t, m, textTurn(sid, "write"))
	model.feed <- "Once upon "
	sub.waitCount(t, msp.NotifyItemDelta, 1)
	clock.advance(1500 * time.Millisecond)
	model.feed <- "a time"
	updated := sub.waitCount(t, msp.NotifyItemUpdated, 1)
	it := params[msp.ItemParams](t, updated[0].Frame).Item
	if it.Revision != 2 || *it.Text != "Once upon a time" || it.Status != msp.ItemInProgress {
		t.Fatalf("item/updated %+v", it)
	}
	model.feed <- " there was" // not saved yet: lost with the process
	sub.waitCount(t, msp.NotifyItemDelta, 3)
	cs.dead.Store(true)
	m.Close()

	m2 := newManager(t, st, pacedModel{feed: make(chan string)}, mgrOpts{})
	defer m2.Close()
	var cut *msp.Item
	for _, r := range records(t, st, sid) {
		if r.Method == msp.NotifyItemCompleted {
			if p := recordParams[msp.ItemParams](t, r); p.Item.ItemID == it.ItemID {
				cut = &p.Item
			}
		}
	}
	if cut == nil || cut.Status != msp.ItemFailed || *cut.Text != "Once upon a time" || !cut.Truncated || cut.Revision != 3 {
		t.Fatalf("the cut item after the restart: %+v", cut)
	}
}

// TestCompletedItemOutranksItsCheckpoints: item/completed's revision is
// above every item/updated of the item.
func TestCompletedItemOutranksItsCheckpoints(t *testing.T) {
	clock := &fakeNow{t: time.Now()}
	model := pacedModel{feed: make(chan string)}
	m := newManager(t, openStore(t), model, mgrOpts{now: clock.now})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	ack := startTurn(t, m, textTurn(sid, "write"))
	model.feed <- "x"
	sub.waitCount(t, msp.NotifyItemDelta, 1)
	for i := range 3 {
		clock.advance(2 * time.Second)
		model.feed <- "x"
		sub.waitCount(t, msp.NotifyItemUpdated, i+1)
	}
	close(model.feed)
	sub.waitTerminal(t, ack.TurnID)
	items := of[msp.ItemParams](t, sub, msp.NotifyItemCompleted)
	if done := items[len(items)-1].Item; done.Revision != 5 || *done.Text != "xxxx" {
		t.Fatalf("item/completed %+v: want revision 5 after three checkpoints", done)
	}
}

// TestRecoveredItemMatchesItsDeltas: §5 item 15 — an item/completed
// carries the full text, equal to the concatenated deltas unless
// truncated is set. The answer opens on an ephemeral item/started, so a
// crash mid-stream before its text was first saved leaves no record of
// it; recovery closes it as failed, truncated, by the id its attempt
// gives it (turn.AnswerItemID), before the retry notice: a reader that
// saw it open is not left with an open item for ever. A reader resuming
// from its last delta's cursor is told of the hole (view/gap after that
// cursor), then gets the closed answer, the retry notice and the next
// attempt's answer, at cursors after its own: none handed out before the
// crash comes again.
func TestRecoveredItemMatchesItsDeltas(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	cs := &crashStore{Store: st}
	model := newHistModel()
	frozen := func() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) } // no text checkpoint falls due
	m1 := newManager(t, cs, model, mgrOpts{now: frozen})
	sub := newRecSub()
	sid := startSession(t, m1, sub)
	ack := startTurn(t, m1, textTurn(sid, "crash")) // streams "working", then hangs
	model.waitStarted(t, "crash")
	var last, cut string
	for _, n := range sub.all() {
		switch n.Method {
		case msp.NotifyItemDelta:
			last = n.Cursor
		case msp.NotifyItemStarted:
			cut = params[msp.ItemParams](t, n.Frame).Item.ItemID
		}
	}
	if last == "" || cut == "" {
		t.Fatal("no answer streamed")
	}
	cs.dead.Store(true) // the process dies
	m1.Close()

	m2 := newManager(t, st, model, mgrOpts{now: frozen})
	sub2 := newRecSub()
	if err := m2.attach(ctx, sub2, sid, last); err != nil {
		t.Fatalf("resuming from the last delta's cursor %s: %v", last, err)
	}
	done := sub2.waitTerminal(t, ack.TurnID)
	if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 2 {
		t.Fatalf("resumed turn: %+v", done)
	}
	got := sub2.all()
	want := []string{msp.NotifyViewGap, msp.NotifyItemCompleted, msp.NotifyTurnRetryScheduled}
	if len(got) < 3 || !slices.Equal(methodsOf(got[:3]), want) {
		t.Fatalf("after the crash the reader got %v, want %v first", methodsOf(got), want)
	}
	if g := params[msp.ViewGapParams](t, got[0].Frame); g.After != last || g.Next != got[1].Cursor {
		t.Fatalf("gap %+v, want after %s, next %s", g, last, got[1].Cursor)
	}
	if it := params[msp.ItemParams](t, got[1].Frame).Item; it.ItemID != cut || it.Status != msp.ItemFailed || !it.Truncated || it.Kind != msp.ItemAgentMessage {
		t.Fatalf("the cut answer closed as %+v, want %s failed and truncated", it, cut)
	}
	prev, _ := parseCursor(last)
	for _, n := range got[1:] {
		c, err := parseCursor(n.Cursor)
		if err != nil || !prev.before(c) {
			t.Fatalf("%s at %s after %s; all: %v %v", n.Method, n.Cursor, prev, methodsOf(got), cursorsOf(got))
		}
		prev = c
	}
	for _, r := range records(t, st, sid) {
		switch r.Method {
		case msp.NotifyItemStarted, msp.NotifyItemUpdated:
			t.Fatalf("the log holds a %s of an answer", r.Method)
		case msp.NotifyItemCompleted:
			it := recordParams[msp.ItemParams](t, r).Item
			if it.Kind == msp.ItemAgentMessage && it.ItemID != cut && deref(it.Text) != "re: crash" {
				t.Fatalf("an answer %q (%s) in the log; only the cut one, closed, and the second attempt's should be", deref(it.Text), it.Status)
			}
		}
	}
}

// failTerminalOnce fails the first commit that carries a turn/completed.
type failTerminalOnce struct {
	store.Store
	failed atomic.Bool
}

func (f *failTerminalOnce) Commit(ctx context.Context, b store.Batch) error {
	for _, r := range b.Records {
		if r.Method == msp.NotifyTurnCompleted && f.failed.CompareAndSwap(false, true) {
			return errors.New("disk full (once)")
		}
	}
	return f.Store.Commit(ctx, b)
}

// TestTurnWhoseTerminalFailedStillSettles: §4.9 "the server must always
// produce a terminal". When finish cannot append a turn's terminal it
// retires the turn in memory only (turns.go: `s.st = st // the next restart
// settles it from the log`), leaving the store's row busy with the turn
// active. But the next state commit — any later turn/start admission or
// launch — writes the in-memory state (Active nil, Busy false) over that
// row. From then on neither this process nor a restart (BusySessions no
// longer lists the session) ever writes a terminal for the first turn:
// every turn-wait on it hangs forever.
func TestTurnWhoseTerminalFailedStillSettles(t *testing.T) {
	st := openStore(t)
	fs := &failTerminalOnce{Store: st}
	model := newHistModel()
	m1 := newManager(t, fs, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m1, sub)

	first := startTurn(t, m1, textTurn(sid, "one"))
	// The session's worker is done with the first turn once none runs.
	wait, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m1.WaitIdle(wait); err != nil || !fs.failed.Load() {
		t.Fatalf("the first turn never tried to write its terminal (WaitIdle: %v)", err)
	}
	second := startTurn(t, m1, textTurn(sid, "two")) // the store works again
	sub.waitTerminal(t, second.TurnID)
	m1.Close()

	newManager(t, st, model, mgrOpts{}) // restart: recovery settles what it can
	for _, r := range records(t, st, sid) {
		if r.Method == msp.NotifyTurnCompleted && recordParams[msp.TurnCompletedParams](t, r).TurnID == first.TurnID {
			return
		}
	}
	t.Fatalf("turn %s never got a terminal, not even after a restart", first.TurnID)
}
