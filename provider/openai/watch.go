package openai

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/openai/openai-go/v3/option"
)

// errIdle is the cause the idle watchdog cancels a request with.
var errIdle = errors.New("openai: no data from the server within the idle timeout")

// watch observes one request at the HTTP layer, below the SDK: it runs the
// idle watchdog, records the response status and headers (the SDK drops
// them when an error body does not parse), and spots data: [DONE], which the
// SDK's stream swallows without telling a clean end from a cut.
//
// Everything but the timer callback runs on the Stream goroutine: the SDK
// calls the middleware and reads the body synchronously.
type watch struct {
	idle   time.Duration
	timer  *time.Timer // nil when the watchdog is off
	fired  atomic.Bool
	cancel context.CancelCauseFunc

	gotHeaders bool
	status     int
	header     http.Header

	line      []byte // the first maxLine bytes of the current SSE line
	done      bool   // data: [DONE] was received
	beforeHdr bool   // the watchdog fired while waiting for headers
}

// maxLine is how much of a line is kept: enough to recognise data: [DONE].
const maxLine = 16

func newWatch(idle time.Duration, cancel context.CancelCauseFunc) *watch {
	w := &watch{idle: idle, cancel: cancel, line: make([]byte, 0, maxLine)}
	if idle > 0 {
		w.timer = time.AfterFunc(time.Hour, func() {
			w.fired.Store(true)
			cancel(errIdle)
		})
		w.timer.Stop()
	}
	return w
}

// arm starts the idle countdown before waiting on the server; disarm stops
// it once the server answered. Time spent elsewhere (in onText, say) is
// not the server's silence.
func (w *watch) arm() {
	if w.timer != nil {
		w.timer.Reset(w.idle)
	}
}

func (w *watch) disarm() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

func (w *watch) stop() { w.disarm() }

// timedOut reports whether the watchdog cancelled the request.
func (w *watch) timedOut() bool { return w.fired.Load() }

// sawDone reports whether data: [DONE] arrived.
func (w *watch) sawDone() bool { return w.done }

// middleware is an SDK middleware wrapping the response body.
func (w *watch) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	w.arm()
	res, err := next(req)
	w.disarm()
	if w.timedOut() {
		w.beforeHdr = true
	}
	if res != nil {
		w.gotHeaders = true
		w.status = res.StatusCode
		w.header = res.Header
		if res.Body != nil {
			res.Body = &watchedBody{rc: res.Body, w: w}
		}
	}
	return res, err
}

// watchedBody times each read and scans the bytes for data: [DONE].
type watchedBody struct {
	rc io.ReadCloser
	w  *watch
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.w.arm()
	n, err := b.rc.Read(p)
	b.w.disarm()
	b.w.scan(p[:n])
	return n, err
}

func (b *watchedBody) Close() error { return b.rc.Close() }

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
