package session

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"mspd/schema/msp"
	"mspd/store"
)

// largestRead is a store that remembers the most params bytes one read of
// several records returned (a read of one record may be as large as that
// record), and the read that did.
type largestRead struct {
	store.Store
	mu   sync.Mutex
	most int
	what string
}

func (l *largestRead) note(what string, rs []store.Record) {
	if len(rs) < 2 {
		return
	}
	n := 0
	for _, r := range rs {
		n += len(r.Params)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n > l.most {
		l.most, l.what = n, what
	}
}

func (l *largestRead) Records(ctx context.Context, id string, after int64, lim store.Limit) ([]store.Record, error) {
	rs, err := l.Store.Records(ctx, id, after, lim)
	l.note("Records", rs)
	return rs, err
}

func (l *largestRead) RecordsBefore(ctx context.Context, id string, before int64, lim store.Limit) ([]store.Record, error) {
	rs, err := l.Store.RecordsBefore(ctx, id, before, lim)
	l.note("RecordsBefore", rs)
	return rs, err
}

// TestEveryLogReadIsBoundedByBytes: a session of six turns whose input
// and answer are 1.5 MiB each (a log of 18 MiB) is loaded, replayed to a
// subscriber from its start, paged both ways, read and resumed with its
// items, and forked. Each of those used to read its log by row counts
// alone (256 or 1000 records at a time: the whole log here); now no read
// of several records returns more than ReadBytes.
func TestEveryLogReadIsBoundedByBytes(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	m1 := newManager(t, st, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m1, sub)
	for i := range 6 {
		runTurn(t, m1, sub, textTurn(sid, strings.Repeat(string(rune('a'+i)), 3<<19)))
	}
	m1.Close()

	reads := &largestRead{Store: st}
	m := newManager(t, reads, model, mgrOpts{})
	ctx := context.Background()
	subscribe(t, m, newRecSub(), sid) // the load's fold, then the replay from the start
	for _, dir := range []string{msp.Forward, msp.Backward} {
		if _, err := m.Page(ctx, msp.ViewPageParams{SessionID: sid, Direction: dir, Limit: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.ReadSession(ctx, mustJSON(map[string]any{"sessionId": sid, "excludeItems": false})); err != nil {
		t.Fatal(err)
	}
	raw, _, err := m.ResumeSession(ctx, newRecSub(), mustJSON(msp.SessionResumeParams{SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	var resumed msp.SessionSnapshot
	if err := json.Unmarshal(raw, &resumed); err != nil {
		t.Fatal(err)
	}
	if resumed.History.Mode != msp.HistoryNone || resumed.History.NoneReason != msp.NoneHistoryBudget {
		t.Fatalf("resume of an 18 MiB history: mode %q (%q), want none (historyBudget)", resumed.History.Mode, resumed.History.NoneReason)
	}
	if _, _, err := m.ForkSession(ctx, newRecSub(), mustJSON(msp.SessionForkParams{CommandID: cmdID(), SessionID: sid})); err != nil {
		t.Fatal(err)
	}
	if reads.most > ReadBytes {
		t.Fatalf("a %s read returned %d bytes of records, past ReadBytes (%d)", reads.what, reads.most, ReadBytes)
	}
	if reads.most == 0 {
		t.Fatal("no read returned several records: the test measured nothing")
	}
}
