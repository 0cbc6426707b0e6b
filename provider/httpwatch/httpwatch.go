// Package httpwatch watches one provider request on the wire, below the
// provider's SDK: it cancels the request when the server stays silent
// longer than an idle timeout, and keeps the response's status and headers
// (an SDK drops them when an error body does not parse, yet they still
// classify the failure).
//
// Only time spent waiting on the server counts: the idle timer runs while
// the round trip waits for headers or a read of the body blocks, not while
// the caller handles what it read, so a slow consumer is no timeout. Any
// bytes end a wait, keep-alive pings included: a model thinking a long
// time before its first token is not a dead connection.
package httpwatch

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"mspd/modelretry"
	"mspd/provider"
)

// ErrIdle is the cause of an idle-timeout failure.
var ErrIdle = errors.New("no data from the server within the idle timeout")

// Watch watches one request. Its methods are safe for concurrent use; the
// timer fires on a goroutine of its own.
type Watch struct {
	idle    time.Duration // <= 0: no idle check
	cancel  func()
	headers atomic.Bool
	fired   atomic.Bool

	mu      sync.Mutex
	timer   *time.Timer // nil when the check is off
	stopped bool
	status  int
	header  http.Header
}

// New returns a Watch that calls cancel, once, when a timed wait on the
// server lasts idle; idle <= 0 turns the check off.
func New(idle time.Duration, cancel func()) *Watch {
	w := &Watch{idle: idle, cancel: cancel}
	if idle > 0 {
		w.timer = time.AfterFunc(idle, w.expire)
		w.timer.Stop()
	}
	return w
}

func (w *Watch) expire() {
	w.mu.Lock()
	stopped := w.stopped
	w.mu.Unlock()
	// A timer that fired as Stop ran must not fail a finished request.
	if !stopped && w.fired.CompareAndSwap(false, true) {
		w.cancel()
	}
}

// waiting runs the idle timer for a blocking wait on the server.
func (w *Watch) waiting() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil && !w.stopped && !w.fired.Load() {
		w.timer.Reset(w.idle)
	}
}

// answered pauses the idle timer: the wait ended.
func (w *Watch) answered() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
}

// RoundTrip sends req through send (the next transport or SDK middleware),
// timing the wait for the response headers, keeps the response's status
// and headers, and times every read of its body.
func (w *Watch) RoundTrip(req *http.Request, send func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	w.waiting()
	res, err := send(req)
	w.answered()
	if res == nil {
		return res, err
	}
	w.mu.Lock()
	w.status, w.header = res.StatusCode, res.Header.Clone()
	w.mu.Unlock()
	w.headers.Store(true)
	if res.Body != nil {
		res.Body = &timedBody{ReadCloser: res.Body, w: w}
	}
	return res, err
}

// Stop ends the watch once nothing more is read: a timer firing later
// does not count.
func (w *Watch) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// Fired reports whether the idle timer cancelled the request.
func (w *Watch) Fired() bool { return w.fired.Load() }

// GotHeaders reports whether response headers arrived, which tells a
// connection that brought nothing from a stream that broke.
func (w *Watch) GotHeaders() bool { return w.headers.Load() }

// Response returns the status and headers of the response, if one arrived
// (status 0 otherwise).
func (w *Watch) Response() (status int, header http.Header) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status, w.header
}

// IdleFailure is the failure of a request the idle timer cancelled: a
// timeout that says whether the server answered at all.
func (w *Watch) IdleFailure() *provider.Error {
	msg := "no data from the server for " + w.idle.String()
	if !w.GotHeaders() {
		msg = "no response from the server within " + w.idle.String()
	}
	return &provider.Error{Kind: modelretry.KindTimeout, Message: msg, Err: ErrIdle}
}

// timedBody runs the idle timer while a read blocks on the server.
type timedBody struct {
	io.ReadCloser
	w *Watch
}

func (b *timedBody) Read(p []byte) (int, error) {
	b.w.waiting()
	n, err := b.ReadCloser.Read(p)
	b.w.answered()
	return n, err
}
