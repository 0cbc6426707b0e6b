package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestServeRefusesStrayArguments: a word left after the flags is a usage
// error, not ignored along with every flag after it: `--pprof false`
// would turn profiling on and drop the rest of the command line.
func TestServeRefusesStrayArguments(t *testing.T) {
	var stderr bytes.Buffer
	// --provider bogus makes a start that got past the flags fail at once.
	args := []string{"serve", "--data", t.TempDir(), "--provider", "bogus", "--pprof", "false", "--listen", "127.0.0.1:0"}
	if code := run(args, strings.NewReader(""), io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), `unexpected argument "false"`) {
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
		{"lease-ttl", "0s"}, {"max-output-tokens", "-1"}, {"idle-timeout", "-1s"},
		{"shutdown-timeout", "-1s"}, {"demo-faults", "1.5"}, {"demo-faults", "-0.1"},
	} {
		// --provider bogus makes a start that got past the flags fail at once.
		base := []string{"serve", "--data", t.TempDir(), "--provider", "bogus"}
		var stderr bytes.Buffer
		if code := run(append(base, "--"+bad[0], bad[1]), strings.NewReader(""), io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--"+bad[0]) {
			t.Errorf("--%s %s: exit %d, want 2 naming the flag:\n%s", bad[0], bad[1], code, stderr.String())
		}
	}
	t.Setenv("MSPD_QUEUE_FRAMES", "0")
	var stderr bytes.Buffer
	if code := run([]string{"serve", "--data", t.TempDir(), "--provider", "bogus"}, strings.NewReader(""), io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--queue-frames") {
		t.Errorf("MSPD_QUEUE_FRAMES=0: exit %d, want 2 naming the flag:\n%s", code, stderr.String())
	}
}
