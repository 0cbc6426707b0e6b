package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// transport moves whole MSP frames: one WebSocket text message, or one
// NDJSON line.
type transport interface {
	// ReadFrame returns the next frame. A frame over the limit is consumed
	// and reported as a *tooLargeError carrying its first bytes. A frame
	// that grows past freeFrameBytes is read on only once in admits it.
	ReadFrame(ctx context.Context, in admitter) ([]byte, error)
	// WriteFrame sends one frame.
	WriteFrame(ctx context.Context, frame []byte) error
	// Close ends the transport; reason is for the peer. A dead peer
	// (unanswered ping, failed write) gets no closing handshake.
	Close(reason string, dead bool) error
}

// batchWriter is a transport that sends several frames, in order, in one
// write to the peer: one system call for everything the writer found
// queued, instead of one a frame.
type batchWriter interface {
	WriteFrames(ctx context.Context, frames [][]byte) error
}

// tooLargeError is an inbound frame over the frame limit; prefix keeps its
// first bytes so that the request id can still be recovered.
type tooLargeError struct{ prefix []byte }

func (e *tooLargeError) Error() string { return "frame exceeds the size limit" }

// prefixKeep is how much of an oversized frame is kept to find its id.
const prefixKeep = 64 << 10

// wsTransport carries frames over a WebSocket connection.
type wsTransport struct {
	c     *websocket.Conn
	limit int64
	// cork, when the connection was hijacked through a corkingWriter,
	// gathers a batch of frames into one write.
	cork *corkConn
}

func (t *wsTransport) ReadFrame(ctx context.Context, in admitter) ([]byte, error) {
	// A binary message is read like a text one: if it is not a valid
	// frame it is answered as such rather than dropping the connection.
	_, r, err := t.c.Reader(ctx)
	if err != nil {
		return nil, err
	}
	return readBounded(ctx, r, t.limit, in)
}

// readBounded reads a whole message, keeping at most limit bytes; beyond
// that it drains the rest and reports a *tooLargeError. Past
// freeFrameBytes it waits for in (nil: admitted) before reading on.
func readBounded(ctx context.Context, r io.Reader, limit int64, in admitter) ([]byte, error) {
	var buf bytes.Buffer
	free := min(limit, freeFrameBytes)
	if _, err := io.Copy(&buf, io.LimitReader(r, free+1)); err != nil {
		return nil, err
	}
	frame := buf.Bytes()
	if int64(len(frame)) > free && free < limit {
		if in != nil {
			if err := in.admitLarge(ctx); err != nil {
				return nil, err
			}
		}
		var err error
		if frame, err = readLarge(frame, r, limit+1); err != nil {
			return nil, err
		}
	}
	if int64(len(frame)) <= limit {
		return frame, nil
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, err
	}
	// A copy: the prefix must not keep the whole frame alive.
	return nil, &tooLargeError{prefix: bytes.Clone(frame[:min(len(frame), prefixKeep)])}
}

// readLarge reads the rest of a message after head, up to max bytes in
// all, in chunks joined once it ends: the frame is held once, at its size,
// where a buffer grown by doubling would hold up to twice it (and, while
// growing, three halves of that).
func readLarge(head []byte, r io.Reader, max int64) ([]byte, error) {
	chunks := [][]byte{head}
	total := int64(len(head))
	for size := int64(256 << 10); total < max; size = min(2*size, 4<<20) {
		chunk := make([]byte, min(size, max-total))
		n, err := io.ReadFull(r, chunk)
		chunks = append(chunks, chunk[:n])
		total += int64(n)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return bytes.Join(chunks, nil), nil
}

func (t *wsTransport) WriteFrame(ctx context.Context, frame []byte) error {
	return t.c.Write(ctx, websocket.MessageText, frame)
}

// WriteFrames sends frames as WebSocket messages in one write: the
// library frames each into the corked connection, and the flush hands
// the lot to the socket within ctx's deadline. The messages are framed
// under a context without a deadline, which spares the library a timer
// per message; nothing they do blocks on the peer (the flush does, and
// it is bounded), except waiting for a control frame another goroutine
// is writing, which the library bounds itself.
func (t *wsTransport) WriteFrames(ctx context.Context, frames [][]byte) error {
	if t.cork == nil || len(frames) == 1 && len(frames[0]) > maxCorkedFrame {
		for _, f := range frames {
			if err := t.WriteFrame(ctx, f); err != nil {
				return err
			}
		}
		return nil
	}
	t.cork.plug()
	for _, f := range frames {
		if err := t.c.Write(context.Background(), websocket.MessageText, f); err != nil {
			// What was framed is whole and may hold a close frame
			// another goroutine wrote meanwhile: send it anyway.
			t.cork.flush(deadlineOf(ctx))
			return err
		}
	}
	return t.cork.flush(deadlineOf(ctx))
}

// corkConn is the network connection under a WebSocket. Plugged (while
// the writer sends a batch), what the library writes is gathered, whole
// frames only since it flushes after each; flush sends it in one write.
// Unplugged, writes pass through: control frames (pongs, pings, the close
// frame) written between batches, each in one write since it fits the
// library's buffer, so they never split a batch or each other.
type corkConn struct {
	net.Conn

	mu      sync.Mutex // guards plugged and buf; never held across I/O
	plugged bool
	buf     *[]byte // pooled while plugged
	// wmu serialises writes to the connection (a channel, so that a
	// goroutine waiting behind a slow write is durably blocked in a
	// testing/synctest bubble, as it is behind the library's own locks).
	wmu chan struct{}
}

func newCorkConn(nc net.Conn) *corkConn {
	return &corkConn{Conn: nc, wmu: make(chan struct{}, 1)}
}

// maxCorkedFrame is the largest frame sent alone that is copied into a
// batch: a larger one is written as it stands (the copy would gain
// nothing but memory).
const maxCorkedFrame = 32 << 10

// corkBufs recycles batch buffers: an idle connection holds none.
var corkBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// maxPooledCork is the largest batch buffer kept for reuse.
const maxPooledCork = 256 << 10

func (c *corkConn) plug() {
	c.mu.Lock()
	c.plugged = true
	c.buf = corkBufs.Get().(*[]byte)
	c.mu.Unlock()
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.plugged {
		*c.buf = append(*c.buf, p...)
		c.mu.Unlock()
		return len(p), nil
	}
	c.mu.Unlock()
	c.wmu <- struct{}{}
	defer func() { <-c.wmu }()
	return c.Conn.Write(p)
}

// flush unplugs and sends what was gathered in one write, by deadline. A
// write that fails or times out may have sent part of a frame: the
// connection must then be closed.
func (c *corkConn) flush(deadline time.Time) error {
	c.mu.Lock()
	buf := c.buf
	c.plugged, c.buf = false, nil
	c.mu.Unlock()
	if buf == nil {
		return nil
	}
	var err error
	if len(*buf) > 0 {
		c.wmu <- struct{}{}
		c.Conn.SetWriteDeadline(deadline)
		_, err = c.Conn.Write(*buf)
		// Control frames written between batches must not inherit it.
		c.Conn.SetWriteDeadline(time.Time{})
		<-c.wmu
	}
	if cap(*buf) <= maxPooledCork {
		*buf = (*buf)[:0]
		corkBufs.Put(buf)
	}
	return err
}

// corkingWriter hands coder/websocket, when it hijacks the connection of
// an upgrade, a corkConn in place of the network connection, so that the
// transport can batch writes without forking the library.
type corkingWriter struct {
	http.ResponseWriter
	cork *corkConn
}

// The buffers coder/websocket reads and writes a connection through, for
// its whole life. Writes are gathered by the corkConn, so the write buffer
// only needs to hold a control frame whole (at most 2+125 bytes); reads of
// a payload larger than the read buffer bypass it. net/http's 4 KiB pair
// is let go: small buffers are most of what an idle connection holds.
const (
	wsReadBuffer  = 512
	wsWriteBuffer = 256
)

// Hijack implements http.Hijacker.
func (w *corkingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	// The switching-protocols response has been flushed (net/http does so
	// on hijacking); anything still buffered goes before the redirection.
	if err := brw.Writer.Flush(); err != nil {
		nc.Close()
		return nil, nil, err
	}
	w.cork = newCorkConn(nc)
	// Bytes the client sent after its request (a first frame) are read
	// already: the new reader must hold them buffered, as the library
	// takes over what is buffered.
	early, _ := brw.Reader.Peek(brw.Reader.Buffered())
	r := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(early)), w.cork), max(wsReadBuffer, len(early)))
	if _, err := r.Peek(len(early)); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return w.cork, bufio.NewReadWriter(r, bufio.NewWriterSize(w.cork, wsWriteBuffer)), nil
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *corkingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Ping sends a WebSocket ping and waits for its pong.
func (t *wsTransport) Ping(ctx context.Context) error { return t.c.Ping(ctx) }

func (t *wsTransport) Close(reason string, dead bool) error {
	if dead {
		return t.c.CloseNow()
	}
	return t.c.Close(websocket.StatusGoingAway, reason)
}

// lineTransport carries NDJSON frames over a byte stream (stdio).
type lineTransport struct {
	r     *bufio.Reader
	limit int64

	wmu    sync.Mutex
	w      io.Writer
	broken bool      // a write gave up: the stream may end inside a frame
	c      io.Closer // may be nil
}

// errWriteAbandoned is returned by writes after one gave up half-way.
var errWriteAbandoned = errors.New("an earlier write did not finish")

func newLineTransport(r io.Reader, w io.Writer, c io.Closer, limit int64) *lineTransport {
	return &lineTransport{r: bufio.NewReaderSize(r, 64<<10), w: w, c: c, limit: limit}
}

func (t *lineTransport) ReadFrame(ctx context.Context, in admitter) ([]byte, error) {
	for {
		line, err := t.readLine(ctx, in)
		if err != nil {
			var tl *tooLargeError
			if errors.As(err, &tl) {
				return nil, err
			}
			if len(bytes.TrimSpace(line)) == 0 || !errors.Is(err, io.EOF) {
				return nil, err
			}
			return line, nil // a last frame without its newline
		}
		line = bytes.TrimRight(line, "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue // empty lines are ignored
		}
		return line, nil
	}
}

// readLine reads up to LF, keeping at most limit bytes of a line. Past
// freeFrameBytes it waits for in (nil: admitted) before reading on. A long
// line is kept in the pieces read and joined once it ends, as readLarge
// does: appending to one slice would copy it over and over as it grows.
func (t *lineTransport) readLine(ctx context.Context, in admitter) ([]byte, error) {
	var parts [][]byte
	n := 0 // bytes of the line read, while within the limit
	over, admitted := false, in == nil
	for {
		if !admitted && !over && n >= freeFrameBytes {
			if err := in.admitLarge(ctx); err != nil {
				return nil, err
			}
			admitted = true
		}
		chunk, err := t.r.ReadSlice('\n')
		if !over {
			if int64(n+len(chunk)) > t.limit+1 { // +1: the LF itself
				over = true
				if keep := prefixKeep - n; keep > 0 {
					parts = append(parts, bytes.Clone(chunk[:min(keep, len(chunk))]))
				}
			} else {
				parts = append(parts, bytes.Clone(chunk))
				n += len(chunk)
			}
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil:
			if over {
				return nil, &tooLargeError{prefix: joined(parts)}
			}
			return joined(parts), err
		}
		if over {
			return nil, &tooLargeError{prefix: joined(parts)}
		}
		line := joined(parts)
		return line[:len(line)-1], nil
	}
}

// joined is parts as one slice: the only one, or a copy of them all.
func joined(parts [][]byte) []byte {
	if len(parts) == 1 {
		return parts[0]
	}
	return bytes.Join(parts, nil)
}

// WriteFrame writes one line, giving up when ctx ends (the write timeout):
// a peer that stopped reading a pipe is wedged, as on WebSocket. After a
// write gave up, the stream may hold part of a line, so none follows.
func (t *lineTransport) WriteFrame(ctx context.Context, frame []byte) error {
	return t.WriteFrames(ctx, [][]byte{frame})
}

// WriteFrames writes frames as lines in one write, as WriteFrame does.
func (t *lineTransport) WriteFrames(ctx context.Context, frames [][]byte) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if t.broken {
		return errWriteAbandoned
	}
	n := 0
	for _, f := range frames {
		n += len(f) + 1
	}
	buf := make([]byte, 0, n)
	for _, f := range frames {
		buf = append(append(buf, f...), '\n')
	}
	err := t.write(ctx, buf)
	if err != nil {
		t.broken = true
	}
	return err
}

// deadlineWriter is a writer whose writes can be bounded: pollable files
// (pipes) and network connections.
type deadlineWriter interface {
	SetWriteDeadline(time.Time) error
}

// write writes buf within ctx: through a write deadline when the writer
// takes one, else on a goroutine that is abandoned when ctx ends (the
// writer is then closed, if it can be, to release it).
func (t *lineTransport) write(ctx context.Context, buf []byte) error {
	if d, ok := t.w.(deadlineWriter); ok && d.SetWriteDeadline(deadlineOf(ctx)) == nil {
		return t.writeBounded(ctx, d, buf)
	}
	done := make(chan error, 1)
	go func() {
		_, err := t.w.Write(buf)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		if c, ok := t.w.(io.Closer); ok {
			c.Close()
		}
		return ctx.Err()
	}
}

// writeBounded writes buf with ctx's deadline already set on d; ctx's
// cancellation moves the deadline to the past.
func (t *lineTransport) writeBounded(ctx context.Context, d deadlineWriter, buf []byte) error {
	var mu sync.Mutex
	finished := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !finished { // a late call must not cut the next write
			d.SetWriteDeadline(time.Unix(1, 0))
		}
	})
	_, err := t.w.Write(buf)
	mu.Lock()
	finished = true
	mu.Unlock()
	stop()
	d.SetWriteDeadline(time.Time{})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}

// deadlineOf is ctx's deadline, or none (the zero time).
func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

func (t *lineTransport) Close(string, bool) error {
	if t.c != nil {
		return t.c.Close()
	}
	return nil
}
