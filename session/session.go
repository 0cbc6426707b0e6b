package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/store"
	"mspd/turn"
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
	gapsDue    map[Subscriber]string // holes to report with a subscriber's next event
	history    []provider.Message
	cumulative msp.CumulativeTokenUsage
	open       map[string]*openItem // items started and not yet completed
	deltas     deltaLog             // the running turn's deltas, for resuming readers
	cancel     context.CancelFunc   // stops the active turn
	working    bool                 // a goroutine is running the queue
	resume     *turn.Resumption     // the active turn is to be resumed so
	broken     bool                 // the log refused the scheduler's writes for good
	deleted    bool                 // session/delete is erasing it: nothing more is written
	workerDone chan struct{}        // closed when the running worker stops
	launched   bool                 // the active turn was launched with its admission and waits for its worker
	held       *heldFanout          // a turn/start's caller, whose events wait for its ack
	queued     atomic.Int32         // len(st.Queue), read by Stats without mu
	leader     bool                 // this node writes the session (always, without a cluster)
	unfollow   func()               // stops following the leader's events (a follower's)
	stale      bool                 // a follower's st lags its log: re-read before use
}

// heldFanout holds what is fanned out to one subscriber until it has been
// sent the response of the command that caused it: a turn launched with
// its admission must not reach its caller before the ack.
type heldFanout struct {
	sub   Subscriber
	queue []Notification
}

// openItem is an item in progress and the text streamed into it so far.
type openItem struct {
	item    msp.Item // as last written: its revision is the latest
	text    strings.Builder
	savedAt time.Time // when its text was last written to the log
	saved   int       // how much of text that was
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
	if s.deleted {
		return errDeleted
	}
	if !s.leader {
		return errNotLeader
	}
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
		s.queued.Store(int32(len(st.Queue)))
	}
	if len(evs) == 0 {
		return nil
	}
	s.head += int64(len(evs))
	s.sub = 0
	for _, ev := range evs {
		s.m.stats.observe(ev.params)
	}
	ms := now.UnixMilli()
	for i, rec := range batch.Records {
		n := Notification{
			SessionID: s.id,
			Method:    rec.Method,
			Cursor:    evs[i].params.Header().ViewCursor,
			Frame:     msp.EncodeNotification(rec.Method, rec.Params, ms),
			Durable:   true,
		}
		s.fanOutLocked(n)
		s.publishLocked(n, rec.Seq, 0)
	}
	return nil
}

// errNotLeader refuses a write on a node that only follows the session.
var errNotLeader = errors.New("session: this node does not lead the session")

func (s *session) fanOutLocked(n Notification) {
	for sub := range s.subs {
		if h := s.held; h != nil && h.sub == sub {
			h.queue = append(h.queue, n)
			continue
		}
		if len(s.gapsDue) > 0 {
			if after, ok := s.gapsDue[sub]; ok {
				sub.Deliver(s.gapNotification(after, n.Cursor))
				delete(s.gapsDue, sub)
			}
		}
		sub.Deliver(n)
	}
}

// emit appends one event on behalf of a running turn.
func (s *session) emit(ctx context.Context, method string, params msp.ViewParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.emitLocked(ctx, []event{{method, params}}, nil)
}

// emitLocked appends a running turn's events in one commit (with st, when
// set), keeping the session's running totals and open items in step.
// s.mu must be held.
func (s *session) emitLocked(ctx context.Context, evs []event, st *state) error {
	c := s.cumulative
	for _, ev := range evs {
		switch p := ev.params.(type) {
		case *msp.SessionTokenUsageParams:
			c.PromptTokens += p.PromptTokens
			c.OutputTokens += p.Usage.OutputTokens
			c.TotalTokens = c.PromptTokens + c.OutputTokens
			p.Cumulative = c
		case *msp.ItemParams:
			if oi := s.open[p.Item.ItemID]; oi != nil && p.Item.Revision <= oi.item.Revision {
				// Text checkpoints raised the revision meanwhile.
				p.Item.Revision = oi.item.Revision + 1
			}
		}
	}
	if err := s.appendLocked(ctx, evs, st); err != nil {
		return err
	}
	s.cumulative = c
	for _, ev := range evs {
		p, ok := ev.params.(*msp.ItemParams)
		switch {
		case !ok:
		case ev.method == msp.NotifyItemStarted:
			oi := &openItem{item: p.Item, savedAt: s.m.now()}
			if p.Item.Text != nil {
				oi.text.WriteString(*p.Item.Text)
			}
			s.open[p.Item.ItemID] = oi
		case ev.method == msp.NotifyItemCompleted:
			delete(s.open, p.Item.ItemID)
		}
	}
	return nil
}

// turnEvents converts a turn's events.
func turnEvents(evs []turn.Event) []event {
	out := make([]event, len(evs))
	for i, e := range evs {
		out[i] = event{e.Method, e.Params}
	}
	return out
}

// delta fans out one ephemeral text delta. Its cursor is a sub-position
// after the last durable record, so it can never collide with a cursor
// handed out before or after a restart.
func (s *session) delta(itemID, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sub++
	at := cursor{session: s.id, seq: s.head, sub: s.sub}
	c := at.String()
	raw, err := msp.Marshal(msp.ItemDeltaParams{SessionID: s.id, ViewCursor: c, ItemID: itemID, Delta: text})
	if err != nil {
		return // a string and ids always encode
	}
	now := s.m.now()
	n := Notification{
		SessionID: s.id,
		Method:    msp.NotifyItemDelta,
		Cursor:    c,
		Frame:     msp.EncodeNotification(msp.NotifyItemDelta, raw, now.UnixMilli()),
	}
	s.deltas.add(at, n.Frame)
	s.fanOutLocked(n)
	s.publishLocked(n, at.seq, at.sub)
	if oi := s.open[itemID]; oi != nil {
		oi.text.WriteString(text)
		if every := s.m.cfg.TextCheckpoint; every > 0 && now.Sub(oi.savedAt) >= every {
			s.saveTextLocked(oi, now)
		}
	}
}

// saveTextLocked writes an open item's text so far as item/updated, so
// that a crash keeps what was streamed (deltas are not durable). It is
// best effort: the item's final state comes with item/completed.
func (s *session) saveTextLocked(oi *openItem, now time.Time) {
	if oi.text.Len() == oi.saved {
		return
	}
	it := oi.item
	it.Revision++
	text := oi.text.String()
	it.Text = &text
	if err := s.appendLocked(context.WithoutCancel(s.m.ctx), []event{{msp.NotifyItemUpdated, &msp.ItemParams{Item: it}}}, nil); err != nil {
		s.m.log.Warn("saving a streaming item's text", "session", s.id, "item", it.ItemID, "err", err)
		return
	}
	oi.item.Revision, oi.savedAt, oi.saved = it.Revision, now, len(text)
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
	var err error
	if r.open, err = s.itemOpenAfter(ctx, after.seq); err != nil {
		return err
	}
	r.midItem = r.open
	s.mu.Lock()
	r.lost = s.deltas.lost
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
	r.lost = s.deltas.lost // more may have been let go meanwhile
	deliver := func(n Notification) error { sub.Deliver(n); return nil }
	if err := r.records(ctx, s.head, true, deliver); err != nil {
		return err
	}
	r.deltasBefore(cursor{seq: math.MaxInt64}, deliver)
	if r.checkHole(true); r.gapAfter != "" {
		s.gapsDue[sub] = r.gapAfter // reported with the next live event
	}
	s.subs[sub] = struct{}{}
	return nil
}

// itemOpenAfter tells whether an item was streaming after durable record
// seq, so that deltas may follow it. Items stream one at a time, so the
// last item event up to seq decides.
func (s *session) itemOpenAfter(ctx context.Context, seq int64) (bool, error) {
	const batch = 64
	for before := seq + 1; before > 1; {
		recs, err := s.m.store.RecordsBefore(ctx, s.id, before, batch)
		if err != nil {
			return false, msp.ErrInternal("reading session log: %v", err)
		}
		for i := len(recs) - 1; i >= 0; i-- {
			switch recs[i].Method {
			case msp.NotifyItemStarted:
				return true, nil
			case msp.NotifyItemCompleted:
				return false, nil
			}
		}
		if len(recs) < batch {
			break
		}
		before = recs[0].Seq
	}
	return false, nil
}

// replay is one subscription's catch-up: where it stands, whether deltas
// may follow that position, and a hole to report before the next event it
// delivers.
type replay struct {
	s        *session
	sub      Subscriber
	pos      cursor // the last position delivered or skipped
	open     bool   // an item was open after record pos.seq
	midItem  bool   // that item was open at the subscription's cursor
	lost     cursor // deltas up to here may be gone (s.deltas.lost)
	gapAfter string // a hole opened after this cursor, not yet reported
	next     int    // kept deltas before it are behind pos
}

// checkHole opens a hole when deltas that followed record pos.seq, after
// pos, are gone and the reader would notice: it holds part of the item's
// text (it subscribed in the middle of the item), or more deltas of the
// item follow (delta is set). An item whose deltas are all gone and that
// the reader sees start arrives whole in its item/completed, as it does
// from view/page. The next event delivered closes the hole.
func (r *replay) checkHole(delta bool) {
	lost := r.open && r.pos.before(r.lost) && r.pos.seq <= r.lost.seq
	if lost && (r.midItem || delta) && r.gapAfter == "" {
		r.gapAfter = r.pos.String()
	}
}

// emit sends n, which stands at at, preceded by the view/gap of an open
// hole: next names n, the first event delivered after it.
func (r *replay) emit(n Notification, at cursor, send func(Notification) error) error {
	r.checkHole(n.Method == msp.NotifyItemDelta)
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
		recs, err := r.s.m.store.Records(ctx, r.s.id, r.pos.seq, int(min(through-r.pos.seq, batch)))
		if err != nil {
			return msp.ErrInternal("reading session log: %v", err)
		}
		if len(recs) == 0 {
			return msp.ErrInternal("session log %s ends before %d", r.s.id, through)
		}
		for _, rec := range recs {
			at := cursor{session: r.s.id, seq: rec.Seq}
			if withDeltas {
				if err := r.deltasBefore(at, send); err != nil {
					return err
				}
			}
			if err := r.emit(r.s.recordNotification(rec), at, send); err != nil {
				return err
			}
			switch rec.Method {
			case msp.NotifyItemStarted:
				r.open, r.midItem = true, false
			case msp.NotifyItemCompleted:
				r.open, r.midItem = false, false
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
		n := Notification{SessionID: r.s.id, Method: msp.NotifyItemDelta, Cursor: d.at.String(), Frame: d.frame}
		if err := r.emit(n, d.at, send); err != nil {
			return err
		}
	}
	return nil
}

// gapNotification renders a view/gap naming the hole (after, next).
func (s *session) gapNotification(after, next string) Notification {
	p, _ := msp.Marshal(msp.ViewGapParams{SessionID: s.id, After: after, Next: next})
	return Notification{SessionID: s.id, Method: msp.NotifyViewGap,
		Frame: msp.EncodeNotification(msp.NotifyViewGap, p, s.m.now().UnixMilli())}
}

// releaseHeld delivers what was held for a command's caller, now that its
// response is on its way.
func (s *session) releaseHeld() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.held; h != nil {
		s.held = nil
		for _, n := range h.queue {
			h.sub.Deliver(n)
		}
	}
}

func (s *session) unsubscribe(sub Subscriber) {
	s.mu.Lock()
	delete(s.subs, sub)
	delete(s.gapsDue, sub)
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
	emitted, ok := recordedAt(r.Params)
	if !ok {
		emitted = s.m.now()
	}
	return Notification{
		SessionID: s.id,
		Method:    r.Method,
		Cursor:    durableCursor(s.id, r.Seq),
		Frame:     msp.EncodeNotification(r.Method, r.Params, emitted.UnixMilli()),
		Durable:   true,
	}
}

// firstID marks the record position's id in stored params.
var firstID = []byte(`"first":{"id":"`)

// recordedAt tells when a stored event was first emitted: its position's
// id is a UUIDv7 minted then, whose first 48 bits are Unix milliseconds. A
// replay keeps that emittedAtMs, so a client reopening a chat during a
// backoff counts down from when the retry was scheduled, not from now.
func recordedAt(params []byte) (time.Time, bool) {
	head := params[:min(len(params), 512)]
	i := bytes.Index(head, firstID)
	if i < 0 || len(head) < i+len(firstID)+36 {
		return time.Time{}, false
	}
	id, err := uuid.Parse(string(head[i+len(firstID) : i+len(firstID)+36]))
	if err != nil || id.Version() != 7 {
		return time.Time{}, false
	}
	sec, nsec := id.Time().UnixTime()
	return time.Unix(sec, nsec), true
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
	// deltasThrough is the last durable seq that deltas may have followed:
	// an item was open after it.
	deltasThrough int64
}

// fold replays a session's log from the start.
func fold(ctx context.Context, st store.Store, id string) (folded, error) {
	f := folded{open: make(map[string]msp.Item)}
	index := make(map[string]int)
	startedAt := make(map[string]int64)
	var after int64
	for {
		recs, err := st.Records(ctx, id, after, 1000)
		if err != nil {
			return f, err
		}
		for _, r := range recs {
			after = r.Seq
			switch r.Method {
			case msp.NotifyItemStarted, msp.NotifyItemUpdated, msp.NotifyItemCompleted:
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
				switch r.Method {
				case msp.NotifyItemStarted:
					f.open[p.Item.ItemID] = p.Item
					startedAt[p.Item.ItemID] = r.Seq
					continue
				case msp.NotifyItemUpdated:
					if _, ok := f.open[p.Item.ItemID]; ok {
						f.open[p.Item.ItemID] = p.Item
					}
					continue
				}
				if _, ok := startedAt[p.Item.ItemID]; ok {
					f.deltasThrough = max(f.deltasThrough, r.Seq-1)
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
			if len(f.open) > 0 {
				f.deltasThrough = after
			}
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
