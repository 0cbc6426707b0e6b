package session

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/google/uuid"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/store"
)

// session is one loaded session: its state, its log head, its subscribers.
// mu serialises every append and fan-out, so subscribers see events in
// cursor order.
type session struct {
	id    string
	owner string // the principal it belongs to; never changes
	m     *Manager

	mu         sync.Mutex
	st         state
	head       int64 // seq of the last durable record
	sub        int64 // ephemeral events emitted since head
	subs       map[Subscriber]struct{}
	history    []provider.Message
	cumulative msp.CumulativeTokenUsage
	open       map[string]*openItem // items started and not yet completed
	cancel     context.CancelFunc   // stops the active turn
	working    bool                 // a goroutine is running the queue
}

// openItem is an item in progress and the text streamed into it so far.
type openItem struct {
	item msp.Item
	text strings.Builder
}

// event is a durable event about to be appended.
type event struct {
	method string
	params msp.ViewParams
}

// appendLocked writes events (and, when st is non-nil, the new state and
// any ledger entries) in one commit, then fans the events out. Nothing is
// fanned out unless the commit succeeded. s.mu must be held.
func (s *session) appendLocked(ctx context.Context, evs []event, st *state, cmds ...store.Command) error {
	now := s.m.now()
	batch := store.Batch{SessionID: s.id, Commands: cmds}
	batch.Records = make([]store.Record, len(evs))
	for i, ev := range evs {
		seq := s.head + int64(i) + 1
		pos := msp.RecordPosition{ID: newID(), Sequence: seq}
		h := ev.params.Header()
		h.SessionID = s.id
		h.ViewCursor = durableCursor(s.id, seq)
		h.SourceRange = &msp.SourceRange{First: pos, Last: pos, Stream: msp.StreamRef{ID: s.id, Kind: "session"}}
		raw, err := msp.Marshal(ev.params)
		if err != nil {
			return fmt.Errorf("encoding %s: %w", ev.method, err)
		}
		batch.Records[i] = store.Record{Seq: seq, Method: ev.method, Params: raw}
	}
	if st != nil {
		st.UpdatedAt = now
		raw, err := json.Marshal(st)
		if err != nil {
			return fmt.Errorf("encoding session state: %w", err)
		}
		batch.Session = &store.Session{ID: s.id, CreatedAt: st.CreatedAt, UpdatedAt: now, Busy: st.busy(), State: raw}
	}
	if err := s.m.store.Commit(ctx, batch); err != nil {
		return fmt.Errorf("appending to session %s: %w", s.id, err)
	}
	if st != nil {
		s.st = *st
	}
	if len(evs) == 0 {
		return nil
	}
	s.head += int64(len(evs))
	s.sub = 0
	for _, ev := range evs {
		s.m.stats.observe(ev.method, ev.params)
	}
	ms := now.UnixMilli()
	for i, rec := range batch.Records {
		s.fanOutLocked(Notification{
			SessionID: s.id,
			Method:    rec.Method,
			Cursor:    evs[i].params.Header().ViewCursor,
			Frame:     msp.EncodeNotification(rec.Method, rec.Params, ms),
			Durable:   true,
		})
	}
	return nil
}

func (s *session) fanOutLocked(n Notification) {
	for sub := range s.subs {
		sub.Deliver(n)
	}
}

// emit appends one event on behalf of a running turn, keeping the session's
// running totals and open items in step.
func (s *session) emit(ctx context.Context, method string, params msp.ViewParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch p := params.(type) {
	case *msp.SessionTokenUsageParams:
		c := s.cumulative
		c.PromptTokens += p.PromptTokens
		c.OutputTokens += p.Usage.OutputTokens
		c.TotalTokens = c.PromptTokens + c.OutputTokens
		p.Cumulative = c
		if err := s.appendLocked(ctx, []event{{method, params}}, nil); err != nil {
			return err
		}
		s.cumulative = c
		return nil
	case *msp.ItemParams:
		if err := s.appendLocked(ctx, []event{{method, params}}, nil); err != nil {
			return err
		}
		if method == msp.NotifyItemStarted {
			oi := &openItem{item: p.Item}
			if p.Item.Text != nil {
				oi.text.WriteString(*p.Item.Text)
			}
			s.open[p.Item.ItemID] = oi
		} else {
			delete(s.open, p.Item.ItemID)
		}
		return nil
	}
	return s.appendLocked(ctx, []event{{method, params}}, nil)
}

// delta fans out one ephemeral text delta. Its cursor is a sub-position
// after the last durable record, so it can never collide with a cursor
// handed out before or after a restart.
func (s *session) delta(itemID, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sub++
	c := cursor{session: s.id, seq: s.head, sub: s.sub}.String()
	raw, err := msp.Marshal(msp.ItemDeltaParams{SessionID: s.id, ViewCursor: c, ItemID: itemID, Delta: text})
	if err != nil {
		return // a string and ids always encode
	}
	if oi := s.open[itemID]; oi != nil {
		oi.text.WriteString(text)
	}
	s.fanOutLocked(Notification{
		SessionID: s.id,
		Method:    msp.NotifyItemDelta,
		Cursor:    c,
		Frame:     msp.EncodeNotification(msp.NotifyItemDelta, raw, s.m.now().UnixMilli()),
	})
}

// checkCursor resolves a client-supplied cursor of this session.
func (s *session) checkCursor(c string) (cursor, error) {
	cur, err := parseCursor(c)
	if err != nil || cur.session != s.id {
		return cursor{}, msp.ErrMissingAnchor(s.id, c)
	}
	s.mu.Lock()
	head, sub := s.head, s.sub
	s.mu.Unlock()
	if cur.seq > head || (cur.seq == head && cur.sub > sub) {
		return cursor{}, msp.ErrMissingAnchor(s.id, c)
	}
	return cur, nil
}

// subscribe attaches sub and replays (after, head] before any live event,
// as one gapless sequence. The bulk of the replay runs without the lock,
// waiting for the subscriber to make room; the lock is taken only for the
// last few records and the registration, so live appends cannot slip
// between replay and live delivery.
func (s *session) subscribe(ctx context.Context, sub Subscriber, after cursor) error {
	const batch = 256
	// A connection re-attaching starts over from after: live events must
	// not interleave with its replay, and what it tracked of its earlier
	// view (a hole, a kept event) is void.
	s.detach(sub)
	sub.Subscribed(s.id, after.String())
	last := after.seq
	for {
		recs, err := s.m.store.Records(ctx, s.id, last, batch)
		if err != nil {
			return msp.ErrInternal("reading session log: %v", err)
		}
		for _, r := range recs {
			if err := sub.Replay(ctx, s.recordNotification(r)); err != nil {
				return err
			}
			last = r.Seq
		}
		if len(recs) < batch {
			break
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	recs, err := s.m.store.Records(ctx, s.id, last, int(s.head-last)+1)
	if err != nil {
		return msp.ErrInternal("reading session log: %v", err)
	}
	for _, r := range recs {
		sub.Deliver(s.recordNotification(r))
	}
	s.subs[sub] = struct{}{}
	return nil
}

func (s *session) unsubscribe(sub Subscriber) {
	s.mu.Lock()
	delete(s.subs, sub)
	s.mu.Unlock()
}

// detach ends sub's subscription and voids what it tracked of it (a hole,
// a kept event), ahead of a re-subscription.
func (s *session) detach(sub Subscriber) {
	s.unsubscribe(sub)
	sub.Subscribed(s.id, "")
}

// recordNotification renders a stored record as a notification again; its
// params are the stored bytes, identical to the first delivery.
func (s *session) recordNotification(r store.Record) Notification {
	return Notification{
		SessionID: s.id,
		Method:    r.Method,
		Cursor:    durableCursor(s.id, r.Seq),
		Frame:     msp.EncodeNotification(r.Method, r.Params, s.m.now().UnixMilli()),
		Durable:   true,
	}
}

// page serves view/page: durable events only, ascending in both directions.
func (s *session) page(ctx context.Context, p msp.ViewPageParams) (msp.ViewPageResult, error) {
	s.mu.Lock()
	head := s.head
	s.mu.Unlock()
	res := msp.ViewPageResult{Events: []msp.ViewEvent{}}
	backward := p.Direction == msp.Backward
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
		recs, err = s.m.store.RecordsBefore(ctx, s.id, before, p.Limit)
	} else {
		var after int64
		if p.Cursor != nil {
			c, cerr := s.checkCursor(*p.Cursor)
			if cerr != nil {
				return res, cerr
			}
			after = c.seq
		}
		recs, err = s.m.store.Records(ctx, s.id, after, p.Limit)
	}
	if err != nil {
		return res, msp.ErrInternal("reading session log: %v", err)
	}
	recs = withinBudget(recs, s.m.frameBudget(), backward)
	if len(recs) == 0 {
		return res, nil
	}
	for _, r := range recs {
		res.Events = append(res.Events, msp.ViewEvent{Method: r.Method, Params: r.Params})
	}
	// nextCursor is null exactly at the end of the view.
	if first, last := recs[0].Seq, recs[len(recs)-1].Seq; backward && first > 1 {
		next := durableCursor(s.id, first)
		res.NextCursor = &next
	} else if !backward && last < head {
		next := durableCursor(s.id, last)
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

// folded is what a pass over a session's log recovers.
type folded struct {
	history    []provider.Message
	items      []msp.Item
	open       map[string]msp.Item
	cumulative msp.CumulativeTokenUsage
}

// fold replays a session's log from the start.
func fold(ctx context.Context, st store.Store, id string) (folded, error) {
	f := folded{open: make(map[string]msp.Item)}
	index := make(map[string]int)
	var after int64
	for {
		recs, err := st.Records(ctx, id, after, 1000)
		if err != nil {
			return f, err
		}
		for _, r := range recs {
			after = r.Seq
			switch r.Method {
			case msp.NotifyItemStarted, msp.NotifyItemCompleted:
				var p msp.ItemParams
				if err := json.Unmarshal(r.Params, &p); err != nil {
					return f, fmt.Errorf("record %d: %w", r.Seq, err)
				}
				if i, ok := index[p.Item.ItemID]; ok {
					f.items[i] = p.Item
				} else {
					index[p.Item.ItemID] = len(f.items)
					f.items = append(f.items, p.Item)
				}
				if r.Method == msp.NotifyItemStarted {
					f.open[p.Item.ItemID] = p.Item
					continue
				}
				delete(f.open, p.Item.ItemID)
				if m, ok := historyMessage(p.Item); ok {
					f.history = append(f.history, m)
				}
			case msp.NotifySessionTokenUsage:
				var p msp.SessionTokenUsageParams
				if err := json.Unmarshal(r.Params, &p); err != nil {
					return f, fmt.Errorf("record %d: %w", r.Seq, err)
				}
				f.cumulative = p.Cumulative
			}
		}
		if len(recs) < 1000 {
			return f, nil
		}
	}
}

// historyMessage tells which completed items the model sees again: the
// user's messages and the agent's completed, non-empty answers (as a live
// session keeps them), never a rejected attempt.
func historyMessage(it msp.Item) (provider.Message, bool) {
	if it.Text == nil || *it.Text == "" || it.Status != msp.ItemCompleted {
		return provider.Message{}, false
	}
	switch it.Kind {
	case msp.ItemUserMessage:
		return provider.Message{Role: provider.RoleUser, Text: *it.Text}, true
	case msp.ItemAgentMessage:
		return provider.Message{Role: provider.RoleAssistant, Text: *it.Text}, true
	}
	return provider.Message{}, false
}

// newID mints a UUIDv7.
func newID() string { return uuid.Must(uuid.NewV7()).String() }
