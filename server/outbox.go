package server

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"
)

var (
	// errClosed is returned once a connection's outbox is shut.
	errClosed = errors.New("connection closed")
	// errWedged reports a peer that does not read: the outbox stayed full
	// past the write timeout, or a frame that cannot wait found no room.
	errWedged = errors.New("outbound queue full: the peer is not reading")
)

// outbox is a connection's outbound queue. Frames leave in the order they
// were queued, taken in batches by a writer goroutine that owns the
// socket. The writer runs only while there is something to write: the
// first frame queued into an idle outbox starts it (startWriter), and it
// ends when it finds the queue empty, so an idle connection keeps no
// writer and no write buffer.
//
// One byte budget covers everything the outbox holds: responses,
// broadcasts, view/gap markers, view events and the kept tails of holes.
// Within it:
//
//   - Responses (and the read loop itself) wait for room: the connection
//     reads its next request only once its queue is under the request
//     limit (the budget less a reserve), so a client that does not read
//     stops being read, and TCP pushes back on it.
//   - View events take at most a share of it (and a frame count). Under
//     pressure — the reader has fallen a sixteenth of the frame count
//     behind, or a delta finds no room — a delta is coalesced into its
//     view's newest queued event when that is a delta of the same item
//     the writer has not taken yet (conflation, as market-data feeds do):
//     one frame, up to 64 KiB, with the texts concatenated and the later
//     cursor, so a reader that is merely behind gets every delta, in
//     fewer frames. Beyond that, or while a response waits, view events
//     are dropped and the hole is reported per session with one view/gap
//     at the next accepted event: a gap is for a reader that stopped
//     reading. A replay waits for room instead.
//   - Protected frames that cannot wait (broadcasts, a replay's view/gap)
//     may also use the reserve; one that finds no room at all means the
//     peer is wedged, and the connection is closed.
//
// A wait that sees no frame leave the queue for the stall time (the write
// timeout) reports the peer wedged too. A frame larger than the request
// limit is queued only while no other such frame is (a response only into
// an otherwise empty queue), and the responses and view events that queue
// behind it are weighed without it (protected frames still get only the
// reserve). So an outbox holds at most its budget and, besides it, one
// frame larger than that, besides the batch being written and the answer
// waiting to be queued; and a slow reader never stalls a session or other
// readers.
type outbox struct {
	gapFrame func(sessionID, after, next string) []byte
	lim      outboxLimits

	// onWait, when set, is told how long each frame taken waited in the
	// queue (metrics); it runs under the lock and must be quick (a
	// histogram's atomic adds).
	onWait func(time.Duration)
	clock  func() time.Duration // monotonic time for queuedAt (tests set it)

	mu          sync.Mutex
	frames      [][]byte
	kinds       []frameKind
	queuedAt    []time.Duration // when each frame was queued, by clock
	head        int
	pos0        uint64 // queue position of frames[0]: positions count every frame ever queued
	bytes       int    // bytes of the frames queued
	nGap        int    // view events queued
	gapBytes    int    // bytes of view events queued
	urgentBytes int    // bytes of protected frames that could not wait
	tailBytes   int    // bytes of kept tails
	oversize    int    // bytes of a response or view event queued alone over the request limit
	oversizeGap int    // of them, a view event's
	peak        int    // high-water mark of bytes held
	closed      bool
	shut        chan struct{} // closed with the outbox: wakes waiters
	startWriter func()        // starts a writer; nil until the connection serves
	writing     bool          // a writer runs (or was started)
	inWrite     int           // bytes of the batch the writer took and is writing
	inWriteBig  bool          // that batch holds a frame over the request limit
	respBytes   int           // bytes of responses waiting for room
	drained     chan struct{} // closed once closed with nothing queued and no writer
	waiting     int           // goroutines waiting for room
	respWaiting int           // of them, responses: view events yield to them
	room        chan struct{} // closed and replaced when room is freed
	views       map[string]*viewState
	lastView    *viewState // the view last looked up: most connections watch one
	tails       int        // views holding a dropped durable event to re-deliver
	dropped     uint64
	gaps        uint64
	coalesced   uint64
}

// outboxLimits bounds one outbox.
type outboxLimits struct {
	budget    int // bytes held in all
	reserve   int // part of the budget only frames that cannot wait may use
	gapBytes  int // share of the budget queued view events may use
	gapFrames int // view events queued at most
	// coalesceAt is the view events queued from which deltas are
	// coalesced even while there is room: the reader is falling behind.
	coalesceAt int
	stall      time.Duration // a wait for room this long with no progress: wedged (0: never)
}

// limitsFor derives a connection's limits from the server config: the
// budget is QueueBytes, view events get half of it, and an eighth is the
// reserve of frames that cannot wait.
func limitsFor(cfg Config) outboxLimits {
	return outboxLimits{
		budget:    cfg.QueueBytes,
		reserve:   cfg.QueueBytes / 8,
		gapBytes:  cfg.QueueBytes / 2,
		gapFrames: cfg.QueueFrames,
		// A sixteenth of the frames (64 by default): answers shorter than
		// that always arrive delta by delta.
		coalesceAt: max(1, cfg.QueueFrames/16),
		stall:      cfg.WriteTimeout,
	}
}

// frameKind is what a queued frame is, for the budget's accounts.
type frameKind uint8

const (
	kindResponse frameKind = iota // a response, or a view/gap of an accepted event
	kindView                      // a view event: may be dropped
	kindUrgent                    // a protected frame that could not wait
)

// viewState tracks one subscribed session on this connection.
type viewState struct {
	id        string // the session
	last      string // cursor of the last event queued
	inHole    bool
	holeAfter string
	// deltaPos is 1 + the queue position of the view's newest event when
	// that is an ephemeral one (a delta), 0 otherwise: a delta that finds
	// no room is coalesced into it while the writer has not taken it.
	deltaPos uint64
	// merged is set once that frame is one this outbox built by
	// coalescing: more text is appended to it in place.
	merged *mergedDelta
	// The tail is the newest durable event dropped in the open hole. Once
	// there is room again it is delivered and the hole reported, so a
	// reader that fell behind at the end of a turn still gets the turn's
	// terminal without waiting for the session's next event.
	tailCursor    string
	tailFrame     []byte
	tailMarker    []byte // the view/gap that goes before it, counted with it
	lostAfterTail bool   // an event was dropped after the tail
}

// tailSize is what v's kept tail counts for.
func (v *viewState) tailSize() int { return len(v.tailMarker) + len(v.tailFrame) }

func newOutbox(lim outboxLimits, gapFrame func(sessionID, after, next string) []byte) *outbox {
	return &outbox{
		gapFrame: gapFrame,
		lim:      lim,
		shut:     make(chan struct{}),
		drained:  make(chan struct{}),
		room:     make(chan struct{}),
		views:    make(map[string]*viewState),
		clock:    sinceStart(),
	}
}

// sinceStart returns a monotonic clock reading the time since the call.
func sinceStart() func() time.Duration {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }
}

// serve makes queued frames start writers with start, from now on (and
// at once, when frames are already queued). start runs under the lock and
// must not block: it starts a goroutine that calls take until the queue
// is empty.
func (o *outbox) serve(start func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.startWriter = start
	o.wakeWriterLocked()
}

// wakeWriterLocked starts a writer when frames wait and none runs.
func (o *outbox) wakeWriterLocked() {
	if !o.writing && o.startWriter != nil && o.head < len(o.frames) {
		o.writing = true
		o.startWriter()
	}
}

// heldLocked is what the budget counts: queued frames and kept tails.
func (o *outbox) heldLocked() int { return o.bytes + o.tailBytes }

// weighedLocked is what the limits weigh: what is held, less a frame
// queued alone over the request limit (admitted because nothing else was
// queued). What comes behind such a frame is weighed as if it had left,
// so that one frame too large for the budget does not cost the small
// events after it their place — a turn's last events, say, which nothing
// would follow to report them missing.
func (o *outbox) weighedLocked() int { return o.heldLocked() - o.oversize }

// oversized tells whether a frame of kind is one the limits leave out of
// their weighing.
func (o *outbox) oversized(frame []byte, kind frameKind) bool {
	return kind != kindUrgent && len(frame) > o.requestLimit()
}

// requestLimit is what responses and view events may fill; the rest of
// the budget is the reserve.
func (o *outbox) requestLimit() int { return o.lim.budget - o.lim.reserve }

// idleLocked tells whether nothing but urgent frames is held: then a
// frame larger than its limit may go, alone, so that it cannot wait
// forever.
func (o *outbox) idleLocked() bool { return o.bytes == o.urgentBytes && o.tailBytes == 0 }

// fitsLocked tells whether size more bytes stay within limit.
func (o *outbox) fitsLocked(size, limit int) bool {
	return o.idleLocked() || o.weighedLocked()+size <= limit
}

// viewRoomLocked tells whether a view event of size bytes (its view/gap
// marker included) fits; own is the view's kept tail, which the event
// would replace. While a response waits, view events yield to it — but not
// into an empty queue: a tail kept then would wait for a frame to leave,
// and none would.
func (o *outbox) viewRoomLocked(size, own int) bool {
	return (o.respWaiting == 0 || o.bytes == o.urgentBytes) && o.eventRoomLocked(size, own)
}

// eventRoomLocked applies the view events' frame count and byte share,
// within the request limit.
func (o *outbox) eventRoomLocked(size, own int) bool {
	if o.nGap >= o.lim.gapFrames {
		return false
	}
	if size > o.requestLimit() {
		// Too large for any room: it queues while no other such frame
		// is, behind what is queued, and is weighed as nothing. Dropped
		// for a small frame ahead of it, a reader that keeps up would get
		// a view/gap.
		return o.oversize == 0
	}
	if o.nGap > 0 && o.gapBytes-o.oversizeGap+o.tailBytes-own+size > o.lim.gapBytes {
		return false
	}
	return o.idleLocked() || o.weighedLocked()-own+size <= o.requestLimit()
}

func (o *outbox) appendLocked(frame []byte, kind frameKind) {
	o.frames = append(o.frames, frame)
	o.kinds = append(o.kinds, kind)
	o.queuedAt = append(o.queuedAt, o.clock())
	o.bytes += len(frame)
	switch kind {
	case kindView:
		o.nGap++
		o.gapBytes += len(frame)
	case kindUrgent:
		o.urgentBytes += len(frame)
	}
	if o.oversized(frame, kind) {
		o.oversize += len(frame)
		if kind == kindView {
			o.oversizeGap += len(frame)
		}
	}
	o.notePeakLocked()
	o.wakeWriterLocked()
}

func (o *outbox) notePeakLocked() { o.peak = max(o.peak, o.heldLocked()) }

// freedLocked wakes whoever waits for room.
func (o *outbox) freedLocked() {
	if o.waiting > 0 {
		close(o.room)
		o.room = make(chan struct{})
	}
}

// waitRoom calls admit under the lock until it reports the frame queued,
// waiting for room between tries. A response (priority) makes view events
// yield while it waits. It gives up when ctx ends, the outbox closes, or
// no frame leaves the queue for the stall time (errWedged).
func (o *outbox) waitRoom(ctx context.Context, priority bool, admit func() bool) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return errClosed
	}
	if admit() {
		return nil
	}
	o.waiting++
	if priority {
		o.respWaiting++
	}
	defer func() {
		o.waiting--
		if priority {
			o.respWaiting--
		}
	}()
	var stall *time.Timer
	var stalled <-chan time.Time
	if o.lim.stall > 0 {
		stall = time.NewTimer(o.lim.stall)
		defer stall.Stop()
		stalled = stall.C
	}
	for {
		room := o.room
		o.mu.Unlock()
		var err error
		select {
		case <-room: // a frame left: progress
			if stall != nil {
				stall.Reset(o.lim.stall)
			}
		case <-o.shut:
			err = errClosed
		case <-ctx.Done():
			err = ctx.Err()
		case <-stalled:
			err = errWedged
		}
		o.mu.Lock()
		switch {
		case err != nil:
			return err
		case o.closed:
			return errClosed
		case admit():
			return nil
		}
	}
}

// pushResponse queues a frame that must never be dropped and can wait: a
// response, from the read loop. It waits for room under the request limit;
// meanwhile the frame counts as held (see inFlightBytes).
func (o *outbox) pushResponse(ctx context.Context, frame []byte) error {
	waiting := false
	defer func() {
		if waiting {
			o.mu.Lock()
			o.respBytes -= len(frame)
			o.mu.Unlock()
		}
	}()
	return o.waitRoom(ctx, true, func() bool {
		if !o.fitsLocked(len(frame), o.requestLimit()) {
			if !waiting {
				waiting = true
				o.respBytes += len(frame)
			}
			return false
		}
		if waiting {
			waiting = false
			o.respBytes -= len(frame)
		}
		o.appendLocked(frame, kindResponse)
		return true
	})
}

// pushProtected queues a frame that must never be dropped and cannot wait
// (a broadcast, a replay's view/gap: their senders hold session locks). It
// may use the whole budget, and the reserve whatever else is queued; when
// neither has room the peer has left a reserve's worth of them unread, and
// errWedged says the connection must close.
func (o *outbox) pushProtected(frame []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return errClosed
	}
	// Weighed with an oversized frame: a peer that reads nothing is found
	// wedged as soon.
	if o.heldLocked()+len(frame) > o.lim.budget && o.urgentBytes+len(frame) > o.lim.reserve {
		return errWedged
	}
	o.appendLocked(frame, kindUrgent)
	return nil
}

// waitReadable returns once the queue is under the request limit and no
// frame over it is queued or being written, so that the next request is
// read only when its answer has room: a client that does not read stops
// being read, and holds at most one such frame (per request it has
// executing) besides its budget. (The limits weigh a queued frame over the
// request limit as nothing, so that events behind it keep their place;
// requests must not.)
func (o *outbox) waitReadable(ctx context.Context) error {
	return o.waitRoom(ctx, false, func() bool {
		return o.oversize == 0 && !o.inWriteBig && o.fitsLocked(1, o.requestLimit())
	})
}

// subscribed starts tracking a session's view after cursor from.
func (o *outbox) subscribed(sessionID, from string) {
	o.mu.Lock()
	o.dropViewLocked(sessionID)
	o.views[sessionID] = &viewState{id: sessionID, last: from}
	o.mu.Unlock()
}

func (o *outbox) dropViewLocked(sessionID string) {
	v := o.views[sessionID]
	if v == nil {
		return
	}
	if v.tailFrame != nil {
		o.clearTailLocked(v)
		o.freedLocked()
	}
	if o.lastView == v {
		o.lastView = nil
	}
	delete(o.views, sessionID)
}

// viewLocked returns the state of a session's view, creating it.
func (o *outbox) viewLocked(sessionID string) *viewState {
	if v := o.lastView; v != nil && v.id == sessionID {
		return v
	}
	v := o.views[sessionID]
	if v == nil {
		v = &viewState{id: sessionID}
		o.views[sessionID] = v
	}
	o.lastView = v
	return v
}

// keepTailLocked keeps a dropped durable event as its view's tail, with
// the view/gap that will go before it, replacing an older tail — when it
// fits the request limit. When it does not, an older tail stays and the
// hole is reported on from it; with none, the hole closes at the view's
// next event.
func (o *outbox) keepTailLocked(sessionID string, v *viewState, cursor string, frame []byte) {
	marker := o.gapFrame(sessionID, v.holeAfter, cursor)
	if o.weighedLocked()-v.tailSize()+len(marker)+len(frame) > o.requestLimit() {
		if v.tailFrame != nil {
			v.lostAfterTail = true
		}
		return
	}
	if v.tailFrame == nil {
		o.tails++
	}
	o.tailBytes += len(marker) + len(frame) - v.tailSize()
	v.tailCursor, v.tailFrame, v.tailMarker, v.lostAfterTail = cursor, frame, marker, false
	o.notePeakLocked()
}

func (o *outbox) clearTailLocked(v *viewState) {
	o.tails--
	o.tailBytes -= v.tailSize()
	v.tailCursor, v.tailFrame, v.tailMarker = "", nil, nil
}

// pushView queues a view event, or drops it and opens a hole when there is
// no room. A durable event dropped is kept as the hole's tail until there
// is room to deliver it.
func (o *outbox) pushView(sessionID, cursor string, frame []byte, durable bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	v := o.viewLocked(sessionID)
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
	marker := o.markerLocked(sessionID, v, cursor)
	room := o.viewRoomLocked(len(marker)+len(frame), len(v.tailFrame))
	if !durable && !v.inHole && (!room || o.behindLocked()) && o.coalesceLocked(v, cursor, frame) {
		return
	}
	if !room {
		if !v.inHole {
			v.inHole, v.holeAfter = true, v.last
		}
		if durable {
			o.keepTailLocked(sessionID, v, cursor, frame)
		} else if v.tailFrame != nil {
			v.lostAfterTail = true
		}
		o.dropped++
		return
	}
	if v.tailFrame != nil { // this event supersedes the kept tail
		o.clearTailLocked(v)
	}
	o.acceptLocked(v, marker, cursor, frame, !durable)
}

// behindLocked tells whether the reader is falling behind: enough view
// events are queued that deltas are coalesced before there is no room.
func (o *outbox) behindLocked() bool {
	return o.lim.coalesceAt > 0 && o.nGap >= o.lim.coalesceAt
}

// maxCoalesced bounds a coalesced frame: past it, a delta starts a frame
// of its own (when there is room for one).
const maxCoalesced = 64 << 10

// coalesceLocked merges a delta into v's newest queued event when that is
// a delta of the same item the writer has not taken: the texts are
// concatenated and the cursor and time are the new delta's. It reports
// false (nothing changed) when there is no such delta, either frame is
// not a plain item/delta, or the longer frame would not fit the view
// events' share.
func (o *outbox) coalesceLocked(v *viewState, cursor string, frame []byte) bool {
	slot, ok := o.queuedSlotLocked(v.deltaPos)
	if !ok {
		return false
	}
	in, ok := parseDeltaOf(frame, v.id, cursor)
	if !ok {
		return false
	}
	old := o.frames[slot]
	m := v.merged
	var merged []byte
	if m == nil {
		q, ok := parseDelta(old)
		if !ok || !bytes.Equal(q.itemID, in.itemID) {
			return false
		}
		merged, m = startMerge(q, len(in.text))
	} else {
		if string(in.itemID) != m.itemID {
			return false
		}
		merged = old
	}
	size := m.textEnd + len(in.text) + mergedSuffixLen(in)
	growth := size - len(old)
	// Neither frame may be one the limits leave out: its size must not
	// change the account.
	if size > maxCoalesced || size > o.requestLimit() || len(old) > o.requestLimit() ||
		o.gapBytes-o.oversizeGap+o.tailBytes+growth > o.lim.gapBytes || o.weighedLocked()+growth > o.requestLimit() {
		return false
	}
	// Appending in place is safe: the frame is queued, so the writer
	// holds no reference to it, and nothing else ever does.
	merged = appendMerged(merged[:m.textEnd], in)
	m.textEnd += len(in.text)
	o.frames[slot] = merged
	o.bytes += growth
	o.gapBytes += growth
	o.notePeakLocked()
	v.merged, v.last = m, cursor
	o.coalesced++
	return true
}

// queuedSlotLocked returns the slot of the frame at queue position pos-1,
// when the writer has not taken it yet (pos 0: none).
func (o *outbox) queuedSlotLocked(pos uint64) (int, bool) {
	if pos == 0 || pos-1 < o.pos0+uint64(o.head) || pos-1 >= o.pos0+uint64(len(o.frames)) {
		return 0, false
	}
	return int(pos - 1 - o.pos0), true
}

// markerLocked renders the view/gap that closes v's hole at cursor, or
// nil when v is not in a hole.
func (o *outbox) markerLocked(sessionID string, v *viewState, cursor string) []byte {
	if !v.inHole {
		return nil
	}
	return o.gapFrame(sessionID, v.holeAfter, cursor)
}

// acceptLocked queues a view event (ephemeral: a delta, which a later one
// may be coalesced into). When it closes a hole, the view/gap marker goes
// right before it: next names an event already queued behind the marker,
// and a client that pages (after, next) on the marker gets the hole's
// events before the live one at next, in cursor order.
func (o *outbox) acceptLocked(v *viewState, marker []byte, cursor string, frame []byte, ephemeral bool) {
	if marker != nil {
		o.appendLocked(marker, kindResponse)
		v.inHole = false
		o.gaps++
	}
	o.appendLocked(frame, kindView)
	v.last = cursor
	v.deltaPos, v.merged = 0, nil
	if ephemeral {
		v.deltaPos = o.pos0 + uint64(len(o.frames))
	}
}

// flushTailsLocked delivers kept tails that now fit, even while a response
// waits: a tail is already counted, so queueing it takes no room, and the
// response can go alone only once no tail is kept. With nothing else
// queued, one tail goes whatever its size.
func (o *outbox) flushTailsLocked() {
	for _, v := range o.views {
		if o.tails == 0 {
			return
		}
		if v.tailFrame == nil {
			continue
		}
		size := v.tailSize()
		if o.bytes != o.urgentBytes && !o.eventRoomLocked(size, size) {
			continue
		}
		cursor, frame, marker, lost := v.tailCursor, v.tailFrame, v.tailMarker, v.lostAfterTail
		o.clearTailLocked(v)
		o.acceptLocked(v, marker, cursor, frame, false)
		if lost { // deltas after the tail are gone too: keep reporting
			v.inHole, v.holeAfter = true, cursor
		}
	}
}

// pushReplay queues a replayed view event, waiting for room.
func (o *outbox) pushReplay(ctx context.Context, sessionID, cursor string, frame []byte) error {
	return o.waitRoom(ctx, false, func() bool {
		if !o.viewRoomLocked(len(frame), 0) {
			return false
		}
		o.appendLocked(frame, kindView)
		if v := o.views[sessionID]; v != nil {
			v.last = cursor
			v.deltaPos, v.merged = 0, nil
		}
		return true
	})
}

// follows tells whether the connection follows sessionID, and how many
// sessions it follows: the views tracked, which subscribing adds and
// view/unsubscribe and a session's deletion remove, so the count is what
// the connection holds.
func (o *outbox) follows(sessionID string) (followed bool, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, followed = o.views[sessionID]
	return followed, len(o.views)
}

// forget stops tracking a session (view/unsubscribe).
func (o *outbox) forget(sessionID string) {
	o.mu.Lock()
	o.dropViewLocked(sessionID)
	o.mu.Unlock()
}

// take moves queued frames into dst, oldest first, for the writer: up to
// maxBytes of them, and at least one. With nothing queued it returns dst
// unchanged and, when release is set, ends the writer's turn: the next
// frame queued starts a writer again, and a closed outbox is drained.
//
// The writer calls take only once it has written what it took before: that
// batch is no longer in write.
func (o *outbox) take(dst [][]byte, maxBytes int, release bool) [][]byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.inWrite > 0 {
		o.inWrite, o.inWriteBig = 0, false
		o.freedLocked()
	}
	n, taken := 0, len(dst)
	now := o.clock()
	for o.head < len(o.frames) && (len(dst) == taken || n+len(o.frames[o.head]) <= maxBytes) {
		if o.onWait != nil {
			o.onWait(now - o.queuedAt[o.head])
		}
		if o.oversized(o.frames[o.head], o.kinds[o.head]) {
			o.inWriteBig = true
		}
		f := o.takeLocked()
		n += len(f)
		dst = append(dst, f)
	}
	o.inWrite = n
	switch {
	case len(dst) > taken:
		// Their room goes to kept tails first, then to whoever waits.
		if o.tails > 0 {
			o.flushTailsLocked()
		}
		o.compactLocked()
		o.freedLocked()
	case release:
		o.writing = false
		o.drainedLocked()
	}
	return dst
}

// takeLocked removes the oldest frame.
func (o *outbox) takeLocked() []byte {
	f, kind := o.frames[o.head], o.kinds[o.head]
	o.frames[o.head] = nil
	o.head++
	o.bytes -= len(f)
	switch kind {
	case kindView:
		o.nGap--
		o.gapBytes -= len(f)
	case kindUrgent:
		o.urgentBytes -= len(f)
	}
	if o.oversized(f, kind) {
		o.oversize -= len(f)
		if kind == kindView {
			o.oversizeGap -= len(f)
		}
	}
	return f
}

// drainedLocked closes drained once the outbox is closed, empty and
// without a writer.
func (o *outbox) drainedLocked() {
	if o.closed && !o.writing && o.head == len(o.frames) {
		select {
		case <-o.drained:
		default:
			close(o.drained)
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
		o.pos0 += uint64(o.head)
		o.frames, o.kinds, o.queuedAt, o.head = o.frames[:0], o.kinds[:0], o.queuedAt[:0], 0
	case o.head >= 64 && o.head*2 >= len(o.frames):
		n := copy(o.frames, o.frames[o.head:])
		copy(o.kinds, o.kinds[o.head:])
		copy(o.queuedAt, o.queuedAt[o.head:])
		clear(o.frames[n:])
		o.pos0 += uint64(o.head)
		o.frames, o.kinds, o.queuedAt, o.head = o.frames[:n], o.kinds[:n], o.queuedAt[:n], 0
	}
}

// close shuts the outbox: it takes no more frames, and drained closes
// once the writer has taken those queued.
func (o *outbox) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		o.closed = true
		close(o.shut)
	}
	o.drainedLocked()
}

// stats reports dropped events and gap markers so far, and the frames
// queued now.
func (o *outbox) stats() (dropped, gaps uint64, queued int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped, o.gaps, len(o.frames) - o.head
}

// coalescedCount reports the deltas coalesced into queued ones so far.
func (o *outbox) coalescedCount() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.coalesced
}

// inFlightBytes reports every outbound byte the connection holds: what
// the budget counts, the batch being written, and the responses waiting
// for room (what /metrics shows).
func (o *outbox) inFlightBytes() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.heldLocked() + o.inWrite + o.respBytes
}

// queuedBytes reports the bytes the budget counts now (queued frames and
// kept tails) and their high-water mark.
func (o *outbox) queuedBytes() (now, peak int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.heldLocked(), o.peak
}
