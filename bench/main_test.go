package bench

import (
	"testing"

	"mspd/internal/cli/clitest"
)

// TestMain runs the tests, or this binary as mspd for the tests that
// benchmark an mspd process (see clitest).
func TestMain(m *testing.M) { clitest.Main(m) }
