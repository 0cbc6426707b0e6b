// Package cli is the mspd command: its subcommands, flags and environment,
// turned into a daemon.Config or a client call. cmd/mspd is main() around
// Run, and tests that need an mspd process run their own binary as one
// through Run (see package e2e's TestMain), so no test builds the server.
//
//	mspd [serve] [flags]       serve MSP over WebSocket (default) or --stdio
//	mspd tail [flags] SESSION  follow a session: pretty text, JSON lines or raw answer text
//	                           (no SESSION: the most recent one; --all: every session)
//	mspd sessions [flags]      list sessions, most recently active first
//	mspd validate FILE|-       check an NDJSON transcript of frames against the schema
//
// Every serve flag can also be set through the environment as MSPD_<FLAG>
// (upper case, dashes as underscores); a flag on the command line wins.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"mspd/daemon"
	"mspd/internal/datadir"
	"mspd/internal/gcheadroom"
	"mspd/modelretry"
	"mspd/provider"
	"mspd/provider/demo"
	"mspd/server"
	"mspd/tool/sessionmcp"
)

// newDaemon starts the daemon serve configured; tests replace it to see
// that configuration.
var newDaemon = daemon.New

// Run dispatches a subcommand (args without the program name) and returns
// the process exit status: 0 success, 1 failure, 2 usage error.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	if len(args) == 1 && cmd == "serve" && (args[0] == "--version" || args[0] == "-version") {
		cmd = "version"
	}
	switch cmd {
	case "version":
		fmt.Fprintf(stdout, "mspd %s (%s, %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	case "serve":
		return serve(args, stderr)
	case "validate":
		return validate(args, stdin, stdout, stderr)
	case "tail":
		return tailCmd(args, stdin, stdout, stderr)
	case "sessions":
		return sessionsCmd(args, stdout, stderr)
	case "help":
		fmt.Fprintln(stdout, "usage: mspd [serve] [flags] | mspd tail [flags] [SESSION] | mspd sessions [flags] | mspd validate FILE|- | mspd version")
		return 0
	}
	fmt.Fprintf(stderr, "mspd: unknown command %q (want serve, tail, sessions, validate or version)\n", cmd)
	return 2
}

// parseFlags parses a subcommand's flags. When parsing ends the command,
// ok is false and status is the exit status: 0 after --help or -h printed
// the usage (asking for help is a success, as with flag.ExitOnError), 2
// for a usage error, which the flag set has already reported.
func parseFlags(fs *flag.FlagSet, args []string) (status int, ok bool) {
	switch err := fs.Parse(args); {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		return 0, false
	default:
		return 2, false
	}
}

// serveOptions are what serve's flags set: the daemon's configuration
// and the few settings serve applies itself.
type serveOptions struct {
	cfg                         daemon.Config
	stdio                       bool
	jitter, logLevel, logFormat string
	shutdownTimeout             time.Duration
	gcHeadroomMiB               int
	origins, allowedHosts       stringList
	sessionMCP                  string
	sessionMCPHosts             stringList
}

// serveFlags is serve's flag set, writing its errors and usage to stderr,
// and the options it sets. docs/configuration.md is generated from it.
func serveFlags(stderr io.Writer) (*flag.FlagSet, *serveOptions) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &serveOptions{}
	fs.StringVar(&o.cfg.Listen, "listen", "127.0.0.1:7700", "`address` for WebSocket /msp and the ops endpoints")
	fs.StringVar(&o.cfg.DataDir, "data", "mspd-data", "`directory` of the SQLite store (and of the embedded NATS server's files)")
	fs.StringVar(&o.cfg.Backend.Store, "store", "sqlite", "where sessions live: sqlite (one node) or jetstream (several nodes sharing NATS JetStream)")
	fs.StringVar(&o.cfg.Backend.NATS, "nats", "", "NATS `URL` of the JetStream deployment (--store jetstream), e.g. nats://a:4222,nats://b:4222")
	fs.BoolVar(&o.cfg.Backend.Embedded, "nats-embedded", false, "run a NATS server with JetStream inside this process (--store jetstream), its files under --data")
	fs.StringVar(&o.cfg.Backend.NATSListen, "nats-listen", "127.0.0.1:4222", "client `address` of the embedded NATS server")
	fs.StringVar(&o.cfg.Backend.ClusterName, "nats-cluster-name", "mspd", "name of the embedded NATS servers' cluster")
	fs.StringVar(&o.cfg.Backend.ClusterListen, "nats-cluster-listen", "", "route `address` of the embedded NATS server, to cluster it with other nodes'")
	fs.StringVar(&o.cfg.Backend.Secret, "nats-secret", "", "shared secret of the embedded NATS servers: each node's token, and their routes' password; needed to listen (--nats-listen, --nats-cluster-listen) elsewhere than on loopback (without it, clients need a random token of this process's own, but routes on loopback take any local server); set it through MSPD_NATS_SECRET to keep it out of ps")
	fs.Var((*stringList)(&o.cfg.Backend.Routes), "nats-routes", "the other embedded NATS servers' routes, nats://host:port (repeatable or comma-separated)")
	fs.IntVar(&o.cfg.Backend.Replicas, "jetstream-replicas", 1, "replication of the JetStream stream and lease bucket: 1, or 3 on three nodes or more")
	fs.IntVar(&o.cfg.Backend.Streams, "jetstream-streams", 1, "how many JetStream streams the sessions are spread over, 1 to 64: new sessions by a hash of their id, existing ones stay where they are; the same on every node, and it may grow but never shrink (see docs/cluster.md)")
	fs.StringVar(&o.cfg.Backend.Node, "node-id", "", "this node's name in a cluster (default: host name and listen address)")
	fs.DurationVar(&o.cfg.Backend.LeaseTTL, "lease-ttl", 10*time.Second, "how soon the sessions of a node that stopped are taken over by another")
	fs.DurationVar(&o.cfg.CommandRetention, "command-retention", daemon.DefaultCommandRetention, "how long a commandId is remembered, the exactly-once window: a replay after that is a new command (negative: for ever; not 0)")
	fs.BoolVar(&o.stdio, "stdio", false, "serve one connection of NDJSON frames on stdin/stdout instead of listening")
	fs.StringVar(&o.cfg.Provider, "provider", "demo", "model provider: demo, scripted, openai (or any OpenAI-compatible server via OPENAI_BASE_URL) or anthropic")
	fs.StringVar(&o.cfg.Model, "model", "", "provider model id (default: the provider's)")
	fs.StringVar(&o.cfg.System, "system", "", "provider name reported as `system` in retry notices (default: openai, anthropic, …; e.g. ollama for a compatible server)")
	fs.DurationVar(&o.cfg.IdleTimeout, "idle-timeout", 0, "an attempt whose stream is silent this long fails as a timeout (default 60s; negative: off, for slow local models)")
	fs.IntVar(&o.cfg.Pool.MaxIdleConns, "provider-max-idle-conns", provider.DefaultMaxIdleConns, "idle connections to the provider's API kept for reuse (negative: none); size it for the turns running at once")
	fs.IntVar(&o.cfg.Pool.MaxConns, "provider-max-conns", 0, "connections to the provider's API open at once at most, busy or idle; requests beyond wait (0: no bound)")
	fs.StringVar(&o.cfg.OpenAIAPI, "openai-api", "chat", "OpenAI API: chat (Chat Completions) or responses")
	fs.IntVar(&o.cfg.MaxOutputTokens, "max-output-tokens", 0, "the model's output limit: no request asks for more and truncation retries stop growing there (default 32768)")
	fs.StringVar(&o.cfg.ConfigFile, "config", "", "TOML `file` naming several providers (overrides --provider and --model)")
	fs.DurationVar(&o.cfg.Demo.WordDelay, "demo-word-delay", demo.DefaultWordDelay, "demo model pace per word (0 or negative: none)")
	fs.Float64Var(&o.cfg.Demo.FaultRate, "demo-faults", 0.2, "share of demo requests that fail first (429/503/529/timeouts/resets), 0..1, so the retry notices show")
	fs.Int64Var(&o.cfg.Demo.Seed, "demo-seed", 0, "seed of the demo model (0: random)")
	fs.IntVar(&o.cfg.Retry.MaxAttempts, "max-attempts", 5, "provider requests per turn, the first included (ceiling for a turn's retry.maxAttempts; 1..16)")
	fs.DurationVar(&o.cfg.Retry.InitialBackoff, "retry-initial-backoff", 500*time.Millisecond, "backoff before the first retry, before jitter")
	fs.DurationVar(&o.cfg.Retry.MaxBackoff, "retry-max-backoff", 8*time.Second, "cap of the computed backoff")
	fs.DurationVar(&o.cfg.Retry.MaxServerDelay, "retry-max-server-delay", 60*time.Second, "longest Retry-After honoured; longer fails the turn at once")
	fs.StringVar(&o.jitter, "retry-jitter", "full", "backoff jitter: full (U(0,d)) or proportional (d·U(0.75,1))")
	fs.IntVar(&o.cfg.RetryBudget.Tokens, "retry-budget-tokens", 10, "retry budget shared by all turns (gRPC retry throttling): retries stop while fewer than half the tokens remain (negative: no budget; not 0)")
	fs.Float64Var(&o.cfg.RetryBudget.Ratio, "retry-budget-ratio", 0.1, "tokens a successful request gives back to the retry budget")
	fs.Float64Var(&o.cfg.RetryBudget.Refill, "retry-budget-refill", 0.2, "tokens each second gives back to the retry budget, so a quiet key recovers after an outage (0 or negative: none)")
	fs.IntVar(&o.cfg.Breaker.Failures, "breaker-failures", 5, "failing requests in a row (within --breaker-window) that open a provider's circuit breaker: turns that have a fallback then skip it (negative: no breakers; not 0)")
	fs.DurationVar(&o.cfg.Breaker.Window, "breaker-window", time.Minute, "time within which --breaker-failures failures must come to open a provider's circuit breaker")
	fs.DurationVar(&o.cfg.Breaker.Cooldown, "breaker-cooldown", 30*time.Second, "how long an open circuit breaker skips its provider before one request probes it")
	fs.IntVar(&o.cfg.DefaultMaxTokens, "default-max-tokens", 1024, "output bound of an attempt when a turn names no maxTokens")
	fs.IntVar(&o.cfg.Tools.MaxSteps, "max-steps", 24, "model calls a turn may make, tool calls running between them; a model still calling tools at the last ends the turn stepLimit (a turn's maxSteps may lower it)")
	fs.DurationVar(&o.cfg.Tools.Timeout, "tool-timeout", 120*time.Second, "a tool call running longer fails as timedOut (the model is told)")
	fs.BoolVar(&o.cfg.Tools.NoBuiltin, "no-builtin-tools", false, "leave out mspd's built-in MCP server (a clock and a calculator, which the demo model calls)")
	fs.DurationVar(&o.cfg.Tools.ApprovalTimeout, "approval-timeout", 0, "how long a tool call waits for a person's approval, from when it was asked for, before it is resolved timedOut and not run (0: no limit)")
	fs.Int64Var(&o.cfg.Server.MaxFrameBytes, "max-frame-bytes", 10<<20, "largest inbound frame")
	fs.Int64Var(&o.cfg.Server.InboundBytes, "inbound-bytes", server.DefaultInboundBytes, "server-wide budget of inbound frames being read and decoded: a frame past its first 64 KiB takes --max-frame-bytes of it while read, then its size until dispatched; a connection whose frame does not fit stops reading until one does")
	fs.IntVar(&o.cfg.Server.MaxConnRequests, "max-conn-requests", 1, "requests one connection has executing at once; the next frame is read only once one finishes (1: in order; above 1, answers may come in any order)")
	fs.IntVar(&o.cfg.Server.QueueFrames, "queue-frames", 1024, "view events queued per connection before a slow reader gets view/gap")
	fs.IntVar(&o.cfg.Server.MaxSubscriptions, "max-subscriptions", server.DefaultMaxSubscriptions, "sessions one connection follows at once (each start, resume, fork or view/subscribe of another); one more is refused as backpressured")
	fs.IntVar(&o.cfg.Server.QueueBytes, "queue-bytes", 8<<20, "bytes queued per connection (responses and events) before it stops reading requests; view events get half, then view/gap")
	fs.DurationVar(&o.cfg.Server.WriteTimeout, "write-timeout", 10*time.Second, "a frame write slower than this closes the connection")
	fs.StringVar(&o.cfg.Server.Fingerprint, "fingerprint", "", "schema fingerprint to report (default: the embedded schema's sha256)")
	fs.StringVar(&o.cfg.Server.AuthToken, "auth-token", "", "require this token to open /msp (Authorization: Bearer, or ?access_token= from a browser); at least 16 characters on a listener beyond loopback; set it through MSPD_AUTH_TOKEN to keep it out of ps")
	fs.Var(&o.origins, "origin", "extra allowed browser `origin` pattern for /msp (repeatable; the server's own host is always allowed)")
	fs.StringVar(&o.cfg.Auth.TokensFile, "auth-tokens", "", "`file` of \"principal token\" lines: each token opens /msp as its principal, who sees only its own sessions (re-read on SIGHUP, which closes the open connections whose token is gone)")
	fs.StringVar(&o.cfg.Auth.JWT.KeyFile, "auth-jwt-key-file", "", "PEM `file` of the public keys (RSA, ECDSA, Ed25519) that sign JWT bearer tokens; the principal is the sub claim; a connection closes when its token expires (re-read on SIGHUP)")
	fs.StringVar(&o.cfg.Auth.JWT.JWKSURL, "auth-jwt-jwks", "", "JSON Web Key Set `URL` whose keys sign JWT bearer tokens (fetched and cached; instead of --auth-jwt-key-file)")
	fs.StringVar(&o.cfg.Auth.JWT.Issuer, "auth-jwt-issuer", "", "the iss JWT bearer tokens must carry (required with JWT)")
	fs.StringVar(&o.cfg.Auth.JWT.Audience, "auth-jwt-audience", "", "an aud JWT bearer tokens must carry (required with JWT)")
	fs.Var(&o.allowedHosts, "allowed-host", "extra Host `name` served while no authentication is configured (repeatable; loopback addresses and localhost always are)")
	fs.BoolVar(&o.cfg.InsecureNoAuth, "insecure-no-auth", false, "allow listening on a non-loopback address with no authentication configured")
	fs.StringVar(&o.sessionMCP, "session-mcp", "off", "MCP servers clients may add to their own sessions (session/start's config.mcpServers): off; http (streamable HTTP servers on --session-mcp-hosts only); or all (stdio servers too, a command this server runs as itself: loopback listeners only)")
	fs.Var(&o.sessionMCPHosts, "session-mcp-hosts", "`host`[:port] a client's streamable HTTP MCP server may be on under --session-mcp http (repeatable or comma-separated; exact match; no port: the scheme's default only; a name must not resolve to a loopback, link-local or metadata address, an address listed as such may be anything)")
	fs.BoolVar(&o.cfg.Server.Pprof, "pprof", false, "serve Go profiles under /debug/pprof/ on the listener (behind the Host check and the token, as /msp; needs authentication off loopback)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM/SIGINT, how long running turns may finish before the rest stop, to resume as a new attempt in the next process (a second signal stops at once)")
	fs.IntVar(&o.gcHeadroomMiB, "gc-headroom-mib", 64, "garbage the heap may gather above what is live before a collection, while less than this is live (MiB; 0: Go's GOGC=100; ignored when GOGC is set)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	return fs, o
}

func serve(args []string, stderr io.Writer) int {
	fs, o := serveFlags(stderr)
	cfg := &o.cfg
	cfg.Server.Version = buildVersion()
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	if fs.NArg() > 0 {
		// Parsing stopped there: every flag after it would be ignored
		// (`--pprof false` sets --pprof and drops the rest).
		fmt.Fprintf(stderr, "mspd: unexpected argument %q (serve takes only flags; a boolean flag's value goes as --flag=false)\n", fs.Arg(0))
		return 2
	}
	if err := fromEnv(fs); err != nil {
		fmt.Fprintln(stderr, "mspd:", err)
		return 2
	}
	if err := checkRanges(fs); err != nil {
		fmt.Fprintln(stderr, "mspd:", err)
		return 2
	}
	zeroMeansNone(cfg)
	switch o.jitter {
	case "full":
		cfg.Retry.Jitter = modelretry.JitterFull
	case "proportional":
		cfg.Retry.Jitter = modelretry.JitterProportional
	default:
		fmt.Fprintf(stderr, "mspd: --retry-jitter %q: want full or proportional\n", o.jitter)
		return 2
	}
	cfg.Server.OriginPatterns = o.origins
	cfg.Server.AllowedHosts = o.allowedHosts
	mode, err := sessionmcp.ParseMode(o.sessionMCP)
	if err != nil {
		fmt.Fprintln(stderr, "mspd:", err)
		return 2
	}
	cfg.SessionMCP = sessionmcp.Policy{Mode: mode, Hosts: o.sessionMCPHosts}
	logger, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		fmt.Fprintln(stderr, "mspd:", err)
		return 2
	}
	cfg.Logger = logger

	if os.Getenv("GOGC") == "" && o.gcHeadroomMiB > 0 {
		defer gcheadroom.Start(uint64(o.gcHeadroomMiB) << 20).Stop()
	}
	sig := watchSignals()
	defer sig.stop()
	ctx := sig.run
	d, err := newDaemon(ctx, *cfg)
	if err != nil {
		var locked *datadir.LockedError
		if errors.As(err, &locked) {
			fmt.Fprintf(stderr, "mspd: %v; stop it or use another --data\n", locked)
			return 1
		}
		logger.Error("cannot start", "err", err)
		return 1
	}
	if o.stdio {
		d.ServeStdio(ctx, os.Stdin, os.Stdout)
		if ctx.Err() == nil {
			// The client closed stdin: an orderly drain cancels its turns.
			d.CancelTurns()
		}
	} else {
		if err := d.Start(); err != nil {
			logger.Error("cannot listen", "err", err)
			d.Close(context.Background())
			return 1
		}
		// The daemon logs each reload's outcome; a bad file keeps the old set.
		sig.onReload(func() { d.ReloadAuth() })
		<-ctx.Done()
		logger.Info("shutting down: running turns may finish", "timeout", o.shutdownTimeout)
	}
	// A (second) signal ends the wait: the turns still running stop and
	// the next start resumes them.
	sig.stopping()
	shutdown, cancelTimeout := context.WithTimeout(sig.grace, o.shutdownTimeout)
	defer cancelTimeout()
	if err := closeWithin(shutdown, stuckAfter, d.Close); err != nil {
		logger.Error("shutdown", "err", err)
		return 1
	}
	return 0
}

// fromEnv applies MSPD_<FLAG> variables to flags not set on the command line.
func fromEnv(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := "MSPD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && !set[f.Name] {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	})
	return errors.Join(errs...)
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*s = append(*s, part)
		}
	}
	return nil
}
