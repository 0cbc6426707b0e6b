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
