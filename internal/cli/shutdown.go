package cli

import (
	"context"
	"errors"
	"time"
)

// stuckAfter is how long a shutdown may go on once its deadline has
// passed (or a second signal came) before the process ends regardless:
// longer than the moment the daemon gives its connections to close. A
// shutdown that takes longer is stuck — a commit waiting on a disk that
// no longer answers, say — and waiting longer only holds up a deploy.
// Ending then is a crash, which loses nothing acknowledged: a commit is
// acknowledged once durable, and the next start resumes the turns.
const stuckAfter = 15 * time.Second

// errStuck reports a shutdown that did not end within stuckAfter of its
// deadline.
var errStuck = errors.New("shutdown stuck past its deadline; exiting without waiting for it (nothing acknowledged is lost; the next start resumes the turns)")

// closeWithin runs closeFn(ctx) and returns its error, or errStuck once
// ctx has ended and closeFn has not returned within grace after that.
func closeWithin(ctx context.Context, grace time.Duration, closeFn func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- closeFn(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	stuck := time.NewTimer(grace)
	defer stuck.Stop()
	select {
	case err := <-done:
		return err
	case <-stuck.C:
		return errStuck
	}
}
