package session

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"mspd/schema/msp"
	"mspd/store"
)

// countingStore counts commits and what they carry.
type countingStore struct {
	store.Store
	mu      sync.Mutex
	batches [][]string // the methods of each commit's records, then urgent if it was
}

// urgent marks a batch marked Urgent in countingStore's batches.
const urgent = "(urgent)"

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

// TestThreeCommitsPerTurn: a turn on an idle session costs three commits
// (fsyncs): its admission with turn/started and the userMessage item; the
// answer's item/started; the item's close, usage and terminal together.
// A retried attempt's close and usage ride with its notice, which goes
// ahead of other writes.
func TestThreeCommitsPerTurn(t *testing.T) {
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
		{msp.NotifyItemStarted},
		{msp.NotifyItemCompleted, msp.NotifySessionTokenUsage, msp.NotifyTurnCompleted},
	}
	if got := cs.take(); !equalBatches(got, want) {
		t.Fatalf("commits of a turn:\n got %v\nwant %v", got, want)
	}
	idle()
	runTurn(t, m, sub, textTurn(sid, "cut")) // attempt 1 is cut after "partial"
	want = [][]string{
		{msp.NotifyTurnStarted, msp.NotifyItemCompleted},
		{msp.NotifyItemStarted},
		{msp.NotifyItemCompleted, msp.NotifyTurnRetryScheduled, urgent},
		{msp.NotifyItemStarted},
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
		{msp.NotifyItemStarted},
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

func (f *failingReads) Records(ctx context.Context, id string, after int64, limit int) ([]store.Record, error) {
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
	from := durableCursor(sid, 1)
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
