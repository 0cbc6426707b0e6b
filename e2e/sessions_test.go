package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/scripted"
	"mspd/schema/msp"
	"mspd/server"
)

// TestSessionsCommand runs `mspd sessions` against a live daemon: the
// table and the JSON lines list the sessions most recently active first,
// as session/list does.
func TestSessionsCommand(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	c := dial(t, d.URL(), client.Options{})
	var ids []string // oldest activity first
	for range 3 {
		s, err := c.StartSession(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.Session.SessionID)
	}
	answerTurn(t, c, ids[0], scripted.Script(scripted.Step{Text: "Bonjour"}))
	rename(t, c, ids[0], "Paris trip") // the first session is now the most recently active
	ids = append(ids[1:], ids[0])

	out, err := mspdCommand(context.Background(), "sessions", "--url", d.URL(), "-o", "json").Output()
	if err != nil {
		t.Fatalf("sessions -o json: %v", err)
	}
	var listed []string
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		var s msp.Session
		if err := json.Unmarshal([]byte(line), &s); err != nil || s.SessionID == "" {
			t.Fatalf("json line %q: %v", line, err)
		}
		listed = append(listed, s.SessionID)
	}
	if want := []string{ids[2], ids[1], ids[0]}; strings.Join(listed, " ") != strings.Join(want, " ") {
		t.Errorf("json lists %v, want the most recently active first: %v", listed, want)
	}

	out, err = mspdCommand(context.Background(), "sessions", "--url", d.URL()).Output()
	if err != nil {
		t.Fatalf("sessions: %v", err)
	}
	rows := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	header := regexp.MustCompile(`^ID +NAME +STATUS +TURNS +LAST ACTIVITY$`)
	if len(rows) != 4 || !header.MatchString(rows[0]) {
		t.Fatalf("table:\n%s", out)
	}
	for i, want := range []*regexp.Regexp{
		regexp.MustCompile(`^` + ids[2] + ` +Paris trip +idle +1 +just now$`),
		regexp.MustCompile(`^` + ids[1] + ` +- +idle +0 +just now$`),
		regexp.MustCompile(`^` + ids[0] + ` +- +idle +0 +just now$`),
	} {
		if !want.MatchString(rows[i+1]) {
			t.Errorf("row %d %q, want %s", i+1, rows[i+1], want)
		}
	}

	out, err = mspdCommand(context.Background(), "sessions", "--url", d.URL(), "--limit", "1", "-o", "json").Output()
	if err != nil || strings.Count(string(out), "\n") != 1 || !strings.Contains(string(out), ids[2]) {
		t.Errorf("--limit 1: %v\n%s", err, out)
	}

	// A refused token is exit status 4, one line on stderr.
	authed := startDaemon(t, daemon.Config{Server: server.Config{AuthToken: "right-token"}})
	cmd := mspdCommand(testCtx(t), "sessions", "--url", authed.URL(), "--token", "wrong-token")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	var exit *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 4 || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("wrong token: %v, want exit status 4; stderr %q", err, stderr.String())
	}
}

func rename(t *testing.T, c *checkedClient, sid, name string) {
	t.Helper()
	err := c.Call(testCtx(t), msp.MethodSessionRename, msp.SessionRenameParams{CommandID: client.NewCommandID(), SessionID: sid, Name: name}, nil)
	if err != nil {
		t.Fatalf("rename: %v", err)
	}
}

// lines collects what a child process writes to one stream, line by line,
// for a test to wait on.
type lines struct {
	mu      sync.Mutex
	all     []string
	changed chan struct{} // closed (and replaced) by every line, and at the end
	ended   bool
}

func readLines(r io.Reader) *lines {
	l := &lines{changed: make(chan struct{})}
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			l.add(s.Text(), false)
		}
		l.add("", true)
	}()
	return l
}

func (l *lines) add(line string, end bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if end {
		l.ended = true
	} else {
		l.all = append(l.all, line)
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// waitFor waits for a line containing want and returns it.
func (l *lines) waitFor(t *testing.T, want string) string {
	t.Helper()
	ctx := testCtx(t)
	for {
		l.mu.Lock()
		for _, line := range l.all {
			if strings.Contains(line, want) {
				l.mu.Unlock()
				return line
			}
		}
		changed, ended := l.changed, l.ended
		l.mu.Unlock()
		if ended {
			t.Fatalf("the output ended without a line containing %q:\n%s", want, l.text())
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("no line containing %q in:\n%s", want, l.text())
		}
	}
}

func (l *lines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

// startCommand runs mspd with args, its stdout and stderr read line by
// line; the process is killed when the test ends.
func startCommand(t *testing.T, args ...string) (stdout, stderr *lines) {
	t.Helper()
	cmd := mspdCommand(context.Background(), args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr = readLines(out), readLines(errs)
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return stdout, stderr
}
