package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// countingConn is a net.Conn that records each Write.
type countingConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

func (c *countingConn) SetWriteDeadline(time.Time) error { return nil }

// Close is called by the library when a write's context ends mid-write.
func (c *countingConn) Close() error { return nil }

// A batch of WebSocket messages leaves in one write: the library frames
// each into the plugged connection, the flush sends them together, and the
// peer reads them as separate messages in order.
func TestWebSocketBatchIsOneWrite(t *testing.T) {
	under := &countingConn{}
	cork := newCorkConn(under)
	ws := websocketOver(t, cork)
	tr := &wsTransport{c: ws, limit: 1 << 20, cork: cork}
	frames := [][]byte{[]byte(`{"a":1}`), []byte(`{"b":2}`), []byte(strings.Repeat("c", 5000))}
	if err := tr.WriteFrames(context.Background(), frames); err != nil {
		t.Fatal(err)
	}
	if len(under.writes) != 1 {
		t.Fatalf("%d writes for a batch of %d frames, want 1", len(under.writes), len(frames))
	}
	got := readMessages(t, under.writes[0], len(frames))
	for i, f := range frames {
		if got[i] != string(f) {
			t.Fatalf("message %d = %.40q, want %.40q", i, got[i], f)
		}
	}
	// Unplugged, a control frame goes out at once, in one write.
	if err := cork.flush(time.Time{}); err != nil { // nothing gathered: no write
		t.Fatal(err)
	}
	under.mu.Lock()
	under.writes = nil
	under.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pinged := make(chan error, 1)
	go func() { pinged <- ws.Ping(ctx) }() // waits for a pong that never comes
	for {
		under.mu.Lock()
		n := len(under.writes)
		under.mu.Unlock()
		if n > 0 || ctx.Err() != nil {
			break
		}
		runtime.Gosched()
	}
	cancel()
	<-pinged
	under.mu.Lock()
	defer under.mu.Unlock()
	if len(under.writes) != 1 || under.writes[0][0] != 0x89 {
		t.Fatalf("a ping between batches went out as %d writes: %x", len(under.writes), under.writes)
	}
}

// websocketOver makes a server-side coder/websocket connection whose
// writes go to nc, through a corkingWriter as serveWebSocket does.
func websocketOver(t *testing.T, nc net.Conn) *websocket.Conn {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/msp", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	rec := &hijackRecorder{ResponseRecorder: httptest.NewRecorder(), conn: nc}
	cw := &corkingWriter{ResponseWriter: rec}
	ws, err := websocket.Accept(cw, req, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// hijackRecorder is a ResponseRecorder that hijacks to conn.
type hijackRecorder struct {
	*httptest.ResponseRecorder
	conn net.Conn
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return h.conn, bufio.NewReadWriter(bufio.NewReader(strings.NewReader("")), bufio.NewWriter(h.conn)), nil
}

// readMessages parses n unmasked server frames from b.
func readMessages(t *testing.T, b []byte, n int) []string {
	t.Helper()
	var out []string
	for range n {
		if len(b) < 2 {
			t.Fatalf("short frame data: %x", b)
		}
		size, head := int(b[1]&0x7f), 2
		switch size {
		case 126:
			size, head = int(binary.BigEndian.Uint16(b[2:4])), 4
		case 127:
			size, head = int(binary.BigEndian.Uint64(b[2:10])), 10
		}
		out = append(out, string(b[head:head+size]))
		b = b[head+size:]
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes after %d messages", len(b), n)
	}
	return out
}

// Lines of a batch leave in one write too (stdio).
func TestLineBatchIsOneWrite(t *testing.T) {
	w := &countingConn{}
	lt := newLineTransport(strings.NewReader(""), w, nil, 1<<20)
	if err := lt.WriteFrames(context.Background(), [][]byte{[]byte("{}"), []byte(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	if len(w.writes) != 1 || string(w.writes[0]) != "{}\n{\"a\":1}\n" {
		t.Fatalf("writes %q", w.writes)
	}
}

// A connection's writer runs only while there is something to write: once
// it has written what was queued, it ends.
func TestWriterEndsWhenIdle(t *testing.T) {
	srv := &Server{cfg: Config{QueueBytes: 1 << 20, QueueFrames: 16, WriteTimeout: time.Minute}}
	tr := &gatedTransport{release: make(chan struct{})}
	close(tr.release)
	c := newConn(srv, tr, slog.New(slog.DiscardHandler))
	c.out.serve(func() { go c.writeLoop() })
	for round := range 3 {
		if err := c.push([]byte(`{"round":1}`)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			c.out.mu.Lock()
			idle := !c.out.writing
			c.out.mu.Unlock()
			if idle {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the writer still runs with nothing to write", round)
			}
			runtime.Gosched()
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.frames) != 3 {
		t.Fatalf("%d frames written, want 3", len(tr.frames))
	}
}

// A client may send its first frame right behind its upgrade request, in
// one packet: the frame, read along with the request, must survive the
// change of read buffer when the connection is hijacked.
func TestFramePipelinedWithTheUpgradeIsRead(t *testing.T) {
	m, _ := testManager(t)
	s, err := New(m, Config{PingInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	defer s.Shutdown(t.Context())
	nc, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}`
	var b bytes.Buffer
	b.WriteString("GET /msp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	b.Write(maskedText(t, init))
	if _, err := nc.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	head := make([]byte, 2)
	if _, err := io.ReadFull(br, head); err != nil {
		t.Fatalf("no answer to the pipelined initialize: %v", err)
	}
	size := int(head[1] & 0x7f)
	if size == 126 {
		var ext [2]byte
		io.ReadFull(br, ext[:])
		size = int(binary.BigEndian.Uint16(ext[:]))
	}
	payload := make([]byte, size)
	if _, err := io.ReadFull(br, payload); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(payload), `"id":1,"result"`) {
		t.Fatalf("answer %s", payload)
	}
}

// maskedText is a client's text frame (masked, as clients must).
func maskedText(t *testing.T, payload string) []byte {
	t.Helper()
	b := []byte{0x81, 0x80 | byte(len(payload))}
	if len(payload) >= 126 {
		b = []byte{0x81, 0x80 | 126, byte(len(payload) >> 8), byte(len(payload))}
	}
	var key [4]byte
	rand.Read(key[:])
	b = append(b, key[:]...)
	for i := range len(payload) {
		b = append(b, payload[i]^key[i%4])
	}
	return b
}
