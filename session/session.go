package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	id    string                      // its sessionId, on the wire
	key   string                      // where the store and the cluster keep it (sessionKey)
	owner string                      // the principal it belongs to; never changes
	spans atomic.Pointer[[]epochSpan] // its cursors' epochs (state.CursorSpans): see spanList
	m     *Manager

	mu         sync.Mutex
	erasing    sync.Mutex // held through an erasure: one at a time
	st         state
	head       int64 // seq of the last durable record
	loadedHead int64 // head when the session was (re)read from the store
	sub        int64 // ephemeral events emitted since head
	subs       map[Subscriber]struct{}
	gapsDue    map[Subscriber]dueGap // holes its catch-up left a subscriber at, for its next event to close
	floors     map[Subscriber]cursor // subscribers that subscribed from ahead of this node: where they stand
	history    []provider.Message
	spend      spend                // its running usage and cost (cost.go)
	window     contextWindow        // its context window: pressure, what may be compacted (compact.go)
	open       map[string]*openItem // items started and not yet completed
	approvals  approvals            // the approvals its log opened (approvals.go)
	deltas     deltaLog             // the running turn's deltas, for resuming readers
	cancel     context.CancelFunc   // stops the active turn (the user's stop)
	park       context.CancelFunc   // stops the active turn as a stopping host does
	awaiting   int                  // the active turn's calls waiting for their approval
	resume     *turn.Resumption     // the active turn is to be resumed so
	farewell   *Notification        // the session/deleteCompleted that erased it, for subscriptions that register after it
	workerDone chan struct{}        // closed when the running worker stops
	stopDue    string               // the active turn, stopped (turn/interrupt, turn/cancel) before its worker took it
	held       *heldFanout          // a turn/start's caller, whose events wait for its ack
	queued     atomic.Int32         // len(st.Queue), read by Stats without mu
	unfollow   func()               // stops following the leader's events (a follower's)
	servers    OpenServers          // its MCP servers, from its first turn since it loaded (st.MCPServers)

	// Its lifecycle and what this node does for it (phase.go).
	phase phase
	role  role
	// term is bumped each time this node gives the session up
	// (demoteLocked): a worker of an earlier term writes nothing.
	term uint64

	// Facts independent of the phase and the role, so not part of them.
	// working and broken are the scheduler's: a broken session still
	// takes commands, may be deleted and stays broken through a failed
	// deletion, and the worker running when it breaks stops at its next
	// launch (both are true until then). launched is the active turn's.
	// stale is a follower's knowledge of its row, in any phase.
	working  bool // a goroutine is running the queue
	broken   bool // the log refused the scheduler's writes for good: no worker until the next start
	launched bool // the active turn was launched with its admission and waits for its worker
	stale    bool // a follower's st lags its log: re-read before use
}

// dueGap is where a subscriber's catch-up ended with ephemeral events
// after it gone. The next event tells whether the reader would notice: an
// ephemeral one continues the stream they belonged to, and a reader in
// the middle of an item holds part of its text; a durable one otherwise
// passes the hole, as view/page does.
type dueGap struct {
	after   string
	midItem bool
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
	text    streamText
	savedAt time.Time // when its text was last written to the log
	saved   int       // how much of text that was
}

// current is the item as it stands: its last state with what streamed
// since.
func (oi *openItem) current() msp.Item {
	it := oi.item
	oi.text.fill(&it)
	return it
}

// event is a durable event about to be appended.
type event struct {
	method string
	params msp.ViewParams
}

// appendLocked writes events (and, when st is non-nil, the new state and
// any ledger entries) in one commit, then fans the events out. Nothing is
// fanned out unless the commit succeeded. The first records this run
// writes open its cursor epoch span, and the state goes with them, so the
// span is durable with the first position minted under it. s.mu must be
// held.
func (s *session) appendLocked(ctx context.Context, evs []event, st *state, cmds ...store.Command) error {
	if s.phase.deleted() {
		return errDeleted
	}
	if s.role != roleLeader {
		return errNotLeader
	}
	now := s.m.now()
	// A retry notice is what a user watches a countdown for, and its
	// backoff starts only once it is written: it goes ahead of a burst of
	// other writes (this session has no other commit in flight).
	batch := store.Batch{SessionID: s.key, Commands: cmds, Urgent: slices.ContainsFunc(evs, isRetryNotice)}
	spans, opened := s.spanList(), false
	if len(evs) > 0 || st != nil {
		// This run's first commit opens its span, from the next record
		// on; the ephemeral positions it mints after head are of it too
		// (see epochSpan).
		if spans, opened = withRun(spans, s.m.run, s.head+1); opened {
			if st == nil {
				c := s.st.clone()
				st = &c
			}
			st.CursorSpans, st.CursorEpoch = spans, ""
		}
	}
	batch.Records = make([]store.Record, len(evs))
	for i, ev := range evs {
		seq := s.head + int64(i) + 1
		pos := msp.RecordPosition{ID: newID(), Sequence: seq}
		h := ev.params.Header()
		h.SessionID = s.id
		h.ViewCursor = cursor{session: s.id, epoch: epochAt(spans, seq), seq: seq}.String()
		h.SourceRange = &msp.SourceRange{First: pos, Last: pos, Stream: msp.StreamRef{ID: s.id, Kind: "session"}}
		raw, err := msp.Marshal(ev.params)
		if err != nil {
			return fmt.Errorf("encoding %s: %w", ev.method, err)
		}
		batch.Records[i] = store.Record{Seq: seq, Method: ev.method, Params: raw}
	}
	batch.Text = textOf(s.owner, batch.Records)
	if st != nil {
		st.UpdatedAt = now
		raw, err := json.Marshal(st)
		if err != nil {
			return fmt.Errorf("encoding session state: %w", err)
		}
		batch.Session = &store.Session{ID: s.key, Owner: st.Owner, CreatedAt: st.CreatedAt, UpdatedAt: now, Busy: st.busy(), State: raw}
		if len(evs) == 0 {
			// Fenced like records: a leader that lost the session to
			// another node cannot overwrite the row that node writes.
			batch.AtHead = new(s.head)
		}
	}
	if err := s.m.store.Commit(ctx, batch); err != nil {
		return fmt.Errorf("appending to session %s: %w", s.id, err)
	}
	if st != nil {
		s.st = *st
		s.queued.Store(int32(len(st.Queue)))
	}
	if opened {
		s.setSpans(spans)
	}
	if len(evs) == 0 {
		return nil
	}
	s.head += int64(len(evs))
	prev := s.sub // the ephemeral events the first record follows
	s.sub = 0
	for _, ev := range evs {
		s.m.stats.observe(ev.params)
	}
	ms := now.UnixMilli()
	var asked []*approval
	for i, rec := range batch.Records {
		if hidden(rec.Method) {
			// No view event: its followers learn its position alone, so
			// that their heads keep step.
			s.publishLocked(Notification{SessionID: s.id, Method: rec.Method, Durable: true}, Position{Seq: rec.Seq, Prev: prev})
			prev = 0
			continue
		}
		n := Notification{
			SessionID: s.id,
			Method:    rec.Method,
			Cursor:    evs[i].params.Header().ViewCursor,
			Frame:     msp.EncodeNotification(rec.Method, rec.Params, ms),
			Durable:   true,
		}
		s.fanOutLocked(n)
		s.publishLocked(n, Position{Seq: rec.Seq, Prev: prev})
		s.noteLocked(rec.Method, rec.Params, rec.Seq, &asked)
		prev = 0
	}
	s.askOpenedLocked(asked)
	return nil
}

// isRetryNotice tells whether ev announces a backoff, a re-run or a
// provider skipped: what precedes the turn's next request.
func isRetryNotice(ev event) bool {
	return isRetryMethod(ev.method) || ev.method == msp.NotifyTurnProviderSkipped
}

// isRetryMethod tells whether method announces a backoff or a re-run.
func isRetryMethod(method string) bool {
	return method == msp.NotifyTurnModelRetryScheduled || method == msp.NotifyTurnRetryScheduled
}

// attemptAfter tells what a record of method says of the attempt after
// it: one runs (a turn started, a retry was scheduled) or none does (the
// turn ended); settled is false for other methods.
func attemptAfter(method string) (running, settled bool) {
	switch {
	case method == msp.NotifyTurnStarted || isRetryMethod(method):
		return true, true
	case method == msp.NotifyTurnCompleted:
		return false, true
	}
	return false, false
}

// errNotLeader refuses a write on a node that only follows the session.
var errNotLeader = errors.New("session: this node does not lead the session")

func (s *session) fanOutLocked(n Notification) {
	if hidden(n.Method) {
		return // the session's own record, no view event
	}
	for sub := range s.subs {
		if h := s.held; h != nil && h.sub == sub {
			h.queue = append(h.queue, n)
			continue
		}
		if len(s.floors) > 0 && s.belowFloorLocked(sub, n) {
			continue
		}
		if len(s.gapsDue) > 0 {
			if g, ok := s.gapsDue[sub]; ok {
				delete(s.gapsDue, sub)
				if g.midItem || !n.Durable {
					sub.Deliver(s.gapNotification(g.after, n.Cursor))
				}
			}
		}
		sub.Deliver(n)
	}
}

// belowFloorLocked tells whether n is at or before the position sub
// subscribed from, which was ahead of this node (a follower that had not
// yet received what the leader handed out): sub has it already. The floor
// goes once an event passes it. s.mu must be held.
func (s *session) belowFloorLocked(sub Subscriber, n Notification) bool {
	floor, ok := s.floors[sub]
	if !ok {
		return false
	}
	if at, err := parseCursor(n.Cursor); err == nil && !floor.before(at) {
		return true
	}
	delete(s.floors, sub)
	return false
}

// emit appends one event on behalf of a running turn.
func (s *session) emit(ctx context.Context, method string, params msp.ViewParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := params.(*msp.ItemParams); ok && method == msp.NotifyItemStarted && s.opensEphemeral(p.Item) {
		return s.startItemLocked(p)
	}
	return s.emitLocked(ctx, []event{{method, params}}, nil)
}

// opensEphemeral tells whether an item may open on an ephemeral event: an
// answer streamed into, whose durable record is its item/completed (MSP
// lets agentMessage items open so), which saves a turn a commit. Until a
// commit moves the head past where the session was loaded, the process
// before may have handed out sub-positions of the head, and they must
// not be handed out again: the item opens durably then. s.mu must be held.
func (s *session) opensEphemeral(it msp.Item) bool {
	return it.Kind == msp.ItemAgentMessage && s.head > s.loadedHead
}

// startItemLocked opens an item at an ephemeral position after the head,
// as a delta is: kept for resuming readers, never written. A crash before
// its text is first saved (item/updated) leaves no trace of it, and its
// attempt is retried as a lost one. s.mu must be held.
func (s *session) startItemLocked(p *msp.ItemParams) error {
	if s.phase.deleted() {
		return errDeleted
	}
	if s.role != roleLeader {
		return errNotLeader
	}
	at := s.nextEphemeralLocked()
	c := at.String()
	p.SessionID, p.ViewCursor, p.SourceRange = s.id, c, nil
	raw, err := msp.Marshal(p)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", msp.NotifyItemStarted, err)
	}
	now := s.m.now()
	s.sendEphemeralLocked(at, c, msp.NotifyItemStarted, raw, now)
	oi := &openItem{item: p.Item, savedAt: now}
	oi.text.seed(p.Item)
	s.open[p.Item.ItemID] = oi
	return nil
}

// nextEphemeralLocked takes the position of the next ephemeral event: a
// sub-position after the last durable record, so it can never collide
// with a cursor handed out before or after it. s.mu must be held.
func (s *session) nextEphemeralLocked() cursor {
	s.sub++
	return s.at(s.head, s.sub)
}

// sendEphemeralLocked fans out an ephemeral event at at, keeps it for
// resuming readers and publishes it to the session's followers. s.mu must
// be held.
func (s *session) sendEphemeralLocked(at cursor, c, method string, params []byte, now time.Time) {
	s.sendFrameLocked(at, c, method, msp.EncodeNotification(method, params, now.UnixMilli()))
}

// sendFrameLocked is sendEphemeralLocked with the frame encoded. s.mu
// must be held.
func (s *session) sendFrameLocked(at cursor, c, method string, frame []byte) {
	n := Notification{SessionID: s.id, Method: method, Cursor: c, Frame: frame}
	s.deltas.add(at, method, n.Frame)
	s.fanOutLocked(n)
	s.publishLocked(n, Position{Seq: at.seq, Sub: at.sub})
}

// emitLocked appends a running turn's events in one commit (with st, when
// set), keeping the session's running totals and open items in step.
// s.mu must be held.
func (s *session) emitLocked(ctx context.Context, evs []event, st *state) error {
	sp := s.spend
	for _, ev := range evs {
		switch p := ev.params.(type) {
		case *msp.SessionTokenUsageParams:
			sp = sp.add(p)
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
	s.spend = sp
	s.noteTurnEventsLocked(evs)
	for _, ev := range evs {
		p, ok := ev.params.(*msp.ItemParams)
		switch {
		case !ok:
		case ev.method == msp.NotifyItemStarted:
			oi := &openItem{item: p.Item, savedAt: s.m.now()}
			oi.text.seed(p.Item)
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

// delta fans out one ephemeral delta appended to field ("": the text) of
// an open item.
func (s *session) delta(itemID, field, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.role != roleLeader {
		return // an attempt stopping on a node that gave the session up
	}
	at := s.nextEphemeralLocked()
	c := at.String()
	now := s.m.now()
	frame := msp.EncodeItemDelta(msp.ItemDeltaParams{SessionID: s.id, ViewCursor: c, ItemID: itemID, Field: field, Delta: text}, now.UnixMilli())
	s.sendFrameLocked(at, c, msp.NotifyItemDelta, frame)
	if oi := s.open[itemID]; oi != nil {
		oi.text.add(field, text)
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
	it := oi.current()
	it.Revision++
	if err := s.appendLocked(context.WithoutCancel(s.m.ctx), []event{{msp.NotifyItemUpdated, &msp.ItemParams{Item: it}}}, nil); err != nil {
		s.m.log.Warn("saving a streaming item's text", "session", s.id, "item", it.ItemID, "err", err)
		return
	}
	oi.item.Revision, oi.savedAt, oi.saved = it.Revision, now, oi.text.Len()
}

// checkCursor resolves a client-supplied cursor of this session.
func (s *session) checkCursor(c string) (cursor, error) {
	cur, err := parseCursor(c)
	if err != nil || cur.session != s.id || !spanOf(s.spanList(), cur) {
		// A cursor of another incarnation of this session id (deleted
		// and started again), or of positions this store does not hold
		// under its epoch (handed out after the backup it was restored
		// from), names nothing in this one.
		return cursor{}, msp.ErrMissingAnchor(s.id, c)
	}
	s.mu.Lock()
	head, sub, lost := s.head, s.sub, s.deltas.lost
	s.mu.Unlock()
	// Sub-positions of the head past this node's own were handed out
	// before its load (by the process before it, or by the leader it
	// follows): lost to it, not unknown. A follower may yet receive some
	// of them; the reader's floor keeps those from it (subscribe).
	if cur.seq > head || (cur.seq == head && cur.sub > sub && lost.before(cur)) {
		return cursor{}, msp.ErrMissingAnchor(s.id, c)
	}
	return cur, nil
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
	delete(s.floors, sub)
	s.mu.Unlock()
}

// detach ends sub's subscription and voids what it tracked of it (a hole,
// a kept event), ahead of a re-subscription.
func (s *session) detach(sub Subscriber) {
	s.unsubscribe(sub)
	sub.Subscribed(s.id, "")
}

// recordNotification renders a stored record as a notification again; its
// params are the stored bytes, identical to the first delivery. With an
// arena the frame is cut from its chunk (a replay's), else allocated alone.
func (s *session) recordNotification(r store.Record, a *frameArena) Notification {
	emitted, ok := recordedAt(r.Params)
	if !ok {
		emitted = s.m.now()
	}
	var frame []byte
	if a != nil {
		frame = a.notification(r.Method, r.Params, emitted.UnixMilli())
	} else {
		frame = msp.EncodeNotification(r.Method, r.Params, emitted.UnixMilli())
	}
	return Notification{
		SessionID: s.id,
		Method:    r.Method,
		Cursor:    s.durable(r.Seq),
		Frame:     frame,
		Durable:   true,
	}
}

// frameArena renders a replay's frames into shared chunks: one allocation
// for a run of records rather than one a frame. Frames are cut from a
// chunk in log order and queued in that order, so the chunks a
// connection's queued frames keep alive hold those frames and at most two
// partial chunks more: memory stays bounded by the queue's bytes plus
// 2 × arenaChunk.
type frameArena struct{ buf []byte }

// arenaChunk is a chunk's size; a frame larger than a quarter of it is
// allocated alone, so that a chunk is never mostly waste.
const arenaChunk = 64 << 10

// notification renders a notification frame, as msp.EncodeNotification
// does, into the current chunk.
func (a *frameArena) notification(method string, params json.RawMessage, emittedAtMs int64) []byte {
	size := msp.NotificationSize(method, params)
	if size > arenaChunk/4 {
		return msp.EncodeNotification(method, params, emittedAtMs)
	}
	if cap(a.buf)-len(a.buf) < size {
		a.buf = make([]byte, 0, arenaChunk)
	}
	start := len(a.buf)
	a.buf = msp.AppendNotification(a.buf, method, params, emittedAtMs)
	// Capped: appending to a frame must never write over the next one.
	return a.buf[start:len(a.buf):len(a.buf)]
}

// firstID marks the record position's id in stored params.
var firstID = []byte(`"first":{"id":"`)

// firstAt is where firstID stands in the params mspd writes, after
// {"sessionId":"<a UUID>","sourceRange":{ — looked at before searching.
const firstAt = len(`{"sessionId":"`) + 36 + len(`","sourceRange":{`)

// recordedAt tells when a stored event was first emitted: its position's
// id is a UUIDv7 minted then, whose first 48 bits are Unix milliseconds. A
// replay keeps that emittedAtMs, so a client reopening a chat during a
// backoff counts down from when the retry was scheduled, not from now.
func recordedAt(params []byte) (time.Time, bool) {
	head := params[:min(len(params), 512)]
	i := firstAt
	if len(head) < firstAt+len(firstID) || !bytes.Equal(head[firstAt:firstAt+len(firstID)], firstID) {
		i = bytes.Index(head, firstID)
	}
	if i < 0 || len(head) < i+len(firstID)+36 {
		return time.Time{}, false
	}
	id := head[i+len(firstID) : i+len(firstID)+36]
	// xxxxxxxx-xxxx-7xxx-xxxx-xxxxxxxxxxxx: read in place, as a replay
	// does for every record (parsing the whole id cost 5% of a resume).
	if id[8] != '-' || id[13] != '-' || id[14] != '7' || id[18] != '-' || id[23] != '-' {
		return time.Time{}, false
	}
	var ms int64
	for j, c := range id[:13] {
		if j == 8 {
			continue
		}
		d, ok := hexDigit(c)
		if !ok {
			return time.Time{}, false
		}
		ms = ms<<4 | int64(d)
	}
	return time.UnixMilli(ms), true
}

// hexDigit is the value of one hex digit of either case.
func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// newID mints a UUIDv7.
func newID() string { return uuid.Must(uuid.NewV7()).String() }
