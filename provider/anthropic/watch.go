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
// arrived, and whether the connection stayed silent longer than the idle
// timeout, in which case it cancels the request.
type watch struct {
	idle    time.Duration // <= 0: no idle check
	headers atomic.Bool
	expired atomic.Bool

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

func newWatch(idle time.Duration) *watch { return &watch{idle: idle} }

// start arms the idle timer; cancel aborts the request when it fires.
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
}

// touch records activity: the idle period starts again.
func (w *watch) touch() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil && !w.stopped && !w.expired.Load() {
		w.timer.Reset(w.idle)
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
	res, err := t.base.RoundTrip(req)
	if w == nil || err != nil {
		return res, err
	}
	w.headers.Store(true)
	w.touch()
	res.Body = &watchedBody{ReadCloser: res.Body, w: w}
	return res, nil
}

// watchedBody counts every byte read, pings included, as liveness.
type watchedBody struct {
	io.ReadCloser
	w *watch
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.touch()
	}
	return n, err
}
