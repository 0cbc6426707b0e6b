package testlane

import (
	"os"
	"testing"
)

// Under CI a slow test runs even with -short; outside it, -short skips it.
func TestSlow(t *testing.T) {
	ran := false
	t.Run("probe", func(t *testing.T) {
		Slow(t, "probe")
		ran = true
	})
	want := !testing.Short() || os.Getenv("CI") != ""
	if ran != want {
		t.Fatalf("ran %v with -short=%v and CI=%q, want %v", ran, testing.Short(), os.Getenv("CI"), want)
	}
}
