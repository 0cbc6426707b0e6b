package session

// Catching a subscriber up: the records after its cursor, the kept deltas
// among them, and the holes reported as view/gap.

import (
	"context"
	"math"

	"mspd/schema/msp"
)

// subscribe attaches sub and replays every event after the cursor —
// durable records from the store, deltas from the delta log — before any
// live event, as one sequence in cursor order. Deltas no longer kept are
// reported as a view/gap around them instead of being skipped silently.
// The bulk of the durable replay runs without the lock, waiting for the
// subscriber to make room; the lock is taken for the rest (the records
// that kept deltas interleave with) and the registration, so no live event
// can slip between replay and live delivery.
func (s *session) subscribe(ctx context.Context, sub Subscriber, after cursor) error {
	// A connection re-attaching starts over from after: live events must
	// not interleave with its replay, and what it tracked of its earlier
	// view (a hole, a kept event) is void.
	s.detach(sub)
	sub.Subscribed(s.id, after.String())
	r := replay{s: s, sub: sub, pos: after}
	// An ephemeral position is inside a turn's stream: its reader holds
	// part of an item's text.
	r.midItem = after.sub > 0
	if !r.midItem {
		var err error
		if r.midItem, err = s.itemOpenAfter(ctx, after.seq); err != nil {
			return err
		}
	}
	s.mu.Lock()
	r.lost = s.deltas.lost
	r.follower = s.role == roleFollower
	s.mu.Unlock()
	if r.follower {
		var err error
		if r.attempt, err = s.attemptRunningAfter(ctx, after.seq); err != nil {
			return err
		}
	}
	s.mu.Lock()
	// Records up to the first kept delta's have no kept delta among them.
	bulk := s.head
	if first := s.deltas.firstSeq(); first >= 0 {
		bulk = min(bulk, first)
	}
	s.mu.Unlock()
	if err := r.records(ctx, bulk, false, func(n Notification) error { return sub.Replay(ctx, n) }); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.farewell != nil {
		// Erased while it caught up, after the subscribers were told.
		s.tellDeletion(sub, *s.farewell)
		return nil
	}
	r.lost = s.deltas.lost // more may have been let go meanwhile
	deliver := func(n Notification) error { sub.Deliver(n); return nil }
	if err := r.records(ctx, s.head, true, deliver); err != nil {
		return err
	}
	r.deltasBefore(cursor{seq: math.MaxInt64}, deliver)
	if r.lostAfter() {
		s.gapsDue[sub] = dueGap{after: r.pos.String(), midItem: r.midItem || r.attempt}
	}
	if r.pos.seq == s.head && r.pos.sub > s.sub {
		s.floors[sub] = r.pos // ahead of this node: nothing up to it again
	}
	s.subs[sub] = struct{}{}
	s.askPendingLocked(sub)
	return nil
}

// itemOpenAfter tells whether an item was streaming after durable record
// seq, so that deltas may follow it. Items stream one at a time, so the
// last item event up to seq decides: a start or a save of its text (an
// answer that opened on an ephemeral event is first written by that), or
// a completion.
func (s *session) itemOpenAfter(ctx context.Context, seq int64) (bool, error) {
	return s.lastSays(ctx, seq, func(method string) (bool, bool) {
		switch method {
		case msp.NotifyItemStarted, msp.NotifyItemUpdated:
			return true, true
		case msp.NotifyItemCompleted:
			return false, true
		}
		return false, false
	})
}

// lastSays reads the records up to durable record seq, newest first,
// until decide settles on one, and returns what it said there; false when
// none settled it.
func (s *session) lastSays(ctx context.Context, seq int64, decide func(method string) (yes, settled bool)) (bool, error) {
	const batch = 64
	for before := seq + 1; before > 1; {
		recs, err := s.m.store.RecordsBefore(ctx, s.key, before, logPage(batch))
		if err != nil {
			return false, msp.ErrInternal("reading session log: %v", err)
		}
		if len(recs) == 0 {
			break
		}
		for i := len(recs) - 1; i >= 0; i-- {
			if yes, settled := decide(recs[i].Method); settled {
				return yes, nil
			}
		}
		before = recs[0].Seq
	}
	return false, nil
}

// replay is one subscription's catch-up: where it stands, whether it is
// inside an item's stream, and a hole to report before the next event it
// delivers.
type replay struct {
	s       *session
	sub     Subscriber
	pos     cursor // the last position delivered or skipped
	midItem bool   // an item was open at the subscription's cursor, and its attempt has not been seen to end since
	// On a follower, an answer that opened on an ephemeral event the
	// follower lost is in no record while its attempt runs on the
	// leader: attempt says one ran at pos (a turn started or a retry was
	// scheduled, and the turn has not ended), so a hole then matters. A
	// leader's own lost events belong to an attempt that never streams
	// again (its previous process's), or to a text saved since.
	follower bool
	attempt  bool
	lost     cursor     // deltas up to here may be gone (s.deltas.lost)
	gapAfter string     // a hole opened after this cursor, not yet reported
	next     int        // kept deltas before it are behind pos
	arena    frameArena // the bulk's frames (records without withDeltas)
}

// checkHole opens a hole when ephemeral events that followed record
// pos.seq, after pos, are gone and the reader would notice: it holds part
// of an item's text (it subscribed in the middle of the item), or more of
// the stream follows (delta is set). An item whose stream is all gone
// arrives whole in its item/completed, as it does from view/page. The next
// event delivered closes the hole.
func (r *replay) checkHole(delta bool) {
	if r.lostAfter() && (r.midItem || r.attempt || delta) && r.gapAfter == "" {
		r.gapAfter = r.pos.String()
	}
}

// lostAfter tells whether ephemeral events that followed record pos.seq,
// after pos, may be gone.
func (r *replay) lostAfter() bool {
	return r.pos.before(r.lost) && r.pos.seq <= r.lost.seq
}

// emit sends n, which stands at at, preceded by the view/gap of an open
// hole: next names n, the first event delivered after it.
func (r *replay) emit(n Notification, at cursor, send func(Notification) error) error {
	r.checkHole(at.sub > 0)
	if r.gapAfter != "" {
		r.sub.Deliver(r.s.gapNotification(r.gapAfter, n.Cursor))
		r.gapAfter = ""
	}
	if err := send(n); err != nil {
		return err
	}
	r.pos = at
	return nil
}

// records sends the durable records after pos through seq through. With
// withDeltas (s.mu held) each is preceded by the kept deltas before it.
func (r *replay) records(ctx context.Context, through int64, withDeltas bool, send func(Notification) error) error {
	const batch = 256
	for r.pos.seq < through {
		recs, err := r.s.m.store.Records(ctx, r.s.key, r.pos.seq, logPage(int(min(through-r.pos.seq, batch))))
		if err != nil {
			return msp.ErrInternal("reading session log: %v", err)
		}
		if len(recs) == 0 {
			return msp.ErrInternal("session log %s ends before %d", r.s.id, through)
		}
		for _, rec := range recs {
			at := r.s.at(rec.Seq, 0)
			if hidden(rec.Method) {
				r.pos = at // passed, never sent: written with the event after it
				continue
			}
			if withDeltas {
				if err := r.deltasBefore(at, send); err != nil {
					return err
				}
			}
			// The bulk's frames share chunks; the rest are delivered
			// live, where one dropped may be kept alone as a hole's tail
			// for long, and must not keep a chunk alive with it.
			arena := &r.arena
			if withDeltas {
				arena = nil
			}
			if err := r.emit(r.s.recordNotification(rec, arena), at, send); err != nil {
				return err
			}
			if running, settled := attemptAfter(rec.Method); settled {
				r.attempt = r.follower && running
				// The turn moved on: the attempt whose stream the reader
				// was in is over, even if nothing of its answer was
				// written (the process died before saving its text).
				r.midItem = r.midItem && rec.Method == msp.NotifyTurnStarted
			}
			if rec.Method == msp.NotifyItemStarted || rec.Method == msp.NotifyItemCompleted {
				r.midItem = false
			}
		}
	}
	return nil
}

// deltasBefore sends the kept deltas after pos and before limit. s.mu must
// be held.
func (r *replay) deltasBefore(limit cursor, send func(Notification) error) error {
	kept := r.s.deltas.kept
	for ; r.next < len(kept) && kept[r.next].at.before(limit); r.next++ {
		d := kept[r.next]
		if !r.pos.before(d.at) {
			continue
		}
		n := Notification{SessionID: r.s.id, Method: d.method, Cursor: d.at.String(), Frame: d.frame}
		if err := r.emit(n, d.at, send); err != nil {
			return err
		}
		r.midItem = true // the reader is in an answer's stream now
	}
	return nil
}

// gapNotification renders a view/gap naming the hole (after, next).
func (s *session) gapNotification(after, next string) Notification {
	p, _ := msp.Marshal(msp.ViewGapParams{SessionID: s.id, After: after, Next: next})
	return Notification{SessionID: s.id, Method: msp.NotifyViewGap,
		Frame: msp.EncodeNotification(msp.NotifyViewGap, p, s.m.now().UnixMilli())}
}

// attemptRunningAfter tells whether a turn's attempt was running after
// durable record seq: the last turn event up to seq started a turn or
// scheduled a retry, rather than ending the turn.
func (s *session) attemptRunningAfter(ctx context.Context, seq int64) (bool, error) {
	return s.lastSays(ctx, seq, attemptAfter)
}
