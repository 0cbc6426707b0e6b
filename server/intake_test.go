package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"testing/synctest"

	"mspd/store"
)

// stdioPeer is a client of one stdio connection: it writes what it likes,
// when it likes, and collects every line the server writes.
type stdioPeer struct {
	in     *io.PipeWriter
	cancel context.CancelFunc
	served chan struct{}
	mu     sync.Mutex
	lines  []string
}

func newStdioPeer(srv *Server) *stdioPeer {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	p := &stdioPeer{in: inW, cancel: cancel, served: make(chan struct{})}
	go func() { srv.ServeStdio(ctx, inR, outW); outW.Close(); close(p.served) }()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
	}()
	p.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}` + "\n")
	return p
}

// send writes s, from a goroutine of its own: a write the server does not
// read yet waits there.
func (p *stdioPeer) send(s string) { go io.WriteString(p.in, s) }

// answered tells whether a line names the id (as JSON text).
func (p *stdioPeer) answered(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if strings.Contains(l, `"id":`+id+`,`) {
			return true
		}
	}
	return false
}

// paddedList is a session/list request of about n bytes: white space
// pads it, so it is valid whatever its size.
func paddedList(id string, n int) string {
	head := `{"jsonrpc":"2.0","id":` + id + `,"method":"session/list","params":{}`
	return head + strings.Repeat(" ", max(0, n-len(head)-1)) + "}"
}

// blockingLists is a store whose session listings wait, each for a token
// on release, once armed; entered counts those that started.
type blockingLists struct {
	store.Store
	armed   atomic.Bool
	entered atomic.Int64
	release chan struct{}
}

func (b *blockingLists) Sessions(ctx context.Context, owner string, after *store.SessionKey, limit int) ([]store.Session, error) {
	if b.armed.Load() {
		b.entered.Add(1)
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return b.Store.Sessions(ctx, owner, after, limit)
}

// A connection has at most MaxConnRequests requests executing: with two
// of them stuck in the store, the third is not even read until one
// finishes; then it runs, and every request is answered. (Before the
// bound, a connection ran one request at a time with no way to raise it.)
func TestConnRequestsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var bl *blockingLists
		m, _ := testManagerOver(t, func(st store.Store) store.Store {
			bl = &blockingLists{Store: st, release: make(chan struct{})}
			return bl
		})
		srv, err := New(m, Config{MaxConnRequests: 2, PingInterval: -1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		p := newStdioPeer(srv)
		synctest.Wait()
		if !p.answered(`"init"`) {
			t.Fatal("initialize was not answered")
		}
		bl.armed.Store(true)
		p.send(`{"jsonrpc":"2.0","id":1,"method":"session/list","params":{}}` + "\n" +
			`{"jsonrpc":"2.0","id":2,"method":"session/list","params":{}}` + "\n" +
			`{"jsonrpc":"2.0","id":3,"method":"session/list","params":{}}` + "\n")
		synctest.Wait()
		if n := bl.entered.Load(); n != 2 {
			t.Fatalf("%d requests executing, want the bound, 2", n)
		}
		bl.release <- struct{}{} // one finishes: the third may run
		synctest.Wait()
		if n := bl.entered.Load(); n != 3 {
			t.Fatalf("%d requests executed once one finished, want 3", n)
		}
		close(bl.release)
		synctest.Wait()
		for _, id := range []string{"1", "2", "3"} {
			if !p.answered(id) {
				t.Errorf("request %s was not answered", id)
			}
		}
		p.in.Close()
		<-p.served
		srv.Shutdown(context.Background())
	})
}

// The server-wide intake budget: while one connection's large frame holds
// it (its client sends half a frame and stalls), another connection's
// large frame waits — unread, so TCP pushes back — and a small frame
// passes; once the first frame is whole and dispatched, the waiting one
// proceeds. Closing a connection that waits, or one that holds the budget
// mid-frame, gives back what it held: the next large frame goes through.
// Without the budget every connection decoded its large frame at once.
func TestIntakeBudgetMakesLargeFramesWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _ := testManager(t)
		const limit = 256 << 10
		srv, err := New(m, Config{MaxFrameBytes: limit, InboundBytes: limit, PingInterval: -1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		a, b, small := newStdioPeer(srv), newStdioPeer(srv), newStdioPeer(srv)
		synctest.Wait()
		big := paddedList(`"a"`, 200<<10)
		a.send(big[:100<<10]) // past the free allowance: a holds the budget, and stalls
		synctest.Wait()
		b.send(paddedList(`"b"`, 200<<10) + "\n")
		small.send(paddedList(`"s"`, 1<<10) + "\n")
		synctest.Wait()
		if b.answered(`"b"`) {
			t.Fatal("b's large frame was read while a's held the whole budget")
		}
		if !small.answered(`"s"`) {
			t.Fatal("a small frame waited for the budget")
		}
		a.send(big[100<<10:] + "\n")
		synctest.Wait()
		if !a.answered(`"a"`) || !b.answered(`"b"`) {
			t.Fatalf("once a's frame was whole, answered a: %v, b: %v", a.answered(`"a"`), b.answered(`"b"`))
		}

		// A connection that waits for the budget, closed, leaves nothing
		// held; nor does one closed half-way through its frame.
		holder, waiter := newStdioPeer(srv), newStdioPeer(srv)
		synctest.Wait()
		holder.send(big[:100<<10])
		synctest.Wait()
		waiter.send(paddedList(`"w"`, 200<<10) + "\n")
		synctest.Wait()
		waiter.cancel()
		<-waiter.served
		holder.cancel()
		<-holder.served
		c := newStdioPeer(srv)
		synctest.Wait()
		c.send(paddedList(`"c"`, 200<<10) + "\n")
		synctest.Wait()
		if !c.answered(`"c"`) {
			t.Fatal("a large frame waits after the connections holding the budget closed")
		}
		for _, p := range []*stdioPeer{a, b, small, c} {
			p.in.Close()
			<-p.served
		}
		srv.Shutdown(context.Background())
	})
}

// stuckOnLarge is a client that reads small frames and then stops reading
// at the first large one: a write of more than 64 KiB blocks until the
// transport closes. It counts the frames the server read from it.
type stuckOnLarge struct {
	*wedgedTransport
	read atomic.Int64
}

func (t *stuckOnLarge) ReadFrame(ctx context.Context, in admitter) ([]byte, error) {
	f, err := t.wedgedTransport.ReadFrame(ctx, in)
	if err == nil {
		t.read.Add(1)
	}
	return f, err
}

func (t *stuckOnLarge) WriteFrame(ctx context.Context, frame []byte) error {
	if len(frame) <= 64<<10 {
		return nil
	}
	return t.wedgedTransport.WriteFrame(ctx, frame)
}

// A client that stops reading in the middle of a large answer (a page over
// the outbox's request limit) is not read again until that answer has been
// written, and the answer counts in the outbound gauge meanwhile. The
// writer's batch used to leave the budget's account: the queue looked
// empty, the next page was read and built, queued alone (weighed as
// nothing), and a third was built to wait for room — three large answers
// held per connection while the gauge counted one (or none).
func TestLargeAnswerInWriteHoldsTheReadLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, head := testManager(t)
		sid := startWithTurnsText(t, m, head, nopSub{}, 4, strings.Repeat("x", 1<<20))
		srv, err := New(m, Config{QueueBytes: 1 << 20, PingInterval: -1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		frames := []string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"initialized"}`,
		}
		for i := range 4 {
			frames = append(frames, `{"jsonrpc":"2.0","id":`+itoa(100+i)+`,"method":"view/page","params":{"sessionId":"`+sid+`","cursor":"`+cursorAt(t, m, sid, int64(3*i))+`","limit":2}}`)
		}
		tr := &stuckOnLarge{wedgedTransport: newWedged(frames...)}
		served := make(chan struct{})
		go func() { srv.run(context.Background(), tr, slog.New(slog.DiscardHandler)); close(served) }()
		synctest.Wait()
		if n := tr.read.Load(); n != 3 {
			t.Errorf("%d frames read, want 3: nothing after the first page while its answer is being written", n)
		}
		if held := srv.stats().QueuedBytes; held < 1<<20 {
			t.Errorf("the outbound gauge reads %d bytes while a page of more than 1 MiB is being written", held)
		}
		tr.Close("", true)
		<-served
		srv.Shutdown(context.Background())
	})
}

// readBounded returns a message whole up to the limit, whatever the size
// around the free allowance and the chunks it reads a large one in, and
// beyond the limit its first bytes only, as a *tooLargeError.
func TestReadBoundedSizes(t *testing.T) {
	const limit = 3 << 20
	for _, n := range []int{0, 1, freeFrameBytes, freeFrameBytes + 1, 300 << 10, limit - 1, limit, limit + 1, 3 * limit} {
		msg := make([]byte, n)
		for i := range msg {
			msg[i] = byte('a' + i%26)
		}
		got, err := readBounded(context.Background(), iotest.HalfReader(bytes.NewReader(msg)), limit, nil)
		var tl *tooLargeError
		switch {
		case n <= limit && (err != nil || !bytes.Equal(got, msg)):
			t.Errorf("%d bytes: got %d bytes, %v", n, len(got), err)
		case n > limit && (!errors.As(err, &tl) || !bytes.Equal(tl.prefix, msg[:prefixKeep])):
			t.Errorf("%d bytes over a %d limit: %v", n, limit, err)
		}
	}
}

// blockingCommits is a store whose commits wait for release to close,
// once armed.
type blockingCommits struct {
	store.Store
	armed   atomic.Bool
	release chan struct{}
}

func (b *blockingCommits) Commit(ctx context.Context, batch store.Batch) error {
	if b.armed.Load() {
		select {
		case <-b.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b.Store.Commit(ctx, batch)
}

// With several requests executing at once, the cap on sessions followed
// still holds: of four session/start sent together on a connection that
// may follow one session, one starts and three are refused as
// backpressured. Each used to pass the room check before any had
// subscribed, and all four started.
func TestFollowCapHoldsWithConcurrentRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var bc *blockingCommits
		m, _ := testManagerOver(t, func(st store.Store) store.Store {
			bc = &blockingCommits{Store: st, release: make(chan struct{})}
			return bc
		})
		srv, err := New(m, Config{MaxConnRequests: 4, MaxSubscriptions: 1, PingInterval: -1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		p := newStdioPeer(srv)
		synctest.Wait()
		bc.armed.Store(true)
		var in strings.Builder
		for i := range 4 {
			in.WriteString(`{"jsonrpc":"2.0","id":` + itoa(i+1) + `,"method":"session/start","params":{"commandId":"` + newCommandID() + `"}}` + "\n")
		}
		p.send(in.String())
		synctest.Wait()
		close(bc.release)
		synctest.Wait()
		started, refused := 0, 0
		p.mu.Lock()
		for _, l := range p.lines {
			switch {
			case strings.Contains(l, `"result":{`) && strings.Contains(l, `"viewCursor"`):
				started++
			case strings.Contains(l, `"kind":"backpressured"`):
				refused++
			}
		}
		p.mu.Unlock()
		if started != 1 || refused != 3 {
			t.Errorf("%d sessions started and %d refused on a connection that may follow one; want 1 and 3", started, refused)
		}
		p.in.Close()
		<-p.served
		srv.Shutdown(context.Background())
	})
}

// A stdio line of blanks past the free allowance is skipped, and the
// frame after it read in the same ReadFrame: the share the blank line took
// is the frame's, taken once, and all of it given back once the frame is
// answered. (The frame used to take a second share over the first, which
// was never given back: two such pairs exhausted this budget for good.)
func TestBlankLargeLinesHoldNoBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _ := testManager(t)
		const limit = 256 << 10
		srv, err := New(m, Config{MaxFrameBytes: limit, InboundBytes: 2 * limit, PingInterval: -1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		p := newStdioPeer(srv)
		synctest.Wait()
		for _, id := range []string{`"a"`, `"b"`, `"c"`} {
			p.send(strings.Repeat(" ", 100<<10) + "\n" + paddedList(id, 200<<10) + "\n")
			synctest.Wait()
			if !p.answered(id) {
				t.Fatalf("request %s after a large blank line was not answered", id)
			}
			if held := srv.intake.held.Load(); held != 0 {
				t.Fatalf("after request %s the intake budget holds %d bytes with nothing in flight", id, held)
			}
		}
		other := newStdioPeer(srv)
		synctest.Wait()
		other.send(paddedList(`"o"`, 200<<10) + "\n")
		synctest.Wait()
		if !other.answered(`"o"`) {
			t.Fatal("another connection's large frame waits for a budget nothing holds")
		}
		for _, c := range []*stdioPeer{p, other} {
			c.in.Close()
			<-c.served
		}
		srv.Shutdown(context.Background())
	})
}
