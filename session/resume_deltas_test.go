package session

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"mspd/provider"
	"mspd/schema/msp"
)

// pacedModel streams one delta per value sent on feed and finishes when
// feed is closed.
type pacedModel struct{ feed chan string }

func (pacedModel) System() string { return "paced" }

func (m pacedModel) Stream(ctx context.Context, _ provider.Request, onText func(string)) (provider.Response, error) {
	for {
		select {
		case text, ok := <-m.feed:
			if !ok {
				return provider.Response{FinishReason: provider.FinishStop, Usage: &provider.Usage{InputTokens: 1, OutputTokens: 1}}, nil
			}
			onText(text)
		case <-ctx.Done():
			return provider.Response{}, ctx.Err()
		}
	}
}

// hookSub runs hook during its first replayed notification: events
// produced then arrive while the replay is under way.
type hookSub struct {
	*recSub
	once sync.Once
	hook func()
}

func (h *hookSub) Replay(ctx context.Context, n Notification) error {
	h.once.Do(h.hook)
	return h.recSub.Replay(ctx, n)
}

// cursors lists the viewCursor of every view event r received, view/gap
// markers as "gap(after,next)".
func cursors(t *testing.T, r *recSub) []string {
	var out []string
	for _, n := range r.all() {
		if n.Method == msp.NotifyViewGap {
			g := params[msp.ViewGapParams](t, n.Frame)
			out = append(out, "gap("+g.After+","+g.Next+")")
			continue
		}
		if n.Cursor != "" {
			out = append(out, n.Cursor)
		}
	}
	return out
}

func (r *recSub) waitCount(t *testing.T, method string, n int) []Notification {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		var got []Notification
		for _, x := range r.all() {
			if x.Method == method {
				got = append(got, x)
			}
		}
		if len(got) >= n {
			return got
		}
		select {
		case <-r.signal:
		case <-deadline:
			t.Fatalf("%d %s after 10s, want %d", len(got), method, n)
		}
	}
}

// suffixAfter returns the part of all strictly after cursor c.
func suffixAfter(t *testing.T, all []string, c string) []string {
	t.Helper()
	i := slices.Index(all, c)
	if i < 0 {
		t.Fatalf("cursor %s not in %v", c, all)
	}
	return all[i+1:]
}

// TestSubscribeMissesNoDelta: issue 7 defect 5 — a reader that subscribes
// from a durable cursor while a turn streams (and more deltas arrive while
// its replay runs), and one that resumes from a delta cursor in the middle
// of the answer, each get every event after their cursor exactly once, in
// order: the same sequence a reader that was there from the start got.
func TestSubscribeMissesNoDelta(t *testing.T) {
	model := pacedModel{feed: make(chan string)}
	m := newManager(t, openStore(t), model, mgrOpts{})
	full := newRecSub()
	sid := startSession(t, m, full)
	ack := startTurn(t, m, textTurn(sid, "stream please"))
	for _, d := range []string{"a", "b", "c"} {
		model.feed <- d
	}
	deltas := full.waitCount(t, msp.NotifyItemDelta, 3)
	mid := deltas[1].Cursor // after "b"

	fromMid := newRecSub()
	if err := m.attach(context.Background(), fromMid, sid, mid); err != nil {
		t.Fatal(err)
	}
	fromStart := &hookSub{recSub: newRecSub()}
	fromStart.hook = func() {
		// Streamed while fromStart replays the log.
		model.feed <- "d"
		model.feed <- "e"
		full.waitCount(t, msp.NotifyItemDelta, 5)
	}
	start := cursorIn(t, m.store, sid, 0)
	if err := m.attach(context.Background(), fromStart, sid, start); err != nil {
		t.Fatal(err)
	}
	model.feed <- "f"
	close(model.feed)
	full.waitTerminal(t, ack.TurnID)
	fromStart.waitTerminal(t, ack.TurnID)
	fromMid.waitTerminal(t, ack.TurnID)

	want := cursors(t, full)
	if got := cursors(t, fromStart.recSub); !slices.Equal(got, want) {
		t.Fatalf("subscribed from the start while streaming:\n got %v\nwant %v", got, want)
	}
	if got, want := cursors(t, fromMid), suffixAfter(t, want, mid); !slices.Equal(got, want) {
		t.Fatalf("resumed from delta cursor %s:\n got %v\nwant %v", mid, got, want)
	}
}

// TestResumeAfterDeltasAreGoneReportsTheHole: once a turn has ended its
// deltas are let go; a reader resuming from a cursor inside that turn
// gets a view/gap naming the hole — after its cursor, next the first event
// it is then given — never a silent skip. The same holds after a restart.
func TestResumeAfterDeltasAreGoneReportsTheHole(t *testing.T) {
	st := openStore(t)
	model := pacedModel{feed: make(chan string)}
	m := newManager(t, st, model, mgrOpts{})
	full := newRecSub()
	sid := startSession(t, m, full)
	ack := startTurn(t, m, textTurn(sid, "stream please"))
	model.feed <- "a"
	model.feed <- "b"
	mid := full.waitCount(t, msp.NotifyItemDelta, 2)[0].Cursor
	close(model.feed)
	full.waitTerminal(t, ack.TurnID)
	all := cursors(t, full)
	// The first event after the last delta is the answer's item/completed.
	last := full.waitCount(t, msp.NotifyItemDelta, 2)[1].Cursor
	rest := suffixAfter(t, all, last)
	want := append([]string{"gap(" + mid + "," + rest[0] + ")"}, rest...)

	check := func(m *Manager, label string) {
		t.Helper()
		late := newRecSub()
		if err := m.attach(context.Background(), late, sid, mid); err != nil {
			t.Fatal(err)
		}
		late.waitTerminal(t, ack.TurnID)
		if got := cursors(t, late); !slices.Equal(got, want) {
			t.Fatalf("%s: resumed from %s:\n got %v\nwant %v", label, mid, got, want)
		}
	}
	check(m, "after the turn")
	m.Close()
	check(newManager(t, st, model, mgrOpts{}), "after a restart")
}

// TestPartlyKeptDeltasReportTheHole: past the kept-delta bound the oldest
// deltas of a long answer are let go; a reader subscribing from before
// the answer gets a view/gap before the first delta it is given, so it
// never shows the answer with a piece missing.
func TestPartlyKeptDeltasReportTheHole(t *testing.T) {
	model := pacedModel{feed: make(chan string)}
	m := newManager(t, openStore(t), model, mgrOpts{})
	full := newRecSub()
	sid := startSession(t, m, full)
	ack := startTurn(t, m, textTurn(sid, "long answer"))
	chunk := strings.Repeat("x", 4<<10)
	n := maxKeptDeltaBytes/len(chunk) + 8
	for range n {
		model.feed <- chunk
	}
	full.waitCount(t, msp.NotifyItemDelta, n)

	late := newRecSub()
	start := cursorIn(t, m.store, sid, 0)
	if err := m.attach(context.Background(), late, sid, start); err != nil {
		t.Fatal(err)
	}
	close(model.feed)
	late.waitTerminal(t, ack.TurnID)
	got := cursors(t, late)
	gap := slices.IndexFunc(got, func(c string) bool { return strings.HasPrefix(c, "gap(") })
	if gap < 0 {
		t.Fatalf("no view/gap although the first deltas were let go: %d events", len(got))
	}
	all := cursors(t, full)
	// Before the gap: the durable start of the turn; after it, the tail
	// of the full sequence from the first kept delta on.
	if want := all[:gap]; !slices.Equal(got[:gap], want) {
		t.Fatalf("before the gap got %v, want %v", got[:gap], want)
	}
	if want := suffixAfter(t, all, got[gap-1]); slices.Equal(got[gap+1:], want) {
		t.Fatal("nothing was skipped, yet a gap was reported")
	}
	next := got[gap+1]
	if want := all[slices.Index(all, next):]; !slices.Equal(got[gap+1:], want) {
		t.Fatalf("after the gap got %d events, want the %d from %s on", len(got)-gap-1, len(want), next)
	}
	if wantGap := "gap(" + got[gap-1] + "," + next + ")"; got[gap] != wantGap {
		t.Fatalf("gap %s, want %s", got[gap], wantGap)
	}
}

// TestReplayFromTheStartAfterARestartHasNoGap: answers whose deltas died
// with an earlier process arrive whole in their item/completed; a reader
// replaying from the start is not told of holes it cannot notice.
func TestReplayFromTheStartAfterARestartHasNoGap(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	m := newManager(t, st, model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	runTurn(t, m, sub, textTurn(sid, "one"))
	runTurn(t, m, sub, textTurn(sid, "two"))
	m.Close()

	m2 := newManager(t, st, model, mgrOpts{})
	again := newRecSub()
	subscribe(t, m2, again, sid)
	var durable []string
	for _, n := range sub.all() {
		if n.Durable {
			durable = append(durable, n.Cursor)
		}
	}
	if got := cursors(t, again); !slices.Equal(got, durable) {
		t.Fatalf("replay after a restart:\n got %v\nwant the durable events %v", got, durable)
	}
}

// TestReplayKeepsEmittedAt: a durable event replayed from the log carries
// the emittedAtMs it was first sent with (within the clock's millisecond),
// so a client reopening a chat counts a backoff down from when the retry
// was scheduled.
func TestReplayKeepsEmittedAt(t *testing.T) {
	m := newManager(t, openStore(t), newHistModel(), mgrOpts{})
	live := newRecSub()
	sid := startSession(t, m, live)
	runTurn(t, m, live, textTurn(sid, "cut")) // with a retry notice
	emitted := func(n Notification) int64 {
		var f struct {
			EmittedAtMs int64 `json:"emittedAtMs"`
		}
		json.Unmarshal(n.Frame, &f)
		return f.EmittedAtMs
	}
	first := map[string]int64{}
	for _, n := range live.all() {
		if n.Durable {
			first[n.Cursor] = emitted(n)
		}
	}
	replayed := newRecSub()
	subscribe(t, m, replayed, sid)
	for _, n := range replayed.all() {
		want, ok := first[n.Cursor]
		if !ok {
			continue
		}
		if got := emitted(n); got < want-2 || got > want+2 {
			t.Fatalf("%s %s replayed with emittedAtMs %d, first sent with %d", n.Method, n.Cursor, got, want)
		}
	}
}

// TestRecordedAtReadsTheIDInPlace: the instant comes from the position's
// UUIDv7, in either case of hex; any other id, or none, gives nothing.
func TestRecordedAtReadsTheIDInPlace(t *testing.T) {
	at := time.UnixMilli(1796101959433)
	id := fmt.Sprintf("%08x-%04x-7abc-8def-0123456789ab", at.UnixMilli()>>16, at.UnixMilli()&0xffff)
	params := func(id string) []byte {
		return []byte(`{"sessionId":"s","sourceRange":{"first":{"id":"` + id + `","sequence":3}}}`)
	}
	for _, tt := range []struct {
		name string
		raw  []byte
		want time.Time
		ok   bool
	}{
		{"v7", params(id), at, true},
		{"v7 in capitals", params(strings.ToUpper(id)), at, true},
		{"v4", params(uuid.NewString()), time.Time{}, false},
		{"not hex", params("0190a8e2-7f3c-7b6e-9d2a-1c2b3c4d5e6f"[:9] + "zz3c-7b6e-9d2a-1c2b3c4d5e6f"), time.Time{}, false},
		{"cut short", params(id[:20]), time.Time{}, false},
		{"no position", []byte(`{"sessionId":"s"}`), time.Time{}, false},
	} {
		got, ok := recordedAt(tt.raw)
		if ok != tt.ok || !got.Equal(tt.want) {
			t.Errorf("%s: recordedAt = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	// A minted id reads back as the millisecond it was minted in.
	before := time.Now().Truncate(time.Millisecond)
	got, ok := recordedAt(params(newID()))
	if after := time.Now(); !ok || got.Before(before) || got.After(after) {
		t.Fatalf("a new id read as %v, %v; want within [%v, %v]", got, ok, before, after)
	}
}
