package sessionmcp

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mspd/internal/testlog"
	"mspd/schema/msp"
	"mspd/tool"
	"mspd/tool/tooltest"
)

func TestMain(m *testing.M) {
	tooltest.MainIfChild()
	os.Exit(m.Run())
}

func newServers(t *testing.T, p Policy, operators ...string) *Servers {
	t.Helper()
	var clients []*tool.Client
	for _, name := range operators {
		c, err := tool.StartInProcess(name, tooltest.New("").MCP, tool.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		// Its tools are listed once it connects: wait, so that a turn's
		// tools hold the operator's (TestGuard once saw none of them).
		if err := c.WaitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	reg, err := tool.NewRegistry(clients...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Policy: p, Operators: reg, ConnectWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func httpServer(url string) msp.SessionMCPServerConfig {
	return msp.SessionMCPServerConfig{Transport: msp.MCPTransportStreamableHTTP, URL: url}
}

// TestCheck: what each policy takes, and every refusal typed, naming the
// field and echoing no value.
func TestCheck(t *testing.T) {
	http := newServers(t, Policy{Mode: HTTP, Hosts: []string{"mcp.example.com", "tools.example.com:8443", "10.1.2.3:9000", "[fd00::1]"}}, "builtin")
	all := newServers(t, Policy{Mode: All}, "builtin")
	stdio := msp.SessionMCPServerConfig{Transport: msp.MCPTransportStdio, Command: "/bin/secret-tool", Env: map[string]string{"TOKEN": "env-secret-value"}}
	tests := []struct {
		name   string
		s      *Servers
		cfg    msp.SessionMCPServerConfig
		server string
		field  string // "" when taken
		reason string
	}{
		{"listed host, default port", http, httpServer("https://mcp.example.com/mcp"), "a", "", ""},
		{"listed host, its default port spelt out", http, httpServer("https://mcp.example.com:443/mcp"), "a", "", ""},
		{"listed host upper case with a dot", http, httpServer("https://MCP.Example.com./mcp"), "a", "", ""},
		{"listed host and port", http, httpServer("https://tools.example.com:8443/mcp"), "a", "", ""},
		{"listed address and port", http, httpServer("http://10.1.2.3:9000/"), "a", "", ""},
		{"listed IPv6 address", http, httpServer("http://[fd00::1]/mcp"), "a", "", ""},
		{"listed host, another port", http, httpServer("https://mcp.example.com:8080/mcp"), "a", "config.mcpServers.a.url", msp.ReasonHostNotAllowed},
		{"listed port, another host", http, httpServer("https://evil.example.com:8443/mcp"), "a", "config.mcpServers.a.url", msp.ReasonHostNotAllowed},
		{"a subdomain", http, httpServer("https://x.mcp.example.com/mcp"), "a", "config.mcpServers.a.url", msp.ReasonHostNotAllowed},
		{"loopback not listed", http, httpServer("http://127.0.0.1:9000/"), "a", "config.mcpServers.a.url", msp.ReasonHostNotAllowed},
		{"credentials in the url", http, httpServer("https://user:pw@mcp.example.com/mcp"), "a", "config.mcpServers.a.url", ""},
		{"not http", http, httpServer("ftp://mcp.example.com/"), "a", "config.mcpServers.a.url", ""},
		{"header with a newline", http, msp.SessionMCPServerConfig{Transport: msp.MCPTransportStreamableHTTP, URL: "https://mcp.example.com/", Headers: map[string]string{"X": "a\r\nHost: evil"}}, "a", "config.mcpServers.a.headers", ""},
		{"stdio under http", http, stdio, "a", "config.mcpServers.a.transport", msp.ReasonTransportNotAllowed},
		{"an operator's name", http, httpServer("https://mcp.example.com/mcp"), "builtin", "config.mcpServers.builtin", msp.ReasonNameTaken},
		{"a name models cannot call", http, httpServer("https://mcp.example.com/mcp"), "a__b", "config.mcpServers.a__b", ""},
		{"stdio under all", all, stdio, "a", "", ""},
		{"any host under all", all, httpServer("http://127.0.0.1:1/"), "a", "", ""},
		{"contentLength framing", all, msp.SessionMCPServerConfig{Transport: msp.MCPTransportStdio, Command: "x", Framing: msp.MCPFramingContentLength}, "a", "config.mcpServers.a.framing", ""},
		{"unknown transport", all, msp.SessionMCPServerConfig{Transport: "grpc", URL: "https://x/"}, "a", "config.mcpServers.a.transport", msp.ReasonTransportNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Check(map[string]msp.SessionMCPServerConfig{tt.server: tt.cfg})
			if tt.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var me *msp.Error
			if !errors.As(err, &me) || me.Data.Kind != msp.KindInvalidParams || me.Data.Details["field"] != tt.field || me.Data.Reason != tt.reason {
				t.Fatalf("got %v (%+v), want field %s reason %q", err, me, tt.field, tt.reason)
			}
			for _, secret := range []string{"pw", "evil", "secret", "mcp.example.com", "/bin"} {
				if strings.Contains(me.Message, secret) {
					t.Errorf("the refusal echoes %q: %s", secret, me.Message)
				}
			}
		})
	}
	many := map[string]msp.SessionMCPServerConfig{}
	for _, c := range "abcdefghi" {
		many[string(c)] = httpServer("https://mcp.example.com/")
	}
	if err := http.Check(many); err == nil || !strings.Contains(err.Error(), "at most 8") {
		t.Errorf("nine servers: %v", err)
	}
}

// TestParseHosts refuses what is not a host and port.
func TestParseHosts(t *testing.T) {
	for _, bad := range []string{"", "https://h", "h/path", "*.example.com", "h:0", "h:99999", "u@h", "fe80::1%eth0"} {
		if _, err := parseHosts([]string{bad}); err == nil {
			t.Errorf("%q taken", bad)
		}
	}
	if _, err := New(Config{Policy: Policy{Mode: Off}}); err == nil {
		t.Error("a policy that is off was taken")
	}
}

// TestForbiddenAddresses: the addresses a listed name may not lead to.
func TestForbiddenAddresses(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "127.8.9.1", "::1", "::ffff:127.0.0.1", "169.254.169.254", "fe80::1", "0.0.0.0", "::",
		"224.0.0.1", "255.255.255.255", "fd00:ec2::254", "100.100.100.200", "168.63.129.16", "0.1.2.3"} {
		if !forbidden(netip.MustParseAddr(a)) {
			t.Errorf("%s allowed", a)
		}
	}
	for _, a := range []string{"10.0.0.1", "192.168.1.1", "fd12::1", "93.184.216.34", "2606:4700::1111"} {
		if forbidden(netip.MustParseAddr(a)) {
			t.Errorf("%s forbidden", a)
		}
	}
}

// startTooltest serves the counting MCP server over streamable HTTP.
func startTooltest(t *testing.T) (*tooltest.Server, *url.URL) {
	t.Helper()
	ts := tooltest.New("")
	srv := httptest.NewServer(ts.HTTPHandler())
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return ts, u
}

// ready opens one session's servers and waits for its turn's tools.
func ready(t *testing.T, s *Servers, servers map[string]msp.SessionMCPServerConfig) ([]string, error) {
	t.Helper()
	if err := s.Check(servers); err != nil {
		t.Fatalf("check: %v", err)
	}
	o := s.Open("sess", servers)
	t.Cleanup(o.Close)
	box, err := o.Ready(context.Background())
	if err != nil {
		return nil, err
	}
	var names []string
	for _, spec := range box.Specs() {
		names = append(names, spec.Name)
	}
	return names, nil
}

// TestGuard: a server on a listed address connects and its tools join
// the operator's; a listed name that resolves to loopback is never
// dialled, and a redirect is never followed: a required server then fails
// the turn naming itself, an optional one is left out. Header values are
// sent, and never logged.
func TestGuard(t *testing.T) {
	_, u := startTooltest(t)
	seen := make(chan string, 16)
	var logs testlog.Buffer
	withHeaders := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case seen <- r.Header.Get("Authorization"):
			default:
			}
			h.ServeHTTP(w, r)
		})
	}
	ts := tooltest.New("")
	srv := httptest.NewServer(withHeaders(ts.HTTPHandler()))
	t.Cleanup(srv.Close)
	su, _ := url.Parse(srv.URL)
	redirect := httptest.NewServer(http.RedirectHandler(srv.URL+"/mcp", http.StatusTemporaryRedirect))
	t.Cleanup(redirect.Close)
	ru, _ := url.Parse(redirect.URL)

	const secret = "Bearer header-secret-value"
	s := newServers(t, Policy{Mode: HTTP, Hosts: []string{u.Host, su.Host, ru.Host, "localhost:" + u.Port()}}, "builtin")
	s.cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	names, err := ready(t, s, map[string]msp.SessionMCPServerConfig{
		"mine": {Transport: msp.MCPTransportStreamableHTTP, URL: srv.URL, Headers: map[string]string{"Authorization": secret}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(names, " "), "builtin__lookup") || !strings.Contains(strings.Join(names, " "), "mine__lookup") {
		t.Fatalf("tools %v", names)
	}
	if got := <-seen; got != secret {
		t.Fatalf("the server got Authorization %q", got)
	}

	// A name resolving to loopback: checked (it is listed), never dialled.
	byName := httpServer("http://localhost:" + u.Port() + "/")
	if _, err := ready(t, s, map[string]msp.SessionMCPServerConfig{"local": byName}); err == nil || !strings.Contains(err.Error(), `"local" (required) is not connected`) {
		t.Fatalf("a name resolving to loopback: %v", err)
	}
	byName.Mode = msp.MCPModeOptional
	names, err = ready(t, s, map[string]msp.SessionMCPServerConfig{"local": byName})
	if err != nil || strings.Contains(strings.Join(names, " "), "local__") {
		t.Fatalf("optional, unreachable: tools %v, %v", names, err)
	}
	if !strings.Contains(logs.String(), "left out") {
		t.Errorf("nothing logged of the optional server left out:\n%s", logs.String())
	}

	// A redirect to a listed server is not followed, and its headers go
	// nowhere else.
	redirected := msp.SessionMCPServerConfig{Transport: msp.MCPTransportStreamableHTTP, URL: redirect.URL, Headers: map[string]string{"Authorization": secret}}
	if _, err := ready(t, s, map[string]msp.SessionMCPServerConfig{"moved": redirected}); err == nil {
		t.Fatal("a redirected server connected")
	}
	for _, why := range []string{"redirect", "loopback"} {
		if !strings.Contains(logs.String(), why) {
			t.Errorf("the log does not say %q:\n%s", why, logs.String())
		}
	}
	if strings.Contains(logs.String(), "header-secret-value") {
		t.Fatalf("a header value was logged:\n%s", logs.String())
	}
}

// TestStdioUnderAll: under All a stdio server (this test binary) starts
// with the client's env, and its tools join the turn's.
func TestStdioUnderAll(t *testing.T) {
	journal := filepath.Join(t.TempDir(), "journal")
	command, args, env := tooltest.Command(journal)
	s := newServers(t, Policy{Mode: All})
	names, err := ready(t, s, map[string]msp.SessionMCPServerConfig{
		"kid": {Transport: msp.MCPTransportStdio, Command: command, Args: args, Env: env},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(names, " "), "kid__append") {
		t.Fatalf("tools %v", names)
	}
}
