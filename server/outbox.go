package server

import (
	"context"
	"errors"
	"sync"
)

// errClosed is returned once a connection's outbox is shut.
var errClosed = errors.New("connection closed")

// outbox is a connection's outbound queue, drained by one writer goroutine
// that owns the socket. Frames leave in the order they were queued.
// Protected frames (responses, view/gap, broadcasts) are always queued;
// gappable ones (view events) count against a frame and byte budget, and
// when it is spent they are dropped and the hole is reported per session
// with one view/gap at the next accepted event. So a slow reader costs
// bounded memory and never stalls a session or other readers.
type outbox struct {
	gapFrame  func(sessionID, after, next string) []byte
	maxFrames int
	maxBytes  int

	mu       sync.Mutex
	frames   [][]byte
	gappable []bool
	head     int
	nGap     int // gappable frames queued
	gapBytes int // bytes of gappable frames queued
	closed   bool
	shut     chan struct{} // closed with the outbox: wakes replay waiters
	wake     chan struct{} // the writer has work
	space    chan struct{} // a gappable frame left the queue
	views    map[string]*viewState
	tails    int // views holding a dropped durable event to re-deliver
	dropped  uint64
	gaps     uint64
}

// viewState tracks one subscribed session on this connection.
type viewState struct {
	last      string // cursor of the last event queued
	inHole    bool
	holeAfter string
	// The tail is the newest durable event dropped in the open hole. Once
	// there is room again it is delivered and the hole reported, so a
	// reader that fell behind at the end of a turn still gets the turn's
	// terminal without waiting for the session's next event.
	tailCursor    string
	tailFrame     []byte
	lostAfterTail bool // a delta was dropped after the tail
}

func newOutbox(maxFrames, maxBytes int, gapFrame func(sessionID, after, next string) []byte) *outbox {
	return &outbox{
		gapFrame:  gapFrame,
		maxFrames: maxFrames,
		maxBytes:  maxBytes,
		wake:      make(chan struct{}, 1),
		shut:      make(chan struct{}),
		space:     make(chan struct{}, 1),
		views:     make(map[string]*viewState),
	}
}

// pushProtected queues a frame that must never be dropped.
func (o *outbox) pushProtected(frame []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return errClosed
	}
	o.appendLocked(frame, false)
	return nil
}

func (o *outbox) appendLocked(frame []byte, gappable bool) {
	o.frames = append(o.frames, frame)
	o.gappable = append(o.gappable, gappable)
	if gappable {
		o.nGap++
		o.gapBytes += len(frame)
	}
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

func (o *outbox) roomLocked(size int) bool {
	return o.nGap < o.maxFrames && (o.gapBytes+size <= o.maxBytes || o.nGap == 0)
}

// subscribed starts tracking a session's view after cursor from.
func (o *outbox) subscribed(sessionID, from string) {
	o.mu.Lock()
	o.dropViewLocked(sessionID)
	o.views[sessionID] = &viewState{last: from}
	o.mu.Unlock()
}

func (o *outbox) dropViewLocked(sessionID string) {
	if v := o.views[sessionID]; v != nil && v.tailFrame != nil {
		o.tails--
	}
	delete(o.views, sessionID)
}

// pushView queues a view event, or drops it and opens a hole when the
// budget is spent. A durable event dropped is kept as the hole's tail
// until there is room to deliver it.
func (o *outbox) pushView(sessionID, cursor string, frame []byte, durable bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	v := o.views[sessionID]
	if v == nil {
		v = &viewState{}
		o.views[sessionID] = v
	}
	if v.inHole && !durable {
		// A hole closes only at a durable event: its view/gap names next,
		// and view/page serves durable events only. The deltas lost here
		// are repaired by their item's item/completed.
		if v.tailFrame != nil {
			v.lostAfterTail = true
		}
		o.dropped++
		return
	}
	if !o.roomLocked(len(frame)) {
		if !v.inHole {
			v.inHole, v.holeAfter = true, v.last
		}
		if durable {
			if v.tailFrame == nil {
				o.tails++
			}
			v.tailCursor, v.tailFrame, v.lostAfterTail = cursor, frame, false
		} else if v.tailFrame != nil {
			v.lostAfterTail = true
		}
		o.dropped++
		return
	}
	if v.tailFrame != nil { // this event supersedes the kept tail
		v.tailCursor, v.tailFrame = "", nil
		o.tails--
	}
	o.acceptLocked(sessionID, v, cursor, frame)
}

// acceptLocked queues a view event. When it closes a hole, the view/gap
// marker goes right before it: next names an event already queued behind
// the marker, and a client that pages (after, next) on the marker gets the
// hole's events before the live one at next, in cursor order.
func (o *outbox) acceptLocked(sessionID string, v *viewState, cursor string, frame []byte) {
	if v.inHole {
		o.appendLocked(o.gapFrame(sessionID, v.holeAfter, cursor), false)
		v.inHole = false
		o.gaps++
	}
	o.appendLocked(frame, true)
	v.last = cursor
}

// flushTailsLocked delivers kept tails that now fit.
func (o *outbox) flushTailsLocked() {
	for id, v := range o.views {
		if o.tails == 0 {
			return
		}
		if v.tailFrame == nil || !o.roomLocked(len(v.tailFrame)) {
			continue
		}
		cursor, frame, lost := v.tailCursor, v.tailFrame, v.lostAfterTail
		v.tailCursor, v.tailFrame = "", nil
		o.tails--
		o.acceptLocked(id, v, cursor, frame)
		if lost { // deltas after the tail are gone too: keep reporting
			v.inHole, v.holeAfter = true, cursor
		}
	}
}

// pushReplay queues a replayed view event, waiting for room.
func (o *outbox) pushReplay(ctx context.Context, sessionID, cursor string, frame []byte) error {
	for {
		o.mu.Lock()
		if o.closed {
			o.mu.Unlock()
			return errClosed
		}
		if o.roomLocked(len(frame)) {
			o.appendLocked(frame, true)
			if v := o.views[sessionID]; v != nil {
				v.last = cursor
			}
			o.mu.Unlock()
			return nil
		}
		o.mu.Unlock()
		select {
		case <-o.space:
		case <-o.shut:
			return errClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// forget stops tracking a session (view/unsubscribe).
func (o *outbox) forget(sessionID string) {
	o.mu.Lock()
	o.dropViewLocked(sessionID)
	o.mu.Unlock()
}

// next blocks until a frame is queued, then removes and returns it; it
// returns errClosed once the outbox is shut and drained.
func (o *outbox) next(ctx context.Context) ([]byte, error) {
	for {
		o.mu.Lock()
		if o.head < len(o.frames) {
			f, g := o.frames[o.head], o.gappable[o.head]
			o.frames[o.head] = nil
			o.head++
			if g {
				o.nGap--
				o.gapBytes -= len(f)
				if o.tails > 0 {
					o.flushTailsLocked()
				}
			}
			o.compactLocked()
			o.mu.Unlock()
			if g {
				select {
				case o.space <- struct{}{}:
				default:
				}
			}
			return f, nil
		}
		closed := o.closed
		o.mu.Unlock()
		if closed {
			return nil, errClosed
		}
		select {
		case <-o.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// compactLocked reclaims the slots of sent frames: at once when the queue
// is empty, and by moving the rest to the front once more than half the
// slice is spent, so a reader that stays a little behind forever does not
// grow the backing arrays forever.
func (o *outbox) compactLocked() {
	switch {
	case o.head == len(o.frames):
		o.frames, o.gappable, o.head = o.frames[:0], o.gappable[:0], 0
	case o.head >= 64 && o.head*2 >= len(o.frames):
		n := copy(o.frames, o.frames[o.head:])
		copy(o.gappable, o.gappable[o.head:])
		clear(o.frames[n:])
		o.frames, o.gappable, o.head = o.frames[:n], o.gappable[:n], 0
	}
}

// close shuts the outbox; queued frames are still handed out by next.
func (o *outbox) close() {
	o.mu.Lock()
	if !o.closed {
		o.closed = true
		close(o.shut)
	}
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// stats reports dropped events and gap markers so far.
func (o *outbox) stats() (dropped, gaps uint64, queued int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped, o.gaps, len(o.frames) - o.head
}
