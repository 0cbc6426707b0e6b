package e2e

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"mspd/client"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// TestGracefulShutdown sends SIGTERM while a turn streams. The process
// stops taking new turns (overloaded, retryable) but lets the running one
// go on for --shutdown-timeout; past it the turn stops without a
// terminal — never "cancelled" or "stopped" — and the process exits 0. The
// next process resumes the turn as attempt 2, saying why.
func TestGracefulShutdown(t *testing.T) {
	dataDir := t.TempDir()
	p1 := startProcess(t, dataDir, "--shutdown-timeout", "300ms")
	ctx := testCtx(t) // after the first start, which may build mspd
	w := watchNewSession(ctx, t, p1.url)
	long := scripted.Step{Text: strings.Repeat("tock ", 400), Chunks: 400, ChunkDelayMs: 10}
	turn := slowTurn(w.sid, 0, long, scripted.Step{Text: "resumed"})
	if _, err := w.c.StartTurnWith(ctx, turn); err != nil {
		t.Fatal(err)
	}
	w.until(ctx, func(n client.Notification) bool { return n.Method == msp.NotifyItemDelta })
	if err := p1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Draining: the turn still streams to this connection, new turns are
	// refused as retryable.
	p1.waitUnready(ctx, t)
	w.until(ctx, func(n client.Notification) bool { return n.Method == msp.NotifyItemDelta })
	_, err := w.c.StartTurn(ctx, w.sid, "too late")
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindOverloaded || me.Data.Retryable == nil || !*me.Data.Retryable {
		t.Fatalf("turn/start while draining: %v, want overloaded, retryable", err)
	}
	if err := p1.cmd.Wait(); err != nil {
		t.Fatalf("mspd exited with %v after SIGTERM, want status 0", err)
	}
	w.readToClose(ctx, "the shutdown")
	items := only(w.seen, msp.NotifyItemCompleted)
	cut := decode[msp.ItemParams](t, items[len(items)-1]).Item
	if cut.Status != msp.ItemFailed || cut.Text == nil || !strings.HasPrefix(*cut.Text, "tock tock") {
		t.Fatalf("the cut attempt's item %+v: want failed with the text streamed", cut)
	}

	p2 := startProcess(t, dataDir)
	w.attach(ctx, p2.url)
	done := w.terminal(ctx, turn.CommandID)
	if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 2 {
		t.Fatalf("resumed turn: %s", jsonText(done))
	}
	notices := only(w.seen, msp.NotifyTurnRetryScheduled)
	if len(notices) != 1 || decode[msp.TurnRetryScheduledParams](t, notices[0]).Reason != "the server restarted during attempt 1" {
		t.Fatalf("notices %s", jsonText(notices))
	}
	w.checkLog(ctx)
}

// TestShutdownLetsShortTurnsFinish: a turn that ends within the shutdown
// timeout ends normally, and the process exits 0.
func TestShutdownLetsShortTurnsFinish(t *testing.T) {
	p := startProcess(t, t.TempDir(), "--shutdown-timeout", "60s")
	ctx := testCtx(t) // after the first start, which may build mspd
	w := watchNewSession(ctx, t, p.url)
	turn := slowTurn(w.sid, 0, scripted.Step{Text: strings.Repeat("tick ", 40), Chunks: 40, ChunkDelayMs: 10})
	if _, err := w.c.StartTurnWith(ctx, turn); err != nil {
		t.Fatal(err)
	}
	w.until(ctx, func(n client.Notification) bool { return n.Method == msp.NotifyItemDelta })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if done := w.terminal(ctx, turn.CommandID); done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 1 {
		t.Fatalf("turn during shutdown: %s", jsonText(done))
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("mspd exited with %v, want 0", err)
	}
}
