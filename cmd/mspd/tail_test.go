package main

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
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
		if code := run(args, strings.NewReader(""), io.Discard, &stderr); code != 2 {
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
	if code := run([]string{"sessions", "--url", url}, strings.NewReader(""), io.Discard, &stderr); code != 1 ||
		!strings.HasPrefix(stderr.String(), "mspd sessions: ") || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}
