// Package memnet is an in-memory network for tests, above all for tests
// that run in a testing/synctest bubble.
//
// A goroutine blocked on a loopback socket is not durably blocked (the
// kernel, outside the bubble, may wake it), so a bubble whose client waits
// on an httptest.Server never idles and its fake clock never advances. A
// goroutine blocked on a net.Pipe made inside the bubble is durably
// blocked: the clock moves on, timers fire in order, and a test of idle
// timeouts, keepalives or slow peers runs exactly and at once. Outside a
// bubble the network works the same, on the real clock.
//
// A pipe is synchronous: a write returns once the other end has read it.
// There are no socket buffers, so a peer that stops reading stops its
// writer at once.
package memnet

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Listener is a net.Listener whose connections are made by its
// DialContext, each one a net.Pipe. In a bubble, make it inside the bubble.
type Listener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// Listen returns a new Listener.
func Listen() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for a DialContext and returns the server's end of its pipe.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and DialContext; connections already made stay open.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is a loopback address, so that a server which trusts only local
// Host headers serves the listener's clients; nothing listens on it.
func (l *Listener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }

// DialContext connects to the listener, whatever network and address say:
// it returns the client's end of a new pipe once Accept has taken the
// other end.
func (l *Listener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// NewServer starts an httptest.Server for h on a new Listener and returns
// it with a client whose requests reach it, whatever their URL's host.
// Both are closed when the test ends (in a bubble, before it ends).
func NewServer(t testing.TB, h http.Handler) (*httptest.Server, *http.Client) {
	l := Listen()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = l
	srv.Start()
	tr := &http.Transport{DialContext: l.DialContext}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.CloseClientConnections() // stalled handlers return once their connection is gone
		srv.Close()
	})
	return srv, &http.Client{Transport: tr}
}
