package tool

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Approval policies of a server's tools: the values of the approval key.
const (
	// ApprovalNever runs the server's tools without asking, except those
	// named in approval_tools.
	ApprovalNever = "never"
	// ApprovalAlways makes every call of the server's tools wait for a
	// person. It is the default: a server the operator has not vouched for
	// acts only with someone's consent.
	ApprovalAlways = "always"
)

// MaxServerNameLen bounds a server's name, so that a model-facing tool name
// (server__tool, at most 64 bytes) keeps room for the tool's own name.
const MaxServerNameLen = 24

// ServerConfig configures one MCP server: an [[mcp]] table of mspd's
// --config file. Exactly one of Command (stdio) and URL (streamable HTTP)
// is set. Env and Headers hold secrets: String, GoString and LogValue
// print their keys only, and no error of this package contains their
// values.
type ServerConfig struct {
	// Name names the server in tool calls and logs, and prefixes its tools'
	// model-facing names: unique, letters, digits and '-', words joined by
	// single underscores, at most MaxServerNameLen bytes.
	Name string `toml:"name"`
	// Command is the stdio server's executable, started and supervised by
	// mspd with Args; its stderr goes to mspd's log, line by line.
	Command string   `toml:"command"`
	Args    []string `toml:"args"`
	// Env is added to the child's environment (never logged).
	Env map[string]string `toml:"env"`
	// URL is a streamable HTTP server's endpoint (http or https).
	URL string `toml:"url"`
	// Headers are sent with every HTTP request to URL (never logged).
	Headers map[string]string `toml:"headers"`
	// Approval is "never" or "always" (the default): whether calls of the
	// server's tools wait for a person.
	Approval string `toml:"approval"`
	// ApprovalTools names tools of this server (their MCP names) whose
	// calls always wait, whatever Approval says.
	ApprovalTools []string `toml:"approval_tools"`
}

var (
	serverNamePattern = regexp.MustCompile(`^[a-zA-Z0-9-]+(_[a-zA-Z0-9-]+)*$`)
	// toolNamePattern is MCP's tool name charset (SEP-986).
	toolNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,128}$`)
)

// Transport names how mspd reaches the server: "stdio" or "http".
func (c ServerConfig) Transport() string {
	if c.URL != "" {
		return "http"
	}
	return "stdio"
}

// NeedsApproval reports whether a call of the server's tool (its MCP
// name) waits for a person under this configuration.
func (c ServerConfig) NeedsApproval(tool string) bool {
	return c.Approval != ApprovalNever || slices.Contains(c.ApprovalTools, tool)
}

// Validate checks one server's configuration. Its errors name the server
// and the key, never a value of env or headers.
func (c ServerConfig) Validate() error {
	if err := validateServerName(c.Name); err != nil {
		return err
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("mcp server %q: %s", c.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Command == "" && c.URL == "":
		return fail("set command (stdio) or url (streamable HTTP)")
	case c.Command != "" && c.URL != "":
		return fail("set command or url, not both")
	case c.URL != "":
		if len(c.Args) > 0 || len(c.Env) > 0 {
			return fail("args and env are for a command; this server has a url")
		}
		u, err := url.Parse(c.URL)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return fail("url must be an absolute http or https URL")
		}
		for k := range c.Headers {
			if k == "" || strings.ContainsAny(k, " :\r\n") {
				return fail("headers has an invalid header name")
			}
		}
	default:
		if len(c.Headers) > 0 {
			return fail("headers are for a url; this server has a command")
		}
		for k := range c.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return fail("env has an invalid variable name")
			}
		}
	}
	switch c.Approval {
	case "", ApprovalNever, ApprovalAlways:
	default:
		return fail("approval must be %q or %q, not %q", ApprovalNever, ApprovalAlways, c.Approval)
	}
	for _, t := range c.ApprovalTools {
		if !toolNamePattern.MatchString(t) {
			return fail("approval_tools entry %q is not a tool name (names only: letters, digits, '_', '-', '.')", t)
		}
	}
	return nil
}

// ValidateServerName checks a server's name (see ServerConfig.Name): a
// name that makes model-facing tool names the providers accept.
func ValidateServerName(name string) error { return validateServerName(name) }

// validateServerName checks a server's name (see ServerConfig.Name).
func validateServerName(name string) error {
	if name == "" {
		return errors.New("mcp: a server has no name")
	}
	if len(name) > MaxServerNameLen || !serverNamePattern.MatchString(name) {
		return fmt.Errorf("mcp server %q: name must be at most %d letters, digits and '-', words joined by single underscores", name, MaxServerNameLen)
	}
	return nil
}

// ValidateServers checks every server's configuration and that their
// names are unique.
func ValidateServers(servers []ServerConfig) error {
	seen := make(map[string]bool, len(servers))
	for _, s := range servers {
		if err := s.Validate(); err != nil {
			return err
		}
		if seen[s.Name] {
			return fmt.Errorf("mcp server %q: the name is used twice", s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

// String describes the server without the values of env and headers, nor
// a URL's credentials or query.
func (c ServerConfig) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mcp server %q (%s", c.Name, c.Transport())
	if c.URL != "" {
		fmt.Fprintf(&b, " %s", redactURL(c.URL))
		if len(c.Headers) > 0 {
			fmt.Fprintf(&b, ", headers %s", strings.Join(sortedKeys(c.Headers), " "))
		}
	} else {
		fmt.Fprintf(&b, " %s", c.Command)
		if len(c.Env) > 0 {
			fmt.Fprintf(&b, ", env %s", strings.Join(sortedKeys(c.Env), " "))
		}
	}
	b.WriteString(")")
	return b.String()
}

// GoString is String, so that %#v redacts too.
func (c ServerConfig) GoString() string { return c.String() }

// LogValue logs the server by name, transport and target; env and headers
// by their keys only.
func (c ServerConfig) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("name", c.Name), slog.String("transport", c.Transport())}
	if c.URL != "" {
		attrs = append(attrs, slog.String("url", redactURL(c.URL)))
		if len(c.Headers) > 0 {
			attrs = append(attrs, slog.Any("headers", sortedKeys(c.Headers)))
		}
	} else {
		attrs = append(attrs, slog.String("command", c.Command))
		if len(c.Env) > 0 {
			attrs = append(attrs, slog.Any("env", sortedKeys(c.Env)))
		}
	}
	return slog.GroupValue(attrs...)
}

// redactURL keeps a URL's scheme, host and path: user info and query may
// carry credentials.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid url)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
