package session

import (
	"fmt"
	"strconv"
	"strings"
)

// A cursor names a position in a session's view: v:<sessionId>:<seq> for a
// durable record, v:<sessionId>:<seq>.<n> for the n-th ephemeral event after
// durable record seq. Clients treat cursors as opaque strings.
type cursor struct {
	session string
	seq     int64
	sub     int64 // 0 for a durable position
}

func (c cursor) String() string {
	if c.sub == 0 {
		return "v:" + c.session + ":" + strconv.FormatInt(c.seq, 10)
	}
	return "v:" + c.session + ":" + strconv.FormatInt(c.seq, 10) + "." + strconv.FormatInt(c.sub, 10)
}

func durableCursor(sessionID string, seq int64) string {
	return cursor{session: sessionID, seq: seq}.String()
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
