package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"mspd/provider/catalog"
	"mspd/session"
	"mspd/tool"
	"mspd/tool/builtin"
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
}

// toolset is the daemon's MCP clients and the registry sessions see.
type toolset struct {
	registry *tool.Registry
	clients  []*tool.Client
}

// firstConnectWait bounds how long a starting daemon waits for its MCP
// servers' first connection attempts.
const firstConnectWait = 10 * time.Second

// startTools starts the built-in server and the configured ones. Servers
// connect supervised: one that is down makes its tools' calls fail, it
// does not stop the daemon starting. startTools returns once each server's
// first attempt has ended (at most firstConnectWait), so that the first
// turns see the tools of the servers that are up. Children start from
// mspd's environment without the providers' keys.
func startTools(ctx context.Context, cfg Config, cat *catalog.Catalog, log *slog.Logger) (*toolset, error) {
	opts := tool.Options{Logger: log, CallTimeout: cfg.Tools.Timeout, BaseEnv: childEnv(os.Environ()),
		// A call's whole output as far as the session keeps it, for
		// item/readOutput; its item shows the first 32 KiB.
		Limits: tool.Limits{OutputBytes: session.MaxStoredOutput}}
	ts := &toolset{}
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
	wait, cancel := context.WithTimeout(ctx, firstConnectWait)
	defer cancel()
	for _, c := range ts.clients {
		c.WaitTried(wait) // they connect at once; this waits for the slowest
	}
	return ts, nil
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
