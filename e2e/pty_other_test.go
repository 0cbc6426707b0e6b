//go:build !linux

package e2e

import (
	"os"
	"testing"
)

// openPTY skips the test: pseudo-terminals are opened on Linux only.
func openPTY(t *testing.T) (keyboard, tty *os.File) {
	t.Skip("the pseudo-terminal tests run on Linux")
	return nil, nil
}
