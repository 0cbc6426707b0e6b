package daemon

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"mspd/server"
)

// TestStartRefusesExposureWithoutAuth: a daemon without any credential
// refuses to listen beyond loopback (before binding anything), with a
// message that says what to do.
func TestStartRefusesExposureWithoutAuth(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:0", ":0"} {
		d, err := New(context.Background(), Config{Listen: listen, DataDir: t.TempDir(), Provider: "scripted",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		err = d.Start()
		d.Close(context.Background())
		if err == nil || !strings.Contains(err.Error(), "refusing to listen on "+listen+" without authentication") ||
			!strings.Contains(err.Error(), "--insecure-no-auth") {
			t.Errorf("Start on %s: %v", listen, err)
		}
	}
}

func TestCheckExposure(t *testing.T) {
	for _, tc := range []struct {
		listen                string
		authenticated, unsafe bool
		refused               bool
	}{
		{"127.0.0.1:7700", false, false, false},
		{"127.0.0.2:0", false, false, false},
		{"[::1]:7700", false, false, false},
		{"localhost:7700", false, false, false},
		{"0.0.0.0:7700", false, false, true},
		{":7700", false, false, true},
		{"[::]:7700", false, false, true},
		{"192.168.1.5:7700", false, false, true},
		{"myhost:7700", false, false, true},
		{"0.0.0.0:7700", true, false, false},
		{"0.0.0.0:7700", false, true, false},
	} {
		err := checkExposure(tc.listen, tc.authenticated, tc.unsafe)
		if (err != nil) != tc.refused {
			t.Errorf("checkExposure(%q, auth %v, insecure %v) = %v", tc.listen, tc.authenticated, tc.unsafe, err)
		}
	}
}

// TestAuthFromServerToken: the single --auth-token reaches the
// authenticator, so it counts as authentication for the exposure check.
func TestAuthFromServerToken(t *testing.T) {
	d, err := New(context.Background(), Config{DataDir: t.TempDir(), Provider: "scripted",
		Server: server.Config{AuthToken: "s3cret-token"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.Background())
	if !d.srv.Authenticator().Enabled() {
		t.Error("the server's token does not enable authentication")
	}
}

// TestStartRefusesAWeakTokenBeyondLoopback: --auth-token "x" on a
// non-loopback listener is refused before anything is bound, the error
// saying the tokens file's minimum (and never the token); on loopback it
// is taken.
func TestStartRefusesAWeakTokenBeyondLoopback(t *testing.T) {
	for _, tc := range []struct {
		listen  string
		refused bool
	}{{"0.0.0.0:0", true}, {":0", true}, {"127.0.0.1:0", false}} {
		d, err := New(context.Background(), Config{Listen: tc.listen, DataDir: t.TempDir(), Provider: "scripted",
			Server: server.Config{AuthToken: "x"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		err = d.Start()
		d.Close(context.Background())
		switch {
		case !tc.refused && err != nil:
			t.Errorf("Start on %s: %v", tc.listen, err)
		case tc.refused && (err == nil || !strings.Contains(err.Error(), "refusing --auth-token on "+tc.listen+": token shorter than 16 characters, the minimum of --auth-tokens files")):
			t.Errorf("Start on %s with a one-character token: %v", tc.listen, err)
		case err != nil && strings.Contains(err.Error(), `"x"`):
			t.Errorf("the refusal quotes the token: %v", err)
		}
	}
}

// TestSharedTokenStrength: beyond loopback the shared token needs the
// tokens file's minimum length; on loopback any token is taken.
func TestSharedTokenStrength(t *testing.T) {
	for _, tc := range []struct {
		listen, token string
		refused       bool
	}{
		{"0.0.0.0:7700", "x", true},
		{"0.0.0.0:7700", "fifteen-chars-x", true},
		{"0.0.0.0:7700", "sixteen-chars-xx", false},
		{"[::]:7700", "short", true},
		{"127.0.0.1:7700", "x", false},
		{"localhost:7700", "x", false},
		{"0.0.0.0:7700", "", false},
	} {
		err := checkSharedToken(tc.listen, tc.token)
		if (err != nil) != tc.refused {
			t.Errorf("checkSharedToken(%q, %d characters) = %v", tc.listen, len(tc.token), err)
		}
		if err != nil && !strings.Contains(err.Error(), "16 characters") {
			t.Errorf("the refusal does not say the minimum: %v", err)
		}
	}
}
