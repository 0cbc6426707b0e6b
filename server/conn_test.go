package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"

	"mspd/internal/memnet"
)

// TestDeadPeerDuringReplayReleasesConnection: a client subscribes
// with a replay longer than its outbound queue and then stops reading (or
// its TCP connection dies). The write times out and the transport is
// closed, but the request handler stays parked in pushReplay on jsonrpc2's
// read loop: serve never returns, the connection stays registered as a
// broadcast listener (its protected queue grows with every session/started)
// and Server.Shutdown waits for it until its deadline.
func TestDeadPeerDuringReplayReleasesConnection(t *testing.T) {
	m, head := testManager(t)
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

// pingEvery and readEvery pace TestKeepAliveDuringLongRequest: the
// keepalive, and a reader slow but well within the write timeout.
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
	m, head := testManager(t)
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
