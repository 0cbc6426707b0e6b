// Package server carries MSP over transports: WebSocket at /msp and NDJSON
// over stdio, both through the same per-connection machinery. Each
// connection has its own handshake state, validates every inbound frame
// against the MSP schema before dispatch, answers every request (bad ones
// with typed errors, never by closing), and owns its socket through one
// writer goroutine fed by a bounded outbox. The package also serves the
// operational endpoints (/livez, /readyz, /metrics).
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"mspd/auth"
	"mspd/internal/workpool"
	"mspd/observe"
	"mspd/schema/msp"
	"mspd/session"
)

// Config configures a Server.
type Config struct {
	// Version is reported in serverInfo and the user agent.
	Version string
	// Fingerprint is the schema fingerprint initialize reports; default
	// the hash of the embedded schema.
	Fingerprint string
	// Home is reported as museHome: the server's data directory, or ""
	// on a server of several principals, which keeps its paths to itself.
	Home string
	// MaxFrameBytes bounds inbound frames (default 10 MiB).
	MaxFrameBytes int64
	// QueueBytes is each connection's outbound budget: responses,
	// broadcasts and view events together (default 8 MiB). View events get
	// half of it, past which a slow reader gets view/gap; past the whole,
	// the connection stops reading requests.
	QueueBytes int
	// InboundBytes is the server-wide budget of inbound frames being read
	// and decoded (default 32 MiB): a frame past its first 64 KiB takes
	// MaxFrameBytes of it while it is read, and its own size until its
	// request is dispatched; a connection whose frame does not fit stops
	// reading (TCP pushes back on its client) until one does.
	InboundBytes int64
	// MaxConnRequests bounds the requests one connection has executing at
	// once (default 1: each is answered before the next frame is read, so
	// a connection's requests are handled in order). Above 1, answers may
	// come in any order.
	MaxConnRequests int
	// QueueFrames bounds the view events queued per connection (default
	// 1024).
	QueueFrames int
	// MaxSubscriptions bounds the sessions one connection follows at once
	// (default 256): each keeps view state on the connection and its
	// session in memory. A request that would follow one more is refused
	// as backpressured until the client unsubscribes one.
	MaxSubscriptions int
	// WriteTimeout bounds one frame write; a peer that takes longer is
	// wedged and its connection closes (default 10 s).
	WriteTimeout time.Duration
	// PingInterval is how often a WebSocket connection is pinged; one not
	// answered within WriteTimeout is dead and closed, so proxies see
	// traffic and half-open connections do not linger (default 25 s;
	// negative disables).
	PingInterval time.Duration
	// OriginPatterns lists the browser origins allowed besides the
	// server's own host (coder/websocket patterns, e.g. "localhost:*").
	OriginPatterns []string
	// AuthToken, when set and Auth is nil, is the one shared token /msp
	// requires (see package auth for how a client presents it).
	AuthToken string
	// Auth authenticates /msp handshakes into principals; nil builds one
	// from AuthToken.
	Auth *auth.Authenticator
	// AllowedHosts lists Host names accepted, besides loopback addresses
	// and localhost, while no credential is configured: the guard against
	// DNS rebinding (see Handler).
	AllowedHosts []string
	// Models answers model/list; nil serves an empty catalog.
	Models ModelLister
	// Metrics are what /metrics serves; the server adds its own counts and
	// the session manager's gauges to them, and times the outbound queues.
	// Nil gives the server a registry of its own.
	Metrics *observe.Metrics
	// Pprof serves the Go runtime's profiles under /debug/pprof/, behind
	// the same Host check and token as /msp (off by default).
	Pprof bool
	// SessionMCP grants the sessionMcp capability to connections that
	// request it, whose session/start may then name MCP servers
	// (config.mcpServers); the session manager's SessionServers must be
	// set. Off by default: no connection may.
	SessionMCP bool
	// Ready, when set, says why this node should be sent no new clients
	// (its store cannot write), or nil; /readyz answers 503 with it.
	Ready func() error
	// Logger receives connection logs (default slog.Default()).
	Logger *slog.Logger
}

// DefaultMaxSubscriptions is Config.MaxSubscriptions when unset.
const DefaultMaxSubscriptions = 256

// DefaultInboundBytes is Config.InboundBytes when unset: three frames of
// the default 10 MiB limit decoded at once.
const DefaultInboundBytes = 32 << 20

// ModelLister renders model/list for a session's (or, when empty, the
// default) provider and model.
type ModelLister interface {
	List(providerID, modelID string) msp.ModelListResult
}

// Server serves MSP connections for a session manager.
type Server struct {
	cfg     Config
	mgr     *session.Manager
	val     *msp.Validator
	log     *slog.Logger
	metrics metrics

	hosts    hostPolicy
	draining atomic.Bool
	mu       sync.Mutex
	conns    map[*conn]struct{}
	wg       sync.WaitGroup
	shutDown bool           // Shutdown has begun: no connection joins wg (guarded by mu)
	workers  *workpool.Pool // handle the frames of every connection
	intake   *intake        // inbound bytes being read and decoded
}

// New builds a server for mgr.
func New(mgr *session.Manager, cfg Config) (*Server, error) {
	val, err := msp.NewValidator()
	if err != nil {
		return nil, fmt.Errorf("server: compiling the MSP schema: %w", err)
	}
	if cfg.Fingerprint == "" {
		cfg.Fingerprint = msp.Fingerprint()
	}
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = 10 << 20
	}
	if cfg.InboundBytes <= 0 {
		cfg.InboundBytes = DefaultInboundBytes
	}
	if cfg.MaxConnRequests <= 0 {
		cfg.MaxConnRequests = 1
	}
	if cfg.QueueFrames <= 0 {
		cfg.QueueFrames = 1024
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = 8 << 20
	}
	if cfg.MaxSubscriptions <= 0 {
		cfg.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.PingInterval == 0 {
		cfg.PingInterval = 25 * time.Second
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Auth == nil {
		if cfg.Auth, err = auth.New(context.Background(), auth.Config{Token: cfg.AuthToken, Logger: cfg.Logger}); err != nil {
			return nil, err
		}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = observe.New(prometheus.NewRegistry())
	}
	s := &Server{cfg: cfg, mgr: mgr, val: val, log: cfg.Logger, conns: make(map[*conn]struct{}),
		hosts: newHostPolicy(cfg.AllowedHosts), workers: workpool.New(workpool.DefaultMaxIdle, workpool.DefaultIdleFor),
		intake: newIntake(cfg.InboundBytes, cfg.MaxFrameBytes)}
	if err := cfg.Metrics.WatchServer(s.stats); err != nil {
		return nil, fmt.Errorf("server: metrics: %w", err)
	}
	if err := cfg.Metrics.WatchSessions(s.sessionStats); err != nil {
		return nil, fmt.Errorf("server: metrics: %w", err)
	}
	return s, nil
}

// Handler returns the HTTP handler: the WebSocket endpoint at /msp and the
// operational endpoints. While no credential is configured, a request
// whose Host is not this machine (a loopback address, localhost, or one
// of AllowedHosts) is refused with 403 before it reaches /msp or a mounted
// page: a web page that rebinds its own name to 127.0.0.1 must not read
// sessions or run turns. The operational endpoints are exempt, as they
// are from the token: they carry no session data and change nothing, and
// probes and scrapers address the server by whatever name they have.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /msp", s.serveWebSocket)
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		if s.cfg.Ready != nil {
			if err := s.cfg.Ready(); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /metrics", s.cfg.Metrics.Handler())
	if s.cfg.Pprof {
		pp := s.pprofHandler()
		mux.Handle("GET /debug/pprof/", pp)
		mux.Handle("POST /debug/pprof/symbol", pp)
	}
	return &frontDoor{s: s, mux: mux}
}

// Authenticator is what authenticates the server's handshakes.
func (s *Server) Authenticator() *auth.Authenticator { return s.cfg.Auth }

// Mount adds a handler (the web page) under the given pattern of h, which
// must come from Handler; it sits behind the same Host check as /msp.
func Mount(h http.Handler, pattern string, page http.Handler) {
	h.(*frontDoor).mux.Handle(pattern, page)
}

// frontDoor checks the Host of every request but the operational ones.
type frontDoor struct {
	s   *Server
	mux *http.ServeMux
}

func (f *frontDoor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/livez", "/readyz", "/metrics":
	default:
		if !f.s.cfg.Auth.Enabled() && !f.s.hosts.allows(r.Host) {
			f.s.log.Info("refused a request for a foreign Host", "host", r.Host, "remote", r.RemoteAddr, "path", r.URL.Path)
			http.Error(w, "this Host is not served: without authentication mspd answers only to loopback names (see --allowed-host)", http.StatusForbidden)
			return
		}
	}
	f.mux.ServeHTTP(w, r)
}

// hostPolicy is the set of Host names accepted without authentication.
type hostPolicy map[string]bool

func newHostPolicy(extra []string) hostPolicy {
	p := hostPolicy{}
	for _, h := range extra {
		p[normalHost(h)] = true
	}
	return p
}

// allows reports whether hostport (a Host header, port optional) names a
// loopback address, localhost, or an allowed host.
func (p hostPolicy) allows(hostport string) bool {
	host := normalHost(hostport)
	if host == "" {
		return false
	}
	if host == "localhost" || p[host] {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// normalHost drops the port, IPv6 brackets and case.
func normalHost(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
}

func (s *Server) serveWebSocket(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		http.Error(w, "server is shutting down", http.StatusServiceUnavailable)
		return
	}
	cred, err := s.cfg.Auth.Authenticate(r)
	if err != nil {
		// The reason names what was wrong, never the token.
		s.log.Warn("refused an unauthenticated connection", "reason", err, "remote", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="mspd", error="invalid_token"`)
		http.Error(w, "a valid token is required", http.StatusUnauthorized)
		return
	}
	cw := &corkingWriter{ResponseWriter: w}
	ws, err := websocket.Accept(cw, r, &websocket.AcceptOptions{
		OriginPatterns: s.cfg.OriginPatterns,
		// Echoed when offered, so that a browser that carries its token
		// as a subprotocol accepts the handshake.
		Subprotocols: []string{auth.Subprotocol},
		// Compression with context takeover costs ~1.2 MiB a connection.
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		s.log.Debug("websocket upgrade refused", "err", err, "origin", r.Header.Get("Origin"))
		return
	}
	// The transport enforces the frame limit itself so that an oversized
	// frame is answered instead of closing the connection.
	ws.SetReadLimit(-1)
	t := &wsTransport{c: ws, limit: s.cfg.MaxFrameBytes, cork: cw.cork}
	log := s.log.With("remote", r.RemoteAddr)
	if cred.Principal != "" {
		log = log.With("principal", cred.Principal)
	}
	// The connection outlives nothing but the server and its credential:
	// Shutdown closes it, and so do a reload that revokes the credential
	// and its expiry. Its context carries the principal every request on
	// it runs for. It is served on a goroutine of its own, so that this
	// one returns and net/http lets go of the request, its headers and
	// the stack that parsed them: an idle connection keeps only what it
	// needs.
	if c := s.open(session.WithPrincipal(context.WithoutCancel(r.Context()), cred.Principal), cred, t, log); c != nil {
		go s.serveConn(c)
	}
}

// ServeStdio serves one connection of NDJSON frames on r and w until r
// ends or ctx is done (then r is closed, if it can be).
func (s *Server) ServeStdio(ctx context.Context, r io.Reader, w io.Writer) {
	closer, _ := r.(io.Closer)
	// stdio is the local user's own pipe: the single-user principal, with
	// no credential to end.
	ctx = session.WithPrincipal(ctx, "")
	s.run(ctx, newLineTransport(r, w, closer, s.cfg.MaxFrameBytes), s.log.With("transport", "stdio"))
}

// run serves a connection without a credential (stdio) until it ends.
func (s *Server) run(ctx context.Context, t transport, log *slog.Logger) {
	if c := s.open(ctx, auth.Credential{}, t, log); c != nil {
		s.serveConn(c)
	}
}

// open registers a new connection, living within ctx and holding cred, so
// that Shutdown and ReloadAuth see it from now on; one opened while the
// server drains is told to go away at once, one whose credential a reload
// revoked meanwhile is closed as revoked, and one opened once Shutdown
// has begun is closed and nil returned.
func (s *Server) open(ctx context.Context, cred auth.Credential, t transport, log *slog.Logger) *conn {
	s.mu.Lock()
	if s.shutDown {
		// Shutdown is waiting for s.wg: nothing may join it now. The
		// connection got past the front door just before it closed.
		s.mu.Unlock()
		_ = t.Close("server shutting down", false)
		return nil
	}
	c := newConn(s, t, log)
	c.cred = cred
	c.begin(ctx)
	c.watchExpiry()
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.metrics.connsOpen.Add(1)
	s.metrics.connsTotal.Add(1)
	// A reload between the handshake and the registration did not see
	// this connection; it sees the reloaded credentials now (the reload
	// stored them before it took s.mu to look at the connections).
	if !s.cfg.Auth.Valid(cred) {
		c.credentialEnded(ReasonRevoked)
	}
	if s.draining.Load() {
		c.goAway("server shutting down")
	}
	return c
}

// serveConn serves an open connection until it ends, then forgets it.
func (s *Server) serveConn(c *conn) {
	defer func() {
		s.metrics.connsOpen.Add(-1)
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	c.serve(c.ctx)
}

// Drain stops accepting connections (503) and turns /readyz 503, so a load
// balancer sends new clients elsewhere; open connections go on.
func (s *Server) Drain() { s.draining.Store(true) }

// Shutdown stops accepting connections (readyz turns 503), closes the open
// ones as going away once their queued frames are written, and waits for
// them until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	s.mu.Lock()
	s.shutDown = true
	for c := range s.conns {
		c.goAway("server shutting down")
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); s.workers.Close(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errors.New("server: connections still open at shutdown deadline")
	}
}
