package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/session"
)

// frameChecker validates frames against the MSP schema.
var frameChecker = func() *msp.Validator {
	v, err := msp.NewValidator()
	if err != nil {
		panic(err)
	}
	return v
}()

// deltaNote is a delta as the session layer fans it out.
func deltaNote(sid, item string, seq, sub int, text string) session.Notification {
	cursor := fmt.Sprintf("v:%s:%d.%d", sid, seq, sub)
	p, _ := msp.Marshal(msp.ItemDeltaParams{SessionID: sid, ViewCursor: cursor, ItemID: item, Delta: text})
	return session.Notification{SessionID: sid, Method: msp.NotifyItemDelta, Cursor: cursor,
		Frame: msp.EncodeNotification(msp.NotifyItemDelta, p, time.Now().UnixMilli())}
}

// durableNote is a durable event (a turn/completed) at seq.
func durableNote(sid string, seq int) session.Notification {
	cursor := fmt.Sprintf("v:%s:%d", sid, seq)
	frame := fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"turn/completed","params":{"sessionId":%q,"viewCursor":%q},"emittedAtMs":1}`, sid, cursor)
	return session.Notification{SessionID: sid, Method: msp.NotifyTurnCompleted, Cursor: cursor, Frame: frame, Durable: true}
}

// burstText is delta i of a burst.
func burstText(i int) string { return fmt.Sprintf("w%04d ", i) }

// readDeltas checks frames as a client reads them: every item/delta
// schema-valid and in cursor order; it returns the text they carry, the
// number of delta frames, the view/gap frames and the last cursor.
func readDeltas(t *testing.T, frames []string) (text string, deltas int, gaps []msp.ViewGapParams, last string) {
	t.Helper()
	checker := frameChecker.NewFrameChecker()
	var b strings.Builder
	for _, f := range frames {
		var n struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal([]byte(f), &n); err != nil {
			t.Fatalf("frame %q: %v", f, err)
		}
		switch n.Method {
		case msp.NotifyItemDelta:
			for _, fe := range checker.Check([]byte(f)) {
				t.Errorf("item/delta fails the schema at %q: %s\n%s", fe.Field, fe.Message, f)
			}
			var p msp.ItemDeltaParams
			json.Unmarshal(n.Params, &p)
			b.WriteString(p.Delta)
			deltas++
			last = p.ViewCursor
		case msp.NotifyViewGap:
			var g msp.ViewGapParams
			json.Unmarshal(n.Params, &g)
			gaps = append(gaps, g)
		}
	}
	return b.String(), deltas, gaps, last
}

// A reader that falls behind a burst of 2,000 deltas with the default
// queue (1,024 frames) gets them all, coalesced into fewer frames, and no
// view/gap: the first ones delta by delta, the rest merged into the
// newest queued delta, each merged frame schema-valid with the cursor of
// its last delta.
func TestOutboxCoalescesABurstForAReaderBehind(t *testing.T) {
	o := newOutbox(limitsFor(Config{QueueBytes: 8 << 20, QueueFrames: 1024}), gapFrame)
	o.subscribed("s", "v:s:1")
	var want strings.Builder
	const n = 2000
	for i := range n {
		d := deltaNote("s", "item-1", 1, i+1, burstText(i))
		o.pushView(d.SessionID, d.Cursor, d.Frame, false)
		want.WriteString(burstText(i))
	}
	end := durableNote("s", 2)
	o.pushView(end.SessionID, end.Cursor, end.Frame, true)
	text, frames, gaps, last := readDeltas(t, drain(t, o))
	if len(gaps) != 0 {
		t.Fatalf("a reader that is only behind got view/gap %+v", gaps)
	}
	if text != want.String() {
		t.Fatalf("text of %d frames: %d bytes, want the whole %d", frames, len(text), want.Len())
	}
	if frames >= n || frames < limitsFor(Config{QueueFrames: 1024}).coalesceAt {
		t.Fatalf("%d frames for %d deltas: want fewer, and the first ones whole", frames, n)
	}
	if lastCursor := fmt.Sprintf("v:s:1.%d", n); last != lastCursor {
		t.Fatalf("last cursor %s, want %s", last, lastCursor)
	}
	if dropped, _, _ := o.stats(); dropped != 0 || o.coalescedCount() != uint64(n-frames) {
		t.Fatalf("dropped %d, coalesced %d; want 0 and %d", dropped, o.coalescedCount(), n-frames)
	}
}

// A reader that stops reading still gets a view/gap: coalescing is
// bounded by the view events' share of the budget, past which deltas are
// dropped and the hole reported at the next durable event.
func TestOutboxStoppedReaderStillGetsAGap(t *testing.T) {
	o := newOutbox(limitsFor(Config{QueueBytes: 64 << 10, QueueFrames: 16}), gapFrame)
	o.subscribed("s", "v:s:1")
	word := strings.Repeat("x", 1000)
	for i := range 200 { // 200 KB: six times the view events' share
		d := deltaNote("s", "item-1", 1, i+1, word)
		o.pushView(d.SessionID, d.Cursor, d.Frame, false)
	}
	if _, peak := o.queuedBytes(); peak > 64<<10 {
		t.Fatalf("held %d bytes, over the budget", peak)
	}
	end := durableNote("s", 2)
	o.pushView(end.SessionID, end.Cursor, end.Frame, true)
	text, _, gaps, last := readDeltas(t, drain(t, o))
	if len(gaps) != 1 || gaps[0].Next != end.Cursor || gaps[0].After != last {
		t.Fatalf("view/gap %+v after the last delta delivered (%s), want one from it to %s", gaps, last, end.Cursor)
	}
	if len(text) >= 200*len(word) || len(text)%len(word) != 0 {
		t.Fatalf("%d bytes of text delivered: want whole deltas, not all of them", len(text))
	}
}

// Coalescing never crosses an item, a durable event, or a delta the writer
// has taken: only the view's newest event, while queued, absorbs a delta.
func TestOutboxCoalescesOnlyIntoTheNewestQueuedDeltaOfTheItem(t *testing.T) {
	push := func(o *outbox, n session.Notification) { o.pushView(n.SessionID, n.Cursor, n.Frame, n.Durable) }
	o := newOutbox(outboxLimits{budget: 1 << 20, reserve: 1 << 10, gapBytes: 1 << 19, gapFrames: 100, coalesceAt: 1}, gapFrame)
	o.subscribed("s", "v:s:1")
	push(o, deltaNote("s", "a", 1, 1, "a1 "))
	push(o, deltaNote("s", "a", 1, 2, "a2 ")) // behind: merged into a1
	push(o, deltaNote("s", "b", 1, 3, "b1 ")) // another item: a frame of its own
	push(o, durableNote("s", 2))
	push(o, deltaNote("s", "b", 2, 1, "b2 ")) // after a durable event: its own frame
	got := drain(t, o)
	push(o, deltaNote("s", "b", 2, 2, "b3 ")) // the writer took b2: its own frame
	got = append(got, drain(t, o)...)
	var texts []string
	for _, f := range got {
		var n struct {
			Method string              `json:"method"`
			Params msp.ItemDeltaParams `json:"params"`
		}
		json.Unmarshal([]byte(f), &n)
		texts = append(texts, n.Method+":"+n.Params.Delta)
	}
	want := "item/delta:a1 a2 |item/delta:b1 |turn/completed:|item/delta:b2 |item/delta:b3 "
	if strings.Join(texts, "|") != want {
		t.Fatalf("frames %q\nwant %q", strings.Join(texts, "|"), want)
	}
	// The merged frame carries the later cursor.
	if _, _, _, last := readDeltas(t, got[:1]); last != "v:s:1.2" {
		t.Fatalf("merged frame cursor %s, want v:s:1.2", last)
	}
}

// parseDelta reads mspd's own encoding and its merged frames, and nothing
// else.
func TestParseDelta(t *testing.T) {
	plain := deltaNote("s", "i", 3, 7, `he said "hi"\n`).Frame
	d, ok := parseDelta(plain)
	if !ok || string(d.itemID) != `"i"` || string(d.cursor) != `"v:s:3.7"` || string(d.text) != `he said \"hi\"\\n` {
		t.Fatalf("parseDelta(%s) = %+v, %v", plain, d, ok)
	}
	if fast, ok := parseDeltaOf(plain, "s", "v:s:3.7"); !ok || fmt.Sprint(fast) != fmt.Sprint(d) {
		t.Fatalf("parseDeltaOf = %+v, %v; parseDelta %+v", fast, ok, d)
	}
	for _, other := range [][2]string{{"t", "v:s:3.7"}, {"s", "v:s:3.8"}} {
		if _, ok := parseDeltaOf(plain, other[0], other[1]); !ok {
			t.Fatalf("parseDeltaOf(%v) refused a frame parseDelta reads", other)
		}
	}
	merged, m := startMerge(d, 0)
	merged = appendMerged(merged, d)
	if _, ok := parseDelta(merged); !ok || m.textEnd == 0 {
		t.Fatalf("a merged frame does not parse: %s", merged)
	}
	for _, bad := range []string{
		`ev c1`,
		`{"jsonrpc":"2.0","method":"item/delta","params":{"sessionId":"s","viewCursor":"c","itemId":"i","field":"text","delta":"x"},"emittedAtMs":1}`,
		`{"jsonrpc":"2.0","method":"item/delta","params":{"sessionId":"s","viewCursor":"c","itemId":"i"},"emittedAtMs":1}`,
		`{"jsonrpc":"2.0","method":"item/delta","params":{"sessionId":"s","viewCursor":"c","itemId":"i","delta":"x","delta":"y"},"emittedAtMs":1}`,
		`{"jsonrpc":"2.0","method":"item/delta","params":{"sessionId":"s","viewCursor":"c","itemId":"i","delta":"x"},"emittedAtMs":1} `,
		`{"jsonrpc":"2.0","method":"item/delta","params":{"sessionId":"s","viewCursor":"c","itemId":"i","delta":"x},"emittedAtMs":1}`,
		`{"jsonrpc":"2.0","method":"item/delta","params":{"sessionId":"s","viewCursor":"c","itemId":1,"delta":"x"},"emittedAtMs":1}`,
	} {
		if _, ok := parseDelta([]byte(bad)); ok {
			t.Errorf("parseDelta accepted %s", bad)
		}
		if _, ok := parseDeltaOf([]byte(bad), "s", "c"); ok {
			t.Errorf("parseDeltaOf accepted %s", bad)
		}
	}
}

// gatedTransport is a reader that is slow, then fast: every write waits
// until release is closed, then everything written is recorded.
type gatedTransport struct {
	release chan struct{}
	mu      sync.Mutex
	frames  []string
	writes  int
}

func (t *gatedTransport) ReadFrame(ctx context.Context, _ admitter) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (t *gatedTransport) WriteFrame(ctx context.Context, frame []byte) error {
	return t.WriteFrames(ctx, [][]byte{frame})
}

func (t *gatedTransport) WriteFrames(ctx context.Context, frames [][]byte) error {
	select {
	case <-t.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.writes++
	for _, f := range frames {
		t.frames = append(t.frames, string(f))
	}
	return nil
}

func (t *gatedTransport) Close(string, bool) error { return nil }

// TestBurstToASlowThenFastReaderArrivesWhole: through a connection's
// writer, a burst that arrives while the reader is slow (its first write
// blocks) reaches it whole once it reads again: no view/gap, fewer frames
// than deltas, written a batch at a time.
func TestBurstToASlowThenFastReaderArrivesWhole(t *testing.T) {
	srv := &Server{cfg: Config{QueueBytes: 8 << 20, QueueFrames: 1024, WriteTimeout: time.Minute}}
	tr := &gatedTransport{release: make(chan struct{})}
	c := newConn(srv, tr, slog.New(slog.DiscardHandler))
	c.out.serve(func() { go c.writeLoop() })
	c.Subscribed("s", "v:s:1")
	var want strings.Builder
	const n = 2000
	for i := range n {
		c.Deliver(deltaNote("s", "item-1", 1, i+1, burstText(i)))
		want.WriteString(burstText(i))
	}
	c.Deliver(durableNote("s", 2))
	close(tr.release)
	c.out.close()
	select {
	case <-c.out.drained:
	case <-time.After(30 * time.Second):
		t.Fatal("the writer did not drain the outbox")
	}
	tr.mu.Lock()
	frames, writes := tr.frames, tr.writes
	tr.mu.Unlock()
	text, deltas, gaps, _ := readDeltas(t, frames)
	if len(gaps) != 0 || text != want.String() {
		t.Fatalf("%d view/gap, %d of %d bytes of text", len(gaps), len(text), want.Len())
	}
	if deltas >= n || writes >= len(frames) {
		t.Fatalf("%d frames for %d deltas in %d writes: want fewer frames than deltas, several a write", deltas, n, writes)
	}
}

// An event larger than the budget is queued behind the small ones ahead
// of it, and the small ones right behind it (a turn's last events,
// written in one commit with it) are queued behind it: none is dropped
// for a reader that keeps up, which no later event might ever tell.
func TestOutboxEventsBehindAnOversizedFrameAreKept(t *testing.T) {
	o := newOutbox(limitsFor(Config{QueueBytes: 64 << 10, QueueFrames: 16}), gapFrame)
	o.subscribed("s", "v:s:1")
	big := durableNote("s", 3)
	big.Frame = []byte(strings.Replace(string(big.Frame), `"params":{`, `"params":{"text":"`+strings.Repeat("y", 2<<20)+`",`, 1))
	for _, n := range []session.Notification{durableNote("s", 2), big, durableNote("s", 4), durableNote("s", 5)} {
		o.pushView(n.SessionID, n.Cursor, n.Frame, n.Durable)
	}
	got := drain(t, o)
	if len(got) != 4 || !strings.Contains(got[3], `"viewCursor":"v:s:5"`) {
		var short []string
		for _, f := range got {
			short = append(short, f[:min(len(f), 80)])
		}
		t.Fatalf("frames %q: want the large event and both after it", short)
	}
	if dropped, gaps, _ := o.stats(); dropped != 0 || gaps != 0 {
		t.Fatalf("dropped %d, gaps %d", dropped, gaps)
	}
	// Behind it, the limits still hold: a reader that does not read drops
	// what exceeds them, and learns of it.
	o.pushView(big.SessionID, "v:s:6", big.Frame, true)
	for i := range 100 {
		d := deltaNote("s", "item-2", 6, i+1, strings.Repeat("z", 1000))
		o.pushView(d.SessionID, d.Cursor, d.Frame, false)
	}
	if _, held := o.queuedBytes(); held > len(big.Frame)+64<<10 {
		t.Fatalf("held %d bytes: over the budget besides the large frame", held)
	}
	if dropped, _, _ := o.stats(); dropped == 0 {
		t.Fatal("nothing dropped behind the large frame for a reader that does not read")
	}
}
