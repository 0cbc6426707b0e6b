package tool

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestRedactingHandlerHidesSecrets: a secret reaches no log line, whether
// it is in the message, a string, an error, a formatted value, a group or
// an attribute added with With; short strings are left alone.
func TestRedactingHandlerHidesSecrets(t *testing.T) {
	var buf bytes.Buffer
	const secret = "s3cr3t-token-value"
	log := Redacting(slog.New(slog.NewJSONHandler(&buf, nil)), secret, "ab")
	log = log.With("with", "x"+secret)
	log.WithGroup("g").Info("message "+secret,
		"str", secret,
		"err", fmt.Errorf("dial: %w", errors.New("Bearer "+secret)),
		"any", struct{ V string }{secret},
		slog.Group("grp", "inner", secret),
		"ab", "ab stays")
	out := buf.String()
	if strings.Contains(out, secret) {
		t.Fatalf("secret logged: %s", out)
	}
	if n := strings.Count(out, redacted); n != 6 {
		t.Errorf("%d redactions, want 6: %s", n, out)
	}
	if !strings.Contains(out, "ab stays") {
		t.Errorf("a short string was redacted: %s", out)
	}
	if l := slog.New(slog.DiscardHandler); Redacting(l, "abc") != l {
		t.Error("a logger with nothing to hide is wrapped")
	}
}
