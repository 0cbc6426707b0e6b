package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"mspd/daemon"
	"mspd/tool/sessionmcp"
)

// TestServeRefusesStrayArguments: a word left after the flags is a usage
// error, not ignored along with every flag after it: `--pprof false`
// would turn profiling on and drop the rest of the command line.
func TestServeRefusesStrayArguments(t *testing.T) {
	var stderr bytes.Buffer
	// --provider bogus makes a start that got past the flags fail at once.
	args := []string{"serve", "--data", t.TempDir(), "--provider", "bogus", "--pprof", "false", "--listen", "127.0.0.1:0"}
	if code := Run(args, strings.NewReader(""), io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), `unexpected argument "false"`) {
		t.Errorf("exit %d, want 2 naming the argument:\n%s", code, stderr.String())
	}
}

// TestServeRefusesOutOfRangeValues: a value the daemon would silently
// replace by its default (a zero or negative size, count or duration), or
// a share outside 0..1, is a usage error naming the flag, from the command
// line and from the environment alike.
func TestServeRefusesOutOfRangeValues(t *testing.T) {
	for _, bad := range [][2]string{
		{"max-attempts", "0"}, {"max-frame-bytes", "-1"}, {"queue-frames", "-5"}, {"queue-bytes", "0"},
		{"write-timeout", "-1s"}, {"default-max-tokens", "-5"}, {"retry-initial-backoff", "0s"},
		{"retry-max-backoff", "0s"}, {"retry-max-server-delay", "0s"}, {"retry-budget-ratio", "0"},
		{"lease-ttl", "0s"}, {"max-output-tokens", "-1"},
		{"shutdown-timeout", "-1s"}, {"approval-timeout", "-1s"}, {"demo-faults", "1.5"}, {"demo-faults", "-0.1"}, {"gc-headroom-mib", "-1"},
		// 0 would silently be the default, while a negative value means off.
		{"retry-budget-tokens", "0"}, {"command-retention", "0s"}, {"breaker-failures", "0"},
		{"breaker-window", "0s"}, {"breaker-cooldown", "-1s"},
		{"jetstream-replicas", "0"}, {"jetstream-replicas", "-1"},
		{"jetstream-streams", "0"}, {"jetstream-streams", "65"},
		{"max-subscriptions", "0"}, {"max-subscriptions", "-1"},
	} {
		// --provider bogus makes a start that got past the flags fail at once.
		base := []string{"serve", "--data", t.TempDir(), "--provider", "bogus"}
		var stderr bytes.Buffer
		if code := Run(append(base, "--"+bad[0], bad[1]), strings.NewReader(""), io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--"+bad[0]) {
			t.Errorf("--%s %s: exit %d, want 2 naming the flag:\n%s", bad[0], bad[1], code, stderr.String())
		}
	}
	t.Setenv("MSPD_QUEUE_FRAMES", "0")
	var stderr bytes.Buffer
	if code := Run([]string{"serve", "--data", t.TempDir(), "--provider", "bogus"}, strings.NewReader(""), io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--queue-frames") {
		t.Errorf("MSPD_QUEUE_FRAMES=0: exit %d, want 2 naming the flag:\n%s", code, stderr.String())
	}
}

// startedWith runs `mspd serve` with args and returns the configuration
// the daemon would have started with.
func startedWith(t *testing.T, args ...string) daemon.Config {
	t.Helper()
	var got *daemon.Config
	orig := newDaemon
	t.Cleanup(func() { newDaemon = orig })
	newDaemon = func(_ context.Context, cfg daemon.Config) (*daemon.Daemon, error) {
		got = &cfg
		return nil, errors.New("not started in this test")
	}
	var stderr bytes.Buffer
	if code := Run(append([]string{"serve", "--data", t.TempDir()}, args...), strings.NewReader(""), io.Discard, &stderr); code != 1 || got == nil {
		t.Fatalf("serve %v: exit %d, want 1 from the daemon:\n%s", args, code, stderr.String())
	}
	return *got
}

// TestServeTakesMaxSubscriptions: --max-subscriptions (and its variable)
// reaches the server's config as given.
func TestServeTakesMaxSubscriptions(t *testing.T) {
	if cfg := startedWith(t, "--max-subscriptions", "3"); cfg.Server.MaxSubscriptions != 3 {
		t.Errorf("--max-subscriptions 3: the daemon got %d", cfg.Server.MaxSubscriptions)
	}
	t.Setenv("MSPD_MAX_SUBSCRIPTIONS", "7")
	if cfg := startedWith(t); cfg.Server.MaxSubscriptions != 7 {
		t.Errorf("MSPD_MAX_SUBSCRIPTIONS=7: the daemon got %d", cfg.Server.MaxSubscriptions)
	}
}

// TestServeTakesAnApprovalTimeout: --approval-timeout reaches the
// runners' config; left out, calls wait for ever.
func TestServeTakesAnApprovalTimeout(t *testing.T) {
	if cfg := startedWith(t); cfg.Tools.ApprovalTimeout != 0 {
		t.Errorf("by default: the daemon got %v", cfg.Tools.ApprovalTimeout)
	}
	if cfg := startedWith(t, "--approval-timeout", "5m"); cfg.Tools.ApprovalTimeout != 5*time.Minute {
		t.Errorf("--approval-timeout 5m: the daemon got %v", cfg.Tools.ApprovalTimeout)
	}
}

// TestServeTakesANegativeIdleTimeout: a negative --idle-timeout turns the
// providers' idle check off (slow local models need it), from the command
// line and the environment alike; it is no usage error.
func TestServeTakesANegativeIdleTimeout(t *testing.T) {
	if cfg := startedWith(t, "--idle-timeout", "-1s"); cfg.IdleTimeout != -time.Second {
		t.Errorf("--idle-timeout -1s: the daemon got %v", cfg.IdleTimeout)
	}
	t.Setenv("MSPD_IDLE_TIMEOUT", "-1s")
	if cfg := startedWith(t); cfg.IdleTimeout != -time.Second {
		t.Errorf("MSPD_IDLE_TIMEOUT=-1s: the daemon got %v", cfg.IdleTimeout)
	}
}

// TestServeZeroMeansNone: --demo-word-delay 0 and --retry-budget-refill 0
// mean no pause and no refill, as written, not the defaults (35ms, 0.2 a
// second) that the daemon takes a zero for; left out, the defaults hold.
func TestServeZeroMeansNone(t *testing.T) {
	if cfg := startedWith(t); cfg.Demo.WordDelay != 35*time.Millisecond || cfg.RetryBudget.Refill != 0.2 {
		t.Errorf("by default: the daemon got a %v word delay and a %v refill", cfg.Demo.WordDelay, cfg.RetryBudget.Refill)
	}
	cfg := startedWith(t, "--demo-word-delay", "0", "--retry-budget-refill", "0")
	if cfg.Demo.WordDelay >= 0 {
		t.Errorf("--demo-word-delay 0: the daemon got %v, a pause", cfg.Demo.WordDelay)
	}
	if cfg.RetryBudget.Refill >= 0 {
		t.Errorf("--retry-budget-refill 0: the daemon got %v, a refill", cfg.RetryBudget.Refill)
	}
	t.Setenv("MSPD_DEMO_WORD_DELAY", "0s")
	if cfg := startedWith(t); cfg.Demo.WordDelay >= 0 {
		t.Errorf("MSPD_DEMO_WORD_DELAY=0s: the daemon got %v, a pause", cfg.Demo.WordDelay)
	}
}

// TestHelpIsASuccess: --help and -h print the command's usage and exit 0,
// as flag.ExitOnError does, for every subcommand; a flag that does not
// exist is still a usage error.
func TestHelpIsASuccess(t *testing.T) {
	for _, cmd := range [][]string{nil, {"serve"}, {"sessions"}, {"tail"}, {"validate"}} {
		for _, help := range []string{"--help", "-h"} {
			var out bytes.Buffer
			args := append(append([]string(nil), cmd...), help)
			if code := Run(args, strings.NewReader(""), &out, &out); code != 0 || !strings.Contains(strings.ToLower(out.String()), "usage") {
				t.Errorf("mspd %s: exit %d, want 0 with the usage:\n%s", strings.Join(args, " "), code, out.String())
			}
		}
		args := append(append([]string(nil), cmd...), "--no-such-flag")
		if cmd != nil && cmd[0] == "validate" {
			args = append(args, "extra") // validate takes one argument, not flags
		}
		if code := Run(args, strings.NewReader(""), io.Discard, io.Discard); code != 2 {
			t.Errorf("mspd %s: exit %d, want 2", strings.Join(args, " "), code)
		}
	}
}

// TestVersion: mspd --version and mspd version print the version (as
// initialize's serverInfo reports it) and exit 0.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		var out bytes.Buffer
		code := Run(args, strings.NewReader(""), &out, io.Discard)
		if code != 0 || !strings.HasPrefix(out.String(), "mspd "+buildVersion()+" (go") {
			t.Errorf("mspd %s: exit %d, %q; want 0 and the version", args[0], code, out.String())
		}
	}
}

// TestServeTakesSessionMCP: --session-mcp is off unless given; http with
// --session-mcp-hosts (repeated or comma-separated) reaches the daemon as
// its policy; another mode is a usage error naming the flag.
func TestServeTakesSessionMCP(t *testing.T) {
	if cfg := startedWith(t); cfg.SessionMCP.Mode != sessionmcp.Off || len(cfg.SessionMCP.Hosts) != 0 {
		t.Errorf("by default: %+v", cfg.SessionMCP)
	}
	cfg := startedWith(t, "--session-mcp", "http", "--session-mcp-hosts", "a.example,b.example:8443", "--session-mcp-hosts", "10.0.0.7")
	if cfg.SessionMCP.Mode != sessionmcp.HTTP || strings.Join(cfg.SessionMCP.Hosts, " ") != "a.example b.example:8443 10.0.0.7" {
		t.Errorf("http: %+v", cfg.SessionMCP)
	}
	var stderr bytes.Buffer
	if code := Run([]string{"serve", "--data", t.TempDir(), "--session-mcp", "stdio"}, strings.NewReader(""), io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--session-mcp") {
		t.Errorf("--session-mcp stdio: exit %d, want 2 naming the flag:\n%s", code, stderr.String())
	}
}
