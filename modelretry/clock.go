package modelretry

import (
	"context"
	"time"
)

// Clock is the engine's view of time, injected so tests never sleep for
// real (see modelretry/retrytest for a manual fake).
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx is done; it returns ctx.Err() when ctx
	// ends first and nil otherwise. A d <= 0 returns at once.
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock returns the real clock.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil || d <= 0 {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
