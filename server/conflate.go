package server

import "bytes"

// Coalescing deltas needs a delta's item and text. The session layer hands
// the outbox whole frames, encoded once for every subscriber; rather than
// widen that interface for one consumer, the outbox reads the two members
// back from the frame. An item/delta frame is small and flat, and the
// parse below is a single pass that accepts only the exact shape mspd
// encodes — anything else (an extra member such as "field", another
// encoder's spacing) is simply not coalesced, never misread.

// deltaPrefix starts every item/delta frame msp.EncodeNotification makes.
var deltaPrefix = []byte(`{"jsonrpc":"2.0","method":"item/delta","params":{`)

// deltaParts are the members of an item/delta frame, as they appear in it:
// sessionID, itemID and cursor with their quotes, text without them
// (still escaped), emitted the digits of emittedAtMs.
type deltaParts struct {
	sessionID, itemID, cursor, text, emitted []byte
}

// parseDelta reads an item/delta frame whose params are exactly sessionId,
// viewCursor, itemId and delta, all strings, in any order.
func parseDelta(frame []byte) (deltaParts, bool) {
	var d deltaParts
	rest, ok := bytes.CutPrefix(frame, deltaPrefix)
	if !ok {
		return d, false
	}
	seen := 0
	for {
		key, val, r, ok := stringMember(rest)
		if !ok {
			return d, false
		}
		var dst *[]byte
		switch string(key) {
		case "sessionId":
			dst = &d.sessionID
		case "viewCursor":
			dst = &d.cursor
		case "itemId":
			dst = &d.itemID
		case "delta":
			dst = &d.text
			val = val[1 : len(val)-1]
		default:
			return d, false
		}
		if *dst != nil {
			return d, false // a member twice
		}
		*dst = val
		seen++
		if len(r) == 0 {
			return d, false
		}
		rest = r[1:]
		if r[0] == '}' {
			break
		}
		if r[0] != ',' {
			return d, false
		}
	}
	rest, ok = bytes.CutPrefix(rest, []byte(`,"emittedAtMs":`))
	if !ok || seen != 4 {
		return d, false
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || n+1 != len(rest) || rest[n] != '}' {
		return d, false
	}
	d.emitted = rest[:n]
	return d, true
}

// parseDeltaOf is parseDelta for a frame of session sessionID at cursor,
// reading the layout msp.EncodeNotification gives item/delta params
// (sessionId, viewCursor, itemId, delta) without scanning the text byte
// by byte: it runs to the fixed tail "},"emittedAtMs":N} and holds no
// quote. Any other frame takes parseDelta.
func parseDeltaOf(frame []byte, sessionID, cursor string) (deltaParts, bool) {
	var d deltaParts
	rest, ok := bytes.CutPrefix(frame, deltaPrefix)
	if !ok {
		return parseDelta(frame)
	}
	if d.sessionID, rest, ok = knownMember(rest, `"sessionId":`, sessionID); !ok {
		return parseDelta(frame)
	}
	if d.cursor, rest, ok = knownMember(rest, `,"viewCursor":`, cursor); !ok {
		return parseDelta(frame)
	}
	rest, ok = bytes.CutPrefix(rest, []byte(`,"itemId":`))
	if !ok {
		return parseDelta(frame)
	}
	if d.itemID, rest, ok = quoted(rest); !ok {
		return parseDelta(frame)
	}
	rest, ok = bytes.CutPrefix(rest, []byte(`,"delta":"`))
	n := len(rest) - 1 // the closing brace
	for n > 0 && rest[n-1] >= '0' && rest[n-1] <= '9' {
		n--
	}
	const tail = `"},"emittedAtMs":`
	if !ok || n == len(rest)-1 || rest[len(rest)-1] != '}' || n < len(tail) || string(rest[n-len(tail):n]) != tail {
		return parseDelta(frame)
	}
	d.text, d.emitted = rest[:n-len(tail)], rest[n:len(rest)-1]
	if bytes.IndexByte(d.text, '"') >= 0 {
		// Escaped quotes, or another member: the scan tells which.
		return parseDelta(frame)
	}
	return d, true
}

// knownMember reads key followed by the string value as its quoted bytes
// at the start of b; val is that string with its quotes (ids and cursors
// need no escaping).
func knownMember(b []byte, key, value string) (val, rest []byte, ok bool) {
	b, ok = bytes.CutPrefix(b, []byte(key))
	if !ok || len(b) < len(value)+2 || b[0] != '"' || string(b[1:1+len(value)]) != value || b[1+len(value)] != '"' {
		return nil, nil, false
	}
	return b[:len(value)+2], b[len(value)+2:], true
}

// stringMember reads `"key":"value"` at the start of b; val keeps its
// quotes. rest follows the value.
func stringMember(b []byte) (key, val, rest []byte, ok bool) {
	key, rest, ok = quoted(b)
	if !ok || len(rest) == 0 || rest[0] != ':' {
		return nil, nil, nil, false
	}
	val, rest, ok = quoted(rest[1:])
	if !ok {
		return nil, nil, nil, false
	}
	return key[1 : len(key)-1], val, rest, true
}

// quoted reads a JSON string at the start of b, quotes included.
func quoted(b []byte) (str, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return b[:i+1], b[i+1:], true
		}
	}
	return nil, nil, false
}

// mergedDelta is a coalesced frame the outbox built: its layout puts the
// text last but the cursor, so that more text is appended in place:
//
//	{"jsonrpc":"2.0","method":"item/delta","params":{"sessionId":S,"itemId":I,"delta":"TEXT","viewCursor":C},"emittedAtMs":N}
type mergedDelta struct {
	itemID  string // with its quotes
	textEnd int    // offset just past TEXT
}

// startMerge builds the head of a merged frame from the first delta, up
// to the end of its text, with room for more.
func startMerge(first deltaParts, more int) ([]byte, *mergedDelta) {
	const (
		open  = `{"jsonrpc":"2.0","method":"item/delta","params":{"sessionId":`
		item  = `,"itemId":`
		delta = `,"delta":"`
	)
	n := len(open) + len(first.sessionID) + len(item) + len(first.itemID) + len(delta) + len(first.text)
	b := make([]byte, 0, 2*(n+more+len(first.cursor)+64))
	b = append(b, open...)
	b = append(b, first.sessionID...)
	b = append(b, item...)
	b = append(b, first.itemID...)
	b = append(b, delta...)
	b = append(b, first.text...)
	return b, &mergedDelta{itemID: string(first.itemID), textEnd: len(b)}
}

// The parts of a merged frame after its text.
const (
	mergedCursor  = `","viewCursor":`
	mergedEmitted = `},"emittedAtMs":`
)

// mergedSuffixLen is how long a merged frame's tail after the text is
// with next's cursor and time.
func mergedSuffixLen(next deltaParts) int {
	return len(mergedCursor) + len(next.cursor) + len(mergedEmitted) + len(next.emitted) + 1
}

// appendMerged appends next's text, cursor and time to a merged frame cut
// at the end of its text.
func appendMerged(b []byte, next deltaParts) []byte {
	b = append(b, next.text...)
	b = append(b, mergedCursor...)
	b = append(b, next.cursor...)
	b = append(b, mergedEmitted...)
	b = append(b, next.emitted...)
	return append(b, '}')
}
