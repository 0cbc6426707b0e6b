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
	s := openAt(t, t.TempDir(), sqlite.WithCommitObserver(func(batches int, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		groups = append(groups, batches)
		took = append(took, d)
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
	if len(groups) != 1 || groups[0] != 1 || took[0] <= 0 {
		t.Errorf("after one commit: groups %v took %v, want [1] and a duration", groups, took)
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
