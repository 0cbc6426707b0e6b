package e2e

import (
	"context"
	"os/exec"
	"testing"

	"mspd/internal/cli/clitest"
	"mspd/tool/tooltest"
)

// TestMain runs the tests, or this binary as mspd for the tests that
// start an mspd process (see clitest), or as the counting MCP server for
// those that configure it as a stdio child (see tooltest).
func TestMain(m *testing.M) {
	tooltest.MainIfChild()
	clitest.Main(m)
}

// mspdCommand is `mspd args…` as a command to start.
func mspdCommand(ctx context.Context, args ...string) *exec.Cmd {
	return clitest.Command(ctx, args...)
}
