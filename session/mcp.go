package session

// MCP servers a client adds to its session (session/start's
// config.mcpServers): checked before the session is made, kept in its
// state (so a restart or another node's takeover reconnects them, and a
// fork keeps them), never returned to a client; started at the first turn
// after the session loads, stopped when it unloads, is erased or the
// manager closes.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"mspd/schema/msp"
	"mspd/turn"
)

// SessionServers adds the MCP servers clients name to their sessions, as
// the operator's policy allows.
type SessionServers interface {
	// Check vets the servers a session/start names before the session is
	// made: a refusal is an *msp.Error naming the field, and echoes no
	// header or env value, command or URL.
	Check(servers map[string]msp.SessionMCPServerConfig) error
	// Open starts one session's servers, connecting in the background. A
	// server the policy no longer allows (it changed since the session
	// started) is not started, and its turns are told why by Ready.
	Open(sessionID string, servers map[string]msp.SessionMCPServerConfig) OpenServers
}

// OpenServers are one session's servers while the session is loaded.
type OpenServers interface {
	// Ready returns what a turn may call: the operator's tools and those
	// of the session's servers that are up. It waits, within ctx and a
	// bound of its own, for required servers to connect and for optional
	// ones to try; a required server not connected then is an error that
	// names it, and fails the turn. An optional one is left out of the
	// turn, and the log says why.
	Ready(ctx context.Context) (turn.Toolbox, error)
	// Close stops the servers and waits for them.
	Close()
}

// checkSessionServers vets session/start's config.mcpServers: names given
// once, and what the host's SessionServers says. A host without them
// refuses any as capabilityRequired.
func (m *Manager) checkSessionServers(p msp.SessionStartParams, raw json.RawMessage) error {
	if p.Config == nil || len(p.Config.MCPServers) == 0 {
		return nil
	}
	if m.cfg.SessionServers == nil {
		return msp.ErrCapabilityRequired(msp.CapabilitySessionMCP, "this server takes no MCP servers from clients (config.mcpServers)")
	}
	if name := repeatedServer(raw); name != "" {
		return msp.ErrInvalidParams("config.mcpServers."+name, "config.mcpServers names %q twice", name)
	}
	return m.cfg.SessionServers.Check(p.Config.MCPServers)
}

// repeatedServer returns a name config.mcpServers gives twice in raw,
// which decoding would quietly settle by keeping the last.
func repeatedServer(raw json.RawMessage) string {
	var p struct {
		Config struct {
			MCPServers json.RawMessage `json:"mcpServers"`
		} `json:"config"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(p.Config.MCPServers))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return ""
		}
		name, _ := t.(string)
		if seen[name] {
			return name
		}
		seen[name] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}

// checkResumeConfig refuses session/resume's config.mcpServers: a
// session's servers are given when it starts, and kept with it.
func checkResumeConfig(p msp.SessionResumeParams) error {
	if p.Config != nil && len(p.Config.MCPServers) > 0 {
		return msp.ErrInvalidParams("config.mcpServers", "a session's MCP servers are given at session/start and kept with the session; session/resume takes none")
	}
	if p.Config != nil && p.Config.Instructions != "" {
		return msp.ErrInvalidParams("config.instructions", "a session's instructions are given at session/start and kept with the session; session/resume takes none")
	}
	return nil
}

// checkInstructions bounds a session/start's instructions: they are sent
// with every request of the session, and kept in its row.
func checkInstructions(c *msp.SessionConfig) error {
	if c == nil || len(c.Instructions) <= msp.MaxInstructionsBytes {
		return nil
	}
	return tooLarge("config.instructions", msp.MaxInstructionsBytes, "the instructions are %d bytes; at most %d", len(c.Instructions), msp.MaxInstructionsBytes)
}

// turnTools returns what the session's next turn may call: nil (the
// operator's tools, Config.Tools) for a session without servers of its
// own, else the toolbox its servers' Ready gives, opening them first if
// need be. s.mu must not be held: Ready waits for servers to connect.
func (m *Manager) turnTools(ctx context.Context, s *session) (turn.Toolbox, error) {
	s.mu.Lock()
	servers := s.st.MCPServers
	if len(servers) == 0 {
		s.mu.Unlock()
		return nil, nil
	}
	if m.cfg.SessionServers == nil {
		s.mu.Unlock()
		// The policy changed since the session started: it takes none now.
		var required []string
		for _, name := range slices.Sorted(maps.Keys(servers)) {
			if servers[name].Required() {
				required = append(required, name)
			} else {
				m.log.Warn("optional session MCP server left out: this server takes no MCP servers from clients now", "session", s.id, "mcp_server", name)
			}
		}
		if len(required) > 0 {
			return nil, fmt.Errorf("this server takes no MCP servers from clients now, and the session requires %s", strings.Join(required, ", "))
		}
		return nil, nil
	}
	if s.servers == nil {
		s.servers = m.cfg.SessionServers.Open(s.id, servers)
	}
	open := s.servers
	s.mu.Unlock()
	return open.Ready(ctx)
}

// closeServersLocked stops the session's servers, if open, on a goroutine
// of their own (a stdio server may take seconds to exit); Manager.Close
// waits for them. s.mu must be held.
func (s *session) closeServersLocked() {
	open := s.servers
	if open == nil {
		return
	}
	s.servers = nil
	s.m.closing.add()
	go func() {
		defer s.m.closing.done()
		open.Close()
	}()
}

// refusedTurn is the outcome of a turn whose session's required MCP server
// cannot be reached: it fails, retryable, before any attempt (a resumed
// turn keeps the attempts it made).
func refusedTurn(spec turn.Spec, err error) turn.Outcome {
	out := turn.Refused(msp.TurnErrorEnvironment, err.Error())
	out.Completed.Error.Retryable = true
	if r := spec.Resume; r != nil {
		out.Completed.Attempts.Count, out.Completed.Attempts.UsageComplete = r.Attempts, false
	}
	return out
}
