package session

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"mspd/store"
)

// cursorIn is the cursor of durable record seq of session sid as st holds
// it: of the epoch of the span holding seq.
func cursorIn(t testing.TB, st store.Store, sid string, seq int64) string {
	t.Helper()
	return cursorAs(t, st, "", sid, seq)
}

// cursorAs is cursorIn for principal's session sid, kept under its key.
func cursorAs(t testing.TB, st store.Store, principal, sid string, seq int64) string {
	t.Helper()
	row, err := st.Session(context.Background(), sessionKey(principal, sid))
	if err != nil {
		t.Fatal(err)
	}
	var s state
	if err := json.Unmarshal(row.State, &s); err != nil {
		t.Fatal(err)
	}
	return durableCursor(sid, epochAt(s.spans(), seq), seq)
}

func TestCursorRoundTrip(t *testing.T) {
	tests := []struct {
		text string
		c    cursor
	}{
		{"v:s:0", cursor{session: "s", seq: 0}},
		{"v:s:1", cursor{session: "s", seq: 1}},
		{"v:0190a8e2-7f3c-7b6e-9d2a-1c2b3c4d5e6f:42", cursor{session: "0190a8e2-7f3c-7b6e-9d2a-1c2b3c4d5e6f", seq: 42}},
		{"v:s:7.1", cursor{session: "s", seq: 7, sub: 1}},
		{"v:s:0.3", cursor{session: "s", seq: 0, sub: 3}},
		{"v:s:9223372036854775807.9223372036854775807", cursor{session: "s", seq: math.MaxInt64, sub: math.MaxInt64}},
		// Session ids with ':' or '.' are split at the last ':'.
		{"v:a:b:3", cursor{session: "a:b", seq: 3}},
		{"v:a:b:3.2", cursor{session: "a:b", seq: 3, sub: 2}},
		{"v:v:s:1:2", cursor{session: "v:s:1", seq: 2}},
		{"v:a.b:5", cursor{session: "a.b", seq: 5}},
		{"v:1.2:5.6", cursor{session: "1.2", seq: 5, sub: 6}},
		// An incarnation's epoch leads the position.
		{"v:s:0123456789ab-0", cursor{session: "s", epoch: "0123456789ab", seq: 0}},
		{"v:s:0123456789ab-42", cursor{session: "s", epoch: "0123456789ab", seq: 42}},
		{"v:s:0123456789ab-7.3", cursor{session: "s", epoch: "0123456789ab", seq: 7, sub: 3}},
		{"v:a:b:ffffffffffff-3", cursor{session: "a:b", epoch: "ffffffffffff", seq: 3}},
		{"v:a-b:0123456789ab-3", cursor{session: "a-b", epoch: "0123456789ab", seq: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			if got := tt.c.String(); got != tt.text {
				t.Fatalf("String() = %q, want %q", got, tt.text)
			}
			c, err := parseCursor(tt.text)
			if err != nil {
				t.Fatalf("parseCursor(%q): %v", tt.text, err)
			}
			if c != tt.c {
				t.Fatalf("parseCursor(%q) = %+v, want %+v", tt.text, c, tt.c)
			}
		})
	}
	if got := durableCursor("s", "", 12); got != "v:s:12" {
		t.Errorf("durableCursor = %q", got)
	}
	if got := durableCursor("s", "0123456789ab", 12); got != "v:s:0123456789ab-12" {
		t.Errorf("durableCursor = %q", got)
	}
	for range 3 {
		if e := newEpoch(); !validEpoch(e) {
			t.Errorf("newEpoch minted %q, which parsing refuses", e)
		}
	}
}

func TestParseCursorRejects(t *testing.T) {
	for _, text := range []string{
		"",
		"v",
		"v:",
		"v:s",
		"v::1",
		"v:s:",
		"x:s:1",
		"V:s:1",
		" v:s:1",
		"v:s:1 ",
		"v:s:01",
		"v:s:00",
		"v:s:-1",
		"v:s:+1",
		"v:s:1.0",
		"v:s:1.",
		"v:s:.1",
		"v:s:1.01",
		"v:s:1.-1",
		"v:s:1.+1",
		"v:s:1.2.3",
		"v:s:abc",
		"v:s:1e3",
		"v:s:0x10",
		"v:s:9223372036854775808",
		"v:s:1.9223372036854775808",
		"v:s:1:",
		"v:s:١",
		"v:s:-1",
		"v:s:0123456789ab-",
		"v:s:0123456789ab-01",
		"v:s:0123456789ab-1-2",
		"v:s:0123456789AB-1",
		"v:s:0123456789a-1",
		"v:s:0123456789abc-1",
		"v:s:0123456789ag-1",
		"v:s:0123456789ab.1",
		"v:s:1.0123456789ab-2",
	} {
		t.Run(text, func(t *testing.T) {
			if c, err := parseCursor(text); err == nil {
				t.Fatalf("parseCursor(%q) = %+v, want an error", text, c)
			} else if !strings.Contains(err.Error(), "cursor") {
				t.Fatalf("error %q does not say what failed", err)
			}
		})
	}
}

// FuzzParseCursor checks that parsing never panics, that whatever parses
// is in canonical form (String gives the input back), and that every valid
// cursor survives String then parse.
func FuzzParseCursor(f *testing.F) {
	f.Add("v:s:1", "s", int64(1), int64(0))
	f.Add("v:a:b:3.2", "a:b", int64(3), int64(2))
	f.Add("v:s:01", "x.y", int64(0), int64(9))
	f.Add("v:s:1.", ":", int64(math.MaxInt64), int64(math.MaxInt64))
	f.Add("v::1", "v:s:1", int64(-1), int64(-5))
	f.Add("v:s:0123456789ab-1.2", "s", int64(1), int64(2))
	f.Fuzz(func(t *testing.T, text, session string, seq, sub int64) {
		if c, err := parseCursor(text); err == nil {
			if got := c.String(); got != text {
				t.Fatalf("parseCursor(%q) = %+v, which prints as %q", text, c, got)
			}
			if c.session == "" || c.seq < 0 || c.sub < 0 {
				t.Fatalf("parseCursor(%q) accepted %+v", text, c)
			}
		}
		if session == "" || seq < 0 || sub < 0 {
			return // not a cursor mspd mints
		}
		for _, c := range []cursor{{session: session, seq: seq, sub: sub}, {session: session, epoch: newEpoch(), seq: seq, sub: sub}} {
			back, err := parseCursor(c.String())
			if err != nil {
				t.Fatalf("parseCursor(%q) of %+v: %v", c.String(), c, err)
			}
			if back != c {
				t.Fatalf("round trip of %+v gave %+v", c, back)
			}
		}
	})
}

// TestEpochSpans: a run opens a span at its first record unless it opened
// the last; a cursor belongs to its epoch's span only within the span's
// positions; past maxEpochSpans the oldest span goes and the next holds
// the positions before it.
func TestEpochSpans(t *testing.T) {
	spans := []epochSpan{{Epoch: "aaaaaaaaaaaa", Run: "r1"}}
	if got, opened := withRun(spans, "r1", 5); opened || len(got) != 1 {
		t.Fatalf("the run that opened the last span opened another: %+v", got)
	}
	spans, opened := withRun(spans, "r2", 5)
	if !opened || len(spans) != 2 || spans[1].From != 5 || spans[1].Run != "r2" || !validEpoch(spans[1].Epoch) {
		t.Fatalf("a new run's spans %+v", spans)
	}
	if _, opened := withRun(nil, "r2", 5); opened {
		t.Fatal("a session without epochs got a span")
	}
	first, second := spans[0].Epoch, spans[1].Epoch
	for _, tt := range []struct {
		c    cursor
		want bool
	}{
		{cursor{epoch: first, seq: 0}, true},
		{cursor{epoch: first, seq: 4, sub: 7}, true},
		{cursor{epoch: first, seq: 5}, false}, // the second span's
		{cursor{epoch: first, seq: 9}, false},
		{cursor{epoch: second, seq: 4}, false}, // before the second began
		{cursor{epoch: second, seq: 5}, true},
		{cursor{epoch: second, seq: 9, sub: 1}, true},
		{cursor{epoch: second, seq: 4, sub: 3}, true},  // streamed by the second run before its first record
		{cursor{epoch: second, seq: 3, sub: 1}, false}, // before it
		{cursor{epoch: first, seq: 4, sub: 3}, true},   // streamed by the first run after its last record
		{cursor{epoch: "bbbbbbbbbbbb", seq: 1}, false},
		{cursor{seq: 1}, false},
	} {
		if got := spanOf(spans, tt.c); got != tt.want {
			t.Errorf("spanOf(%+v) = %v, want %v", tt.c, got, tt.want)
		}
	}
	if epochAt(spans, 4) != first || epochAt(spans, 5) != second || epochAt(nil, 5) != "" {
		t.Errorf("epochAt over %+v", spans)
	}
	if !spanOf(nil, cursor{seq: 3}) || spanOf(nil, cursor{epoch: first, seq: 3}) {
		t.Error("a session without epochs takes only cursors without one")
	}
	for i := 0; len(spans) < maxEpochSpans; i++ {
		spans, _ = withRun(spans, fmt.Sprint("run", i), int64(10+i))
	}
	full := spans
	spans, _ = withRun(spans, "last", 1000)
	if len(spans) != maxEpochSpans || spans[0].Epoch != full[1].Epoch || spans[0].From != 0 || spans[len(spans)-1].From != 1000 {
		t.Fatalf("past the bound: %d spans, first %+v (dropped %+v)", len(spans), spans[0], full[0])
	}
	if spanOf(spans, cursor{epoch: first, seq: 1}) {
		t.Error("a cursor of the dropped span is still taken")
	}
	if full[1].From == 0 {
		t.Error("withRun changed the list it was given")
	}
}

// TestAStateOnlyCommitOpensTheRunsSpan: a run whose first commit writes no
// record (a turn stopped before its first request resumes with the state
// alone, then streams) opens its span there, and the ephemeral positions
// it mints after the head are of its epoch: a store restored from before
// them, whose next run mints the same positions, hands them out under
// another epoch, never again under the one a client may hold.
func TestAStateOnlyCommitOpensTheRunsSpan(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	sid, _ := oneTurnByAClosedRun(t, st, model)

	m2 := newManager(t, st, model, mgrOpts{})
	s, release, err := m2.acquire(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	s.mu.Lock()
	head, first := s.head, s.at(s.head, 0).epoch
	next := s.st.clone()
	err = s.appendLocked(context.Background(), nil, &next)
	streamed := s.at(head, 1)
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	spans := spansIn(t, st, sid)
	if len(spans) != 2 || spans[1].From != head+1 {
		t.Fatalf("spans after a state-only commit of a new run: %+v, want a second from %d", spans, head+1)
	}
	if streamed.epoch != spans[1].Epoch || streamed.epoch == first {
		t.Errorf("the new run mints %s after the head, want its own epoch %s (the first run's is %s)", streamed, spans[1].Epoch, first)
	}
	if _, err := s.checkCursor(streamed.String()); err != nil {
		t.Errorf("the new run's own cursor %s is refused: %v", streamed, err)
	}
}
