package cli

import (
	"flag"
	"fmt"
	"io"

	"mspd/tail"
)

// sessionsCmd lists sessions: `mspd sessions [flags]`, most recently
// active first. Exit status: 0 on success, 1 on an error, 2 on a usage
// error, 4 when the server refuses the token.
func sessionsCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sessions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := tail.ListOptions{}
	tokenFromEnv := serverFlags(fs, &opts.URL, &opts.Token)
	fs.IntVar(&opts.Limit, "limit", 50, "list at most `n` sessions (0: all)")
	fs.StringVar(&opts.Format, "o", tail.Table, "output: table, or json (one session object per line)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mspd sessions [flags]")
		fs.PrintDefaults()
	}
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	if fs.NArg() > 0 || opts.Limit < 0 {
		fs.Usage()
		return 2
	}
	tokenFromEnv()
	if opts.Format != tail.Table && opts.Format != tail.JSON {
		fmt.Fprintf(stderr, "mspd sessions: -o %q: want table or json\n", opts.Format)
		return 2
	}
	ctx, stop := interruptible()
	defer stop()
	return clientExit("sessions", tail.List(ctx, opts, stdout), stderr)
}
