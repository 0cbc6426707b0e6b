package server

import (
	"context"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// freeFrameBytes is how much of an inbound frame a connection reads
// without the server-wide budget: most frames end within it, so they never
// wait on other connections, and it is part of the per-connection figure
// (with the read buffers) that the budget leaves out.
const freeFrameBytes = 64 << 10

// intake is the server-wide budget of inbound bytes being read and
// decoded. A frame that outgrows freeFrameBytes takes the whole frame limit
// from it (its size is not known until it ends: a WebSocket message may
// come in fragments, a line has no length) before the rest is read, and
// gives back all but its own size once read; that size is held until the
// request has been dispatched, when its params are no longer needed. A
// connection that cannot take its share stops reading its socket, so TCP
// pushes back on its client. Taking the whole limit at once, not chunk by
// chunk, is what keeps connections half-way through frames from waiting on
// each other for ever.
type intake struct {
	sem     *semaphore.Weighted
	share   int64        // what a frame past the free allowance takes while read
	held    atomic.Int64 // bytes taken (/metrics)
	waiting atomic.Int64 // connections waiting to take their share (/metrics)
}

// newIntake is a budget of budget bytes for frames of up to frameLimit
// (a limit over the budget takes the whole budget: one at a time).
func newIntake(budget, frameLimit int64) *intake {
	return &intake{sem: semaphore.NewWeighted(budget), share: min(frameLimit, budget)}
}

// take waits for n bytes of the budget.
func (in *intake) take(ctx context.Context, n int64) error {
	in.waiting.Add(1)
	err := in.sem.Acquire(ctx, n)
	in.waiting.Add(-1)
	if err == nil {
		in.held.Add(n)
	}
	return err
}

// give returns n bytes taken.
func (in *intake) give(n int64) {
	in.held.Add(-n)
	in.sem.Release(n)
}

// admitter lets a frame being read grow past freeFrameBytes: it returns
// once the frame holds its share of the budget, or with ctx's error.
type admitter interface {
	admitLarge(ctx context.Context) error
}

// admitLarge implements admitter for the frame the read loop is reading;
// the read loop takes the charge over once the frame is whole (see
// readFrame).
func (c *conn) admitLarge(ctx context.Context) error {
	if c.charge > 0 {
		// Taken already by this read: a transport that skipped a large
		// line of blanks reads on for the frame, which holds that share.
		return nil
	}
	// Mid-frame, pongs are not read either: no pings while it waits.
	c.busy.Store(true)
	defer c.busy.Store(false)
	in := c.srv.intake
	if err := in.take(ctx, in.share); err != nil {
		return err
	}
	c.charge = in.share
	return nil
}

// settle keeps of a frame's charge only what the frame needs once read
// (nothing for one within the free allowance or refused as too large) and
// returns what it keeps, for release once the frame has been dispatched.
func (c *conn) settle(frame []byte) int64 {
	charge := c.charge
	c.charge = 0
	keep := int64(len(frame))
	if charge == 0 || keep <= freeFrameBytes {
		keep = 0
	}
	keep = min(keep, charge)
	if charge > keep {
		c.srv.intake.give(charge - keep)
	}
	return keep
}

// release gives back what settle kept.
func (c *conn) release(charge int64) {
	if charge > 0 {
		c.srv.intake.give(charge)
	}
}
