package session

// The view: subscribing, paging and the head.

import (
	"context"

	"mspd/schema/msp"
	"mspd/store"
)

// attachAfter returns a function that subscribes sub to a session after a
// cursor, logging (not failing) when that cannot be done. s is the session
// as the request found it (nil for one the request made): should it be
// erased before sub is registered, sub hears so as its subscribers did.
func (m *Manager) attachAfter(sub Subscriber, s *session, sessionID, after string) func(context.Context) {
	return func(ctx context.Context) {
		err := m.attach(ctx, sub, sessionID, after)
		if err == nil || ctx.Err() != nil || s != nil && s.toldErased(ctx, sub) {
			return
		}
		m.log.Warn("auto-subscribe failed", "session", sessionID, "err", err)
		// The client was told it is subscribed: it must not wait for
		// events that will never come. A connection that can be
		// dropped is, and its client resumes by cursor.
		if a, ok := sub.(Aborter); ok {
			a.Abort("subscribing failed: " + err.Error())
		}
	}
}

// toldErased tells sub of the erasure of s, once an erasure under way
// has ended, and reports whether s was erased: a subscription that failed
// because its session went meanwhile ends as the others did, with the
// news, rather than with its connection cut. A follower may find the log
// gone before the leader's news arrives: sub then waits for it among the
// subscribers.
func (s *session) toldErased(ctx context.Context, sub Subscriber) bool {
	s.erasing.Lock()
	defer s.erasing.Unlock()
	s.mu.Lock()
	follower := s.role == roleFollower && s.farewell == nil && !s.phase.deleted()
	s.mu.Unlock()
	gone := false
	if follower {
		_, erasing, err := s.m.readState(ctx, s.key, s.id)
		gone = isNotFound(err) || err == nil && erasing
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.farewell != nil:
		s.tellDeletion(sub, *s.farewell)
		return true
	case gone && !s.phase.deleted():
		s.subs[sub] = struct{}{} // ingest tells it
		return true
	}
	return false
}

// tellDeletion delivers n, the session/deleteCompleted of s, to sub,
// unless sub hears it as list news. It tells a follower's subscribers,
// and those that register once the leader's have been told (from
// s.farewell). s.mu is held.
func (s *session) tellDeletion(sub Subscriber, n Notification) {
	if !s.m.listeners.takes(sub, s.owner) {
		sub.Deliver(n)
	}
}

// Aborter is a Subscriber that can be cut off (a connection), so that its
// client starts over rather than wait on a subscription that failed
// after its response was sent.
type Aborter interface {
	Abort(reason string)
}

// attach subscribes sub to a session after a cursor: it replays (after,
// head], then goes live. It is what attachAfter's function runs, with its
// failure returned.
func (m *Manager) attach(ctx context.Context, sub Subscriber, sessionID, after string) error {
	s, release, err := m.acquire(ctx, sessionID)
	if err != nil {
		return err
	}
	defer release()
	from, err := s.checkCursor(after)
	if err != nil {
		return err
	}
	return s.subscribe(ctx, sub, from)
}

// Head returns a session's current head cursor.
func (m *Manager) Head(ctx context.Context, sessionID string) (string, error) {
	s, release, err := m.acquire(ctx, sessionID)
	if err != nil {
		return "", err
	}
	defer release()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.durable(s.head), nil
}

// Subscribe serves view/subscribe: it returns the head, and attach, to
// run once the result is sent, replays (after, head] when after is given
// (else from where the session stands now) and then goes live. The
// connection's earlier subscription to the session ends before the head
// is read, so no event reaches it twice or out of order around the
// result.
func (m *Manager) Subscribe(ctx context.Context, sub Subscriber, sessionID string, after *string) (string, func(context.Context), error) {
	s, release, err := m.acquire(ctx, sessionID)
	if err != nil {
		return "", nil, err
	}
	defer release()
	if after != nil {
		if _, err := s.checkCursor(*after); err != nil {
			return "", nil, err
		}
	}
	s.detach(sub)
	s.mu.Lock()
	head, from := s.durable(s.head), s.at(s.head, s.sub).String()
	s.mu.Unlock()
	if after != nil {
		from = *after
	}
	return head, m.attachAfter(sub, s, s.id, from), nil
}

// Unsubscribe serves view/unsubscribe; it is idempotent.
func (m *Manager) Unsubscribe(ctx context.Context, sub Subscriber, sessionID string) error {
	s, release, err := m.acquire(ctx, sessionID)
	if err != nil {
		return err
	}
	defer release()
	s.unsubscribe(sub)
	return nil
}

// Page serves view/page.
func (m *Manager) Page(ctx context.Context, p msp.ViewPageParams) (msp.ViewPageResult, error) {
	s, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return msp.ViewPageResult{}, err
	}
	defer release()
	return s.page(ctx, p)
}

// page serves view/page: durable events only, ascending in both directions.
func (s *session) page(ctx context.Context, p msp.ViewPageParams) (msp.ViewPageResult, error) {
	s.mu.Lock()
	head := s.head
	s.mu.Unlock()
	res := msp.ViewPageResult{Events: []msp.ViewEvent{}}
	backward := p.Direction == msp.Backward
	// The store stops reading at the page's bytes, so a page never holds
	// more of the log than it may send; withinBudget then fits the events'
	// envelopes to the frame.
	lim := store.Limit{Rows: p.Limit, Bytes: min(ReadBytes, s.m.frameBudget())}
	var recs []store.Record
	var err error
	if backward {
		before := head + 1
		if p.Cursor != nil {
			c, cerr := s.checkCursor(*p.Cursor)
			if cerr != nil {
				return res, cerr
			}
			before = c.seq
			if c.sub > 0 { // a delta lies after its durable record
				before = c.seq + 1
			}
		}
		recs, err = s.m.store.RecordsBefore(ctx, s.key, before, lim)
	} else {
		var after int64
		if p.Cursor != nil {
			c, cerr := s.checkCursor(*p.Cursor)
			if cerr != nil {
				return res, cerr
			}
			after = c.seq
		}
		recs, err = s.m.store.Records(ctx, s.key, after, lim)
	}
	if err != nil {
		return res, msp.ErrInternal("reading session log: %v", err)
	}
	recs = withinBudget(recs, s.m.frameBudget(), backward)
	if len(recs) == 0 {
		return res, nil
	}
	for _, r := range recs {
		if !hidden(r.Method) {
			res.Events = append(res.Events, msp.ViewEvent{Method: r.Method, Params: r.Params})
		}
	}
	// nextCursor is null exactly at the end of the view: a page of hidden
	// records alone (a long tool output) is empty, and names where to go on.
	if first, last := recs[0].Seq, recs[len(recs)-1].Seq; backward && first > 1 {
		next := s.durable(first)
		res.NextCursor = &next
	} else if !backward && last < head {
		next := s.durable(last)
		res.NextCursor = &next
	}
	return res, nil
}

// withinBudget keeps as many records as fit one frame — those nearest the
// page's cursor — and always at least one, so a page makes progress.
func withinBudget(recs []store.Record, budget int, backward bool) []store.Record {
	size := 0
	for k := range recs {
		i := k
		if backward {
			i = len(recs) - 1 - k
		}
		size += len(recs[i].Params) + len(recs[i].Method) + 32
		if k > 0 && size > budget {
			if backward {
				return recs[i+1:]
			}
			return recs[:i]
		}
	}
	return recs
}
