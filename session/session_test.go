package session

// Tests of appending and fanning out a session's events (session.go).

import (
	"strings"
	"testing"
)

// TestOutboundFramesStayUnderTheFrameCap: §1.2/§5 item 2 — "never
// emit a frame over the cap (10 MiB)". Events are encoded with
// json.Marshal, which HTML-escapes '<', '>' and '&' to six bytes each, and
// nothing bounds the size of an event. A turn/start whose input is 2 MiB of
// '<' (a 2 MiB inbound frame, a fifth of the cap) produces a ~12 MiB
// userMessage item/completed frame (and the echoed answer another), which
// a client with the standard 10 MiB read limit cannot receive: it drops the
// connection, reconnects, replays the same frame, and drops again.
func TestOutboundFramesStayUnderTheFrameCap(t *testing.T) {
	st := openStore(t)
	m := newManager(t, st, newHistModel(), mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	ack := startTurn(t, m, textTurn(sid, strings.Repeat("<", 2<<20)))
	sub.waitTerminal(t, ack.TurnID)
	const frameCap = 10 << 20
	for _, n := range sub.all() {
		if len(n.Frame) > frameCap {
			t.Fatalf("%s frame of %d bytes exceeds the %d-byte frame cap (input was %d bytes)", n.Method, len(n.Frame), frameCap, 2<<20)
		}
	}
}
