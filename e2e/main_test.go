package e2e

import (
	"context"
	"os/exec"
	"testing"

	"mspd/internal/cli/clitest"
)

// TestMain runs the tests, or this binary as mspd for the tests that
// start an mspd process (see clitest).
func TestMain(m *testing.M) { clitest.Main(m) }

// mspdCommand is `mspd args…` as a command to start.
func mspdCommand(ctx context.Context, args ...string) *exec.Cmd {
	return clitest.Command(ctx, args...)
}
