package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBrowserMissing: without Chromium a newcomer's `go test ./...` skips
// the browser tests, saying how to get it and run them; under CI a
// missing browser fails them, so CI always runs them.
func TestBrowserMissing(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if msg, fail := browserMissing(self, true); msg != "" || fail {
		t.Errorf("an executable browser: %q, %v; want it used", msg, fail)
	}
	plain := filepath.Join(t.TempDir(), "chromium")
	if err := os.WriteFile(plain, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(t.TempDir(), "no-chromium"), plain, t.TempDir()} {
		for _, ci := range []bool{false, true} {
			msg, fail := browserMissing(path, ci)
			if fail != ci {
				t.Errorf("%s, CI %v: fail %v, want %v (skip without CI, fail with it)", path, ci, fail, ci)
			}
			for _, want := range []string{path, "apt-get install -y chromium", "go test -race -run TestWebChat ./e2e", "MSPD_TEST_CHROMIUM"} {
				if !strings.Contains(msg, want) {
					t.Errorf("%s, CI %v: message %q lacks %q", path, ci, msg, want)
				}
			}
		}
	}
}
