package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"mspd/tail"
)

// tailCmd follows a session: `mspd tail [flags] SESSION`. Exit status: 0 on
// a clean end, 1 on an error, 2 on a usage error, 3 when the session or
// the cursor is unknown (for a cursor: start over with --from-start), 4
// when the server refuses the token.
func tailCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := tail.Options{Status: stderr}
	var noFollow bool
	var color string
	fs.StringVar(&opts.URL, "url", "ws://127.0.0.1:7700/msp", "the server's MSP WebSocket `endpoint`")
	fs.StringVar(&opts.Token, "token", os.Getenv("MSPD_AUTH_TOKEN"), "the server's auth token (default $MSPD_AUTH_TOKEN)")
	fs.StringVar(&opts.From, "from", "", "start after this `cursor` (a viewCursor printed earlier)")
	fs.BoolVar(&opts.FromStart, "from-start", false, "show the whole session log first")
	fs.BoolVar(&noFollow, "no-follow", false, "stop at the end of the log instead of following live events")
	fs.StringVar(&opts.Format, "o", tail.Pretty, "output: pretty, json (one object per line, with its cursor) or raw (answer text only)")
	fs.IntVar(&opts.Count, "count", 0, "stop after `n` notifications")
	fs.StringVar(&color, "color", "auto", "colour: auto, always or never")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mspd tail [flags] SESSION")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	opts.SessionID = fs.Arg(0)
	opts.Follow = !noFollow
	switch opts.Format {
	case tail.Pretty, tail.JSON, tail.Raw:
	default:
		fmt.Fprintf(stderr, "mspd tail: -o %q: want pretty, json or raw\n", opts.Format)
		return 2
	}
	switch color {
	case "always":
		opts.Color = true
	case "auto":
		opts.Color = isTerminal(stdout) && os.Getenv("NO_COLOR") == ""
	case "never":
	default:
		fmt.Fprintf(stderr, "mspd tail: --color %q: want auto, always or never\n", color)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := tail.Run(ctx, opts, stdout)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "mspd tail:", err)
	switch {
	case errors.Is(err, tail.ErrUnknownCursor), errors.Is(err, tail.ErrSessionNotFound):
		return 3
	case errors.Is(err, tail.ErrUnauthorized):
		return 4
	}
	return 1
}

// isTerminal tells whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
