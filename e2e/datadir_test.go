package e2e

import (
	"bufio"
	"fmt"
	"strings"
	"testing"

	"mspd/client"
	"mspd/internal/testlane"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// TestDataDirInUse starts a second mspd on the data directory of a first
// one that is streaming a turn: the second exits at once, non-zero, with a
// one-line message naming the directory and the first's PID, and the
// first's turn completes untouched. Once the first is killed, the directory
// is free again. So in every store mode that keeps files there: SQLite's,
// and JetStream's with the NATS server embedded (its files under --data).
func TestDataDirInUse(t *testing.T) {
	testlane.Slow(t, "starts mspd processes, on SQLite and on embedded NATS")
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"sqlite", nil},
		{"jetstream-embedded", []string{"--store", "jetstream", "--nats-embedded", "--nats-listen", "127.0.0.1:0"}},
	} {
		t.Run(mode.name, func(t *testing.T) { testDataDirInUse(t, mode.args) })
	}
}

func testDataDirInUse(t *testing.T, args []string) {
	dataDir := t.TempDir()
	p1 := startProcess(t, dataDir, args...)
	ctx := testCtx(t) // after the first start, which may build mspd
	c := dial(t, p1.url, client.Options{})
	start, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID
	// About 3s of streaming: far longer than a second process takes to
	// start and give up.
	text := strings.Repeat("tick ", 150)
	ack, err := c.StartTurn(ctx, sid, scripted.Script(scripted.Step{Text: text, Chunks: 150, ChunkDelayMs: 20}))
	if err != nil {
		t.Fatal(err)
	}
	for {
		n, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Method == msp.NotifyItemDelta {
			break // the turn is live
		}
	}

	second := mspdCommand(ctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--data", dataDir, "--provider", "scripted"}, args...)...)
	stderr, err := second.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for sc := bufio.NewScanner(stderr); sc.Scan(); {
		lines = append(lines, sc.Text())
		if listening.MatchString(sc.Text()) {
			second.Process.Kill()
			second.Wait()
			t.Fatalf("a second mspd started serving on a data directory in use:\n%s", strings.Join(lines, "\n"))
		}
	}
	err = second.Wait()
	if second.ProcessState == nil || second.ProcessState.ExitCode() <= 0 {
		t.Fatalf("second mspd: %v, want a non-zero exit status", err)
	}
	want := fmt.Sprintf("mspd: data directory %s is in use by another mspd (pid %d); stop it or use another --data", dataDir, p1.cmd.Process.Pid)
	if len(lines) != 1 || lines[0] != want {
		t.Fatalf("second mspd said:\n%s\nwant the one line:\n%s", strings.Join(lines, "\n"), want)
	}

	// The first still owns its turn: it keeps streaming and completes.
	events, err := c.WaitTurn(ctx, ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	deltas := 0
	for _, n := range events {
		if n.Method == msp.NotifyItemDelta {
			deltas++
		}
	}
	done := decode[msp.TurnCompletedParams](t, events[len(events)-1])
	if done.Terminal != msp.TerminalCompleted || done.Error != nil {
		t.Fatalf("turn ended %s %+v, want completed", done.Terminal, done.Error)
	}
	if deltas == 0 {
		t.Fatal("the turn was over before the second mspd gave up; the test proved nothing")
	}

	// The OS drops the lock with its holder: after kill -9, mspd starts.
	p1.kill()
	p3 := startProcess(t, dataDir, args...)
	c3 := dial(t, p3.url, client.Options{})
	res, err := c3.Resume(ctx, sid, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Session.Status != msp.SessionIdle || res.Session.ActiveTurnID != nil {
		t.Fatalf("session after restart: %+v", res.Session)
	}
}
