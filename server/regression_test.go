package server

// Review tests: each one pins a defect found in review. They are expected to
// FAIL on the reviewed code and pass once the defect is fixed.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"

	"mspd/internal/memnet"
	"mspd/schema/msp"
	"mspd/session"
	"mspd/store"
	"mspd/store/sqlite"
	"mspd/turn"
)

// instantRunner ends every turn at once: turn/started, the userMessage
// item and turn/completed are three durable records per turn.
type instantRunner struct{}

func (instantRunner) Run(context.Context, turn.Spec, turn.Sink) turn.Outcome {
	return turn.Outcome{Completed: msp.TurnCompletedParams{Terminal: msp.TerminalCompleted}}
}

func reviewManager(t *testing.T) (*session.Manager, func(sid string) int64) {
	t.Helper()
	return reviewManagerOver(t, func(st store.Store) store.Store { return st })
}

// reviewManagerOver is reviewManager on what wrap makes of its store.
func reviewManagerOver(t *testing.T, wrap func(store.Store) store.Store) (*session.Manager, func(sid string) int64) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mspd.db"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := session.New(context.Background(), session.Config{Store: wrap(st), Runner: instantRunner{},
		LogPath: "x.db", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); st.Close() })
	head := func(sid string) int64 {
		h, err := st.Head(context.Background(), sid)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	return m, head
}

var reviewSeq int

func reviewCmd() string {
	reviewSeq++
	return "0198f0aa-0000-7000-8000-" + strings.Repeat("0", 12-len(itoa(reviewSeq))) + itoa(reviewSeq)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// nopSub is a Subscriber that ignores everything.
type nopSub struct{}

func (nopSub) Deliver(session.Notification)                       {}
func (nopSub) Replay(context.Context, session.Notification) error { return nil }
func (nopSub) Subscribed(string, string)                          {}
func (nopSub) Broadcasts() bool                                   { return false }

// startWithTurns starts a session and runs n instant turns in it, waiting
// until each has settled, its 3 records in the log.
func startWithTurns(t *testing.T, m *session.Manager, head func(string) int64, sub session.Subscriber, n int) string {
	return startWithTurnsText(t, m, head, sub, n, "hi")
}

func startWithTurnsText(t *testing.T, m *session.Manager, head func(string) int64, sub session.Subscriber, n int, text string) string {
	t.Helper()
	ctx := context.Background()
	raw, attach, err := m.StartSession(ctx, sub, mustMarshal(msp.SessionStartParams{CommandID: reviewCmd()}))
	if err != nil {
		t.Fatal(err)
	}
	var res msp.SessionStartResult
	json.Unmarshal(raw, &res)
	attach(ctx)
	sid := res.Session.SessionID
	for i := 0; i < n; i++ {
		_, launch, err := m.StartTurn(ctx, nil, mustMarshal(msp.TurnStartParams{CommandID: reviewCmd(), SessionID: sid,
			Input: []msp.TurnInputPart{{Type: "text", Text: text}}}))
		if err != nil {
			t.Fatal(err)
		}
		launch()
		waitIdle(t, m)
		if h := head(sid); h < int64(3*(i+1)) {
			t.Fatalf("turn %d settled with the log at %d records, want at least %d", i+1, h, 3*(i+1))
		}
	}
	return sid
}

// cursorAt is the cursor of durable record seq of session sid: its head's,
// of the same incarnation, at seq.
func cursorAt(t *testing.T, m *session.Manager, sid string, seq int64) string {
	t.Helper()
	head, err := m.Head(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndexByte(head, ':')
	epoch, _, ok := strings.Cut(head[i+1:], "-")
	if ok {
		return head[:i+1] + epoch + "-" + strconv.FormatInt(seq, 10)
	}
	return head[:i+1] + strconv.FormatInt(seq, 10)
}

// waitIdle waits until no turn of m runs: the turns launched so far have
// settled.
func waitIdle(t *testing.T, m *session.Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.WaitIdle(ctx); err != nil {
		t.Fatalf("turns still running: %v", err)
	}
}

func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// TestPushReplayWokenByClose: a replay waiting for room in a full
// outbox must return once the outbox is closed. It only watches o.space
// and ctx, and close() signals neither, so it waits forever. In a synctest
// bubble, so that the test closes the outbox once the replay is blocked
// waiting (synctest.Wait), and the 2 s bound is on the fake clock.
func TestPushReplayWokenByClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := newTestOutbox(1, 1<<20)
		durable(o, "c1") // the queue is full
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel() // a replay left blocked by a failure ends with the test
		done := make(chan error, 1)
		go func() { done <- o.pushReplay(ctx, "s", "c2", ev("c2")) }()
		synctest.Wait()
		o.mu.Lock()
		waiting := o.waiting
		o.mu.Unlock()
		if waiting != 1 {
			t.Fatalf("%d goroutines wait for room; want the replay waiting", waiting)
		}
		o.close()
		select {
		case err := <-done:
			if !errors.Is(err, errClosed) {
				t.Fatalf("pushReplay after close: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("pushReplay still blocked 2s after the outbox was closed")
		}
	})
}

// wedgedTransport reads the given frames, then blocks until closed; every
// write blocks until its context ends (a peer that stopped reading).
type wedgedTransport struct {
	in     chan []byte
	closed chan struct{}
	once   sync.Once
}

func newWedged(frames ...string) *wedgedTransport {
	t := &wedgedTransport{in: make(chan []byte, len(frames)), closed: make(chan struct{})}
	for _, f := range frames {
		t.in <- []byte(f)
	}
	return t
}

func (t *wedgedTransport) ReadFrame(ctx context.Context, _ admitter) ([]byte, error) {
	select {
	case f := <-t.in:
		return f, nil
	case <-t.closed:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (t *wedgedTransport) WriteFrame(ctx context.Context, _ []byte) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.closed:
		return errors.New("closed")
	}
}

func (t *wedgedTransport) Close(string, bool) error {
	t.once.Do(func() { close(t.closed) })
	return nil
}

// TestDeadPeerDuringReplayReleasesConnection: a client subscribes
// with a replay longer than its outbound queue and then stops reading (or
// its TCP connection dies). The write times out and the transport is
// closed, but the request handler stays parked in pushReplay on jsonrpc2's
// read loop: serve never returns, the connection stays registered as a
// broadcast listener (its protected queue grows with every session/started)
// and Server.Shutdown waits for it until its deadline.
func TestDeadPeerDuringReplayReleasesConnection(t *testing.T) {
	m, head := reviewManager(t)
	sid := startWithTurns(t, m, head, nopSub{}, 3) // 9 durable records

	srv, err := New(m, Config{QueueFrames: 2, WriteTimeout: 50 * time.Millisecond, PingInterval: -1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	tr := newWedged(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"view/subscribe","params":{"sessionId":"`+sid+`","after":"v:`+sid+`:0"}}`,
	)
	served := make(chan struct{})
	go func() {
		srv.run(context.Background(), tr, slog.New(slog.DiscardHandler))
		close(served)
	}()
	select {
	case <-served:
	case <-time.After(3 * time.Second):
		select {
		case <-tr.closed:
		default:
			t.Fatal("transport was never closed")
		}
		t.Fatal("the transport was closed (write timed out) but the connection never ended: its handler is stuck in pushReplay")
	}
}

// TestServeStdioHonoursContext: ServeStdio documents "until r ends or
// ctx is done", and cmd/mspd passes the SIGINT/SIGTERM context. run()
// wraps it in context.WithoutCancel, so `mspd serve --stdio` ignores
// SIGTERM until the client closes stdin.
func TestServeStdioHonoursContext(t *testing.T) {
	m, _ := reviewManager(t)
	srv, err := New(m, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r, w := io.Pipe() // stdin that stays open
	defer w.Close()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.ServeStdio(ctx, r, outW); close(done) }()
	// Serving: initialize is answered.
	go io.WriteString(w, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	if line, err := bufio.NewReader(outR).ReadString('\n'); err != nil || !strings.Contains(line, `"id":1`) {
		t.Fatalf("initialize answered %q, %v", line, err)
	}
	go io.Copy(io.Discard, outR)
	cancel() // SIGTERM
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("ServeStdio still serving 2s after its context was cancelled")
	}
}

// TestResubscribeDuringHoleKeepsCursorOrder: a connection fell behind
// (a hole whose newest durable event is kept as the tail) and re-anchors
// with view/subscribe {after} on the same connection, as §4.3 allows.
// session.subscribe detaches and replays through pushReplay, but the
// outbox still holds the old hole's tail: the writer flushes it (and a
// view/gap) in front of the replay, so after the subscribe response the
// client sees c3, view/gap, then c1, c2, c3 — cursors going backwards and a
// stale live event before the replay (§5 items 13 and 22).
func TestResubscribeDuringHoleKeepsCursorOrder(t *testing.T) {
	m, head := reviewManager(t)
	srv := &Server{cfg: Config{QueueFrames: 2, QueueBytes: 1 << 20}}
	c := newConn(srv, newWedged(), slog.New(slog.DiscardHandler))
	sid := startWithTurns(t, m, head, c, 1) // c1, c2 queued; the rest dropped, the newest kept as the tail

	// What the handler does: admit the subscription, reply, then attach.
	after := cursorAt(t, m, sid, 0)
	_, attach, err := m.Subscribe(context.Background(), c, sid, &after)
	if err != nil {
		t.Fatal(err)
	}
	c.out.pushProtected([]byte(`{"response":"view/subscribe"}`))
	subDone := make(chan error, 1)
	go func() { attach(context.Background()); subDone <- nil }()

	var got []string
	for len(got) < 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		f, err := c.out.next(ctx)
		cancel()
		if err != nil {
			break
		}
		var fr struct {
			Method string `json:"method"`
			Params struct {
				ViewCursor string `json:"viewCursor"`
				After      string `json:"after"`
				Next       string `json:"next"`
			} `json:"params"`
			Response string `json:"response"`
		}
		json.Unmarshal(f, &fr)
		switch {
		case fr.Response != "":
			got = append(got, "RESPONSE")
		case fr.Method == msp.NotifyViewGap:
			got = append(got, "gap("+short(fr.Params.After)+"→"+short(fr.Params.Next)+")")
		default:
			got = append(got, short(fr.Params.ViewCursor))
		}
	}
	if err := <-subDone; err != nil {
		t.Fatal(err)
	}
	// After the response only the replay (1 … head) may follow.
	var replay []string
	for seq := int64(1); seq <= head(sid); seq++ {
		replay = append(replay, itoa(int(seq)))
	}
	i := 0
	for i < len(got) && got[i] != "RESPONSE" {
		i++
	}
	if want := strings.Join(replay, " "); strings.Join(got[i+1:], " ") != want {
		t.Fatalf("frames %v: after the subscribe response want exactly the replay [%s]", got, want)
	}
}

// short is a cursor's position: what follows its session and epoch.
func short(cursor string) string {
	if i := strings.LastIndexByte(cursor, ':'); i >= 0 {
		cursor = cursor[i+1:]
	}
	if _, pos, ok := strings.Cut(cursor, "-"); ok {
		return pos
	}
	return cursor
}

var pingEvery, readEvery = 50 * time.Millisecond, 30 * time.Millisecond

// TestKeepAliveDuringLongRequest: coder/websocket's Ping only
// completes while another goroutine is inside Reader, but jsonrpc2 runs
// handlers on the read loop. A request that keeps the read loop busy
// longer than WriteTimeout — here a view/subscribe replay to a client that
// reads steadily but slowly — makes the keepalive ping time out, and a
// live, reading client is disconnected as "no pong" in the middle of its
// replay (then reconnects, replays again, and is cut again). With
// pingEvery = -1 (keepalive off) the same client receives the whole replay,
// so the ping is what cuts it.
//
// It runs in a synctest bubble on an in-memory network: the reader's pace,
// the pings and the write timeouts all follow the bubble's fake clock, so
// the interleaving is exact and there are no socket buffers to soak up
// the replay.
func TestKeepAliveDuringLongRequest(t *testing.T) {
	synctest.Test(t, keepAliveDuringLongRequest)
}

func keepAliveDuringLongRequest(t *testing.T) {
	m, head := reviewManager(t)
	sid := startWithTurnsText(t, m, head, nopSub{}, 10, strings.Repeat("x", 1<<20)) // 30 records, 10 of them 1 MiB

	srv, err := New(m, Config{QueueFrames: 2, QueueBytes: 1 << 20, WriteTimeout: 300 * time.Millisecond, PingInterval: pingEvery,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hs, hc := memnet.NewServer(t, srv.Handler())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/msp", &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(16 << 20)
	defer ws.CloseNow()
	for _, f := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"view/subscribe","params":{"sessionId":"` + sid + `","after":"` + cursorAt(t, m, sid, 0) + `"}}`,
	} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	// A slow but live reader: one frame every 30 ms, well within the write
	// timeout (it answers pings as it reads).
	events := 0
	for events < 30 {
		<-time.After(readEvery) // bubble time
		_, f, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("connection closed after %d of 30 replayed events: %v", events, err)
		}
		if strings.Contains(string(f), `"viewCursor":"v:`) && strings.Contains(string(f), `"method"`) {
			events++
		}
	}
	ws.CloseNow()
	if err := srv.Shutdown(ctx); err != nil { // ends the server's workers inside the bubble
		t.Fatal(err)
	}
}

// TestGapNextIsServable: §4.3 — a client fills a hole by paging
// view/page forward from `after` until a page contains `next`. view/page
// serves durable events only, so `next` must be a durable cursor. When a
// hole is closed by an ephemeral item/delta (small enough to fit the byte
// budget while the dropped durable tail did not), the marker names the
// delta's sub-position cursor, which no page will ever contain: the fill
// runs to the head of the log (re-reading events the client also gets
// live), and `mspd tail` renders everything up to the head twice.
func TestGapNextIsServable(t *testing.T) {
	o := newTestOutbox(100, 20)
	o.subscribed("s", "v:s:0")
	o.pushView("s", "v:s:1", []byte(strings.Repeat("a", 15)), true)
	o.pushView("s", "v:s:2", []byte(strings.Repeat("b", 10)), true) // dropped: the tail
	o.pushView("s", "v:s:2.1", []byte("d"), false)                  // fits: closes the hole
	for _, f := range drain(t, o) {
		if strings.HasPrefix(f, "gap ") && strings.Contains(f, "→v:s:2.1") {
			t.Fatalf("%q: view/gap.next is an ephemeral cursor view/page can never return", f)
		}
	}
}
