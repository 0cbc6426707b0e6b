package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestServeRefusesExposureWithoutAuth: `mspd serve --listen 0.0.0.0:…`
// with no credential exits non-zero and says why and what to do.
func TestServeRefusesExposureWithoutAuth(t *testing.T) {
	var stderr bytes.Buffer
	code := Run([]string{"serve", "--listen", "0.0.0.0:0", "--data", t.TempDir(), "--provider", "scripted"}, strings.NewReader(""), io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "refusing to listen on 0.0.0.0:0 without authentication") {
		t.Errorf("exit %d:\n%s", code, stderr.String())
	}
}

// TestServeRefusesBadAuthConfig: a malformed tokens file or JWT flags
// without an issuer stop startup.
func TestServeRefusesBadAuthConfig(t *testing.T) {
	for name, args := range map[string][]string{
		"no tokens file":  {"--auth-tokens", "/no/such/tokens"},
		"issuer, no keys": {"--auth-jwt-issuer", "https://issuer.test"},
	} {
		var stderr bytes.Buffer
		code := Run(append([]string{"serve", "--data", t.TempDir(), "--provider", "scripted"}, args...), strings.NewReader(""), io.Discard, &stderr)
		if code != 1 || !strings.Contains(stderr.String(), "auth:") {
			t.Errorf("%s: exit %d:\n%s", name, code, stderr.String())
		}
	}
}
