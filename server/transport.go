package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"sync"

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

	wmu sync.Mutex
	w   io.Writer
	c   io.Closer // may be nil
}

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

func (t *lineTransport) WriteFrame(_ context.Context, frame []byte) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	buf := make([]byte, 0, len(frame)+1)
	buf = append(append(buf, frame...), '\n')
	_, err := t.w.Write(buf)
	return err
}

func (t *lineTransport) Close(string, bool) error {
	if t.c != nil {
		return t.c.Close()
	}
	return nil
}
