package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"mspd/client"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// binary is the mspd command, built once for the tests that need a real
// process to kill.
var binary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "mspd-e2e-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "mspd")
	out, err := exec.Command("go", "build", "-o", bin, "mspd/cmd/mspd").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// process is a running mspd child process.
type process struct {
	cmd *exec.Cmd
	url string
}

var listening = regexp.MustCompile(`url=(ws://\S+)`)

// startProcess runs `mspd serve` on a free port over dataDir.
func startProcess(t *testing.T, dataDir string, args ...string) *process {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--data", dataDir, "--provider", "scripted"}, args...)
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd}
	t.Cleanup(func() { p.kill() })
	lines := bufio.NewScanner(stderr)
	found := make(chan string, 1)
	go func() {
		for lines.Scan() {
			if m := listening.FindStringSubmatch(lines.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case p.url = <-found:
	case <-time.After(20 * time.Second):
		t.Fatal("mspd did not report its address")
	}
	return p
}

func (p *process) kill() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
	}
}

// TestKilledMidTurn kills the server (SIGKILL) in the middle of a turn,
// restarts it on the same data directory, and checks what survives.
func TestKilledMidTurn(t *testing.T) {
	dataDir := t.TempDir()
	ctx := testCtx(t)
	p1 := startProcess(t, dataDir)
	c := dial(t, p1.url, client.Options{})
	start, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID
	var seen []client.Notification
	ack, err := c.StartTurn(ctx, sid, scripted.Script(scripted.Step{Text: "first answer", Chunks: 2}))
	if err != nil {
		t.Fatal(err)
	}
	events, err := c.WaitTurn(ctx, ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	seen = append(seen, events...)

	slowTurn := msp.TurnStartParams{CommandID: client.NewCommandID(), SessionID: sid,
		Input: []msp.TurnInputPart{{Type: "text", Text: scripted.Script(scripted.Step{Text: strings.Repeat("tick ", 500), Chunks: 500, ChunkDelayMs: 20})}}}
	ack1, err := c.CallRaw(ctx, msp.MethodTurnStart, slowTurn)
	if err != nil {
		t.Fatal(err)
	}
	for deltas := 0; deltas < 5; {
		n, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, n)
		if n.Method == msp.NotifyItemDelta {
			deltas++
		}
	}
	p1.kill()

	p2 := startProcess(t, dataDir)
	c2 := dial(t, p2.url, client.Options{})
	// Everything acknowledged (delivered) before the kill is in the log,
	// byte-identical.
	var page msp.ViewPageResult
	if err := c2.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Limit: 1000}, &page); err != nil {
		t.Fatal(err)
	}
	logged := map[string]string{}
	for _, e := range page.Events {
		n := client.Notification{Method: e.Method, Params: e.Params}
		logged[n.Cursor()] = string(e.Params)
	}
	for _, n := range seen {
		if n.Method == msp.NotifyItemDelta || n.Cursor() == "" {
			continue
		}
		if logged[n.Cursor()] != string(n.Params) {
			t.Errorf("acknowledged %s %s is not in the log as sent", n.Method, n.Cursor())
		}
	}
	// The interrupted turn is settled: its item failed, then a failed
	// terminal, the first events of the new process.
	tail := page.Events[len(page.Events)-2:]
	item := decode[msp.ItemParams](t, client.Notification{Params: tail[0].Params}).Item
	done := decode[msp.TurnCompletedParams](t, client.Notification{Params: tail[1].Params})
	if tail[0].Method != msp.NotifyItemCompleted || item.Status != msp.ItemFailed || tail[1].Method != msp.NotifyTurnCompleted ||
		done.TurnID != slowTurn.CommandID || done.Terminal != msp.TerminalFailed || done.Error == nil || done.Error.Kind != msp.TurnErrorHostRestarted {
		t.Fatalf("settlement: %s %s / %s %s", tail[0].Method, tail[0].Params, tail[1].Method, tail[1].Params)
	}
	// A replayed turn/start is acknowledged identically and not run again.
	ack2, err := c2.CallRaw(ctx, msp.MethodTurnStart, slowTurn)
	if err != nil {
		t.Fatal(err)
	}
	if string(ack1) != string(ack2) {
		t.Fatalf("replayed ack differs:\n%s\n%s", ack1, ack2)
	}
	// Resume without a cursor, then run one more turn: no cursor is ever
	// handed out twice, before or after the restart.
	res, err := c2.Resume(ctx, sid, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Session.ActiveTurnID != nil || res.Session.Status != msp.SessionIdle || res.History.Mode != msp.HistoryInline {
		t.Fatalf("resumed session: %+v", res.Session)
	}
	ack3, err := c2.StartTurn(ctx, sid, "after the restart")
	if err != nil {
		t.Fatal(err)
	}
	more, err := c2.WaitTurn(ctx, ack3.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	var final msp.ViewPageResult
	if err := c2.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Limit: 1000}, &final); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(jsonText(final), `"method":"turn/started"`); n != 3 {
		t.Fatalf("%d turns started; the replayed one must not run again", n)
	}
	all := append(append([]client.Notification(nil), seen...), more...)
	cursors := map[string]string{}
	for _, n := range all {
		c := n.Cursor()
		if c == "" {
			continue
		}
		if prev, dup := cursors[c]; dup {
			t.Errorf("cursor %s issued twice: %s and %s", c, prev, n.Method)
		}
		cursors[c] = n.Method
	}
	var fresh msp.TurnStartedParams
	for _, n := range more {
		if n.Method == msp.NotifyTurnStarted {
			json.Unmarshal(n.Params, &fresh)
		}
	}
	if cursorPos(t, fresh.ViewCursor)[0] != int64(len(page.Events)+1) {
		t.Errorf("the new turn starts at %s after %d logged events", fresh.ViewCursor, len(page.Events))
	}
}
