package cli

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCloseWithinEndsAStuckShutdown: a close that never returns (a commit
// waiting on a disk that no longer answers) ends the wait once the
// deadline and the grace after it have passed; one that returns, in time
// or within the grace, gives its own result.
func TestCloseWithinEndsAStuckShutdown(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	stuck := func(context.Context) error { <-never; return nil }
	if err := closeWithin(ended, time.Millisecond, stuck); !errors.Is(err, errStuck) {
		t.Fatalf("a stuck close: %v, want errStuck", err)
	}

	failed := errors.New("connections still open")
	if err := closeWithin(context.Background(), time.Millisecond, func(context.Context) error { return failed }); err != failed {
		t.Fatalf("a close that returned: %v, want its error", err)
	}

	// Past the deadline, a close that returns within the grace is waited
	// for.
	late := make(chan struct{})
	go func() { late <- struct{}{} }()
	if err := closeWithin(ended, time.Hour, func(context.Context) error { <-late; return nil }); err != nil {
		t.Fatalf("a close that ended within the grace: %v", err)
	}
}
