package session

import (
	"encoding/json"
	"math"
	"slices"
	"strings"

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

// streamed is what of a session's open items streamed after its head:
// items opened on an ephemeral event (open, whole, by item id), and text
// appended to items the log holds (tails, by item id).
type streamed struct {
	open  map[string]msp.Item
	tails map[string]string
}

// after returns the ephemeral events kept after durable record head; ok
// is false when some of them were let go or never arrived (a
// follower's). The events' frames are never changed: they may be read
// without the session's lock.
func (l *deltaLog) after(head int64) (kept []keptDelta, ok bool) {
	if (cursor{seq: head}).before(l.lost) {
		return nil, false
	}
	for i, k := range l.kept {
		if k.at.seq == head && k.at.sub > 0 {
			return slices.Clone(l.kept[i:]), true
		}
	}
	return nil, true
}

// streamedIn rebuilds what of the open items streamed in kept, the
// ephemeral events after one head; ok is false for an event it cannot
// read.
func streamedIn(kept []keptDelta) (s streamed, ok bool) {
	texts := map[string]*strings.Builder{} // by item id: an open item's, or a tail
	text := func(id string) *strings.Builder {
		b := texts[id]
		if b == nil {
			b = &strings.Builder{}
			texts[id] = b
		}
		return b
	}
	for _, k := range kept {
		var f struct{ Params json.RawMessage }
		if json.Unmarshal(k.frame, &f) != nil {
			return streamed{}, false
		}
		switch k.method {
		case msp.NotifyItemStarted:
			var p msp.ItemParams
			if json.Unmarshal(f.Params, &p) != nil {
				return streamed{}, false
			}
			if s.open == nil {
				s.open = map[string]msp.Item{}
			}
			s.open[p.Item.ItemID] = p.Item
			text(p.Item.ItemID).WriteString(deref(p.Item.Text))
		case msp.NotifyItemDelta:
			var p msp.ItemDeltaParams
			if json.Unmarshal(f.Params, &p) != nil {
				return streamed{}, false
			}
			text(p.ItemID).WriteString(p.Delta)
		}
	}
	for id, b := range texts {
		if it, ok := s.open[id]; ok {
			t := b.String()
			it.Text = &t
			s.open[id] = it
			continue
		}
		if s.tails == nil {
			s.tails = map[string]string{}
		}
		s.tails[id] = b.String()
	}
	return s, true
}
