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
// id is never taken as a position in the new one. Sessions made before
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
	b.WriteString("v:")
	b.WriteString(c.session)
	b.WriteByte(':')
	if c.epoch != "" {
		b.WriteString(c.epoch)
		b.WriteByte('-')
	}
	b.WriteString(strconv.FormatInt(c.seq, 10))
	if c.sub != 0 {
		b.WriteByte('.')
		b.WriteString(strconv.FormatInt(c.sub, 10))
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

// at is the position seq (sub, after it) in s's current incarnation.
func (s *session) at(seq, sub int64) cursor {
	return cursor{session: s.id, epoch: s.epoch, seq: seq, sub: sub}
}

// durable is the cursor of s's durable record seq.
func (s *session) durable(seq int64) string { return s.at(seq, 0).String() }
