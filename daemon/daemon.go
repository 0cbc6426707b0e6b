// Package daemon assembles a complete mspd from a Config: the SQLite
// store, the model provider, the retry engine, the turn runner, the session
// manager and the MSP server. cmd/mspd fills a Config from flags and the
// environment; the end-to-end tests start daemons in-process.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"mspd/auth"
	"mspd/modelretry"
	"mspd/observe"
	"mspd/provider"
	"mspd/provider/catalog"
	"mspd/provider/demo"
	"mspd/schema/msp"
	"mspd/server"
	"mspd/session"
	"mspd/store"
	"mspd/tool/sessionmcp"
	"mspd/turn"
	"mspd/web"
)

// Config is everything a daemon needs.
type Config struct {
	// Listen is the HTTP address for /msp and the ops endpoints
	// (default 127.0.0.1:7700; port 0 picks a free one).
	Listen string
	// DataDir holds the SQLite database (default ./mspd-data).
	DataDir string
	// Backend says where sessions live (default: SQLite in DataDir).
	Backend Backend
	// CommandRetention is how long a commandId ledger entry is kept, the
	// exactly-once window: a command replayed later is taken as new
	// (0: DefaultCommandRetention; negative: for ever).
	CommandRetention time.Duration
	// ConfigFile, when set, is a TOML file naming the providers (see
	// package catalog); Provider, Model and Demo are then ignored.
	ConfigFile string
	// Provider names the single provider without a ConfigFile: demo
	// (default), scripted, openai or anthropic.
	Provider string
	// Model is that provider's model id; empty for its default.
	Model string
	// System, IdleTimeout and OpenAIAPI refine that provider: the name
	// reported as `system` (e.g. "ollama" for a compatible server), the
	// silence after which an attempt fails as a timeout, and "responses"
	// for OpenAI's Responses API.
	System      string
	IdleTimeout time.Duration
	OpenAIAPI   string
	// Pool sizes that provider's connections to its API (the ConfigFile's
	// providers set theirs per entry).
	Pool provider.Pool
	// MaxOutputTokens is the model's output limit: the cap of every
	// request and of truncation growth (0: 32768).
	MaxOutputTokens int
	// Demo configures the demo provider.
	Demo demo.Config
	// Tools configures the tools turns may call: the built-in server and
	// the ConfigFile's [[mcp]] servers.
	Tools Tools
	// SessionMCP is what MCP servers clients may add to their own
	// sessions (session/start's config.mcpServers): none (the zero value,
	// off), streamable HTTP servers on listed hosts (http), or any (all,
	// refused by Start beyond loopback). See docs/tools.md.
	SessionMCP sessionmcp.Policy
	// Env reads the providers' environment variables (API keys, base
	// URLs); nil means os.Getenv.
	Env catalog.Env
	// Retry is the host retry policy; zero fields take modelretry defaults.
	Retry modelretry.Policy
	// RetryBudget bounds retries across all turns of each provider (gRPC
	// retry throttling): zero values take modelretry's defaults (10 tokens,
	// ratio 0.1); negative Tokens disables the budget.
	RetryBudget Budget
	// Breaker sets each provider's circuit breaker: zero fields take
	// modelretry.DefaultBreakerConfig's; a negative Failures turns the
	// breakers off.
	Breaker modelretry.BreakerConfig
	// DefaultMaxTokens bounds each attempt when a turn names no maxTokens.
	DefaultMaxTokens int
	// Server configures transports and limits.
	Server server.Config
	// Auth names the per-user credentials: a tokens file and JWT keys.
	// Its Token defaults to Server.AuthToken, the single-user token.
	Auth auth.Config
	// InsecureNoAuth lets Start listen on a non-loopback address with no
	// credential configured, which it otherwise refuses.
	InsecureNoAuth bool
	// Clock, when set, replaces the real clock (tests).
	Clock modelretry.Clock
	// Logger receives logs (default slog.Default()); lines about a turn
	// carry its trace_id and span_id when tracing.
	Logger *slog.Logger
	// TracerProvider receives the turns' spans (tests pass an in-memory
	// one). Nil builds one from the standard OTEL_* variables, which is
	// none unless an OTLP endpoint is named (see observe).
	TracerProvider trace.TracerProvider
}

// Budget sizes the shared retry budget.
type Budget struct {
	// Tokens is the bucket size; retries stop below half of it.
	Tokens int
	// Ratio is what a success gives back.
	Ratio float64
	// Refill is what each second gives back (default 0.2; negative: none).
	Refill float64
}

// Daemon is a running mspd.
type Daemon struct {
	cfg     Config
	backend *backend
	mgr     *session.Manager
	srv     *server.Server
	http    *http.Server
	ln      net.Listener
	served  chan error
	// stopPruner stops the ledger pruner and waits for it.
	stopPruner func()
	// metrics is what /metrics serves, on a registry of this daemon's.
	metrics *observe.Metrics
	// tools are the MCP servers' clients, stopped last.
	tools *toolset
	// stopTracing flushes and stops the tracer provider New built (a no-op
	// for one given in Config, whose owner stops it).
	stopTracing func(context.Context) error

	closeOnce sync.Once
	closeErr  error
}

// New opens the store, settles what a previous process left running, and
// builds the server; it does not listen yet.
func New(ctx context.Context, cfg Config) (*Daemon, error) {
	if cfg.DataDir == "" {
		cfg.DataDir = "mspd-data"
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:7700"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = slog.New(observe.LogHandler(cfg.Logger.Handler()))
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if cfg.Auth.Token == "" {
		cfg.Auth.Token = cfg.Server.AuthToken
	}
	acfg := cfg.Auth
	acfg.Logger = cfg.Logger
	authn, err := auth.New(ctx, acfg)
	if err != nil {
		return nil, err
	}
	cat, err := newCatalog(cfg)
	if err != nil {
		return nil, err
	}
	tel, err := newTelemetry(ctx, cfg)
	if err != nil {
		return nil, err
	}
	runners, err := newRunners(cfg, cat, tel)
	if err != nil {
		tel.stopTracing(ctx)
		return nil, err
	}
	// The store first: a data directory in use is refused before any tool
	// server starts (and logs).
	be, err := openBackend(ctx, cfg, dir, tel.metrics)
	if err != nil {
		tel.stopTracing(ctx)
		return nil, err
	}
	tools, err := startTools(cfg, cat, cfg.Logger)
	if err != nil {
		be.close()
		tel.stopTracing(ctx)
		return nil, err
	}
	sessionServers, err := tools.sessionServers(cfg)
	if err != nil {
		tools.close()
		be.close()
		tel.stopTracing(ctx)
		return nil, err
	}
	// Before the manager resumes what a previous process left running.
	tools.waitReady(ctx, cmp.Or(cfg.Tools.ReadyWait, 10*time.Second), cfg.Logger)
	st := be.store
	// A server of several principals tells none of them where it keeps
	// its files (or its NATS address): session.path and museHome are ""
	// there, the value upstream reserves for "no path a client may use".
	logPath, home := be.logPath, dir
	if authn.PerUser() {
		logPath, home = "", ""
	}
	now := time.Now
	if cfg.Clock != nil {
		now = cfg.Clock.Now
	}
	scfg0 := session.Config{
		Store:   st,
		Runner:  runners,
		LogPath: logPath,
		Catalog: models{cat, runners.breakers},
		Models:  models{cat, runners.breakers},
		Now:     now,
		// Events, pages and histories must fit the transports' frames.
		MaxFrameBytes: int(cfg.Server.MaxFrameBytes),
		Logger:        cfg.Logger,
		Metrics:       tel.metrics,
		Tools:         turn.Registry(tools.registry),
	}
	if be.cluster != nil {
		scfg0.Cluster = be.cluster
	}
	if sessionServers != nil {
		scfg0.SessionServers = sessionServers
	}
	mgr, err := session.New(ctx, scfg0)
	if err != nil {
		be.close()
		tools.close()
		tel.stopTracing(ctx)
		return nil, err
	}
	if be.cluster != nil {
		if err := be.cluster.Serve(mgr.Serve); err != nil {
			mgr.Close()
			be.close()
			tools.close()
			tel.stopTracing(ctx)
			return nil, err
		}
	}
	scfg := cfg.Server
	if h, ok := st.(store.Health); ok {
		scfg.Ready = h.Healthy
	}
	scfg.Home = home
	scfg.Logger = cfg.Logger
	scfg.Models = models{cat, runners.breakers}
	scfg.Auth = authn
	scfg.Metrics = tel.metrics
	scfg.SessionMCP = sessionServers != nil
	srv, err := server.New(mgr, scfg)
	if err != nil {
		mgr.Close()
		be.close()
		tools.close()
		tel.stopTracing(ctx)
		return nil, err
	}
	for _, p := range cat.Providers() {
		cfg.Logger.Info("provider", "id", p.ID, "type", p.Type, "model", p.DefaultModel, "system", p.Model.System())
	}
	stopPruner := startPruner(st, cfg.CommandRetention, cfg.Logger)
	return &Daemon{cfg: cfg, backend: be, mgr: mgr, srv: srv, stopPruner: stopPruner,
		metrics: tel.metrics, tools: tools, stopTracing: tel.stopTracing}, nil
}

// DefaultCommandRetention is the exactly-once window when Config names
// none: a week, as payment APIs keep idempotency keys.
const DefaultCommandRetention = 7 * 24 * time.Hour

// startPruner prunes the commandId ledger in the background, unless
// retention is negative, and returns what stops it.
func startPruner(st store.Store, retention time.Duration, log *slog.Logger) (stop func()) {
	if retention == 0 {
		retention = DefaultCommandRetention
	}
	if retention < 0 {
		return func() {}
	}
	// Entries outlive the window by at most a tenth of it (an hour at most).
	interval := max(time.Second, min(time.Hour, retention/10))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		store.PruneEvery(ctx, st, retention, interval, log)
	}()
	return func() {
		cancel()
		<-done
	}
}

func newCatalog(cfg Config) (*catalog.Catalog, error) {
	env := cfg.Env
	if env == nil {
		env = os.Getenv
	}
	if cfg.ConfigFile != "" {
		return catalog.Load(cfg.ConfigFile, env)
	}
	return catalog.Single(catalog.Entry{
		Type:            cfg.Provider,
		Model:           cfg.Model,
		System:          cfg.System,
		IdleTimeout:     catalog.Duration(cfg.IdleTimeout),
		MaxIdleConns:    cfg.Pool.MaxIdleConns,
		MaxConns:        cfg.Pool.MaxConns,
		API:             cfg.OpenAIAPI,
		MaxOutputTokens: cfg.MaxOutputTokens,
		WordDelay:       catalog.Duration(cfg.Demo.WordDelay),
		Faults:          cfg.Demo.FaultRate,
		Seed:            cfg.Demo.Seed,
	}, env)
}

// models adapts the catalog to MSP: session/start's provider and model,
// model/list (with each model's context window, each provider's breaker
// state and chain), and what a session's model takes (Info, for
// turn/start's images).
type models struct {
	*catalog.Catalog
	breakers map[string]*modelretry.Breaker
}

func (m models) Resolve(providerID, modelID string) (string, string, error) {
	p, model, err := m.Catalog.Resolve(providerID, modelID)
	var re *catalog.RefusedError
	if errors.As(err, &re) {
		return "", "", msp.ErrInvalidParams(re.Field, "%s", re.Message)
	}
	return p, model, err
}

func (m models) Serves(providerID string) bool { return m.Get(providerID) != nil }

func (m models) List(activeProvider, activeModel string) msp.ModelListResult {
	if activeProvider == "" {
		def := m.Default()
		activeProvider, activeModel = def.ID, def.DefaultModel
	}
	res := msp.ModelListResult{ProviderID: activeProvider, Source: "configCatalog", Models: []msp.ModelEntry{}}
	for _, l := range m.Models() {
		e := msp.ModelEntry{ModelID: l.ModelID, ProviderID: l.ProviderID, DisplayLabel: l.ProviderID + " · " + l.ModelID,
			IsDefault: l.IsDefault, IsActive: l.ProviderID == activeProvider && l.ModelID == activeModel,
			Images: l.Capabilities.Images, Tools: l.Capabilities.Tools, Reasoning: l.Capabilities.Reasoning}
		if l.OutputLimit > 0 {
			limit := int64(l.OutputLimit)
			e.OutputLimit = &limit
		}
		if l.ContextWindow > 0 {
			window := int64(l.ContextWindow)
			e.ContextLimit = &window
		}
		e.Cost = modelCost(m.Info(l.ProviderID, l.ModelID).Price)
		m.chainOf(&e)
		res.Models = append(res.Models, e)
	}
	return res
}

// modelCost is a configured price as model/list's cost: each number
// written as the shortest decimal that reads back as it (what the
// operator wrote, "2.5" for 2.5), in USD; nil for no price.
func modelCost(p *provider.Price) *msp.ModelCost {
	if p == nil {
		return nil
	}
	decimal := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	usd := "USD"
	return &msp.ModelCost{Input: decimal(p.In), Output: decimal(p.Out), Cached: decimal(p.CachedIn), Currency: &usd}
}

// newRunners gives each provider its own turn runner, retry budget and
// circuit breaker: one provider's outage must not throttle another's
// retries, nor open another's breaker.
func newRunners(cfg Config, cat *catalog.Catalog, tel telemetry) (*router, error) {
	policy := withDefaults(cfg.Retry)
	if err := policy.Validate(); err != nil {
		return nil, fmt.Errorf("retry policy: %w", err)
	}
	r := &router{byID: make(map[string]*turn.Runner), def: cat.Default().ID, breakers: make(map[string]*modelretry.Breaker)}
	family := make(map[string]string)
	for _, p := range cat.Providers() {
		family[p.ID] = p.Type
	}
	configs := make(map[string]turn.Config)
	for _, p := range cat.Providers() {
		budget, err := newBudget(cfg)
		if err != nil {
			return nil, err
		}
		tel.metrics.WatchBudget(p.ID, p.Model.System(), budget)
		breaker, err := newBreaker(cfg)
		if err != nil {
			return nil, err
		}
		tel.metrics.WatchBreaker(p.ID, p.Model.System(), breaker)
		r.breakers[p.ID] = breaker
		configs[p.ID] = turn.Config{
			Model:            p.Model,
			Engine:           &modelretry.Engine{Clock: cfg.Clock, Budget: budget},
			Policy:           policy,
			DefaultMaxTokens: cfg.DefaultMaxTokens,
			ModelMaxTokens:   p.MaxOutputTokens,
			Metrics:          tel.metrics,
			Tracer:           tel.tracer,
			Logger:           cfg.Logger,
			MaxSteps:         cfg.Tools.MaxSteps,
			ToolTimeout:      cfg.Tools.Timeout,
			ApprovalTimeout:  cfg.Tools.ApprovalTimeout,
			// A provider's family is its API: every openai entry (OpenAI,
			// compatible servers) speaks one, every anthropic entry the
			// other. A provider no longer configured is another family.
			SameFamily: func(id string) bool { f, ok := family[id]; return ok && f == p.Type },
			Models:     p.Info,
			Breaker:    breaker,
		}
	}
	chain(r, cat, configs)
	return r, nil
}

// router runs each turn on its session's provider.
type router struct {
	byID map[string]*turn.Runner
	def  string
	// breakers are the providers' circuit breakers (nil ones when off).
	breakers map[string]*modelretry.Breaker
}

func (r *router) Run(ctx context.Context, spec turn.Spec, sink turn.Sink) turn.Outcome {
	id := spec.ProviderID
	if id == "" {
		id = r.def
	}
	runner, ok := r.byID[id]
	if !ok {
		// A turn admitted under another configuration: its model id means
		// nothing to the providers configured now.
		return turn.Refused(msp.TurnErrorConfig, fmt.Sprintf("the session's provider %q is not configured on this server", id))
	}
	return runner.Run(ctx, spec, sink)
}

// newBudget builds a provider's retry budget (nil: unthrottled).
func newBudget(cfg Config) (*modelretry.Budget, error) {
	tokens, ratio, refill := cfg.RetryBudget.Tokens, cfg.RetryBudget.Ratio, cfg.RetryBudget.Refill
	if tokens < 0 {
		return nil, nil
	}
	if tokens == 0 {
		tokens = 10
	}
	if ratio == 0 {
		ratio = 0.1
	}
	if refill == 0 {
		refill = 0.2
	}
	b, err := modelretry.NewBudget(tokens, ratio)
	if err != nil {
		return nil, fmt.Errorf("retry budget: %w", err)
	}
	if refill > 0 {
		now := time.Now
		if cfg.Clock != nil {
			now = cfg.Clock.Now
		}
		b.WithRefill(refill, now)
	}
	return b, nil
}

func withDefaults(p modelretry.Policy) modelretry.Policy {
	d := modelretry.DefaultPolicy()
	if p.MaxAttempts != 0 {
		d.MaxAttempts = p.MaxAttempts
	}
	if p.InitialBackoff != 0 {
		d.InitialBackoff = p.InitialBackoff
	}
	if p.MaxBackoff != 0 {
		d.MaxBackoff = p.MaxBackoff
	}
	if p.Multiplier != 0 {
		d.Multiplier = p.Multiplier
	}
	if p.MaxServerDelay != 0 {
		d.MaxServerDelay = p.MaxServerDelay
	}
	d.Jitter = p.Jitter
	return d
}

// Handler is the daemon's HTTP handler (for tests that serve it themselves):
// the server's endpoints and, at /, the web chat page.
func (d *Daemon) Handler() http.Handler {
	h := d.srv.Handler()
	server.Mount(h, "GET /", web.Handler())
	return h
}

// Start listens on cfg.Listen and serves in the background. It refuses a
// non-loopback address while no credential is configured, unless
// InsecureNoAuth says to.
func (d *Daemon) Start() error {
	authenticated := d.srv.Authenticator().Enabled()
	if err := checkExposure(d.cfg.Listen, authenticated, d.cfg.InsecureNoAuth); err != nil {
		return err
	}
	if err := checkSharedToken(d.cfg.Listen, d.cfg.Auth.Token); err != nil {
		return err
	}
	if d.cfg.SessionMCP.Mode == sessionmcp.All && !isLoopback(d.cfg.Listen) {
		return fmt.Errorf("refusing --session-mcp all on %s: it lets clients make this server run any command, so it is for a listener on loopback only; use --session-mcp http with --session-mcp-hosts", d.cfg.Listen)
	}
	if d.cfg.Server.Pprof && !authenticated && !isLoopback(d.cfg.Listen) {
		return fmt.Errorf("refusing --pprof on %s without authentication: anyone who can reach it could profile the server; configure a token or listen on 127.0.0.1", d.cfg.Listen)
	}
	if !authenticated && !isLoopback(d.cfg.Listen) {
		d.cfg.Logger.Warn("serving without authentication on a non-loopback address (--insecure-no-auth): anyone who reaches it can read every session and run turns", "listen", d.cfg.Listen)
	}
	ln, err := net.Listen("tcp", d.cfg.Listen)
	if err != nil {
		return err
	}
	d.ln = ln
	d.http = &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second}
	d.served = make(chan error, 1)
	go func() { d.served <- d.http.Serve(ln) }()
	d.cfg.Logger.Info("mspd listening", "url", "ws://"+ln.Addr().String()+"/msp", "page", "http://"+ln.Addr().String()+"/", "data", d.cfg.DataDir)
	return nil
}

// checkExposure refuses to serve a non-loopback address without
// authentication unless insecure is set.
func checkExposure(listen string, authenticated, insecure bool) error {
	if authenticated || insecure || isLoopback(listen) {
		return nil
	}
	return fmt.Errorf("refusing to listen on %s without authentication: anyone who can reach it could read every session and run turns on your API keys; "+
		"set --auth-token, --auth-tokens or --auth-jwt-*, listen on 127.0.0.1, or pass --insecure-no-auth", listen)
}

// checkSharedToken refuses, on a non-loopback address, a shared token
// weaker than the tokens file accepts: anyone who reaches the listener
// could guess it.
func checkSharedToken(listen, token string) error {
	if token == "" || isLoopback(listen) {
		return nil
	}
	if err := auth.CheckStrength(token); err != nil {
		return fmt.Errorf("refusing --auth-token on %s: %w, the minimum of --auth-tokens files and of any token served beyond loopback (make one with: openssl rand -hex 32)", listen, err)
	}
	return nil
}

// isLoopback reports whether a listen address is on a loopback address
// or localhost only (an empty host means every interface).
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// ReloadAuth re-reads the tokens file and the JWT key file (on SIGHUP)
// and closes the open connections whose credential it revoked (see
// server.Server.ReloadAuth); a file that does not load leaves the
// previous credentials in force.
func (d *Daemon) ReloadAuth() error { return d.srv.ReloadAuth() }

// Addr is the address the daemon listens on (after Start).
func (d *Daemon) Addr() string { return d.ln.Addr().String() }

// URL is the WebSocket endpoint (after Start).
func (d *Daemon) URL() string { return "ws://" + d.Addr() + "/msp" }

// ServeStdio serves one NDJSON connection on r and w until r ends.
func (d *Daemon) ServeStdio(ctx context.Context, r io.Reader, w io.Writer) {
	d.srv.ServeStdio(ctx, r, w)
}

// Drain begins a graceful shutdown: new connections and new turns are
// refused (503, overloaded: both retryable on a successor), /readyz turns
// 503, queued turns wait for the next process, and running turns go on.
func (d *Daemon) Drain() {
	d.mgr.Drain() // first: once /readyz says 503, new turns are refused
	d.srv.Drain()
}

// CancelTurns drains and ends every running turn as cancelled (a stdio
// client that closed stdin asked for that).
func (d *Daemon) CancelTurns() {
	d.Drain()
	d.mgr.CancelRunning()
}

// Close shuts down gracefully: it drains, stops the turns waiting for a
// person's approval (they resume in the next process), waits for the
// other running turns until ctx ends, then stops those still running — they stay active in the store
// and the next process resumes them as a new attempt — closes the
// connections as going away, and closes the store. Later calls return
// the first one's result.
func (d *Daemon) Close(ctx context.Context) error {
	d.closeOnce.Do(func() { d.closeErr = d.close(ctx) })
	return d.closeErr
}

func (d *Daemon) close(ctx context.Context) error {
	d.Drain()
	// Turns waiting for a person's approval stop at once and resume in
	// the next process; the others may finish.
	d.mgr.StopWaiting()
	if err := d.mgr.WaitIdle(ctx); err != nil {
		d.cfg.Logger.Warn("turns still running at the shutdown deadline; the next start resumes them")
	}
	d.mgr.Close()
	// Connections get a moment of their own to close, whatever is left of ctx.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var errs []error
	if d.http != nil {
		errs = append(errs, d.http.Shutdown(ctx))
	}
	errs = append(errs, d.srv.Shutdown(ctx))
	d.stopPruner()
	errs = append(errs, d.backend.close())
	errs = append(errs, d.tools.close())
	// Every turn span has ended: the batch goes out before the exit.
	errs = append(errs, d.stopTracing(ctx))
	if d.served != nil {
		if err := <-d.served; !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
