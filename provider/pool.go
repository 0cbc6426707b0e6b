package provider

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Connection pool defaults. Go's http.DefaultTransport keeps 2 idle
// connections per host: under hundreds of concurrent streams most requests
// then close their connection on return and the next opens a new one (a TCP
// handshake, and a TLS handshake against a real provider). A turn's
// admission commits in groups, so requests start in bursts; the idle pool
// must hold a burst's worth of connections to reuse them.
const (
	// DefaultMaxIdleConns is how many idle connections a provider keeps to
	// its API when its configuration names none: the turns in flight at
	// 1,000 a second of 1.5 s answers (1,500) with room to spare. At 256,
	// mspbench gateway counted 12,268 connections for 60,000 requests at
	// that rate. Idle ones close after DefaultIdleConnTimeout.
	DefaultMaxIdleConns = 2048
	// DefaultIdleConnTimeout closes a connection idle this long.
	DefaultIdleConnTimeout = 90 * time.Second
)

// Pool sizes the connections one provider keeps to its API. The zero
// value is the defaults.
type Pool struct {
	// MaxIdleConns is how many idle connections are kept for reuse (per
	// host; a provider has one): 0 means DefaultMaxIdleConns, a negative
	// value keeps none.
	MaxIdleConns int
	// MaxConns bounds the connections open at once, idle or busy; a
	// request beyond it waits for one to free. 0 means no bound.
	MaxConns int
}

// Transport returns a transport of its own for one provider, sized by p:
// http.DefaultTransport's dialer, proxy and timeouts, HTTP/2 attempted over
// TLS (one connection then carries many streams), idle connections closed
// after DefaultIdleConnTimeout.
func (p Pool) Transport() *http.Transport {
	idle := p.MaxIdleConns
	switch {
	case idle == 0:
		idle = DefaultMaxIdleConns
	case idle < 0:
		idle = -1 // net/http: no idle connections kept
	}
	if p.MaxConns > 0 && idle > p.MaxConns {
		idle = p.MaxConns
	}
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          max(idle, 0),
		MaxIdleConnsPerHost:   idle,
		MaxConnsPerHost:       max(p.MaxConns, 0),
		IdleConnTimeout:       DefaultIdleConnTimeout,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// Client returns an HTTP client on p's Transport whose response bodies,
// closed unfinished, are drained first (below). It has no Timeout: a
// stream's silence is bounded by Endpoint.IdleTimeout instead.
func (p Pool) Client() *http.Client {
	return &http.Client{Transport: drainingTransport{base: p.Transport()}}
}

// Draining a closed stream: a streaming SDK closes the response body at
// the stream's last event, often before the chunked encoding's final
// chunk has been read. net/http then cannot tell the connection is at a
// message boundary and closes it instead of keeping it for the next
// request (measured: 3 to 6 new connections for 20 requests one after
// another). Close reads the rest first, within bounds. It must do so before
// it returns: the providers cancel the request's context right after, which
// would close the connection under a drain running in the background.
const (
	drainMaxBytes = 4 << 10
	drainTimeout  = 100 * time.Millisecond
)

// drainingTransport wraps each response body so that Close drains it.
type drainingTransport struct{ base http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t drainingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil || resp.Body == http.NoBody {
		return resp, err
	}
	resp.Body = &drainingBody{ReadCloser: resp.Body, ctx: req.Context()}
	return resp, nil
}

// drainingBody is a response body whose Close first reads what is left of
// it: at most drainMaxBytes, for at most drainTimeout, and nothing once
// its request's context has ended.
type drainingBody struct {
	io.ReadCloser
	ctx context.Context
	eof atomic.Bool
}

func (b *drainingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// Close drains, then closes.
func (b *drainingBody) Close() error {
	if !b.eof.Load() && b.ctx.Err() == nil {
		// Closing the body aborts a read the server keeps waiting.
		stop := time.AfterFunc(drainTimeout, func() { b.ReadCloser.Close() })
		io.CopyN(io.Discard, b.ReadCloser, drainMaxBytes)
		stop.Stop()
	}
	return b.ReadCloser.Close()
}
