package daemon

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"mspd/server"
)

// TestPprofNeedsAuthOffLoopback: --pprof on a non-loopback address without
// a credential is refused (even with --insecure-no-auth); with a token it
// starts.
func TestPprofNeedsAuthOffLoopback(t *testing.T) {
	for _, tc := range []struct {
		token   string
		refused bool
	}{{"", true}, {"a-token-long-enough-1234", false}} {
		d, err := New(context.Background(), Config{Listen: "0.0.0.0:0", DataDir: t.TempDir(), Provider: "scripted", InsecureNoAuth: true,
			Server: server.Config{Pprof: true, AuthToken: tc.token}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		err = d.Start()
		d.Close(context.Background())
		if refused := err != nil && strings.Contains(err.Error(), "refusing --pprof"); refused != tc.refused {
			t.Errorf("token %q: Start = %v, want refused %v", tc.token, err, tc.refused)
		}
	}
}
