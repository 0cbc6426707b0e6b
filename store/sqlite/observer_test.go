package sqlite_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"mspd/store"
	"mspd/store/sqlite"
)

// TestCommitObserver: every group commit is reported once, with the
// batches it carried; together they add up to every batch committed, and
// a commit with nothing to write is not a group commit.
func TestCommitObserver(t *testing.T) {
	var mu sync.Mutex
	var groups []int
	var took []time.Duration
	var pages []int
	s := openAt(t, t.TempDir(), sqlite.WithCommitObserver(func(g sqlite.GroupCommit) {
		mu.Lock()
		defer mu.Unlock()
		groups = append(groups, g.Batches)
		took = append(took, g.Took)
		pages = append(pages, g.Pages)
	}))
	defer s.Close()
	ctx := context.Background()
	if err := s.Commit(ctx, store.Batch{SessionID: "a", Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`{}`)}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, store.Batch{}); err != nil { // empty: never reaches the writer
		t.Fatal(err)
	}
	mu.Lock()
	// One record in a new table's first leaf, and the page 1 header.
	if len(groups) != 1 || groups[0] != 1 || took[0] <= 0 || pages[0] < 1 || pages[0] > 4 {
		t.Errorf("after one commit: groups %v took %v pages %v, want [1], a duration and 1-4 pages", groups, took, pages)
	}
	mu.Unlock()

	const n = 32
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := s.Commit(ctx, store.Batch{SessionID: fmt.Sprintf("s%d", i), Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`{}`)}}}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	sum := 0
	for _, g := range groups[1:] {
		sum += g
	}
	if sum != n {
		t.Errorf("groups %v carry %d batches, want %d", groups[1:], sum, n)
	}
}
