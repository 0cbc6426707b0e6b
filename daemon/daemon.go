// Package daemon assembles a complete mspd from a Config: the SQLite
// store, the model provider, the retry engine, the turn runner, the session
// manager and the MSP server. cmd/mspd fills a Config from flags and the
// environment; the end-to-end tests start daemons in-process.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"mspd/modelretry"
	"mspd/provider"
	"mspd/provider/demo"
	"mspd/provider/scripted"
	"mspd/schema/msp"
	"mspd/server"
	"mspd/session"
	"mspd/store/sqlite"
	"mspd/turn"
)

// Config is everything a daemon needs.
type Config struct {
	// Listen is the HTTP address for /msp and the ops endpoints
	// (default 127.0.0.1:7700; port 0 picks a free one).
	Listen string
	// DataDir holds the SQLite database (default ./mspd-data).
	DataDir string
	// Provider names the model provider: demo (default) or scripted.
	Provider string
	// Model is the provider's model id; empty for its default.
	Model string
	// Demo configures the demo provider.
	Demo demo.Config
	// Retry is the host retry policy; zero fields take modelretry defaults.
	Retry modelretry.Policy
	// RetryBudget bounds retries across all turns of the provider (gRPC
	// retry throttling): zero values take modelretry's defaults (10 tokens,
	// ratio 0.1); negative Tokens disables the budget.
	RetryBudget Budget
	// DefaultMaxTokens bounds each attempt when a turn names no maxTokens.
	DefaultMaxTokens int
	// Server configures transports and limits.
	Server server.Config
	// Clock, when set, replaces the real clock (tests).
	Clock modelretry.Clock
	// Logger receives logs (default slog.Default()).
	Logger *slog.Logger
}

// Budget sizes the shared retry budget.
type Budget struct {
	// Tokens is the bucket size; retries stop below half of it.
	Tokens int
	// Ratio is what a success gives back.
	Ratio float64
}

// Daemon is a running mspd.
type Daemon struct {
	cfg    Config
	store  *sqlite.Store
	mgr    *session.Manager
	srv    *server.Server
	http   *http.Server
	ln     net.Listener
	served chan error
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
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	model, err := newModel(cfg)
	if err != nil {
		return nil, err
	}
	policy := withDefaults(cfg.Retry)
	if err := policy.Validate(); err != nil {
		return nil, fmt.Errorf("retry policy: %w", err)
	}
	dbPath := filepath.Join(dir, "mspd.db")
	st, err := sqlite.Open(dbPath)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", dbPath, err)
	}
	budget, err := newBudget(cfg)
	if err != nil {
		st.Close()
		return nil, err
	}
	engine := &modelretry.Engine{Clock: cfg.Clock, Budget: budget}
	runner := turn.NewRunner(turn.Config{Model: model, Engine: engine, Policy: policy, DefaultMaxTokens: cfg.DefaultMaxTokens})
	now := time.Now
	if cfg.Clock != nil {
		now = cfg.Clock.Now
	}
	mgr, err := session.New(ctx, session.Config{
		Store:      st,
		Runner:     runner,
		LogPath:    dbPath,
		ProviderID: model.System(),
		ModelID:    cfg.Model,
		Now:        now,
		Logger:     cfg.Logger,
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	scfg := cfg.Server
	scfg.Home = dir
	scfg.Logger = cfg.Logger
	scfg.Models = modelList(model.System(), cfg.Model)
	srv, err := server.New(mgr, scfg)
	if err != nil {
		mgr.Close()
		st.Close()
		return nil, err
	}
	return &Daemon{cfg: cfg, store: st, mgr: mgr, srv: srv}, nil
}

func newModel(cfg Config) (provider.Model, error) {
	switch cfg.Provider {
	case "", "demo":
		return demo.New(cfg.Demo), nil
	case "scripted":
		return scripted.New(), nil
	}
	return nil, fmt.Errorf("unknown provider %q (want demo or scripted)", cfg.Provider)
}

// newBudget builds the provider's shared retry budget (nil: unthrottled).
func newBudget(cfg Config) (*modelretry.Budget, error) {
	tokens, ratio := cfg.RetryBudget.Tokens, cfg.RetryBudget.Ratio
	switch {
	case tokens < 0:
		return nil, nil
	case tokens == 0 && ratio == 0:
		return modelretry.DefaultBudget(), nil
	case tokens == 0:
		tokens = 10
	case ratio == 0:
		ratio = 0.1
	}
	b, err := modelretry.NewBudget(tokens, ratio)
	if err != nil {
		return nil, fmt.Errorf("retry budget: %w", err)
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

func modelList(providerID, modelID string) msp.ModelListResult {
	if modelID == "" {
		modelID = providerID + "-default"
		if providerID == demo.System {
			modelID = demo.DefaultModel
		}
	}
	return msp.ModelListResult{
		ProviderID: providerID,
		Source:     "configCatalog",
		Models: []msp.ModelEntry{{ModelID: modelID, ProviderID: providerID, DisplayLabel: providerID + " · " + modelID,
			IsActive: true, IsDefault: true}},
	}
}

// Handler is the daemon's HTTP handler (for tests that serve it themselves).
func (d *Daemon) Handler() http.Handler { return d.srv.Handler() }

// Start listens on cfg.Listen and serves in the background.
func (d *Daemon) Start() error {
	ln, err := net.Listen("tcp", d.cfg.Listen)
	if err != nil {
		return err
	}
	d.ln = ln
	d.http = &http.Server{Handler: d.srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	d.served = make(chan error, 1)
	go func() { d.served <- d.http.Serve(ln) }()
	d.cfg.Logger.Info("mspd listening", "url", "ws://"+ln.Addr().String()+"/msp", "data", d.cfg.DataDir)
	return nil
}

// Addr is the address the daemon listens on (after Start).
func (d *Daemon) Addr() string { return d.ln.Addr().String() }

// URL is the WebSocket endpoint (after Start).
func (d *Daemon) URL() string { return "ws://" + d.Addr() + "/msp" }

// ServeStdio serves one NDJSON connection on r and w until r ends.
func (d *Daemon) ServeStdio(ctx context.Context, r io.Reader, w io.Writer) {
	d.srv.ServeStdio(ctx, r, w)
}

// Close drains: connections close as going away, running turns end with a
// durable cancelled terminal, and the store closes.
func (d *Daemon) Close(ctx context.Context) error {
	var errs []error
	if d.http != nil {
		errs = append(errs, d.http.Shutdown(ctx))
	}
	errs = append(errs, d.srv.Shutdown(ctx))
	d.mgr.Close()
	errs = append(errs, d.store.Close())
	if d.served != nil {
		if err := <-d.served; !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
