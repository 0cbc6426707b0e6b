package cli

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"mspd/tail"
)

// TestClientCommandUsage: flags that cannot go together, or outputs the
// commands do not have, are usage errors (exit status 2) before any
// connection is made.
func TestClientCommandUsage(t *testing.T) {
	for name, args := range map[string][]string{
		"two sessions":         {"tail", "a", "b"},
		"all and a session":    {"tail", "--all", "a"},
		"all from the start":   {"tail", "--all", "--from-start"},
		"all from a cursor":    {"tail", "--all", "--from", "v:s:1"},
		"all without follow":   {"tail", "--all", "--no-follow"},
		"all as raw":           {"tail", "--all", "-o", "raw"},
		"sessions as yaml":     {"sessions", "-o", "yaml"},
		"sessions, a negative": {"sessions", "--limit", "-1"},
		"sessions, a session":  {"sessions", "a"},
	} {
		var stderr bytes.Buffer
		if code := Run(args, strings.NewReader(""), io.Discard, &stderr); code != 2 {
			t.Errorf("%s: exit %d, want 2:\n%s", name, code, stderr.String())
		}
	}
}

// TestClientCommandUnreachable: no server is exit status 1, one line on
// stderr naming the command.
func TestClientCommandUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "ws://" + ln.Addr().String() + "/msp"
	ln.Close() // nothing listens there now
	var stderr bytes.Buffer
	if code := Run([]string{"sessions", "--url", url}, strings.NewReader(""), io.Discard, &stderr); code != 1 ||
		!strings.HasPrefix(stderr.String(), "mspd sessions: ") || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

// TestClientUsageKeepsTheTokenPrivate: a usage error of `mspd tail` or
// `mspd sessions` prints the flags' defaults, and $MSPD_AUTH_TOKEN, the
// server's token, is none of them (stderr goes to CI logs and shared
// screens).
func TestClientUsageKeepsTheTokenPrivate(t *testing.T) {
	const secret = "s3cret-auth-token"
	t.Setenv("MSPD_AUTH_TOKEN", secret)
	for _, args := range [][]string{{"tail", "a", "b"}, {"sessions", "extra"}, {"tail", "--bogus"}, {"sessions", "--help"}} {
		var stderr bytes.Buffer
		Run(args, strings.NewReader(""), io.Discard, &stderr)
		if strings.Contains(stderr.String(), secret) {
			t.Errorf("mspd %s printed the auth token:\n%s", strings.Join(args, " "), stderr.String())
		}
	}
}

// TestClientTokenFromTheEnvironment: with no --token, the client commands
// present $MSPD_AUTH_TOKEN; --token wins over it.
func TestClientTokenFromTheEnvironment(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Header.Get("Authorization"):
		default:
		}
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/msp"
	t.Setenv("MSPD_AUTH_TOKEN", "from-env")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sessions", "--url", url}, "Bearer from-env"},
		{[]string{"tail", "--url", url, "s"}, "Bearer from-env"},
		{[]string{"sessions", "--url", url, "--token", "from-flag"}, "Bearer from-flag"},
	} {
		var stderr bytes.Buffer
		if code := Run(c.args, strings.NewReader(""), io.Discard, &stderr); code != 4 {
			t.Errorf("%v: exit %d, want 4:\n%s", c.args, code, stderr.String())
		}
		select {
		case auth := <-got:
			if auth != c.want {
				t.Errorf("%v: Authorization %q, want %q", c.args, auth, c.want)
			}
		default:
			t.Errorf("%v: no request reached the server", c.args)
		}
	}
}

// TestTailKeys: `mspd tail` reads key presses (to decide approvals) only
// following as pretty text with a terminal as stdin, in key mode, which
// it restores as it ends; a terminal that refuses key mode leaves it
// without.
func TestTailKeys(t *testing.T) {
	tty, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	entered, restored := 0, 0
	var refuse error
	defer func(k func(io.Reader) (*os.File, bool), m func(*os.File) (func(), error)) {
		keysFrom, enterKeyMode = k, m
	}(keysFrom, enterKeyMode)
	keysFrom = func(r io.Reader) (*os.File, bool) { return tty, r == tty }
	enterKeyMode = func(f *os.File) (func(), error) {
		if refuse != nil {
			return nil, refuse
		}
		entered++
		return func() { restored++ }, nil
	}
	for _, c := range []struct {
		name   string
		stdin  io.Reader
		opts   tail.Options
		refuse error
		keys   bool
	}{
		{"a terminal, following as pretty text", tty, tail.Options{Follow: true, Format: tail.Pretty}, nil, true},
		{"not a terminal", strings.NewReader("a"), tail.Options{Follow: true, Format: tail.Pretty}, nil, false},
		{"not following", tty, tail.Options{Format: tail.Pretty}, nil, false},
		{"json", tty, tail.Options{Follow: true, Format: tail.JSON}, nil, false},
		{"raw", tty, tail.Options{Follow: true, Format: tail.Raw}, nil, false},
		{"key mode refused", tty, tail.Options{Follow: true, Format: tail.Pretty}, errors.New("not a tty"), false},
	} {
		entered, restored, refuse = 0, 0, c.refuse
		opts := c.opts
		restore := useKeys(c.stdin, &opts)
		if got := opts.Keys != nil; got != c.keys || entered != restored+map[bool]int{true: 1, false: 0}[c.keys] {
			t.Errorf("%s: keys %v (entered key mode %d times), want %v", c.name, got, entered, c.keys)
		}
		restore()
		if entered != restored {
			t.Errorf("%s: key mode entered %d times, restored %d", c.name, entered, restored)
		}
	}
}

// TestTailNoKeys: with --no-keys a terminal's stdin is left alone.
func TestTailNoKeys(t *testing.T) {
	defer func(k func(io.Reader) (*os.File, bool)) { keysFrom = k }(keysFrom)
	asked := false
	keysFrom = func(io.Reader) (*os.File, bool) { asked = true; return nil, false }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "ws://" + ln.Addr().String() + "/msp"
	ln.Close()
	Run([]string{"tail", "--no-keys", "--url", url, "s"}, strings.NewReader(""), io.Discard, io.Discard)
	if asked {
		t.Error("--no-keys looked at stdin for keys")
	}
}
