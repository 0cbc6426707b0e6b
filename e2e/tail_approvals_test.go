package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mspd/client"
	"mspd/provider/scripted"
	"mspd/schema/msp"
	"mspd/tool/tooltest"
)

// tailTestdata is where the tail package's recorded frames live, from
// this package.
const tailTestdata = "../tail/testdata"

// TestTailApprovals runs `mspd tail` against a daemon whose scripted
// model calls the append tool of a test MCP server marked approval =
// "always", three tails following one session: as JSON lines, as pretty
// text, and as pretty text with a pseudo-terminal as its input, where
// key presses decide. A key pressed while nothing waits does nothing; a
// decides the approval once (the tool runs once), d denies it (it never
// runs); an approval the turn's stop abandons, and one the session's mode
// denies without asking, say so. Pretty output reads "? append (notes)
// needs approval {…}" and each outcome, in order; JSON lines carry the
// approval events with their cursors; read back from the log, pretty
// output is the same and raw output has none of it. With -update the
// live and logged JSON lines are written to tail/testdata, whose frames
// the tail package's tests replay.
func TestTailApprovals(t *testing.T) {
	notes, _, d := approvalTools(t)
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})
	start, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID
	answerTurn(t, c, sid, scripted.Script(scripted.Step{Text: "Hello."}))

	// From the start, so that the first turn's end shows each tail
	// following: the next turns reach it, live or replayed after its
	// cursor.
	jsonLines, _ := startCommand(t, "tail", "--url", d.URL(), "--from-start", "-o", "json", sid)
	pretty, _ := startCommand(t, "tail", "--url", d.URL(), "--from-start", "--color", "never", sid)
	keyboard, tty := openPTY(t)
	keyed, status := startCommandWithInput(t, tty, "tail", "--url", d.URL(), "--from-start", "--color", "never", sid)
	jsonLines.waitFor(t, `"method":"turn/completed"`)
	pretty.waitFor(t, "✓ completed")
	keyed.waitFor(t, "✓ completed")
	press := func(keys string) {
		t.Helper()
		if _, err := keyboard.WriteString(keys); err != nil {
			t.Fatal(err)
		}
	}

	// A key while nothing waits is read, and does nothing.
	press("a")
	status.waitFor(t, "no approval waits: a does nothing now")

	prompt := "⏵ append (notes) waits: a approve once · s approve for this session · d deny"
	turn := func(args string, after scripted.Step) string {
		t.Helper()
		ack, err := c.StartTurn(ctx, sid, scripted.Script(scripted.Step{Text: "On it.", Calls: []scripted.Call{{Name: "notes__append", Args: args}}}, after))
		if err != nil {
			t.Fatal(err)
		}
		return ack.TurnID
	}
	wait := func(turnID string) {
		t.Helper()
		if _, err := c.WaitTurn(ctx, turnID); err != nil {
			t.Fatal(err)
		}
	}

	approved := turn(`{"text":"oat milk"}`, scripted.Step{Text: "Added."})
	keyed.waitFor(t, prompt)
	press("a")
	wait(approved)
	keyed.waitFor(t, "✓ append approved once")
	if n := notes.Count(tooltest.Append); n != 1 {
		t.Fatalf("approved by a key, the tool ran %d times, want once", n)
	}

	denied := turn(`{"text":"the car"}`, scripted.Step{Text: "Not added."})
	keyed.waitCount(t, prompt, 2)
	press("dd") // twice: it decides once
	wait(denied)
	keyed.waitFor(t, "✗ append denied")
	if n := notes.Count(tooltest.Append); n != 1 {
		t.Fatalf("denied, the tool ran: %d calls in all", n)
	}

	stopped := turn(`{"text":"never"}`, scripted.Step{Text: "never"})
	keyed.waitCount(t, prompt, 3)
	if err := c.Call(ctx, msp.MethodTurnInterrupt, msp.TurnStopParams{CommandID: client.NewCommandID(), SessionID: sid, TurnID: stopped}, nil); err != nil {
		t.Fatal(err)
	}
	wait(stopped)

	if _, err := c.SetApprovalMode(ctx, sid, msp.ApprovalDenyUnmatched); err != nil {
		t.Fatal(err)
	}
	policy := turn(`{"text":"by policy"}`, scripted.Step{Text: "Refused."})
	wait(policy)
	for _, l := range []*lines{pretty, keyed} {
		l.waitFor(t, "✗ append denied by the session's approval mode")
		l.waitCount(t, "✓ completed", 4) // and the stopped turn
	}
	jsonLines.waitCount(t, `"method":"turn/completed"`, 5)
	if n := notes.Count(tooltest.Append); n != 1 {
		t.Fatalf("the tool ran %d times in all, want once", n)
	}

	want := []string{
		`? append (notes) needs approval {"text":"oat milk"}`,
		"✓ append approved once",
		"✓ append ",
		"agent: Added.",
		`? append (notes) needs approval {"text":"the car"}`,
		"✗ append denied",
		"✗ append rejected: the user denied it",
		"agent: Not added.",
		`? append (notes) needs approval {"text":"never"}`,
		"■ append: not decided, the turn was stopped",
		"■ append cancelled: the turn was stopped while the call waited for approval",
		`? append (notes) needs approval {"text":"by policy"}`,
		"✗ append denied by the session's approval mode",
		"✗ append rejected: the session's approval mode denies this tool without asking",
		"agent: Refused.",
	}
	inOrder(t, "followed live", pretty.text(), want)
	keyedWant := append([]string{}, want[:1]...)
	keyedWant = append(keyedWant, prompt)
	keyedWant = append(keyedWant, want[1:5]...)
	keyedWant = append(keyedWant, prompt)
	keyedWant = append(keyedWant, want[5:9]...)
	keyedWant = append(keyedWant, prompt)
	keyedWant = append(keyedWant, want[9:]...)
	inOrder(t, "followed live with keys", keyed.text(), keyedWant)
	if strings.Count(keyed.text(), prompt) != 3 {
		t.Errorf("the prompt shown %d times, want once for each approval asked:\n%s", strings.Count(keyed.text(), prompt), keyed.text())
	}
	if strings.Contains(pretty.text(), "⏵") {
		t.Errorf("a tail whose input is no terminal prompted:\n%s", pretty.text())
	}

	// The log, read back.
	logged, err := mspdCommand(ctx, "tail", "--url", d.URL(), "--from-start", "--no-follow", "--color", "never", sid).Output()
	if err != nil {
		t.Fatal(err)
	}
	inOrder(t, "read from the log", string(logged), want)
	logJSON, err := mspdCommand(ctx, "tail", "--url", d.URL(), "--from-start", "--no-follow", "-o", "json", sid).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, recorded := range []string{jsonLines.text() + "\n", string(logJSON)} {
		var requested, resolved []string
		for l := range strings.Lines(recorded) {
			var e struct {
				Cursor string `json:"cursor"`
				Method string `json:"method"`
				Params struct {
					ApprovalID string `json:"approvalId"`
					Decision   string `json:"decision"`
					ViewCursor string `json:"viewCursor"`
				} `json:"params"`
			}
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatalf("json line %q: %v", l, err)
			}
			switch e.Method {
			case msp.NotifyApprovalRequested:
				requested = append(requested, e.Params.ApprovalID)
			case msp.NotifyApprovalResolved:
				resolved = append(resolved, e.Params.Decision)
			case msp.RequestApproval:
				t.Errorf("a request among the events: %s", l)
			}
			if strings.HasPrefix(e.Method, "approval/") && (e.Cursor == "" || e.Cursor != e.Params.ViewCursor) {
				t.Errorf("an approval event without its cursor: %s", l)
			}
		}
		if len(requested) != 4 || strings.Join(resolved, ",") != "approved,denied,abort,denied" {
			t.Errorf("json lines: %d approval/requested, resolved %v", len(requested), resolved)
		}
	}
	raw, err := mspdCommand(ctx, "tail", "--url", d.URL(), "--from-start", "--no-follow", "-o", "raw", sid).Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != "Hello.\nOn it.\nAdded.\nOn it.\nNot added.\nOn it.\nOn it.\nRefused.\n" {
		t.Errorf("raw output %q, want the answers only", raw)
	}

	if *update {
		for name, text := range map[string]string{"approvals-live.jsonl": jsonLines.text() + "\n", "approvals-log.jsonl": string(logJSON)} {
			if err := os.WriteFile(filepath.Join(tailTestdata, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("wrote %s/approvals-live.jsonl and approvals-log.jsonl", tailTestdata)
	}
}

// inOrder checks that text has a line beginning with each of want, in
// that order.
func inOrder(t *testing.T, what, text string, want []string) {
	t.Helper()
	lines := strings.Split(text, "\n")
	i := 0
	for _, w := range want {
		for i < len(lines) && !strings.HasPrefix(lines[i], w) {
			i++
		}
		if i == len(lines) {
			t.Errorf("%s: no line %q in order; the output:\n%s", what, w, text)
			return
		}
		i++
	}
}

// startCommandWithInput is startCommand with stdin read from in.
func startCommandWithInput(t *testing.T, in *os.File, args ...string) (stdout, stderr *lines) {
	t.Helper()
	cmd := mspdCommand(context.Background(), args...)
	cmd.Stdin = in
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

// waitCount waits for n lines containing want.
func (l *lines) waitCount(t *testing.T, want string, n int) {
	t.Helper()
	ctx := testCtx(t)
	for {
		l.mu.Lock()
		seen := 0
		for _, line := range l.all {
			if strings.Contains(line, want) {
				seen++
			}
		}
		changed, ended := l.changed, l.ended
		l.mu.Unlock()
		if seen >= n {
			return
		}
		if ended {
			t.Fatalf("the output ended with %d lines containing %q, want %d:\n%s", seen, want, n, l.text())
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("%d lines containing %q, want %d, in:\n%s", seen, want, n, l.text())
		}
	}
}
