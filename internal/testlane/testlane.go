// Package testlane keeps tests out of the fast lane (go test -short) that
// are too slow for it, and never out of CI: with CI set in the
// environment, as .ci/run sets it, every such test runs, -short or not.
package testlane

import (
	"os"
	"testing"
)

// Slow skips t, saying why, under -short outside CI; under CI it runs.
func Slow(t testing.TB, why string) {
	t.Helper()
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip(why + " (not in the -short lane; CI runs it)")
	}
}
