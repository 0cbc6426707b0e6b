package session

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/store"

	"github.com/google/uuid"
)

// countingStore counts commits and what they carry.
type countingStore struct {
	store.Store
	mu      sync.Mutex
	batches [][]string // the methods of each commit's records, then urgent and begun if it was
}

// urgent marks a batch marked Urgent in countingStore's batches; begun one
// whose row marks the active turn's next request begun.
const (
	urgent = "(urgent)"
	begun  = "(begun)"
)

func (c *countingStore) Commit(ctx context.Context, b store.Batch) error {
	err := c.Store.Commit(ctx, b)
	if err == nil {
		var ms []string
		for _, r := range b.Records {
			ms = append(ms, r.Method)
		}
		if b.Urgent {
			ms = append(ms, urgent)
		}
		if b.Session != nil {
			var st state
			if json.Unmarshal(b.Session.State, &st) == nil && st.Active != nil && st.Active.Checkpoint != nil &&
				st.Active.Checkpoint.Begun != nil && *st.Active.Checkpoint.Begun {
				ms = append(ms, begun)
			}
		}
		c.mu.Lock()
		c.batches = append(c.batches, ms)
		c.mu.Unlock()
	}
	return err
}

func (c *countingStore) take() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.batches
	c.batches = nil
	return b
}

// TestTwoCommitsPerTurn: a turn on an idle session costs two commits
// (fsyncs): its admission with turn/started and the userMessage item; the
// answer's close, usage and terminal together. The answer opens on an
// ephemeral item/started. A retried attempt's close and usage ride with
// its notice, which goes ahead of other writes; the retried request is
// marked begun in the session row, alone, before it is sent.
func TestTwoCommitsPerTurn(t *testing.T) {
	cs := &countingStore{Store: openStore(t)}
	m := newManager(t, cs, newHistModel(), mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	runTurn(t, m, sub, textTurn(sid, "first")) // names the session too
	idle := func() {
		// The worker has let go: the next turn launches with its
		// admission rather than queueing behind a worker winding down.
		if err := m.WaitIdle(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	idle()
	cs.take()
	runTurn(t, m, sub, textTurn(sid, "second"))
	want := [][]string{
		{msp.NotifyTurnStarted, msp.NotifyItemCompleted},
		{msp.NotifyItemCompleted, msp.NotifySessionTokenUsage, msp.NotifyTurnCompleted},
	}
	if got := cs.take(); !equalBatches(got, want) {
		t.Fatalf("commits of a turn:\n got %v\nwant %v", got, want)
	}
	// The answer's item/started still reaches the reader first, at an
	// ephemeral position and without a sourceRange.
	var started *Notification
	for _, n := range sub.all() {
		n := n
		switch n.Method {
		case msp.NotifyItemStarted:
			started = &n
		case msp.NotifyItemDelta:
			if started == nil {
				t.Fatal("a delta before its item/started")
			}
		}
	}
	if started == nil {
		t.Fatal("no item/started")
	}
	p := params[msp.ItemParams](t, started.Frame)
	if started.Durable || !strings.Contains(started.Cursor, ".") || p.SourceRange != nil || p.ViewCursor != started.Cursor {
		t.Fatalf("the answer's item/started: durable %v, cursor %s, params %+v", started.Durable, started.Cursor, p)
	}
	idle()
	runTurn(t, m, sub, textTurn(sid, "cut")) // attempt 1 is cut after "partial"
	want = [][]string{
		{msp.NotifyTurnStarted, msp.NotifyItemCompleted},
		{msp.NotifyItemCompleted, msp.NotifyTurnRetryScheduled, urgent},
		{begun},
		{msp.NotifyItemCompleted, msp.NotifySessionTokenUsage, msp.NotifyTurnCompleted},
	}
	if got := cs.take(); !equalBatches(got, want) {
		t.Fatalf("commits of a retried turn:\n got %v\nwant %v", got, want)
	}
	idle()
	runTurn(t, m, sub, textTurn(sid, "busy")) // attempt 1 gets a 503
	want = [][]string{
		{msp.NotifyTurnStarted, msp.NotifyItemCompleted},
		{msp.NotifyTurnModelRetryScheduled, urgent},
		{begun},
		{msp.NotifyItemCompleted, msp.NotifySessionTokenUsage, msp.NotifyTurnCompleted},
	}
	if got := cs.take(); !equalBatches(got, want) {
		t.Fatalf("commits of a turn with a provider backoff:\n got %v\nwant %v", got, want)
	}
}

func equalBatches(a, b [][]string) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestLaunchedTurnWaitsForItsAck: a turn launched with its admission
// reaches other subscribers at once, but its caller only once the ack is
// on its way (launch), so that turn/started follows the ack there.
func TestLaunchedTurnWaitsForItsAck(t *testing.T) {
	m := newManager(t, openStore(t), newHistModel(), mgrOpts{})
	caller := newRecSub()
	sid := startSession(t, m, caller)
	other := newRecSub()
	subscribe(t, m, other, sid)
	p := textTurn(sid, "hello")
	p.CommandID = cmdID()
	raw, launch, err := m.StartTurn(context.Background(), caller, mustJSON(p))
	if err != nil {
		t.Fatal(err)
	}
	if got := of[msp.TurnStartedParams](t, other, msp.NotifyTurnStarted); len(got) != 1 {
		t.Fatalf("the other subscriber got %d turn/started before the ack, want 1 (it has no ack to wait for)", len(got))
	}
	if got := of[msp.TurnStartedParams](t, caller, msp.NotifyTurnStarted); len(got) != 0 {
		t.Fatal("the caller got turn/started before its ack was sent")
	}
	launch()
	var ack msp.TurnStartResult
	json.Unmarshal(raw, &ack)
	caller.waitTerminal(t, ack.TurnID)
	if got := of[msp.TurnStartedParams](t, caller, msp.NotifyTurnStarted); len(got) != 1 {
		t.Fatalf("the caller got %d turn/started", len(got))
	}
}

// failingReads refuses reads of the log while fail is set.
type failingReads struct {
	store.Store
	fail atomic.Bool
}

func (f *failingReads) Records(ctx context.Context, id string, after int64, limit store.Limit) ([]store.Record, error) {
	if f.fail.Load() {
		return nil, errors.New("store unavailable")
	}
	return f.Store.Records(ctx, id, after, limit)
}

// abortSub is a recSub that can be cut off.
type abortSub struct {
	*recSub
	aborted atomic.Bool
}

func (a *abortSub) Abort(string) { a.aborted.Store(true) }

// TestFailedAttachAborts: a resume answered before its subscription
// failed (the store refused the replay) cuts the connection off, so that
// its client starts over rather than wait for events that never come.
func TestFailedAttachAborts(t *testing.T) {
	fr := &failingReads{Store: openStore(t)}
	m := newManager(t, fr, newHistModel(), mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	runTurn(t, m, sub, textTurn(sid, "hello"))
	late := &abortSub{recSub: newRecSub()}
	from := cursorIn(t, m.store, sid, 1)
	_, attach, err := m.ResumeSession(context.Background(), late, mustJSON(msp.SessionResumeParams{CommandID: cmdID(), SessionID: sid, Cursor: &from}))
	if err != nil {
		t.Fatal(err)
	}
	fr.fail.Store(true)
	attach(context.Background())
	if !late.aborted.Load() {
		t.Fatal("a failed subscription left its connection waiting")
	}
}

// oneTurnSession starts a session on a new manager over a new store and
// runs one turn in it.
func oneTurnSession(t *testing.T) (store.Store, *Manager, string) {
	t.Helper()
	st := openStore(t)
	m := newManager(t, st, newHistModel(), mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	runTurn(t, m, sub, textTurn(sid, "first"))
	return st, m, sid
}

// answerOpening is the params of a new answer of turn turnID, opening.
func answerOpening(turnID string) *msp.ItemParams {
	return &msp.ItemParams{Item: msp.Item{ItemID: uuid.NewString(), Kind: msp.ItemAgentMessage, Revision: 1,
		Status: msp.ItemInProgress, TurnID: &turnID}}
}

// TestNoEphemeralPositionAtALoadedHead: the process before a load may
// have handed out sub-positions of the head it left (a streamed answer's
// item/started and deltas), and a load starts counting them again from
// zero. So until a commit moves the head, an answer opens durably: no
// cursor it would be given can repeat one handed out before.
func TestNoEphemeralPositionAtALoadedHead(t *testing.T) {
	ctx := context.Background()
	st, m1, sid := oneTurnSession(t)
	m1.Close()
	head := int64(len(records(t, st, sid)))

	m2 := newManager(t, st, newHistModel(), mgrOpts{})
	s, release, err := m2.acquire(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	p := answerOpening("t")
	if err := s.emit(ctx, msp.NotifyItemStarted, p); err != nil {
		t.Fatal(err)
	}
	if want := cursorIn(t, st, sid, head+1); p.ViewCursor != want || p.SourceRange == nil {
		t.Fatalf("an answer opened at the loaded head: cursor %s, sourceRange %v; want durable %s", p.ViewCursor, p.SourceRange, want)
	}
	// The head has moved: the next answer opens at a sub-position of it.
	p = answerOpening("t")
	if err := s.emit(ctx, msp.NotifyItemStarted, p); err != nil {
		t.Fatal(err)
	}
	if want := s.at(head+1, 1).String(); p.ViewCursor != want || p.SourceRange != nil {
		t.Fatalf("the next answer: cursor %s, sourceRange %v; want ephemeral %s", p.ViewCursor, p.SourceRange, want)
	}
}

// TestAbandonAtALoadedHeadRepeatsNoCursor: a session whose log refuses a
// turn's terminal tells its readers at an ephemeral position. Right after a
// load (no commit since), that position must lie past every sub-position
// the process before may have handed out at the same head.
func TestAbandonAtALoadedHeadRepeatsNoCursor(t *testing.T) {
	ctx := context.Background()
	st, m1, sid := oneTurnSession(t)
	s1, release1, err := m1.acquire(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	turnID := "t"
	p := answerOpening(turnID)
	if err := s1.emit(ctx, msp.NotifyItemStarted, p); err != nil {
		t.Fatal(err)
	}
	release1()
	seen, err := parseCursor(p.ViewCursor)
	if err != nil || seen.sub == 0 {
		t.Fatalf("the answer opened at %q: want an ephemeral position", p.ViewCursor)
	}
	m1.Close()

	m2 := newManager(t, st, newHistModel(), mgrOpts{})
	sub := newRecSub()
	if err := m2.attach(ctx, sub, sid, p.ViewCursor); err != nil {
		t.Fatal(err)
	}
	s2, release2, err := m2.acquire(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	defer release2()
	s2.mu.Lock()
	m2.abandonLocked(s2, msp.TurnCompletedParams{TurnID: turnID}, errors.New("disk on fire"))
	s2.mu.Unlock()
	c := sub.waitTerminal(t, turnID)
	got, err := parseCursor(c.ViewCursor)
	if err != nil || !seen.before(got) {
		t.Fatalf("the abandoned terminal's cursor %s does not follow %s, handed out before the load", c.ViewCursor, p.ViewCursor)
	}
}

// readCountingStore counts ledger reads.
type readCountingStore struct {
	store.Store
	reads atomic.Int32
}

func (c *readCountingStore) Command(ctx context.Context, id string) (store.Command, error) {
	c.reads.Add(1)
	return c.Store.Command(ctx, id)
}

// TestTurnStartReadsTheLedgerOnlyForAReplay: a new turn/start is admitted
// without a ledger read (its commit would refuse a command id the ledger
// holds); a replay is answered from the ledger, whether its admission
// conflicts in its commit (the session idle again) or fails a check
// first (the session busy with a full queue), and one with another
// payload is refused as a command_id_conflict. Nothing of a replay is
// written: the turn ran once.
func TestTurnStartReadsTheLedgerOnlyForAReplay(t *testing.T) {
	cs := &readCountingStore{Store: openStore(t)}
	model := newHistModel()
	m := newManager(t, cs, model, mgrOpts{maxQueued: 1})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	p := textTurn(sid, "once")
	p.CommandID = cmdID()
	before := cs.reads.Load()
	ack := runTurn(t, m, sub, p)
	if n := cs.reads.Load() - before; n != 0 {
		t.Fatalf("a new turn/start read the ledger %d times", n)
	}
	if err := m.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	replay := func() (json.RawMessage, error) {
		raw, launch, err := m.StartTurn(context.Background(), nil, mustJSON(p))
		if err == nil {
			launch()
		}
		return raw, err
	}
	first, err := replay()
	if err != nil {
		t.Fatal(err)
	}
	var got msp.TurnStartResult
	if err := json.Unmarshal(first, &got); err != nil || got.TurnID != ack.TurnID || got.Disposition != msp.DispositionStarted {
		t.Fatalf("replay on an idle session: %s, %v; want the recorded ack of %s", first, err, ack.TurnID)
	}
	// Busy, with a full queue: the replay's admission fails its checks.
	startTurn(t, m, textTurn(sid, "block"))
	model.waitStarted(t, "block")
	startTurn(t, m, textTurn(sid, "queued"))
	if again, err := replay(); err != nil || string(again) != string(first) {
		t.Fatalf("replay on a busy session: %s, %v; want %s", again, err, first)
	}
	other := p
	other.Input = []msp.TurnInputPart{{Type: "text", Text: "something else"}}
	_, _, err = m.StartTurn(context.Background(), nil, mustJSON(other))
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Reason != msp.ReasonCommandIDConflict {
		t.Fatalf("another payload under the same commandId: %v", err)
	}
	started := 0
	for _, r := range records(t, cs, sid) {
		if r.Method == msp.NotifyTurnStarted && recordParams[msp.TurnStartedParams](t, r).TurnID == ack.TurnID {
			started++
		}
	}
	if started != 1 {
		t.Fatalf("the turn started %d times", started)
	}
}

// TestReadWhileAnswerStreams: session/read while an answer streams shows
// it as the reader sees it, open with the text streamed so far, though
// it opened on an ephemeral event and nothing of it is in the log yet.
func TestReadWhileAnswerStreams(t *testing.T) {
	model := newHistModel()
	frozen := func() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) } // no text checkpoint falls due
	m := newManager(t, openStore(t), model, mgrOpts{now: frozen})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	ack := startTurn(t, m, textTurn(sid, "block")) // streams "working", then waits
	model.waitStarted(t, "block")
	no := false
	got, err := m.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid, ExcludeItems: &no}))
	if err != nil {
		t.Fatal(err)
	}
	items := got.History.Items
	interrupt(t, m, sid)
	sub.waitTerminal(t, ack.TurnID)
	if n := len(items); n == 0 || items[n-1].Kind != msp.ItemAgentMessage || items[n-1].Status != msp.ItemInProgress || deref(items[n-1].Text) != "working" {
		t.Fatalf("session/read during the stream: %+v; want the answer last, open, with %q", items, "working")
	}
}

// TestResumeSnapshotThenReplay: a client takes session/resume's inline
// history while an answer streams, then applies what its subscription
// replays after the returned viewCursor (upsert by revision, append
// deltas): the answer's text comes out once, not the snapshot's part and
// the replayed deltas both.
func TestResumeSnapshotThenReplay(t *testing.T) {
	model := newHistModel()
	frozen := func() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) } // no text checkpoint falls due
	m := newManager(t, openStore(t), model, mgrOpts{now: frozen})
	sid := startSession(t, m, newRecSub())
	ack := startTurn(t, m, textTurn(sid, "block")) // streams "working", then waits
	model.waitStarted(t, "block")
	r := newRecSub()
	raw, attach, err := m.ResumeSession(context.Background(), r, mustJSON(msp.SessionResumeParams{CommandID: cmdID(), SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	var snap msp.SessionSnapshot
	if err := json.Unmarshal(raw, &snap); err != nil {
		t.Fatal(err)
	}
	attach(context.Background())
	interrupt(t, m, sid)
	r.waitTerminal(t, ack.TurnID)
	items, text := map[string]msp.Item{}, map[string]string{}
	for _, it := range snap.History.Items {
		items[it.ItemID], text[it.ItemID] = it, deref(it.Text)
	}
	for _, n := range r.all() {
		switch n.Method {
		case msp.NotifyItemStarted, msp.NotifyItemUpdated:
			it := params[msp.ItemParams](t, n.Frame).Item
			if old, ok := items[it.ItemID]; !ok || it.Revision > old.Revision {
				items[it.ItemID], text[it.ItemID] = it, deref(it.Text)
			}
		case msp.NotifyItemDelta:
			d := params[msp.ItemDeltaParams](t, n.Frame)
			text[d.ItemID] += d.Delta
		}
	}
	answers := 0
	for id, it := range items {
		if it.Kind == msp.ItemAgentMessage {
			answers++
			if text[id] != "working" {
				t.Fatalf("snapshot at %s, then %v: the answer reads %q", snap.ViewCursor, cursorsOf(r.all()), text[id])
			}
		}
	}
	if answers != 1 {
		t.Fatalf("%d answers in the snapshot and the replay", answers)
	}
}
