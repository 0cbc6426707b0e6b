package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"mspd/store"
)

// One group of batches where some fail: a stale sequence (found before
// anything is written) and a batch whose second command is already in the
// ledger (found after its first command is written, so the group is
// written again without it). Exactly the failing batches leave nothing
// behind, the rest land in the same group, and the heads the writer
// remembers afterwards are the committed ones.
func TestFailingBatchesInOneGroup(t *testing.T) {
	ctx := context.Background()
	const n = 48
	gate := make(chan struct{})
	groups := make(chan int, 2) // the priming group's size, then the tested one's
	s, err := Open(filepath.Join(t.TempDir(), "mspd.db"), WithCommitObserver(func(batches int, _ time.Duration) {
		select {
		case groups <- batches:
		default:
		}
		<-gate // hold the writer until the next group is queued whole
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	primed := make(chan error, 1)
	go func() { primed <- s.Commit(ctx, store.Batch{Commands: []store.Command{{ID: "taken", Digest: "d"}}}) }()
	if got := <-groups; got != 1 {
		t.Fatalf("priming group of %d batches", got)
	}
	errs := make([]error, n)
	done := make(chan struct{}, n)
	for i := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			id := fmt.Sprintf("s%d", i)
			b := store.Batch{
				SessionID: id,
				Records:   []store.Record{{Seq: 1, Method: "m", Params: []byte(`{"i":` + fmt.Sprint(i) + `}`)}},
				Session:   &store.Session{ID: id, CreatedAt: time.Now(), UpdatedAt: time.Now(), Busy: true, State: []byte(`{}`)},
				Commands:  []store.Command{{ID: "c-" + id, Digest: "d"}},
			}
			switch i % 3 {
			case 0:
				b.Commands = append(b.Commands, store.Command{ID: "taken", Digest: "d"})
			case 1:
				b.Records[0].Seq = 2
			}
			errs[i] = s.Commit(ctx, b)
		}()
	}
	for len(s.reqs) < n { // a condition, not a time: every batch queued
		select {
		case <-done:
			t.Fatal("a commit returned before the writer was let go")
		default:
		}
		runtime.Gosched()
	}
	close(gate)
	if err := <-primed; err != nil {
		t.Fatal(err)
	}
	for range n {
		<-done
	}
	if got := <-groups; got != n {
		t.Errorf("the batches were written in a group of %d, want %d", got, n)
	}
	for i, err := range errs {
		id := fmt.Sprintf("s%d", i)
		head, herr := s.Head(ctx, id)
		_, cerr := s.Command(ctx, "c-"+id)
		_, rerr := s.Session(ctx, id)
		if herr != nil {
			t.Fatal(herr)
		}
		if i%3 != 2 {
			if !errors.Is(err, store.ErrConflict) || head != 0 || !errors.Is(cerr, store.ErrNotFound) || !errors.Is(rerr, store.ErrNotFound) {
				t.Errorf("%s: err %v, head %d, command %v, row %v; want a conflict that left nothing", id, err, head, cerr, rerr)
			}
		} else if err != nil || head != 1 || cerr != nil || rerr != nil {
			t.Errorf("%s: err %v, head %d, command %v, row %v; want all of it", id, err, head, cerr, rerr)
		}
	}
	// The heads remembered are the committed ones: every session takes
	// its next record, and only that.
	for i := range n {
		id := fmt.Sprintf("s%d", i)
		next := int64(1)
		if i%3 == 2 {
			next = 2
		}
		if err := s.Commit(ctx, store.Batch{SessionID: id, Records: []store.Record{{Seq: next + 1, Method: "m", Params: []byte(`{}`)}}}); !errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: seq %d after head %d: %v, want a conflict", id, next+1, next-1, err)
		}
		if err := s.Commit(ctx, store.Batch{SessionID: id, Records: []store.Record{{Seq: next, Method: "m", Params: []byte(`{}`)}}}); err != nil {
			t.Errorf("%s: seq %d: %v", id, next, err)
		}
	}
}

// Urgent batches queued behind more than a group's worth of others are
// written in the next group, and the others still land in order.
func TestUrgentBatchesGoFirst(t *testing.T) {
	ctx := context.Background()
	const group, normal, urgent = 4, 12, 2
	gate := make(chan struct{})
	var groups atomic.Int32
	s, err := Open(filepath.Join(t.TempDir(), "mspd.db"), WithMaxGroup(group), WithCommitObserver(func(int, time.Duration) {
		if groups.Add(1) == 1 {
			<-gate // hold the writer until everything is queued
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	primed := make(chan error, 1)
	go func() { primed <- s.Commit(ctx, store.Batch{Commands: []store.Command{{ID: "prime", Digest: "d"}}}) }()
	for groups.Load() == 0 {
		runtime.Gosched()
	}
	// inGroup[i] is the number of groups committed when batch i returned:
	// the group it was written in, counting the priming one.
	inGroup := make([]int32, normal+urgent)
	done := make(chan error, normal+urgent)
	commit := func(i int, urgent bool) {
		id := fmt.Sprintf("s%d", i)
		err := s.Commit(ctx, store.Batch{SessionID: id, Urgent: urgent, Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`{}`)}}})
		inGroup[i] = groups.Load()
		done <- err
	}
	for i := range normal {
		go commit(i, false)
	}
	for len(s.reqs) < cap(s.reqs) { // full: the rest wait to send
		runtime.Gosched()
	}
	for i := normal; i < normal+urgent; i++ {
		go commit(i, true)
	}
	for len(s.urgent) < urgent {
		runtime.Gosched()
	}
	close(gate)
	if err := <-primed; err != nil {
		t.Fatal(err)
	}
	for range normal + urgent {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for i := normal; i < normal+urgent; i++ {
		if inGroup[i] != 2 {
			t.Errorf("urgent batch %d written in group %d, want the first after the priming one (2)", i, inGroup[i])
		}
	}
	if got, want := groups.Load(), int32(1+(normal+urgent+group-1)/group); got != want {
		t.Errorf("%d groups, want %d", got, want)
	}
	for i := range normal + urgent {
		if h, err := s.Head(ctx, fmt.Sprintf("s%d", i)); err != nil || h != 1 {
			t.Errorf("s%d: head %d, %v", i, h, err)
		}
	}
}
