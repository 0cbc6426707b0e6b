// Package sessionmcp adds the MCP servers clients name in session/start
// (config.mcpServers) to their sessions, as far as the operator allows:
// it is mspd's session.SessionServers. A client that can make the server
// start a command owns the host, and one that can make it send requests
// anywhere reaches what the host reaches, so the policy (Mode) is off by
// default; HTTP takes streamable HTTP servers on hosts the operator lists
// only, reached through a guard (see guard.go); All takes any server, for
// a single local user. Each session gets clients of its own, which no
// other session or principal sees, beside the operator's shared ones.
package sessionmcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"mspd/schema/msp"
	"mspd/tool"
)

// Mode is what the operator allows clients to add (--session-mcp).
type Mode string

// The modes.
const (
	// Off refuses every server: the sessionMcp capability is not granted.
	Off Mode = "off"
	// HTTP takes streamable HTTP servers whose URL's host is listed
	// (Policy.Hosts), reached through the guard.
	HTTP Mode = "http"
	// All takes stdio servers too (a command mspd runs as itself) and HTTP
	// servers on any host: whoever may open a session owns the host. The
	// daemon refuses it on a listener beyond loopback.
	All Mode = "all"
)

// ParseMode reads a --session-mcp value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Off, HTTP, All:
		return m, nil
	}
	return "", fmt.Errorf("--session-mcp %q: want off, http or all", s)
}

// Bounds of a session's servers. They are kept in the session's row,
// which every change of the session writes again.
const (
	// MaxServers bounds a session's servers.
	MaxServers = 8
	// MaxConfigBytes bounds one server's configuration, encoded.
	MaxConfigBytes = 16 << 10
)

// Policy is what the operator allows.
type Policy struct {
	Mode Mode
	// Hosts are the hosts HTTP servers may be on (HTTP mode): "name",
	// "name:port", an IP address, or "[v6]:port". A host without a port
	// allows the scheme's default port only.
	Hosts []string
}

// hostRule is one entry of Policy.Hosts.
type hostRule struct {
	host string     // lower case, no trailing dot; an address in its canonical form
	port string     // "" for the scheme's default
	addr netip.Addr // set when host is an IP address
}

// parseHosts reads Policy.Hosts.
func parseHosts(entries []string) ([]hostRule, error) {
	var rules []hostRule
	for _, e := range entries {
		raw := strings.ToLower(strings.TrimSpace(e))
		if raw == "" || strings.ContainsAny(raw, "/@*?# ") {
			return nil, fmt.Errorf("--session-mcp-hosts %q: want a host name or address, with an optional :port", e)
		}
		host, port := raw, ""
		if h, p, err := net.SplitHostPort(raw); err == nil {
			host, port = h, p
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("--session-mcp-hosts %q: bad port", e)
			}
		}
		host = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), ".")
		r := hostRule{host: host, port: port}
		if a, err := netip.ParseAddr(host); err == nil {
			if a.Zone() != "" {
				return nil, fmt.Errorf("--session-mcp-hosts %q: an address with a zone", e)
			}
			r.addr = a.Unmap()
			r.host = r.addr.String()
		} else if strings.ContainsAny(host, ":[]") {
			return nil, fmt.Errorf("--session-mcp-hosts %q: want a host name or address, with an optional :port", e)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// match finds the rule allowing u's host and port.
func match(rules []hostRule, u *url.URL) (hostRule, bool) {
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	}
	port := u.Port()
	def := map[string]string{"http": "80", "https": "443"}[u.Scheme]
	for _, r := range rules {
		if r.host == host && (r.port == port || r.port == def && port == "" || r.port == "" && (port == "" || port == def)) {
			return r, true
		}
	}
	return hostRule{}, false
}

// refusal is why a server is refused: an invalidParams error naming its
// field under config.mcpServers.<name>, echoing no value but the name.
func refusal(name, field, reason, format string, args ...any) *msp.Error {
	path := "config.mcpServers." + name
	if field != "" {
		path += "." + field
	}
	e := msp.ErrInvalidParams(path, "mcp server %q: %s", name, fmt.Sprintf(format, args...))
	e.Data.Reason = reason
	return e
}

// checked is a server the policy takes: its tool configuration, and the
// host rule that let it in (HTTP mode).
type checked struct {
	cfg      tool.ServerConfig
	required bool
	rule     hostRule
	secrets  []string // what its logs must not show
}

// check vets one server (see Check); taken names the operator's servers.
func check(p Policy, rules []hostRule, taken map[string]bool, name string, c msp.SessionMCPServerConfig) (checked, error) {
	if err := tool.ValidateServerName(name); err != nil {
		return checked{}, refusal(name, "", "", "a name must be at most %d letters, digits and '-', words joined by single underscores", tool.MaxServerNameLen)
	}
	if taken[name] {
		return checked{}, refusal(name, "", msp.ReasonNameTaken, "the name is one of this server's own MCP servers'")
	}
	if raw, _ := json.Marshal(c); len(raw) > MaxConfigBytes {
		return checked{}, refusal(name, "", "", "the configuration is over %d bytes", MaxConfigBytes)
	}
	out := checked{required: c.Required(), cfg: tool.ServerConfig{Name: name}}
	switch c.Transport {
	case msp.MCPTransportStdio:
		if p.Mode != All {
			return checked{}, refusal(name, "transport", msp.ReasonTransportNotAllowed, "this server runs no command a client names (--session-mcp %s)", p.Mode)
		}
		if c.Command == "" {
			return checked{}, refusal(name, "command", "", "command is empty")
		}
		if c.Framing == msp.MCPFramingContentLength {
			return checked{}, refusal(name, "framing", "", "mspd speaks newline-delimited JSON to stdio servers (MCP's stdio transport): use auto or lineDelimitedJson")
		}
		for _, k := range slices.Sorted(maps.Keys(c.Env)) {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(c.Env[k], 0) {
				return checked{}, refusal(name, "env", "", "env has a variable name or value a process environment cannot hold")
			}
			out.secrets = append(out.secrets, c.Env[k])
		}
		out.cfg.Command, out.cfg.Args, out.cfg.Env = c.Command, c.Args, c.Env
	case msp.MCPTransportStreamableHTTP:
		u, err := url.Parse(c.URL)
		switch {
		case err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" || u.Opaque != "":
			return checked{}, refusal(name, "url", "", "url must be an absolute http or https URL")
		case u.User != nil:
			return checked{}, refusal(name, "url", "", "url must not carry credentials: send them in headers")
		}
		if p.Mode == HTTP {
			r, ok := match(rules, u)
			if !ok {
				return checked{}, refusal(name, "url", msp.ReasonHostNotAllowed, "the url's host is not one this server lets clients reach (--session-mcp-hosts)")
			}
			out.rule = r
		}
		for _, k := range slices.Sorted(maps.Keys(c.Headers)) {
			if k == "" || strings.ContainsAny(k, " :\r\n\t") || strings.ContainsAny(c.Headers[k], "\r\n\x00") {
				return checked{}, refusal(name, "headers", "", "headers has a header name or value HTTP cannot carry")
			}
			out.secrets = append(out.secrets, c.Headers[k])
		}
		// The path and query may carry a credential as well.
		if u.RawQuery != "" {
			out.secrets = append(out.secrets, u.RawQuery)
		}
		if len(u.EscapedPath()) > 1 {
			out.secrets = append(out.secrets, u.EscapedPath())
		}
		out.cfg.URL, out.cfg.Headers = c.URL, c.Headers
	default:
		// The schema's closed union refuses it first; here for callers
		// that did not go through it.
		return checked{}, refusal(name, "transport", msp.ReasonTransportNotAllowed, "transport must be %q or %q", msp.MCPTransportStdio, msp.MCPTransportStreamableHTTP)
	}
	return out, nil
}

// errUnsetPolicy refuses a Servers whose policy takes nothing.
var errUnsetPolicy = errors.New("sessionmcp: the policy is off")
