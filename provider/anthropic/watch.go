package anthropic

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// watchKey carries a request's *watch in its context to the transport.
type watchKey struct{}

// watch observes one request on the wire: whether response headers
// arrived (and, for an error response, its status and headers), and
// whether the server stayed silent longer than the idle timeout, in which
// case it cancels the request. Only time spent waiting on the server
// counts: the timer runs while a round trip or a body read is blocked, not
// while the caller handles what was read (a slow onText is no timeout).
type watch struct {
	idle    time.Duration // <= 0: no idle check
	headers atomic.Bool
	expired atomic.Bool

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	status  int         // an error response's status, 0 otherwise
	header  http.Header // that response's headers
}

func newWatch(idle time.Duration) *watch { return &watch{idle: idle} }

// start prepares the idle timer, stopped; cancel aborts the request when
// it fires.
func (w *watch) start(cancel context.CancelFunc) {
	if w.idle <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = time.AfterFunc(w.idle, func() {
		w.mu.Lock()
		stopped := w.stopped
		w.mu.Unlock()
		if !stopped {
			w.expired.Store(true)
			cancel()
		}
	})
	w.timer.Stop()
}

// waiting runs the idle timer for a blocking wait on the server.
func (w *watch) waiting() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil && !w.stopped && !w.expired.Load() {
		w.timer.Reset(w.idle)
	}
}

// done pauses the idle timer: the wait ended.
func (w *watch) done() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
}

// stop disarms the timer once the request is over, so a late firing does
// not count as a timeout.
func (w *watch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// errorResponse returns the status and headers of an error response, if
// one arrived.
func (w *watch) errorResponse() (int, http.Header) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status, w.header
}

func (w *watch) fired() bool      { return w.expired.Load() }
func (w *watch) gotHeaders() bool { return w.headers.Load() }

// watchTransport reports a request's wire activity to the watch in its
// context; requests without one pass through untouched.
type watchTransport struct {
	base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *watchTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	w, _ := req.Context().Value(watchKey{}).(*watch)
	if w == nil {
		return t.base.RoundTrip(req)
	}
	w.waiting()
	res, err := t.base.RoundTrip(req)
	w.done()
	if err != nil {
		return res, err
	}
	w.headers.Store(true)
	if res.StatusCode >= 400 {
		// Kept in case the error body breaks: the status and Retry-After
		// still classify the failure.
		w.mu.Lock()
		w.status, w.header = res.StatusCode, res.Header.Clone()
		w.mu.Unlock()
	}
	res.Body = &watchedBody{ReadCloser: res.Body, w: w}
	return res, nil
}

// watchedBody runs the idle timer while a read blocks on the server.
type watchedBody struct {
	io.ReadCloser
	w *watch
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.w.waiting()
	n, err := b.ReadCloser.Read(p)
	b.w.done()
	return n, err
}
