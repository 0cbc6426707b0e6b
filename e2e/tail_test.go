package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/demo"
	"mspd/provider/scripted"
	"mspd/schema/msp"
	"mspd/server"
)

// TestTail runs `mspd tail` against a live daemon: the log, then live
// events, in each output format.
func TestTail(t *testing.T) {
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

	out, err := mspdCommand(context.Background(), "tail", "--url", d.URL(), "--from-start", "--no-follow", "--color", "never", sid).Output()
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

	out, err = mspdCommand(context.Background(), "tail", "--url", d.URL(), "--from-start", "--no-follow", "-o", "json", sid).Output()
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
	if len(lines) != 7 { // a turn with a retry notice, and the session's name
		t.Errorf("%d json lines for 7 durable events", len(lines))
	}

	// Follow: the next turn's answer appears live, as raw text. From the
	// start, so that its first line shows it subscribed: the live turn
	// then reaches it whether it runs before the subscription lands (a
	// replay after the cursor) or after.
	follow := mspdCommand(context.Background(), "tail", "--url", d.URL(), "--from-start", "-o", "raw", sid)
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { follow.Process.Kill(); follow.Wait() })
	printed := make(chan string, 100)
	go func() {
		defer close(printed)
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			printed <- line
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case line := <-printed:
			return line
		case <-testCtx(t).Done():
			t.Fatal("tail printed nothing")
			return ""
		}
	}
	if line := next(); line != "Hello there\n" {
		t.Fatalf("raw follow printed %q first, want the logged answer", line)
	}
	answerTurn(t, c, sid, scripted.Script(scripted.Step{Text: "live words", Chunks: 2}))
	if line := next(); line != "live words\n" {
		t.Errorf("raw follow printed %q, want the live answer", line)
	}

	// Refusals no reconnect cures end it at once, with one line on stderr:
	// an unknown cursor or session is exit status 3, a refused token 4.
	authed := startDaemon(t, daemon.Config{Server: server.Config{AuthToken: "right-token"}})
	for _, c := range []struct {
		name string
		args []string
		want int
	}{
		{"unknown cursor", []string{"--url", d.URL(), "--no-follow", "--from", "v:" + sid + ":999", sid}, 3},
		{"unknown session", []string{"--url", d.URL(), "0198f0aa-0000-7000-8000-0000000000ff"}, 3},
		{"unknown session from the start", []string{"--url", d.URL(), "--from-start", "0198f0aa-0000-7000-8000-0000000000ff"}, 3},
		{"wrong token", []string{"--url", authed.URL(), "--token", "wrong-token", sid}, 4},
	} {
		cmd := mspdCommand(testCtx(t), append([]string{"tail"}, c.args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != c.want {
			t.Errorf("%s: %v, want exit status %d; stderr:\n%s", c.name, err, c.want, stderr.String())
			continue
		}
		if msg := stderr.String(); strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "mspd tail: ") {
			t.Errorf("%s: stderr %q, want one line", c.name, msg)
		}
	}
}

// TestTailLatestSession: `mspd tail` without a session follows the most
// recently active one and says which on stderr; with no session at all it
// exits at once, status 3, with one line.
func TestTailLatestSession(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	cmd := mspdCommand(testCtx(t), "tail", "--url", d.URL())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	var exit *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("no session: %v, want exit status 3; stderr %q", err, stderr.String())
	}
	if msg := stderr.String(); msg != "mspd tail: no session to follow: the server has none\n" {
		t.Errorf("no session: stderr %q", msg)
	}

	c := dial(t, d.URL(), client.Options{})
	var sids []string
	for range 2 {
		s, err := c.StartSession(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		sids = append(sids, s.Session.SessionID)
	}
	rename(t, c, sids[0], "Paris trip")
	answerTurn(t, c, sids[0], scripted.Script(scripted.Step{Text: "Bonjour"})) // the older session is the latest active

	cmd = mspdCommand(testCtx(t), "tail", "--url", d.URL(), "--from-start", "--no-follow", "-o", "raw")
	stderr.Reset()
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tail: %v; stderr %q", err, stderr.String())
	}
	if want := "following " + sids[0] + " (“Paris trip”)\n"; stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	if string(out) != "Bonjour\n" {
		t.Errorf("stdout %q, want the latest session's answer", out)
	}
}

// TestTailAll: `mspd tail --all` shows the live events of every session,
// each line prefixed with its session's name: one that existed before it
// began, and one started after.
func TestTailAll(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	c := dial(t, d.URL(), client.Options{})
	before, err := c.StartSession(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	trip := before.Session.SessionID
	rename(t, c, trip, "Paris trip")
	answerTurn(t, c, trip, scripted.Script(scripted.Step{Text: "an old answer"}))

	stdout, stderr := startCommand(t, "tail", "--all", "--url", d.URL(), "--color", "never")
	stderr.waitFor(t, "following every session (0 running)")

	answerTurn(t, c, trip, scripted.Script(scripted.Step{Text: "Bonjour from Paris", Chunks: 3}))
	if line := stdout.waitFor(t, "agent: Bonjour from Paris"); line != "[Paris trip] agent: Bonjour from Paris" {
		t.Errorf("line %q, want the answer whole, prefixed with its session's name", line)
	}
	stdout.waitFor(t, `[Paris trip] you: {"mspScript"`) // from the start of the turn that woke it

	later, err := c.StartSession(testCtx(t)) // after tail began
	if err != nil {
		t.Fatal(err)
	}
	rename(t, c, later.Session.SessionID, "Monads")
	answerTurn(t, c, later.Session.SessionID, scripted.Script(
		scripted.Step{Status: 429, ErrorKind: "rateLimited", RetryAfterMs: new(10)},
		scripted.Step{Text: "A monad is a monoid"}))
	stdout.waitFor(t, "[Monads] ⟳ scripted · rate limited (429) · retrying in 10ms · attempt 2/5")
	stdout.waitFor(t, "[Monads] agent: A monad is a monoid")
	stdout.waitFor(t, "[Monads] ✓ completed")
	stderr.waitFor(t, "following "+later.Session.SessionID) // as it started, before its name
	if strings.Contains(stdout.text(), "an old answer") {
		t.Errorf("showed a turn from before tail began:\n%s", stdout.text())
	}
}

// TestTailToolCalls runs `mspd tail` against a daemon running the demo
// model, which calls the built-in calculator: followed live, pretty
// output has a line as the call starts and one as it ends, between the
// step's text and the answer made of its result; from the log, JSON
// lines carry the call's events whole, and raw output leaves it out.
func TestTailToolCalls(t *testing.T) {
	d := startDaemon(t, daemon.Config{Provider: "demo", Demo: demo.Config{WordDelay: demo.NoDelay, Seed: 3}})
	c := dial(t, d.URL(), client.Options{})
	start, err := c.StartSession(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID
	answerTurn(t, c, sid, "Hello")

	// From the start, so that the first turn's end shows it following:
	// the next turn then reaches it, live or replayed after its cursor.
	stdout, _ := startCommand(t, "tail", "--url", d.URL(), "--from-start", "--color", "never", sid)
	stdout.waitFor(t, "✓ completed")
	answerTurn(t, c, sid, "What is (2+3)*4?")
	stdout.waitFor(t, "agent: The calculator says 20.")
	all := stdout.text()
	turn := all[strings.LastIndex(all, "you: What is (2+3)*4?"):]
	want := []string{
		"you: What is (2+3)*4?",
		"agent: Let me work that out.",
		`→ calculator (builtin) {"expression":"(2+3)*4"}`,
		"✓ calculator ", // its time, then ": 20"
		"agent: The calculator says 20.",
	}
	lines := strings.Split(turn, "\n")
	if len(lines) < len(want) {
		t.Fatalf("followed:\n%s", all)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d %q, want %q first; followed:\n%s", i+1, lines[i], w, all)
		}
	}
	if !strings.HasSuffix(lines[3], " ms: 20") {
		t.Errorf("the call's end %q, want its time in ms and its output", lines[3])
	}

	out, err := mspdCommand(testCtx(t), "tail", "--url", d.URL(), "--from-start", "--no-follow", "-o", "json", sid).Output()
	if err != nil {
		t.Fatal(err)
	}
	var calls []msp.Item
	for l := range strings.Lines(string(out)) {
		var e struct {
			Cursor string         `json:"cursor"`
			Method string         `json:"method"`
			Params msp.ItemParams `json:"params"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("json line %q: %v", l, err)
		}
		if e.Params.Item.Kind == msp.ItemToolCall {
			if e.Cursor == "" {
				t.Errorf("a tool call's line without its cursor: %s", l)
			}
			calls = append(calls, e.Params.Item)
		}
	}
	if len(calls) != 2 || calls[0].Status != msp.ItemInProgress || calls[1].Status != msp.ItemCompleted ||
		calls[1].Tool != "calculator" || calls[1].Server != "builtin" || calls[1].VisibleOutput == nil || *calls[1].VisibleOutput != "20" {
		t.Errorf("json tool call events: %+v\n%s", calls, out)
	}

	out, err = mspdCommand(testCtx(t), "tail", "--url", d.URL(), "--from-start", "--no-follow", "-o", "raw", sid).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(out), "\nLet me work that out.\nThe calculator says 20.\n") || strings.Contains(string(out), "calculator (") {
		t.Errorf("raw output %q, want the answers' text only", out)
	}
}
