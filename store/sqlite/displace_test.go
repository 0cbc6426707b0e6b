package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"mspd/store"
)

// While retry notices keep coming, one before each group and one while
// it is written, a batch the first notice displaced must still land in
// the next group: displacing it again and again leaves admissions
// waiting for as long as notices come (no normal batch is written at all
// in a group that starts with a notice and takes the next at its second
// batch).
func TestDisplacedBatchIsNotDisplacedAgain(t *testing.T) {
	ctx := context.Background()
	const flood = 20 // groups during which notices keep coming
	gate := make(chan struct{})
	var s *Store
	var groups, landedIn atomic.Int32
	var notices atomic.Int32
	var wg sync.WaitGroup
	notice := func() {
		id := fmt.Sprintf("u%d", notices.Add(1))
		before := len(s.urgent)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Commit(ctx, store.Batch{SessionID: id, Urgent: true,
				Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`{}`)}}}); err != nil {
				t.Error(err)
			}
		}()
		for len(s.urgent) == before {
			runtime.Gosched()
		}
	}
	flooding := func() bool { n := groups.Load(); return n >= 1 && n < 1+flood }
	var err error
	s, err = Open(filepath.Join(t.TempDir(), "mspd.db"), WithCommitObserver(func(GroupCommit) {
		n := groups.Add(1)
		if n == 1 {
			<-gate // the priming group: hold until n1 and a notice are queued
		}
		if landedIn.Load() == 0 {
			if h, err := s.Head(ctx, "n1"); err == nil && h == 1 {
				landedIn.Store(n)
			}
		}
		if flooding() {
			notice() // queued before the next group begins
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer wg.Wait() // every notice answered before Close
	primed := make(chan error, 1)
	go func() { primed <- s.Commit(ctx, store.Batch{Commands: []store.Command{{ID: "prime", Digest: "d"}}}) }()
	for len(s.reqs) > 0 || groups.Load() == 0 {
		runtime.Gosched()
	}
	done := make(chan error, 1)
	go func() {
		done <- s.Commit(ctx, store.Batch{SessionID: "n1", Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`{}`)}}})
	}()
	for len(s.reqs) == 0 {
		runtime.Gosched()
	}
	notice()
	s.beforeBatch = func(i int) {
		if i == 1 && flooding() {
			notice() // comes while the group's first batch is written
		}
	}
	close(gate)
	if err := <-primed; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Group 2 is [notice, n1]: n1 is displaced once, and goes in group 3.
	for landedIn.Load() == 0 {
		runtime.Gosched()
	}
	if got := landedIn.Load(); got > 3 {
		t.Errorf("n1 landed in group %d, want 3: displaced once, then written in the next group (%d notices came meanwhile)", got, notices.Load())
	}
}

// A group cut by a failing batch (its second command is already in the
// ledger) is written again as it was, even if a notice comes meanwhile:
// letting it in on the second attempt displaces the batch that failed,
// forgets its answer and writes it again in the next group, which is cut
// again by the same batch.
func TestGroupWrittenAgainKeepsItsBatches(t *testing.T) {
	ctx := context.Background()
	gate := make(chan struct{})
	var s *Store
	var groups, attempts atomic.Int32
	sizes := make(chan int, 8)
	var err error
	s, err = Open(filepath.Join(t.TempDir(), "mspd.db"), WithCommitObserver(func(g GroupCommit) {
		if groups.Add(1) == 1 {
			<-gate
		}
		sizes <- g.Batches
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	primed := make(chan error, 1)
	go func() { primed <- s.Commit(ctx, store.Batch{Commands: []store.Command{{ID: "taken", Digest: "d"}}}) }()
	for len(s.reqs) > 0 || groups.Load() == 0 {
		runtime.Gosched()
	}
	rec := func(id string) store.Batch {
		return store.Batch{SessionID: id, Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`{}`)}}}
	}
	bad := rec("b")
	bad.Commands = []store.Command{{ID: "c-b", Digest: "d"}, {ID: "taken", Digest: "d"}}
	errs := make([]chan error, 3)
	for i, b := range []store.Batch{rec("a"), bad, rec("c")} {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- s.Commit(ctx, b) }()
		for len(s.reqs) < i+1 { // in this order
			runtime.Gosched()
		}
	}
	var noticed atomic.Bool
	noticeDone := make(chan error, 1)
	s.beforeBatch = func(i int) {
		if i != 0 {
			return
		}
		// The second attempt at the group of a, b, c: a notice comes.
		if attempts.Add(1) == 2 && noticed.CompareAndSwap(false, true) {
			go func() {
				noticeDone <- s.Commit(ctx, store.Batch{SessionID: "n", Urgent: true, Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`{}`)}}})
			}()
			for len(s.urgent) == 0 {
				runtime.Gosched()
			}
		}
	}
	close(gate)
	if err := <-primed; err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, true, false} {
		err := <-errs[i]
		if want != errors.Is(err, store.ErrConflict) || (!want && err != nil) {
			t.Errorf("batch %d: %v", i, err)
		}
	}
	if err := <-noticeDone; err != nil {
		t.Fatal(err)
	}
	<-sizes // the priming group
	if got := <-sizes; got != 3 {
		t.Errorf("the group written again committed %d batches, want its 3", got)
	}
	<-sizes // and the group after it (its observer runs after its answers)
	// (The hook is set after the priming group began.) a, b, c: 2
	// attempts (cut by b); the notice: 1.
	if got, g := attempts.Load(), groups.Load()-1; got-g != 1 {
		t.Errorf("%d attempts for %d groups: %d cuts, want the one b caused", got, g, got-g)
	}
}

// The commit observer runs before the group's callers are answered (as
// TestUrgentBatchesGoFirst relies on, and a caller reading the metrics
// after its answer expects): a caller answered has its group counted.
// The checkpoint's tail still waits until after the answers
// (TestCommitAnsweredBeforeTheCheckpointTail).
func TestObserverRunsBeforeTheAnswer(t *testing.T) {
	ctx := context.Background()
	var observed atomic.Int32
	s, err := Open(filepath.Join(t.TempDir(), "mspd.db"), WithCommitObserver(func(g GroupCommit) {
		runtime.Gosched()
		for range 1000 { // slow enough for an answered caller to look first
			runtime.Gosched()
		}
		observed.Add(int32(g.Batches))
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for seq := int64(1); seq <= 20; seq++ {
		if err := s.Commit(ctx, store.Batch{SessionID: "s", Records: []store.Record{{Seq: seq, Method: "m", Params: []byte(`{}`)}}}); err != nil {
			t.Fatal(err)
		}
		if got := observed.Load(); got != int32(seq) {
			t.Fatalf("after commit %d the observer had counted %d batches, want %d", seq, got, seq)
		}
	}
}
