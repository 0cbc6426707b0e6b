package session

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// A cursor names a position in a session's view: v:<sessionId>:<epoch>-<seq>
// for a durable record, v:<sessionId>:<epoch>-<seq>.<n> for the n-th
// ephemeral event after durable record seq. The epoch names the
// incarnation of the session id (a session/start or session/fork made
// it), so a cursor of a session deleted and started again under the same
// id is never taken as a position in the new one, and within it the
// process run that wrote the position (see epochSpan). Sessions made before
// epochs existed have none: their cursors keep the old form,
// v:<sessionId>:<seq>[.<n>]. Clients treat cursors as opaque strings.
type cursor struct {
	session string
	epoch   string // "" for a session made before epochs
	seq     int64
	sub     int64 // 0 for a durable position
}

func (c cursor) String() string {
	var b strings.Builder
	// Sized once: a replay renders a cursor for every record.
	b.Grow(len("v::-.") + len(c.session) + len(c.epoch) + 2*20)
	b.WriteString("v:")
	b.WriteString(c.session)
	b.WriteByte(':')
	if c.epoch != "" {
		b.WriteString(c.epoch)
		b.WriteByte('-')
	}
	var digits [20]byte
	b.Write(strconv.AppendInt(digits[:0], c.seq, 10))
	if c.sub != 0 {
		b.WriteByte('.')
		b.Write(strconv.AppendInt(digits[:0], c.sub, 10))
	}
	return b.String()
}

func durableCursor(sessionID, epoch string, seq int64) string {
	return cursor{session: sessionID, epoch: epoch, seq: seq}.String()
}

// epochBytes is the size of a cursor epoch's randomness: 48 bits, so two
// incarnations of one session id share an epoch with odds of 2^-48.
const epochBytes = 6

// newEpoch mints the cursor epoch of a new incarnation of a session id.
func newEpoch() string {
	b := make([]byte, epochBytes)
	rand.Read(b) // never fails (crypto/rand panics rather)
	return hex.EncodeToString(b)
}

// validEpoch tells whether e is an epoch as newEpoch mints them.
func validEpoch(e string) bool {
	if len(e) != 2*epochBytes {
		return false
	}
	for i := 0; i < len(e); i++ {
		if c := e[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// parseCursor parses a cursor of any session.
func parseCursor(s string) (cursor, error) {
	rest, ok := strings.CutPrefix(s, "v:")
	if !ok {
		return cursor{}, fmt.Errorf("cursor %q: not a view cursor", s)
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return cursor{}, fmt.Errorf("cursor %q: no sequence", s)
	}
	c := cursor{session: rest[:i]}
	pos := rest[i+1:]
	if epoch, at, hasEpoch := strings.Cut(pos, "-"); hasEpoch {
		if !validEpoch(epoch) {
			return cursor{}, fmt.Errorf("cursor %q: bad epoch", s)
		}
		c.epoch, pos = epoch, at
	}
	seqText, subText, hasSub := strings.Cut(pos, ".")
	seq, err := strconv.ParseInt(seqText, 10, 64)
	if err != nil || seq < 0 || strconv.FormatInt(seq, 10) != seqText {
		return cursor{}, fmt.Errorf("cursor %q: bad sequence", s)
	}
	c.seq = seq
	if hasSub {
		sub, err := strconv.ParseInt(subText, 10, 64)
		if err != nil || sub < 1 || strconv.FormatInt(sub, 10) != subText {
			return cursor{}, fmt.Errorf("cursor %q: bad sub-position", s)
		}
		c.sub = sub
	}
	return c, nil
}

// epochSpan is a run of a session's view whose cursors carry one epoch:
// the positions from durable record From on, up to the next span's From,
// and the ephemeral ones after durable record From-1 that the run opening
// it mints (a run may stream before it writes a record: a turn stopped
// before its first request resumes with a state-only commit, then its
// answer's deltas). The run's first commit opens its span, so the span is
// durable before any position under it is handed out.
// An incarnation's first span starts at 0 (a session/start or fork mints
// it); each process that goes on writing the session opens a new one at
// its first record, so a store restored from a backup, whose sessions
// fall back to an earlier head, never hands out again a position a
// client was given after that point: those positions were of a span the
// backup does not hold.
type epochSpan struct {
	Epoch string `json:"epoch"`
	From  int64  `json:"from"`
	// Run is the manager (process) run that opened it; "" for an
	// incarnation's epoch an older build minted.
	Run string `json:"run,omitempty"`
}

// maxEpochSpans bounds a session's spans. Past it the oldest goes, and
// the next stands for the positions before it: those of the dropped
// span's cursors are refused missingAnchor (no cursor the next one's
// epoch could name was ever handed out for them).
const maxEpochSpans = 64

// spanAt is the span of spans holding position seq; nil spans (a session
// made before epochs) have the empty epoch.
func spanAt(spans []epochSpan, seq int64) int {
	for i := len(spans) - 1; i > 0; i-- {
		if spans[i].From <= seq {
			return i
		}
	}
	return 0
}

// epochAt is the epoch of position seq among spans.
func epochAt(spans []epochSpan, seq int64) string {
	if len(spans) == 0 {
		return ""
	}
	return spans[spanAt(spans, seq)].Epoch
}

// withRun returns spans with a span opened by run at from, unless run
// opened the last one already (or the session has no epochs): it is what
// a run's first record is minted under. opened tells whether it did.
func withRun(spans []epochSpan, run string, from int64) (_ []epochSpan, opened bool) {
	if len(spans) == 0 || spans[len(spans)-1].Run == run {
		return spans, false
	}
	out := make([]epochSpan, 0, min(len(spans)+1, maxEpochSpans))
	if len(spans) >= maxEpochSpans {
		spans = spans[len(spans)-maxEpochSpans+1:]
	}
	out = append(out, spans...)
	out[0].From = 0
	return append(out, epochSpan{Epoch: newEpoch(), From: from, Run: run}), true
}

// firstSpan is the span of a new incarnation (a session/start, a fork):
// its records, copied ones included, are of this run.
func (m *Manager) firstSpan() []epochSpan {
	return []epochSpan{{Epoch: newEpoch(), Run: m.run}}
}

// spanList is the session's spans now. The list is replaced, never
// changed in place, so it may be read without s.mu.
func (s *session) spanList() []epochSpan {
	if p := s.spans.Load(); p != nil {
		return *p
	}
	return nil
}

// setSpans makes spans the session's. s.mu must be held (or s not yet
// published).
func (s *session) setSpans(spans []epochSpan) { s.spans.Store(&spans) }

// at is the position seq (sub, after it) in s's current incarnation, of
// the epoch of the span holding it. An ephemeral position is of the span
// of the next durable one: the run minting it has opened its span at its
// first commit, from the next record on, and mints it under that.
func (s *session) at(seq, sub int64) cursor {
	return cursor{session: s.id, epoch: epochAt(s.spanList(), ephemeralSpanSeq(seq, sub)), seq: seq, sub: sub}
}

// ephemeralSpanSeq is the durable position whose span an ephemeral
// position (seq, sub > 0) is minted under: the next record's.
func ephemeralSpanSeq(seq, sub int64) int64 {
	if sub > 0 {
		return seq + 1
	}
	return seq
}

// durable is the cursor of s's durable record seq.
func (s *session) durable(seq int64) string { return s.at(seq, 0).String() }

// spanOf tells which span of spans cursor c's position belongs to: the
// one of its epoch, if that holds the position; ok is false for a cursor
// of another incarnation, of a span dropped or not held here (a store
// restored from a backup), or of a position its span never reached.
func spanOf(spans []epochSpan, c cursor) (ok bool) {
	if len(spans) == 0 {
		return c.epoch == ""
	}
	for i, sp := range spans {
		if sp.Epoch != c.epoch {
			continue
		}
		holds := func(seq int64) bool { return sp.From <= seq && (i == len(spans)-1 || seq < spans[i+1].From) }
		// An ephemeral position was minted under the span of the record
		// after it (this run's) or, by a run that wrote that record, of
		// the one before.
		return holds(c.seq) || (c.sub > 0 && holds(c.seq+1))
	}
	return false
}
