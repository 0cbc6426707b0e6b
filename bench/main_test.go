package bench

import (
	"flag"
	"fmt"
	"os"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"mspd/internal/cli/clitest"
)

// runAsNATS is the environment variable that, set to 1, makes this test
// binary run as nats-server (--config FILE), for the tests of
// --nats-server; an mspd process it starts runs as mspd, whose variable
// it also has.
const runAsNATS = "MSPBENCH_TEST_RUN_AS_NATS"

// TestMain runs the tests, or this binary as mspd for the tests that
// benchmark an mspd process (see clitest), or as nats-server.
func TestMain(m *testing.M) {
	if os.Getenv(runAsNATS) == "1" && os.Getenv("MSPD_TEST_RUN_AS_MSPD") != "1" {
		os.Exit(natsServerMain(os.Args[1:]))
	}
	clitest.Main(m)
}

// natsServerMain is nats-server's main for a configuration file: the
// server reads it, runs, and stops on SIGTERM.
func natsServerMain(args []string) int {
	fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
	conf := fs.String("config", "", "configuration file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	opts, err := natsserver.ProcessConfigFile(*conf)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := natsserver.NewServer(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s.ConfigureLogger()
	if err := natsserver.Run(s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s.WaitForShutdown()
	return 0
}
