package session

import (
	"encoding/json"
	"math"
	"slices"

	"mspd/schema/msp"
)

// maxKeptDeltaBytes bounds the delta frames a session keeps for resuming
// readers; past it the oldest are let go (and a resume from before them
// gets a view/gap).
const maxKeptDeltaBytes = 1 << 20

// deltaLog keeps the ephemeral events of the running turn (its deltas
// and the item/started of the answer they stream into), so that a reader
// subscribing from any cursor — durable or ephemeral — gets every event
// after it in order. What it no longer holds is summed up by lost:
// every delta at or before lost may be gone, so a reader from before lost
// is told so with a view/gap rather than silently missing them.
type deltaLog struct {
	kept  []keptDelta // ascending cursor order
	bytes int
	lost  cursor // zero: nothing lost
}

// keptDelta is one ephemeral event as fanned out.
type keptDelta struct {
	at     cursor
	method string
	frame  []byte
}

// add keeps a delta, letting the oldest go past the byte bound (never the
// newest, so a reader from before the loss has an event to resume at).
func (l *deltaLog) add(at cursor, method string, frame []byte) {
	l.kept = append(l.kept, keptDelta{at, method, frame})
	l.bytes += len(frame)
	for l.bytes > maxKeptDeltaBytes && len(l.kept) > 1 {
		l.drop(1)
	}
}

// drop lets the n oldest deltas go.
func (l *deltaLog) drop(n int) {
	for _, d := range l.kept[:n] {
		l.bytes -= len(d.frame)
	}
	l.lose(l.kept[n-1].at)
	clear(l.kept[:n])
	l.kept = l.kept[n:]
}

// reset lets every delta go: the turn they belong to has ended, and its
// items' final states are durable.
func (l *deltaLog) reset() {
	if len(l.kept) > 0 {
		l.drop(len(l.kept))
	}
	l.kept = nil
}

// lose records that deltas up to c are gone.
func (l *deltaLog) lose(c cursor) {
	if l.lost.before(c) {
		l.lost = c
	}
}

// loseAllThrough records that any delta after durable record seq (before
// seq+1) may be gone: a log loaded from the store has none of its deltas.
func (l *deltaLog) loseAllThrough(seq int64) {
	l.lose(cursor{seq: seq, sub: math.MaxInt64})
}

// firstSeq is the durable sequence the oldest kept delta follows, or -1.
func (l *deltaLog) firstSeq() int64 {
	if len(l.kept) == 0 {
		return -1
	}
	return l.kept[0].at.seq
}

// before orders positions of one session's view.
func (c cursor) before(d cursor) bool {
	return c.seq < d.seq || (c.seq == d.seq && c.sub < d.sub)
}

// streamed is what of a session's open items streamed past its log: the
// leader's open items as streamed so far (open, by item id), or a
// follower's kept ephemeral events and what of them may be gone (kept,
// lost), rebuilt against the log's items once folded (rebuild).
type streamed struct {
	open     map[string]msp.Item
	follower bool
	kept     []keptDelta
	lost     cursor
}

// snapshot returns a copy of what the log keeps, for a rebuild outside
// the session's lock (frames are never changed once kept).
func (l *deltaLog) snapshot() streamed {
	return streamed{follower: true, kept: slices.Clone(l.kept), lost: l.lost}
}

// rebuild gives a follower's open items as far as they streamed: each
// item the log holds open (f) with the text kept after its last record
// appended (tails, by item id), and each answer that opened on a kept
// ephemeral event since the last attempt ended, whole (open; one from
// before that belongs to an attempt a stopped leader never closed). ok is
// false when any of that text may be missing: an event after such a
// start was let go or never arrived, or a delta's item is unknown (its
// start was).
func (s streamed) rebuild(f folded) (open map[string]msp.Item, tails map[string]*streamText, ok bool) {
	from := make(map[string]cursor, len(f.openAt)) // where each open item's text goes on
	for id, seq := range f.openAt {
		if at := (cursor{seq: seq}); at.before(s.lost) {
			return nil, nil, false
		}
		from[id] = cursor{seq: seq}
	}
	texts := map[string]*streamText{}
	known := make(map[string]bool, len(f.items)) // items the log holds, open or closed
	for _, it := range f.items {
		known[it.ItemID] = true
	}
	for _, k := range s.kept {
		var fr struct{ Params json.RawMessage }
		if json.Unmarshal(k.frame, &fr) != nil {
			return nil, nil, false
		}
		switch k.method {
		case msp.NotifyItemStarted:
			var p msp.ItemParams
			if json.Unmarshal(fr.Params, &p) != nil {
				return nil, nil, false
			}
			id := p.Item.ItemID
			if known[id] || k.at.seq < f.attemptEnd {
				continue // saved or closed since, or its attempt ended: the log's state supersedes it
			}
			if !s.lost.before(k.at) {
				return nil, nil, false
			}
			if open == nil {
				open = map[string]msp.Item{}
			}
			open[id], from[id] = p.Item, k.at
			texts[id] = &streamText{}
			texts[id].seed(p.Item)
		case msp.NotifyItemDelta:
			var p msp.ItemDeltaParams
			if json.Unmarshal(fr.Params, &p) != nil {
				return nil, nil, false
			}
			start, ok := from[p.ItemID]
			switch {
			case !ok && !known[p.ItemID] && k.at.seq >= f.attemptEnd:
				return nil, nil, false // its item's start never came, or was let go
			case !ok || !start.before(k.at):
				continue // a closed item's, an ended attempt's, or in its saved text already
			}
			b := texts[p.ItemID]
			if b == nil {
				b = &streamText{}
				texts[p.ItemID] = b
			}
			b.add(p.Field, p.Delta)
		}
	}
	for id, b := range texts {
		if it, ok := open[id]; ok {
			b.fill(&it)
			open[id] = it
			continue
		}
		if tails == nil {
			tails = map[string]*streamText{}
		}
		tails[id] = b
	}
	return open, tails, true
}
