package e2e

import (
	"strings"
	"syscall"
	"testing"

	"mspd/client"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// TestSignalsDuringShutdown: a SIGHUP while mspd drains (a log rotation,
// a reload) does not kill it: the turn goes on streaming; a second SIGTERM
// then ends the grace at once, the turn stops without a terminal, to
// resume, and the process exits 0.
func TestSignalsDuringShutdown(t *testing.T) {
	p := startProcess(t, t.TempDir(), "--shutdown-timeout", "60s")
	ctx := testCtx(t) // after the first start, which may build mspd
	w := watchNewSession(ctx, t, p.url)
	long := scripted.Step{Text: strings.Repeat("tock ", 1000), Chunks: 1000, ChunkDelayMs: 10}
	turn := slowTurn(w.sid, 0, long)
	if _, err := w.c.StartTurnWith(ctx, turn); err != nil {
		t.Fatal(err)
	}
	isDelta := func(n client.Notification) bool { return n.Method == msp.NotifyItemDelta }
	w.until(ctx, isDelta)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitUnready(ctx, t) // the shutdown has begun
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// Two more deltas: the one that may have been in flight as the signal
	// came, and one certainly after it.
	w.until(ctx, isDelta)
	w.until(ctx, isDelta)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("mspd exited with %v after a SIGHUP and a second SIGTERM, want status 0", err)
	}
	w.readToClose(ctx, "the second signal")
}
