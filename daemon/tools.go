package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"mspd/provider/catalog"
	"mspd/session"
	"mspd/tool"
	"mspd/tool/builtin"
	"mspd/tool/sessionmcp"
)

// Tools configures the tools turns may call.
type Tools struct {
	// NoBuiltin leaves out mspd's built-in server (a clock and a
	// calculator), which the offline demo model calls.
	NoBuiltin bool
	// MaxSteps bounds a turn's model calls (0: 24).
	MaxSteps int
	// Timeout bounds each tool call (0: 120 s).
	Timeout time.Duration
	// ReadyWait bounds how long a start waits for the MCP servers to
	// connect and list their tools (0: 10 s); see waitReady.
	ReadyWait time.Duration
	// ApprovalTimeout bounds how long a call waits for its approval before
	// it is resolved timedOut (0: no bound).
	ApprovalTimeout time.Duration
}

// toolset is the daemon's MCP clients and the registry sessions see.
type toolset struct {
	registry *tool.Registry
	clients  []*tool.Client
	// opts start every client, the operator's and the sessions' own.
	opts tool.Options
}

// startTools starts the built-in server and the configured ones. Servers
// connect in the background, supervised: one that is down makes its
// tools' calls fail, it does not stop the daemon starting (New waits a
// bounded while for them, see waitReady). Children start from mspd's
// environment without the providers' keys.
func startTools(cfg Config, cat *catalog.Catalog, log *slog.Logger) (*toolset, error) {
	opts := tool.Options{Logger: log, CallTimeout: cfg.Tools.Timeout, BaseEnv: childEnv(os.Environ()),
		// A call's whole output as far as the session keeps it, for
		// item/readOutput; its item shows the first 32 KiB.
		Limits: tool.Limits{OutputBytes: session.MaxStoredOutput}}
	ts := &toolset{opts: opts}
	if !cfg.Tools.NoBuiltin {
		c, err := builtin.Start(time.Now, opts)
		if err != nil {
			return nil, fmt.Errorf("built-in tools: %w", err)
		}
		ts.clients = append(ts.clients, c)
	}
	for _, sc := range cat.MCP() {
		if sc.Name == builtin.Name && !cfg.Tools.NoBuiltin {
			ts.close()
			return nil, fmt.Errorf("mcp server %q: the name is mspd's built-in server's", sc.Name)
		}
		c, err := tool.Start(sc, opts)
		if err != nil {
			ts.close()
			return nil, fmt.Errorf("mcp server %q: %w", sc.Name, err)
		}
		log.Info("mcp server", "server", sc)
		ts.clients = append(ts.clients, c)
	}
	r, err := tool.NewRegistry(ts.clients...)
	if err != nil {
		ts.close()
		return nil, err
	}
	ts.registry = r
	return ts, nil
}

// waitReady waits, at most limit, until every server is connected and
// its tools listed. A start waits for them before it resumes the turns a
// previous process left running, and before it serves: a turn run
// earlier would find none of a server's tools, so a call it had in
// flight could not be told replay-safe and would not be made again, and
// the model would be offered no tools. A server still down after limit
// is left to its supervisor: its tools are missing until it is up.
func (ts *toolset) waitReady(ctx context.Context, limit time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range ts.clients {
		wg.Go(func() {
			if err := c.WaitReady(ctx); err != nil {
				log.Warn("mcp server not ready at start; its tools are missing until it is", "server", c.Name(), "err", err)
			}
		})
	}
	wg.Wait()
}

// sessionServers is the session servers of cfg.SessionMCP, or nil when
// it takes none (off, the default).
func (ts *toolset) sessionServers(cfg Config) (*sessionmcp.Servers, error) {
	p := cfg.SessionMCP
	switch p.Mode {
	case "", sessionmcp.Off:
		return nil, nil
	case sessionmcp.HTTP:
		if len(p.Hosts) == 0 {
			cfg.Logger.Warn("--session-mcp http with no --session-mcp-hosts: every MCP server a client names is refused")
		}
	case sessionmcp.All:
		cfg.Logger.Warn("--session-mcp all: clients may make this server run any command as its own user")
	default:
		return nil, fmt.Errorf("session MCP servers: mode %q: want off, http or all", p.Mode)
	}
	return sessionmcp.New(sessionmcp.Config{Policy: p, Operators: ts.registry, Options: ts.opts, Logger: cfg.Logger})
}

// close stops every server.
func (ts *toolset) close() error {
	var errs []error
	for _, c := range ts.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// childEnv is env without the variables that carry provider keys or
// mspd's own secrets: a tool server is not trusted with them.
func childEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		up := strings.ToUpper(name)
		if strings.HasPrefix(up, "MSPD_") || strings.Contains(up, "API_KEY") || strings.Contains(up, "TOKEN") || strings.Contains(up, "SECRET") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
