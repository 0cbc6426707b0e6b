package cli

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

// isTerminal tells whether w is a terminal; tests replace it.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// keysFrom returns the terminal stdin is, for `mspd tail` to read key
// presses from; ok is false when stdin is no terminal. Tests replace it.
var keysFrom = func(stdin io.Reader) (f *os.File, ok bool) {
	f, ok = stdin.(*os.File)
	if !ok {
		return nil, false
	}
	st, err := f.Stat()
	return f, err == nil && st.Mode()&os.ModeCharDevice != 0
}

// enterKeyMode makes the terminal f pass each key as it is pressed,
// unechoed, and returns what restores it (keyMode; tests replace it).
var enterKeyMode = keyMode

// useKeys lets a run that follows as pretty text read key presses from
// stdin when it is a terminal, which it puts in key mode: it sets
// opts.Keys and returns what restores the terminal (nothing to do
// otherwise).
func useKeys(stdin io.Reader, opts *tail.Options) (restore func()) {
	f, ok := keysFrom(stdin)
	if !ok || !opts.Follow || opts.Format != tail.Pretty {
		return func() {}
	}
	restore, err := enterKeyMode(f) // fails for a device that is no terminal (/dev/null)
	if err != nil {
		return func() {}
	}
	opts.Keys = f
	return restore
}

// serverFlags registers --url and --token, the flags of every command
// that talks to a running server, and returns what to call after parsing:
// with no --token, it reads $MSPD_AUTH_TOKEN. That is no flag default,
// which a usage error would print.
func serverFlags(fs *flag.FlagSet, url, token *string) (tokenFromEnv func()) {
	fs.StringVar(url, "url", "ws://127.0.0.1:7700/msp", "the server's MSP WebSocket `endpoint`")
	fs.StringVar(token, "token", "", "the server's auth token (without it, the MSPD_AUTH_TOKEN variable is read)")
	return func() {
		set := false
		fs.Visit(func(f *flag.Flag) { set = set || f.Name == "token" })
		if !set {
			*token = os.Getenv("MSPD_AUTH_TOKEN")
		}
	}
}

// clientExit reports a client command's error on stderr, one line, and
// returns its exit status: 0 for none, 3 when the session or cursor is
// unknown or there is no session, 4 when the server refused the token, 1
// otherwise.
func clientExit(cmd string, err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "mspd %s: %v\n", cmd, err)
	switch {
	case errors.Is(err, tail.ErrUnknownCursor), errors.Is(err, tail.ErrSessionNotFound), errors.Is(err, tail.ErrNoSession):
		return 3
	case errors.Is(err, tail.ErrUnauthorized):
		return 4
	}
	return 1
}

// interruptible returns a context that Ctrl-C or SIGTERM ends.
func interruptible() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// tailCmd follows a session: `mspd tail [flags] [SESSION]`, or every
// session with --all. Exit status: 0 on a clean end, 1 on an error, 2 on a
// usage error, 3 when the session or the cursor is unknown (for a cursor:
// start over with --from-start) or there is no session to follow, 4 when
// the server refuses the token. Following with pretty output on a
// terminal (stdin is one), a, s and d decide the approval it shows
// waiting, unless --no-keys.
func tailCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := tail.Options{Status: stderr}
	var noFollow, noKeys bool
	var color string
	tokenFromEnv := serverFlags(fs, &opts.URL, &opts.Token)
	fs.BoolVar(&opts.All, "all", false, "follow every session's live events, each line prefixed with its session's name")
	fs.StringVar(&opts.From, "from", "", "start after this `cursor` (a viewCursor printed earlier)")
	fs.BoolVar(&opts.FromStart, "from-start", false, "show the whole session log first")
	fs.BoolVar(&noFollow, "no-follow", false, "stop at the end of the log instead of following live events")
	fs.StringVar(&opts.Format, "o", tail.Pretty, "output: pretty, json (one object per line, with its cursor) or raw (answer text only: no reasoning, tool calls or compaction summaries)")
	fs.IntVar(&opts.Count, "count", 0, "stop after `n` notifications")
	fs.StringVar(&color, "color", "auto", "colour: auto, always or never")
	fs.BoolVar(&noKeys, "no-keys", false, "never decide approvals by key press (otherwise, following as pretty text with a terminal as input: a approves a waiting call once, s for the session, d denies it)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mspd tail [flags] [SESSION]   (no SESSION: the most recently active one)")
		fmt.Fprintln(stderr, "       mspd tail --all [flags]")
		fs.PrintDefaults()
	}
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	if fs.NArg() > 1 || (opts.All && fs.NArg() > 0) {
		fs.Usage()
		return 2
	}
	tokenFromEnv()
	opts.SessionID = fs.Arg(0)
	opts.Follow = !noFollow
	switch opts.Format {
	case tail.Pretty, tail.JSON, tail.Raw:
	default:
		fmt.Fprintf(stderr, "mspd tail: -o %q: want pretty, json or raw\n", opts.Format)
		return 2
	}
	if opts.All && (opts.From != "" || opts.FromStart || noFollow || opts.Format == tail.Raw) {
		fmt.Fprintln(stderr, "mspd tail: --all follows live events as pretty text or JSON: not with --from, --from-start, --no-follow or -o raw")
		return 2
	}
	if opts.Terminal = isTerminal(stdout); opts.Terminal {
		opts.Width = terminalWidth(stdout)
	}
	switch color {
	case "always":
		opts.Color = true
	case "auto":
		opts.Color = opts.Terminal && os.Getenv("NO_COLOR") == ""
	case "never":
	default:
		fmt.Fprintf(stderr, "mspd tail: --color %q: want auto, always or never\n", color)
		return 2
	}
	if !noKeys {
		defer useKeys(stdin, &opts)()
	}
	ctx, stop := interruptible()
	defer stop()
	return clientExit("tail", tail.Run(ctx, opts, stdout), stderr)
}
