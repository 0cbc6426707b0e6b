package sessionmcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"mspd/schema/msp"
	"mspd/session"
	"mspd/tool"
	"mspd/turn"
)

// DefaultConnectWait bounds how long a turn waits for its session's
// servers to connect (Config.ConnectWait).
const DefaultConnectWait = 15 * time.Second

// Config configures Servers.
type Config struct {
	Policy Policy
	// Operators are the operator's servers, which every session sees: a
	// session's servers join them, and may not take their names.
	Operators *tool.Registry
	// Options start each server's client (the timeout of a call, the
	// environment a stdio server starts from); its Logger (with the
	// server's secrets hidden), HTTPClient and Limits are set per server.
	Options tool.Options
	// ConnectWait bounds how long a turn waits for its session's servers
	// (default DefaultConnectWait).
	ConnectWait time.Duration
	// Logger receives what happens to the servers.
	Logger *slog.Logger
}

// Servers is session.SessionServers under a policy.
type Servers struct {
	cfg   Config
	rules []hostRule
	taken map[string]bool // the operator's servers' names
}

var _ session.SessionServers = (*Servers)(nil)

// New returns the session servers of cfg's policy; the policy must not be
// Off (a daemon without session servers configures none).
func New(cfg Config) (*Servers, error) {
	if cfg.Policy.Mode != HTTP && cfg.Policy.Mode != All {
		return nil, errUnsetPolicy
	}
	rules, err := parseHosts(cfg.Policy.Hosts)
	if err != nil {
		return nil, err
	}
	if cfg.ConnectWait <= 0 {
		cfg.ConnectWait = DefaultConnectWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Operators == nil {
		cfg.Operators, _ = tool.NewRegistry()
	}
	taken := map[string]bool{}
	for _, name := range cfg.Operators.Servers() {
		taken[name] = true
	}
	return &Servers{cfg: cfg, rules: rules, taken: taken}, nil
}

// Check implements session.SessionServers.
func (s *Servers) Check(servers map[string]msp.SessionMCPServerConfig) error {
	if len(servers) > MaxServers {
		e := msp.ErrInvalidParams("config.mcpServers", "a session takes at most %d MCP servers", MaxServers)
		return e
	}
	for _, name := range slices.Sorted(maps.Keys(servers)) {
		if _, err := check(s.cfg.Policy, s.rules, s.taken, name, servers[name]); err != nil {
			return err
		}
	}
	return nil
}

// Open implements session.SessionServers: each server the policy takes
// now starts connecting; one it no longer takes is kept with its refusal,
// for Ready to report.
func (s *Servers) Open(sessionID string, servers map[string]msp.SessionMCPServerConfig) session.OpenServers {
	o := &open{s: s, session: sessionID}
	for _, name := range slices.Sorted(maps.Keys(servers)) {
		sv := server{name: name, required: servers[name].Required(), log: s.cfg.Logger.With("session", sessionID, "mcp_server", name)}
		c, err := check(s.cfg.Policy, s.rules, s.taken, name, servers[name])
		if err == nil {
			// Everything logged of it, here and by its client, hides its
			// secrets.
			sv.log = tool.Redacting(sv.log, c.secrets...)
			opts := s.cfg.Options
			opts.Logger = tool.Redacting(s.cfg.Logger.With("session", sessionID), c.secrets...)
			if c.cfg.URL != "" {
				opts.HTTPClient = httpClient(c.rule, s.cfg.Policy.Mode == HTTP)
			}
			sv.client, err = tool.Start(c.cfg, opts)
		}
		if err != nil {
			// A refusal names fields, never values.
			sv.refused = err
			sv.log.Warn("session MCP server not started", "error", err)
		}
		o.servers = append(o.servers, sv)
	}
	return o
}

// open is one session's servers.
type open struct {
	s       *Servers
	session string
	servers []server
}

// server is one of a session's servers.
type server struct {
	name     string
	required bool
	client   *tool.Client // nil when refused
	refused  error
	log      *slog.Logger // hides its secrets
}

// Ready implements session.OpenServers.
func (o *open) Ready(ctx context.Context) (turn.Toolbox, error) {
	wait, cancel := context.WithTimeout(ctx, o.s.cfg.ConnectWait)
	defer cancel()
	var up []*tool.Client
	for _, sv := range o.servers {
		var why error
		if sv.refused != nil {
			why = errors.New("not allowed by this server's policy now")
		} else {
			// A server connecting gets until the bound; one whose last
			// attempt failed is down now, and its client retries in the
			// background for the next turn.
			sv.client.WaitTried(wait)
			if !sv.client.Status().Connected {
				why = errors.New("not connected")
			}
		}
		if why == nil {
			up = append(up, sv.client)
			continue
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if sv.required {
			// The wire hears the name only: the cause may hold the URL.
			sv.log.Warn("required session MCP server unavailable: the turn fails", "why", why, "status", sv.status())
			return nil, fmt.Errorf("the session's MCP server %q (required) is %v", sv.name, why)
		}
		sv.log.Warn("optional session MCP server left out of the turn", "why", why, "status", sv.status())
	}
	reg, err := o.s.cfg.Operators.With(up...)
	if err != nil {
		return nil, fmt.Errorf("the session's MCP servers: %v", err)
	}
	return turn.Registry(reg), nil
}

// status says why a server is down, for its log.
func (sv server) status() string {
	if sv.client == nil {
		return sv.refused.Error()
	}
	if err := sv.client.Status().Err; err != nil {
		return err.Error()
	}
	return "connecting"
}

// Close implements session.OpenServers.
func (o *open) Close() {
	for _, sv := range o.servers {
		if sv.client != nil {
			sv.client.Close()
		}
	}
}
