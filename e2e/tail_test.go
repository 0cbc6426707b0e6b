package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/scripted"
)

// TestTail runs `mspd tail` against a live daemon: the log, then live
// events, in each output format.
func TestTail(t *testing.T) {
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, daemon.Config{})
	c := dial(t, d.URL(), client.Options{})
	start, err := c.StartSession(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID
	answerTurn(t, c, sid, scripted.Script(
		scripted.Step{Status: 429, ErrorKind: "rateLimited", RetryAfterMs: new(1200)},
		scripted.Step{Text: "Hello there", Chunks: 2, OutputTokens: new(3)}))

	out, err := exec.Command(bin, "tail", "--url", d.URL(), "--from-start", "--no-follow", "--color", "never", sid).Output()
	if err != nil {
		t.Fatalf("tail: %v", err)
	}
	text := string(out)
	for _, want := range []string{
		"you: {\"mspScript\"",
		"⟳ scripted · rate limited (429) · retrying in 1.2s · attempt 2/5",
		"agent: Hello there",
		"✓ completed · ",
		"2 attempts · 3 output tokens",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("pretty output lacks %q:\n%s", want, text)
		}
	}

	out, err = exec.Command(bin, "tail", "--url", d.URL(), "--from-start", "--no-follow", "-o", "json", sid).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, l := range lines {
		var e struct {
			Cursor string          `json:"cursor"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.Cursor == "" || e.Method == "" {
			t.Errorf("json line %q: %v", l, err)
		}
	}
	if len(lines) != 7 {
		t.Errorf("%d json lines for 7 durable events", len(lines))
	}

	// Follow: the next turn's answer appears live, as raw text.
	follow := exec.Command(bin, "tail", "--url", d.URL(), "-o", "raw", sid)
	stdout, _ := follow.StdoutPipe()
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { follow.Process.Kill(); follow.Wait() })
	time.Sleep(300 * time.Millisecond) // let it subscribe
	answerTurn(t, c, sid, scripted.Script(scripted.Step{Text: "live words", Chunks: 2}))
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if line != "live words\n" {
			t.Errorf("raw follow printed %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tail did not print the live answer")
	}

	// An unknown cursor is exit status 3.
	err = exec.Command(bin, "tail", "--url", d.URL(), "--no-follow", "--from", "v:"+sid+":999", sid).Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Errorf("unknown cursor: %v", err)
	}
}
