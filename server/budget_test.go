package server

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mspd/session"
)

// floodTransport is a client that sends its frames and never reads: every
// write blocks until its context ends or the transport closes. drained is
// closed once the server asks for a frame after the last one, i.e. once
// nothing held its read loop back.
type floodTransport struct {
	*wedgedTransport
	read    atomic.Int64
	drained chan struct{}
	once    sync.Once
}

func newFlood(frames ...string) *floodTransport {
	return &floodTransport{wedgedTransport: newWedged(frames...), drained: make(chan struct{})}
}

func (t *floodTransport) ReadFrame(ctx context.Context, in admitter) ([]byte, error) {
	if len(t.in) == 0 {
		t.once.Do(func() { close(t.drained) })
	}
	f, err := t.wedgedTransport.ReadFrame(ctx, in)
	if err == nil {
		t.read.Add(1)
	}
	return f, err
}

// TestFloodOfPagesToAClientThatDoesNotRead: forty view/page requests on a
// session with a 4 MiB log, from a client that never reads. Every answer
// used to be queued at once (the read loop kept dispatching while the
// writer was stuck): 1 MiB a page, without bound, for one connection. The
// outbox must stay within its budget: the connection stops reading
// instead, and once its queue stays full past the write timeout it is
// closed as wedged.
func TestFloodOfPagesToAClientThatDoesNotRead(t *testing.T) {
	m, head := testManager(t)
	sid := startWithTurnsText(t, m, head, nopSub{}, 4, strings.Repeat("x", 1<<20))

	const budget = 2 << 20
	srv, err := New(m, Config{QueueBytes: budget, WriteTimeout: time.Second, PingInterval: -1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	frames := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"initialized"}`,
	}
	const pages = 40
	for i := range pages {
		// Two records from the start of a turn: its 1 MiB user message.
		after := cursorAt(t, m, sid, int64(3*(i%4)))
		frames = append(frames, `{"jsonrpc":"2.0","id":`+itoa(100+i)+`,"method":"view/page","params":{"sessionId":"`+sid+`","cursor":"`+after+`","limit":2}}`)
	}
	tr := newFlood(frames...)
	c := newConn(srv, tr, slog.New(slog.DiscardHandler))
	served := make(chan struct{})
	go func() { c.serve(context.Background()); close(served) }()

	select {
	case <-served: // closed as wedged
	case <-tr.drained:
		// Every request was read while nothing was written: wait for the
		// write timeout to close it, so the high-water mark is final.
		<-served
	case <-time.After(60 * time.Second):
		t.Fatal("the connection to a client that never reads was never closed")
	}
	_, peak := c.out.queuedBytes()
	if peak > budget {
		t.Fatalf("the outbox held %d bytes (%.1f MiB) for a client that never reads; budget %d (%d of %d requests read)",
			peak, float64(peak)/(1<<20), budget, tr.read.Load(), len(frames))
	}
	if n := tr.read.Load(); n == int64(len(frames)) {
		t.Fatalf("all %d requests were read and dispatched with no answer written", n)
	}
}

// within reports whether f returns before the upper bound.
func within(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never returned", what)
		return nil
	}
}

func frame(n int, tag string) []byte { return []byte(tag + strings.Repeat(".", n-len(tag))) }

// A response waits for room under the request limit; while it waits, view
// events yield to it (a hole opens) instead of taking the room it needs.
func TestOutboxResponseWaitsForRoom(t *testing.T) {
	o := newOutbox(outboxLimits{budget: 100, reserve: 20, gapBytes: 50, gapFrames: 10}, testGap)
	o.subscribed("s", "c0")
	ctx := context.Background()
	if err := o.pushResponse(ctx, frame(60, "r1")); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() { second <- o.pushResponse(ctx, frame(40, "r2")) }()
	// Wait until it is waiting, then offer a view event: it must yield.
	for {
		o.mu.Lock()
		waiting := o.respWaiting
		o.mu.Unlock()
		if waiting == 1 {
			break
		}
		runtime.Gosched()
	}
	// The waiting response is held, so it counts (/metrics shows it).
	if held := o.inFlightBytes(); held != 100 {
		t.Fatalf("%d bytes in flight with 60 queued and 40 waiting", held)
	}
	durable(o, "c1") // would fit, but a response waits: dropped
	if got := pop(t, o); got != string(frame(60, "r1")) {
		t.Fatalf("first %q", got)
	}
	if err := within(t, "the waiting response", func() error { return <-second }); err != nil {
		t.Fatal(err)
	}
	// c1 was dropped and kept as the hole's tail, which already counted:
	// it goes out with its gap as soon as r1 leaves, then r2.
	wantFrames(t, drain(t, o), "gap s c0→c1", "ev c1", string(frame(40, "r2")))
	if _, peak := o.queuedBytes(); peak > 100 {
		t.Fatalf("peak %d over the budget", peak)
	}
}

// The read loop reads on only while the queue is under the request limit.
func TestOutboxReadWaitsUnderTheLimit(t *testing.T) {
	o := newOutbox(outboxLimits{budget: 100, reserve: 20, gapBytes: 50, gapFrames: 10}, testGap)
	ctx := context.Background()
	if err := o.waitReadable(ctx); err != nil {
		t.Fatal(err)
	}
	o.pushResponse(ctx, frame(50, "a"))
	o.pushResponse(ctx, frame(30, "b")) // 80: at the limit
	readable := make(chan error, 1)
	go func() { readable <- o.waitReadable(ctx) }()
	select {
	case err := <-readable:
		t.Fatalf("readable at the limit: %v", err)
	default:
	}
	pop(t, o)
	if err := within(t, "waitReadable", func() error { return <-readable }); err != nil {
		t.Fatal(err)
	}
}

// A wait that sees nothing leave the queue for the stall time reports the
// peer wedged; one that sees progress keeps waiting.
func TestOutboxStalledWaitIsWedged(t *testing.T) {
	o := newOutbox(outboxLimits{budget: 100, reserve: 20, gapBytes: 50, gapFrames: 10, stall: 50 * time.Millisecond}, testGap)
	ctx := context.Background()
	o.pushResponse(ctx, frame(80, "full"))
	err := within(t, "a stalled wait", func() error { return o.pushResponse(ctx, frame(10, "late")) })
	if !errors.Is(err, errWedged) {
		t.Fatalf("stalled pushResponse: %v, want errWedged", err)
	}
	if err := within(t, "a stalled read", func() error { return o.waitReadable(ctx) }); !errors.Is(err, errWedged) {
		t.Fatalf("stalled waitReadable: %v, want errWedged", err)
	}
}

// Frames that cannot wait use the budget, then the reserve; past both the
// peer is wedged, and nothing beyond the budget was ever held.
func TestOutboxUrgentFramesAreBounded(t *testing.T) {
	o := newOutbox(outboxLimits{budget: 1000, reserve: 200, gapBytes: 500, gapFrames: 10}, testGap)
	var err error
	n := 0
	for ; n < 1000 && err == nil; n++ {
		err = o.pushProtected(frame(50, "b"))
	}
	if !errors.Is(err, errWedged) {
		t.Fatalf("%d broadcasts queued to a peer that does not read: %v", n, err)
	}
	if now, peak := o.queuedBytes(); peak > 1000 || now != 1000 {
		t.Fatalf("held %d (peak %d), want the budget, 1000", now, peak)
	}
	// With an oversized response queued alone, the reserve still takes
	// broadcasts.
	o = newOutbox(outboxLimits{budget: 1000, reserve: 200, gapBytes: 500, gapFrames: 10}, testGap)
	if err := o.pushResponse(context.Background(), frame(3000, "huge")); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := o.pushProtected(frame(50, "b")); err != nil {
			t.Fatalf("broadcast behind an oversized response: %v", err)
		}
	}
	if err := o.pushProtected(frame(50, "b")); !errors.Is(err, errWedged) {
		t.Fatalf("a broadcast past the reserve: %v", err)
	}
}

// A frame larger than the budget goes once the queue is empty: it cannot
// wait forever, and it never joins other frames.
func TestOutboxOversizedResponseGoesAlone(t *testing.T) {
	o := newOutbox(outboxLimits{budget: 100, reserve: 20, gapBytes: 50, gapFrames: 10}, testGap)
	ctx := context.Background()
	o.pushResponse(ctx, frame(30, "small"))
	big := make(chan error, 1)
	go func() { big <- o.pushResponse(ctx, frame(500, "big")) }()
	pop(t, o)
	if err := within(t, "the oversized response", func() error { return <-big }); err != nil {
		t.Fatal(err)
	}
	if now, _ := o.queuedBytes(); now != 500 {
		t.Fatalf("held %d", now)
	}
}

// Kept tails count against the budget, with the view/gap each will need;
// one that does not fit is not kept, and its hole closes at the view's next
// event instead.
func TestOutboxKeptTailsCount(t *testing.T) {
	o := newOutbox(outboxLimits{budget: 200, reserve: 40, gapBytes: 50, gapFrames: 10}, testGap)
	for _, s := range []string{"a", "b", "c"} {
		o.subscribed(s, s+"0")
	}
	marker := len(testGap("b", "b0", "b1"))
	o.pushView("a", "a1", frame(40, "a1"), true) // queued
	o.pushView("b", "b1", frame(20, "b1"), true) // 60 > 50: the tail of b
	o.pushView("c", "c1", frame(20, "c1"), true) // the tail of c
	held := func() int { now, _ := o.queuedBytes(); return now }
	if got, want := held(), 40+2*(marker+20); got != want {
		t.Fatalf("held %d, want %d: 40 queued and two kept tails", got, want)
	}
	o.pushView("a", "a2", frame(60, "a2"), true) // over the request limit: not kept
	if got, want := held(), 40+2*(marker+20); got != want {
		t.Fatalf("held %d, want %d", got, want)
	}
	o.forget("c")
	if got, want := held(), 40+marker+20; got != want {
		t.Fatalf("held %d after forgetting c, want %d", got, want)
	}
	pop(t, o) // a1 leaves: b's tail goes out with its gap
	wantFrames(t, drain(t, o), "gap b b0→b1", string(frame(20, "b1")))
	o.pushView("a", "a3", frame(5, "a3"), true)
	wantFrames(t, drain(t, o), "gap a a1→a3", string(frame(5, "a3")))
	if _, peak := o.queuedBytes(); peak > 160 {
		t.Fatalf("peak %d over the request limit", peak)
	}
}

// Whatever mix of traffic a reader that is always behind gets, the outbox
// never holds more than its budget.
func TestOutboxMixedLoadStaysWithinBudget(t *testing.T) {
	const budget = 4096
	o := newOutbox(outboxLimits{budget: budget, reserve: budget / 8, gapBytes: budget / 2, gapFrames: 64}, testGap)
	for _, s := range []string{"a", "b"} {
		o.subscribed(s, s+"0")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // responses, as the read loop queues them
		defer wg.Done()
		for i := range 500 {
			if err := o.pushResponse(ctx, frame(100+i%300, "r")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() { // live events of two sessions
		defer wg.Done()
		for i := range 3000 {
			s := []string{"a", "b"}[i%2]
			o.pushView(s, s+itoa(i+1), frame(20+i%200, s), i%5 == 0)
		}
	}()
	go func() { // a few broadcasts
		defer wg.Done()
		for range 8 { // within the reserve: the reader is behind, not wedged
			if err := o.pushProtected(frame(60, "bc")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() { wg.Wait(); o.close() }()
	for {
		if _, err := o.next(ctx); err != nil {
			break // closed and drained: every pusher is done
		}
	}
	if _, peak := o.queuedBytes(); peak > budget {
		t.Fatalf("peak %d over the budget %d", peak, budget)
	}
}

// Broadcasts to a connection that never reads are bounded too: they take
// the budget and the reserve, and the next one closes the connection as
// wedged (the client resumes by cursor) instead of being queued.
func TestBroadcastsToAPeerThatDoesNotReadAreBounded(t *testing.T) {
	const budget = 64 << 10
	srv := &Server{cfg: Config{QueueFrames: 16, QueueBytes: budget, WriteTimeout: time.Minute}}
	c := newConn(srv, newWedged(), slog.New(slog.DiscardHandler))
	started := []byte(`{"jsonrpc":"2.0","method":"session/started","params":{"session":{"sessionId":"` + strings.Repeat("s", 200) + `"}}}`)
	for range 10 * budget / len(started) {
		c.Deliver(session.Notification{Method: "session/started", Frame: started})
	}
	_, peak := c.out.queuedBytes()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("ten budgets of broadcasts to a peer that does not read (%d bytes held), and the connection is still open", peak)
	}
	if peak > budget {
		t.Fatalf("held %d bytes of broadcasts, over the budget %d", peak, budget)
	}
	if n := srv.metrics.connsWedged.Load(); n != 1 {
		t.Fatalf("wedged counted %d times", n)
	}
}

// A response woken by the last frame leaving has not re-checked yet when a
// live event comes: the event must not become a tail of an empty queue,
// which no departure would ever flush (the response would then wait for
// room until the connection was closed as wedged).
func TestOutboxEventIntoAnEmptyQueueIsNotKeptBack(t *testing.T) {
	o := newOutbox(outboxLimits{budget: 100, reserve: 20, gapBytes: 50, gapFrames: 10}, testGap)
	o.subscribed("s", "c0")
	o.mu.Lock()
	o.respWaiting = 1 // woken, about to re-check
	o.mu.Unlock()
	durable(o, "c1")
	o.mu.Lock()
	o.respWaiting = 0
	tails := o.tails
	o.mu.Unlock()
	if tails != 0 {
		t.Fatal("the event was kept back as the tail of an empty queue")
	}
	wantFrames(t, drain(t, o), "ev c1")
}
