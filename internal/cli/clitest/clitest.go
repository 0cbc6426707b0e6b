// Package clitest lets a test binary run as mspd, so that tests which
// need a real mspd process (to kill it, to speak stdio to it, to run its
// client commands, to benchmark it) start their own executable instead of
// building the server: a package's TestMain calls Main, and its tests
// start Command.
package clitest

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"mspd/internal/cli"
)

// Env is the environment variable, as NAME=value, that makes a test
// binary whose TestMain calls Main run as mspd. Its MSPD_ prefix keeps it
// from the tool servers an mspd starts, which get mspd's environment
// without MSPD_ variables.
const Env = "MSPD_TEST_RUN_AS_MSPD=1"

// Main runs mspd with the process's arguments when Env is set, and the
// tests otherwise; either way it exits with their status.
func Main(m *testing.M) {
	if os.Getenv("MSPD_TEST_RUN_AS_MSPD") == "1" {
		os.Exit(cli.Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// Self is this test binary's path, which runs as mspd with Env set.
func Self() string {
	self, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return self
}

// Command is `mspd args…` as a command to start: this test binary,
// running as mspd, killed when ctx ends.
func Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, Self(), args...)
	cmd.Env = append(os.Environ(), Env)
	return cmd
}
