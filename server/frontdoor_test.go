package server

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"mspd/auth"
)

// frontDoor serves a Server's handler, with a page mounted at / as the
// daemon mounts the web page, on a loopback test listener.
func serveFrontDoor(t *testing.T, cfg Config) *httptest.Server {
	t.Helper()
	m, _ := testManager(t)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	Mount(h, "GET /", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "page") }))
	ts := httptest.NewServer(h)
	t.Cleanup(func() { ts.Close(); s.Shutdown(t.Context()) })
	return ts
}

// status sends GET path to ts with the given Host (and Origin) and, for
// /msp, a WebSocket upgrade; it returns the status code.
func status(t *testing.T, ts *httptest.Server, path, host, origin string, header http.Header) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range header {
		req.Header[k] = v
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if path == "/msp" {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestDNSRebindingRefused: a server without credentials answers only to
// Host names that mean this machine. A page on attacker.example that
// rebinds its name to 127.0.0.1 sends its own name as Host (and Origin,
// which therefore matches): it gets 403 for both the page and /msp.
func TestDNSRebindingRefused(t *testing.T) {
	ts := serveFrontDoor(t, Config{})
	for _, path := range []string{"/msp", "/"} {
		if got := status(t, ts, path, "attacker.example:7700", "http://attacker.example:7700", nil); got != http.StatusForbidden {
			t.Errorf("GET %s from a rebound name: %d, want 403", path, got)
		}
		if got := status(t, ts, path, "attacker.example", "", nil); got != http.StatusForbidden {
			t.Errorf("GET %s with Host attacker.example: %d, want 403", path, got)
		}
	}
}

// TestLoopbackHostsServed: loopback addresses, localhost and the allowed
// hosts pass the Host check, on any port.
func TestLoopbackHostsServed(t *testing.T) {
	ts := serveFrontDoor(t, Config{AllowedHosts: []string{"mspd.internal", "Box.LAN:7700"}})
	for _, host := range []string{"127.0.0.1:7700", "127.0.0.1", "127.1.2.3:80", "[::1]:7700", "[::1]", "localhost:7700",
		"LOCALHOST", "mspd.internal:8080", "MSPD.internal", "box.lan:9"} {
		for _, path := range []string{"/msp", "/"} {
			want := http.StatusOK
			if path == "/msp" {
				want = http.StatusSwitchingProtocols
			}
			if got := status(t, ts, path, host, "", nil); got != want {
				t.Errorf("GET %s with Host %s: %d, want %d", path, host, got, want)
			}
		}
	}
	for _, host := range []string{"10.0.0.1:7700", "[::ffff:10.0.0.1]", "localhost.attacker.example", "127.0.0.1.nip.io", "mspd.internal.attacker.example"} {
		if got := status(t, ts, "/", host, "", nil); got != http.StatusForbidden {
			t.Errorf("GET / with Host %s: %d, want 403", host, got)
		}
	}
	// The ops endpoints answer whatever the Host, as they answer without
	// a token: probes address the server by any name.
	for _, path := range []string{"/livez", "/readyz", "/metrics"} {
		if got := status(t, ts, path, "attacker.example", "", nil); got != http.StatusOK {
			t.Errorf("GET %s with a foreign Host: %d, want 200", path, got)
		}
	}
}

// TestHostCheckOffWithAuth: with a credential configured the token is the
// guard, and any Host may reach the server (a reverse proxy's name).
func TestHostCheckOffWithAuth(t *testing.T) {
	ts := serveFrontDoor(t, Config{AuthToken: "s3cret-token"})
	bearer := http.Header{"Authorization": {"Bearer s3cret-token"}}
	if got := status(t, ts, "/msp", "mspd.example.com", "", bearer); got != http.StatusSwitchingProtocols {
		t.Errorf("/msp with a token and any Host: %d, want 101", got)
	}
	if got := status(t, ts, "/", "mspd.example.com", "", nil); got != http.StatusOK {
		t.Errorf("/ with auth on and any Host: %d, want 200", got)
	}
	// The Origin check still holds.
	if got := status(t, ts, "/msp", "mspd.example.com", "https://evil.example", bearer); got != http.StatusForbidden {
		t.Errorf("/msp from a foreign Origin: %d, want 403", got)
	}
}

// TestRefusalNamesNoToken: a refused handshake is 401 with an RFC 6750
// challenge, and is logged with its reason and remote address but never
// the token.
func TestRefusalNamesNoToken(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "jwt.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	authn, err := auth.New(t.Context(), auth.Config{Token: "s3cret-token", Logger: logger,
		JWT: auth.JWTConfig{KeyFile: keyFile, Issuer: "https://issuer.test", Audience: "mspd"}})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.RegisteredClaims{Subject: "alice", Issuer: "https://issuer.test",
		Audience: jwt.ClaimStrings{"mspd"}, ExpiresAt: jwt.NewNumericDate(time.Now().Add(-time.Hour))}).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	ts := serveFrontDoor(t, Config{Auth: authn, Logger: logger})
	for _, h := range []http.Header{
		{"Authorization": {"Bearer wrong-token-0123456789"}},
		{"Authorization": {"Bearer " + expired}},
		{"Sec-Websocket-Protocol": {"msp, msp.bearer.wrong-token-0123456789"}},
		{},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.URL+"/msp", nil)
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Bearer realm="mspd", error="invalid_token"` {
			t.Errorf("%v: %s %q", h, resp.Status, resp.Header.Get("WWW-Authenticate"))
		}
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	for _, want := range []string{"reason=\"auth: unknown token\"", "reason=\"auth: JWT expired\"", "reason=\"auth: no token\"", "remote=127.0.0.1:"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s:\n%s", want, out)
		}
	}
	for _, secret := range []string{"wrong-token-0123456789", expired, strings.Split(expired, ".")[1], strings.Split(expired, ".")[2]} {
		if strings.Contains(out, secret) {
			t.Errorf("the log shows a token:\n%s", out)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestTokenAsSubprotocol: a browser offers "msp" and "msp.bearer.<token>";
// the handshake succeeds and only the neutral "msp" is echoed.
func TestTokenAsSubprotocol(t *testing.T) {
	ts := serveFrontDoor(t, Config{AuthToken: "s3cret-token"})
	url := "ws" + strings.TrimPrefix(ts.URL, "http") + "/msp"
	ws, resp, err := websocket.Dial(t.Context(), url, &websocket.DialOptions{Subprotocols: []string{"msp", "msp.bearer.s3cret-token"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if ws.Subprotocol() != "msp" || resp.Header.Get("Sec-WebSocket-Protocol") != "msp" {
		t.Errorf("echoed subprotocol %q", resp.Header.Get("Sec-WebSocket-Protocol"))
	}
	if _, _, err := websocket.Dial(t.Context(), url, &websocket.DialOptions{Subprotocols: []string{"msp", "msp.bearer.wrong"}}); err == nil ||
		!strings.Contains(err.Error(), "401") {
		t.Errorf("a wrong subprotocol token: %v", err)
	}
}
