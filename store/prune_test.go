package store_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"mspd/store"
)

// ledgerStore is a store whose ledger is a map of id → CreatedAt; only
// PruneCommands is implemented. It records every call.
type ledgerStore struct {
	store.Store
	mu      sync.Mutex
	created map[string]time.Time
	calls   []pruneCall
	fail    error
	pruned  chan struct{} // when set, told of every call without blocking
}

type pruneCall struct {
	before time.Time
	limit  int
}

func newLedger(ages map[string]time.Time) *ledgerStore {
	return &ledgerStore{created: ages}
}

func (l *ledgerStore) PruneCommands(ctx context.Context, before time.Time, limit int) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, pruneCall{before, limit})
	if l.pruned != nil {
		defer func() {
			select {
			case l.pruned <- struct{}{}:
			default:
			}
		}()
	}
	if l.fail != nil {
		return 0, l.fail
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var old []string
	for id, at := range l.created {
		if at.Before(before) {
			old = append(old, id)
		}
	}
	slices.SortFunc(old, func(a, b string) int { return l.created[a].Compare(l.created[b]) })
	old = old[:min(len(old), limit)]
	for _, id := range old {
		delete(l.created, id)
	}
	return len(old), nil
}

func (l *ledgerStore) left() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for id := range l.created {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ages gives ids a0…a(n-1) created an hour apart from t0 on.
func ages(n int) map[string]time.Time {
	m := map[string]time.Time{}
	for i := range n {
		m[string(rune('a'+i))] = t0.Add(time.Duration(i) * time.Hour)
	}
	return m
}

func TestPruneOnceDeletesOlderThanRetentionInChunks(t *testing.T) {
	l := newLedger(ages(7)) // a..g at t0, t0+1h, …, t0+6h
	p := &store.Pruner{Store: l, Retention: 2 * time.Hour, Chunk: 2}
	// now = t0+6h30m: the window starts at t0+4h30m, so a..e go.
	n, err := p.PruneOnce(context.Background(), t0.Add(6*time.Hour+30*time.Minute))
	if err != nil || n != 5 {
		t.Fatalf("PruneOnce = %d, %v; want 5", n, err)
	}
	if got := l.left(); !slices.Equal(got, []string{"f", "g"}) {
		t.Fatalf("left %v, want [f g]", got)
	}
	// 2 + 2 + 1: the short chunk ends the pass.
	want := t0.Add(4*time.Hour + 30*time.Minute)
	if len(l.calls) != 3 {
		t.Fatalf("%d PruneCommands calls, want 3", len(l.calls))
	}
	for _, c := range l.calls {
		if !c.before.Equal(want) || c.limit != 2 {
			t.Fatalf("PruneCommands(%v, %d), want (%v, 2)", c.before, c.limit, want)
		}
	}
}

func TestPruneOnceDefaultChunkAndError(t *testing.T) {
	l := newLedger(ages(1))
	p := &store.Pruner{Store: l, Retention: time.Hour}
	if _, err := p.PruneOnce(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	if l.calls[0].limit != store.DefaultPruneChunk {
		t.Fatalf("limit %d, want DefaultPruneChunk", l.calls[0].limit)
	}
	boom := errors.New("boom")
	l.fail = boom
	if _, err := p.PruneOnce(context.Background(), t0.Add(time.Hour*5)); !errors.Is(err, boom) {
		t.Fatalf("PruneOnce = %v, want the store's error", err)
	}
}

// Run prunes as of each tick's time, and keeps going after a failed pass.
func TestPrunerRunPrunesOnEachTick(t *testing.T) {
	l := newLedger(ages(4)) // a..d at t0..t0+3h
	p := &store.Pruner{Store: l, Retention: time.Hour}
	ticks := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx, ticks)
	}()

	// An unbuffered send returns once Run has taken the tick, so a second
	// send returns once the first tick's pass is over. A tick at t0 prunes
	// nothing: nothing is older than t0 minus the retention.
	ticks <- t0.Add(time.Hour + time.Minute) // window from t0+1m: a goes
	ticks <- t0
	if got := l.left(); !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Fatalf("after a tick left %v, want [b c d]", got)
	}
	l.mu.Lock()
	l.fail = errors.New("disk on fire")
	l.mu.Unlock()
	ticks <- t0.Add(10 * time.Hour)
	ticks <- t0
	l.mu.Lock()
	l.fail = nil
	l.mu.Unlock()
	if got := l.left(); !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Fatalf("after a failed pass left %v, want [b c d]", got)
	}
	ticks <- t0.Add(3*time.Hour + time.Minute) // window from t0+2h1m: b, c go
	ticks <- t0
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if got := l.left(); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("after the pass that follows a failure left %v, want [d]", got)
	}
}

// PruneEvery prunes once as it starts, and returns when ctx ends.
func TestPruneEveryPrunesAtStart(t *testing.T) {
	now := time.Now()
	l := newLedger(map[string]time.Time{"old": now.Add(-48 * time.Hour), "young": now})
	l.pruned = make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		store.PruneEvery(ctx, l, 24*time.Hour, time.Hour, nil)
	}()
	select {
	case <-l.pruned:
	case <-time.After(10 * time.Second):
		t.Fatal("PruneEvery did not prune at start")
	}
	cancel()
	<-done
	if got := l.left(); !slices.Equal(got, []string{"young"}) {
		t.Fatalf("left %v, want [young]", got)
	}
}
