package openai

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/openai/openai-go/v3/option"

	"mspd/provider/httpwatch"
)

// watch observes one request at the HTTP layer, below the SDK: the
// httpwatch.Watch runs the idle timer and keeps the response status and
// headers, and watch spots data: [DONE], which the SDK's stream swallows
// without telling a clean end from a cut.
//
// The SDK calls the middleware and reads the body on the Stream
// goroutine, so line and done need no lock.
type watch struct {
	*httpwatch.Watch

	line []byte // the first maxLine bytes of the current SSE line
	done bool   // data: [DONE] was received
}

// maxLine is how much of a line is kept: enough to recognise data: [DONE].
const maxLine = 16

func newWatch(idle time.Duration, cancel context.CancelCauseFunc) *watch {
	return &watch{Watch: httpwatch.New(idle, func() { cancel(httpwatch.ErrIdle) }), line: make([]byte, 0, maxLine)}
}

// sawDone reports whether data: [DONE] arrived.
func (w *watch) sawDone() bool { return w.done }

// middleware is an SDK middleware: the request goes through the Watch,
// and the body it returns through the [DONE] scanner.
func (w *watch) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := w.RoundTrip(req, next)
	if res != nil && res.Body != nil {
		res.Body = &scannedBody{ReadCloser: res.Body, w: w}
	}
	return res, err
}

// scannedBody scans the bytes read for data: [DONE].
type scannedBody struct {
	io.ReadCloser
	w *watch
}

func (b *scannedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.w.scan(p[:n])
	return n, err
}

// scan feeds body bytes through a tiny line splitter. Only a line's first
// maxLine bytes are kept (a prefix is all isDone needs), so scanning costs
// no allocation.
func (w *watch) scan(p []byte) {
	for _, c := range p {
		if c == '\n' || c == '\r' {
			if isDone(w.line) {
				w.done = true
			}
			w.line = w.line[:0]
			continue
		}
		if len(w.line) < maxLine {
			w.line = append(w.line, c)
		}
	}
}

// isDone matches "data: [DONE]" and "data:[DONE]", the same test as the
// SDK's (a data value starting with [DONE]).
func isDone(line []byte) bool {
	const field, done = "data:", "[DONE]"
	if len(line) < len(field) || string(line[:len(field)]) != field {
		return false
	}
	v := line[len(field):]
	if len(v) > 0 && v[0] == ' ' {
		v = v[1:]
	}
	return len(v) >= len(done) && string(v[:len(done)]) == done
}
