package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// transport moves whole MSP frames: one WebSocket text message, or one
// NDJSON line.
type transport interface {
	// ReadFrame returns the next frame. A frame over the limit is consumed
	// and reported as a *tooLargeError carrying its first bytes.
	ReadFrame(ctx context.Context) ([]byte, error)
	// WriteFrame sends one frame.
	WriteFrame(ctx context.Context, frame []byte) error
	// Close ends the transport; reason is for the peer. A dead peer
	// (unanswered ping, failed write) gets no closing handshake.
	Close(reason string, dead bool) error
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
}

func (t *wsTransport) ReadFrame(ctx context.Context) ([]byte, error) {
	// A binary message is read like a text one: if it is not a valid
	// frame it is answered as such rather than dropping the connection.
	_, r, err := t.c.Reader(ctx)
	if err != nil {
		return nil, err
	}
	return readBounded(r, t.limit)
}

// readBounded reads a whole message, keeping at most limit bytes; beyond
// that it drains the rest and reports a *tooLargeError.
func readBounded(r io.Reader, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if n <= limit {
		return buf.Bytes(), nil
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, err
	}
	return nil, &tooLargeError{prefix: buf.Bytes()[:min(buf.Len(), prefixKeep)]}
}

func (t *wsTransport) WriteFrame(ctx context.Context, frame []byte) error {
	return t.c.Write(ctx, websocket.MessageText, frame)
}

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

func (t *lineTransport) ReadFrame(ctx context.Context) ([]byte, error) {
	for {
		line, err := t.readLine()
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

// readLine reads up to LF, keeping at most limit bytes of a line.
func (t *lineTransport) readLine() ([]byte, error) {
	var line []byte
	over := false
	for {
		chunk, err := t.r.ReadSlice('\n')
		if !over {
			if int64(len(line)+len(chunk)) > t.limit+1 { // +1: the LF itself
				over = true
				keep := prefixKeep - len(line)
				if keep > 0 {
					line = append(line, chunk[:min(keep, len(chunk))]...)
				}
			} else {
				line = append(line, chunk...)
			}
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil:
			if over {
				return nil, &tooLargeError{prefix: line}
			}
			return line, err
		}
		if over {
			return nil, &tooLargeError{prefix: line}
		}
		return line[:len(line)-1], nil
	}
}

// WriteFrame writes one line, giving up when ctx ends (the write timeout):
// a peer that stopped reading a pipe is wedged, as on WebSocket. After a
// write gave up, the stream may hold part of a line, so none follows.
func (t *lineTransport) WriteFrame(ctx context.Context, frame []byte) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if t.broken {
		return errWriteAbandoned
	}
	buf := make([]byte, 0, len(frame)+1)
	buf = append(append(buf, frame...), '\n')
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
