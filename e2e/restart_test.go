package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"mspd/client"
	"mspd/internal/testlane"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// process is a running mspd child process.
type process struct {
	cmd   *exec.Cmd
	url   string
	found chan string // the address, once reported
}

var listening = regexp.MustCompile(`url=(ws://\S+)`)

// startProcess runs `mspd serve` on a free port over dataDir.
func startProcess(t *testing.T, dataDir string, args ...string) *process {
	t.Helper()
	p := launchProcess(t, dataDir, args...)
	p.waitListening(t, 20*time.Second)
	return p
}

// launchProcess starts `mspd serve` on a free port over dataDir without
// waiting for it to listen (nodes of a cluster start together).
func launchProcess(t *testing.T, dataDir string, args ...string) *process {
	t.Helper()
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--data", dataDir, "--provider", "scripted"}, args...)
	cmd := mspdCommand(context.Background(), args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, found: make(chan string, 1)}
	t.Cleanup(func() { p.kill() })
	lines := bufio.NewScanner(stderr)
	var keep *os.File // MSPD_E2E_LOG_DIR keeps each process's log, for debugging
	if dir := os.Getenv("MSPD_E2E_LOG_DIR"); dir != "" {
		keep, _ = os.CreateTemp(dir, "mspd-*.log")
	}
	go func() {
		if keep != nil {
			defer keep.Close()
		}
		for lines.Scan() {
			if keep != nil {
				fmt.Fprintln(keep, lines.Text())
			}
			if m := listening.FindStringSubmatch(lines.Text()); m != nil {
				select {
				case p.found <- m[1]:
				default:
				}
			}
		}
	}()
	return p
}

// waitListening waits for the process to report its address.
func (p *process) waitListening(t *testing.T, limit time.Duration) {
	t.Helper()
	select {
	case p.url = <-p.found:
	case <-time.After(limit):
		t.Fatal("mspd did not report its address")
	}
}

// waitUnready waits until the process's /readyz answers 503: it drains,
// and refuses new turns.
func (p *process) waitUnready(ctx context.Context, t *testing.T) {
	t.Helper()
	readyz := strings.Replace(strings.TrimSuffix(p.url, "/msp"), "ws://", "http://", 1) + "/readyz"
	for {
		if code, _ := get(t, readyz); code == http.StatusServiceUnavailable {
			return
		}
		if ctx.Err() != nil {
			t.Fatal("/readyz still ready after SIGTERM")
		}
	}
}

func (p *process) kill() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
	}
}

// watcher follows one session across server processes, resuming from the
// last cursor it saw, and keeps everything it was given.
type watcher struct {
	t      *testing.T
	sid    string
	c      *checkedClient
	seen   []client.Notification
	cursor string
}

// watchNewSession starts a session on the process at url and follows it
// from its head, as a client would: a kill before any notification then
// resumes from the head, not from nothing.
func watchNewSession(ctx context.Context, t *testing.T, url string) *watcher {
	t.Helper()
	w := &watcher{t: t, c: dial(t, url, client.Options{})}
	start, err := w.c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.sid, w.cursor = start.Session.SessionID, start.ViewCursor
	return w
}

// attach connects to a (new) process, resumes after the last cursor and
// returns the resume's snapshot.
func (w *watcher) attach(ctx context.Context, url string) msp.SessionSnapshot {
	w.t.Helper()
	w.c = dial(w.t, url, client.Options{})
	cursor := w.cursor
	snap, err := w.c.Resume(ctx, w.sid, &cursor)
	if err != nil {
		w.t.Fatalf("resume after %s: %v", cursor, err)
	}
	return snap
}

// next takes one notification (or server request), remembering its
// cursor.
func (w *watcher) next(ctx context.Context) client.Notification {
	w.t.Helper()
	n, err := w.c.Next(ctx)
	if err != nil {
		w.t.Fatalf("%v; the last notifications: %s", err, compact(methods(w.seen[max(len(w.seen)-12, 0):])))
	}
	w.seen = append(w.seen, n)
	if c := n.Cursor(); c != "" && !n.IsRequest() {
		w.cursor = c
	}
	return n
}

// until takes notifications until one satisfies done.
func (w *watcher) until(ctx context.Context, done func(client.Notification) bool) {
	w.t.Helper()
	for !done(w.next(ctx)) {
	}
}

// readToClose takes notifications until the server closes the connection
// (going away), failing if a turn ends first: a stopping process leaves
// its running turn to the next one. why names the stop, for the failure.
func (w *watcher) readToClose(ctx context.Context, why string) {
	w.t.Helper()
	for {
		n, err := w.c.Next(ctx)
		if err != nil {
			return // the connection closed as going away
		}
		if n.Method == msp.NotifyTurnCompleted {
			w.t.Fatalf("%s ended the turn: %s", why, n.Params)
		}
		w.seen = append(w.seen, n)
		if c := n.Cursor(); c != "" {
			w.cursor = c
		}
	}
}

// terminal returns turnID's terminal, from what was seen or by waiting.
func (w *watcher) terminal(ctx context.Context, turnID string) msp.TurnCompletedParams {
	w.t.Helper()
	isIt := terminalOf(turnID)
	if i := slices.IndexFunc(w.seen, isIt); i >= 0 {
		return decode[msp.TurnCompletedParams](w.t, w.seen[i])
	}
	w.until(ctx, isIt)
	return decode[msp.TurnCompletedParams](w.t, w.seen[len(w.seen)-1])
}

// terminalOf reports whether n is turnID's terminal.
func terminalOf(turnID string) func(client.Notification) bool {
	return func(n client.Notification) bool {
		var p msp.TurnCompletedParams
		return n.Method == msp.NotifyTurnCompleted && json.Unmarshal(n.Params, &p) == nil && p.TurnID == turnID
	}
}

// checkLog checks the session's whole log against what was delivered: no
// cursor twice, every durable event delivered is in the log byte for byte
// (the ephemeral ones, at sub-positions, are deltas and the item/started
// of an answer).
func (w *watcher) checkLog(ctx context.Context) msp.ViewPageResult {
	w.t.Helper()
	var page msp.ViewPageResult
	if err := w.c.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: w.sid, Limit: 1000}, &page); err != nil {
		w.t.Fatal(err)
	}
	logged := map[string]string{}
	for _, e := range page.Events {
		logged[client.Notification{Params: e.Params}.Cursor()] = string(e.Params)
	}
	issued := map[string]string{}
	for _, n := range w.seen {
		c := n.Cursor()
		if c == "" || n.IsRequest() { // approval/request carries its approval/requested's cursor
			continue
		}
		if prev, dup := issued[c]; dup && n.Method != msp.NotifyViewGap {
			w.t.Errorf("cursor %s delivered twice: %s and %s", c, prev, n.Method)
		}
		issued[c] = n.Method
		if cursorPos(w.t, c)[1] == 0 && logged[c] != string(n.Params) {
			w.t.Errorf("delivered %s %s is not in the log as sent", n.Method, c)
		}
	}
	return page
}

// durableOnly leaves out the ephemeral events (deltas and an answer's
// item/started, at sub-positions): a reader back after its turn's attempt
// ended gets none of them, so how many arrive depends on timing.
func durableOnly(ns []client.Notification) []client.Notification {
	return slices.DeleteFunc(slices.Clone(ns), func(n client.Notification) bool {
		c := n.Cursor()
		return c != "" && strings.Contains(c[strings.LastIndexByte(c, ':'):], ".")
	})
}

func slowTurn(sid string, maxAttempts int, steps ...scripted.Step) msp.TurnStartParams {
	p := msp.TurnStartParams{CommandID: client.NewCommandID(), SessionID: sid,
		Input: []msp.TurnInputPart{{Type: "text", Text: scripted.Script(steps...)}}}
	if maxAttempts > 0 {
		p.Retry = &msp.RetryPolicy{MaxAttempts: &maxAttempts}
	}
	return p
}

var streaming = scripted.Step{Text: strings.Repeat("tick ", 200), Chunks: 200, ChunkDelayMs: 10}

// TestKilledMidTurn kills the server (SIGKILL) while a turn streams with
// two turns queued behind it, and restarts it on the same data directory:
// the cut attempt is discarded, the turn resumes as attempt 2 after a
// turn/retryScheduled saying why and completes with the lost attempt
// counted; the queued turns then run, each exactly once; a replayed
// turn/start gets its recorded ack; no cursor repeats and every event
// delivered before the kill is in the log as sent.
func TestKilledMidTurn(t *testing.T) {
	dataDir := t.TempDir()
	p1 := startProcess(t, dataDir)
	ctx := testCtx(t) // after the first start, which may build mspd
	w := watchNewSession(ctx, t, p1.url)
	first := slowTurn(w.sid, 0, streaming, scripted.Step{Text: "second try"})
	ack1, err := w.c.CallRaw(ctx, msp.MethodTurnStart, first)
	if err != nil {
		t.Fatal(err)
	}
	var queued []string
	for _, text := range []string{"queued one", "queued two"} {
		ack, err := w.c.StartTurn(ctx, w.sid, text)
		if err != nil || ack.Disposition != msp.DispositionQueued {
			t.Fatalf("queueing %q: %+v, %v", text, ack, err)
		}
		queued = append(queued, ack.TurnID)
	}
	for deltas := 0; deltas < 5; {
		if w.next(ctx).Method == msp.NotifyItemDelta {
			deltas++
		}
	}
	p1.kill()

	p2 := startProcess(t, dataDir)
	w.attach(ctx, p2.url)
	from := len(w.seen)
	w.until(ctx, terminalOf(first.CommandID))
	resumed := durableOnly(w.seen[from:])
	// The cursor was inside the cut answer, whose later deltas died: a
	// gap. The answer closes as failed (with the text saved, if the kill
	// came after its text was first saved, a second in). Then the
	// notice, then the new attempt (whose stream is gone if it finished
	// before the client was back: its item arrives whole).
	opened := only(w.seen[:from], msp.NotifyItemStarted)
	if len(opened) != 1 {
		t.Fatalf("%d answers seen open before the kill", len(opened))
	}
	cutID := decode[msp.ItemParams](t, opened[0]).Item.ItemID
	resumed = slices.DeleteFunc(resumed, func(n client.Notification) bool {
		if n.Method != msp.NotifyItemCompleted {
			return false
		}
		it := decode[msp.ItemParams](t, n).Item
		if it.ItemID == cutID && it.Status != msp.ItemFailed {
			t.Errorf("the cut answer closed %s", it.Status)
		}
		return it.ItemID == cutID
	})
	want := "view/gap, turn/retryScheduled, item/completed, session/tokenUsage, turn/completed"
	if got := compact(methods(resumed)); got != want {
		t.Fatalf("after the restart:\n got %s\nwant %s", got, want)
	}
	notice := decode[msp.TurnRetryScheduledParams](t, resumed[1])
	if notice.Attempt != 1 || notice.NextAttempt != 2 || notice.Reason != "the server restarted during attempt 1" {
		t.Errorf("notice %+v", notice)
	}
	done := decode[msp.TurnCompletedParams](t, resumed[len(resumed)-1])
	if done.Terminal != msp.TerminalCompleted || done.Attempts == nil || done.Attempts.Count != 2 || done.Attempts.UsageComplete {
		t.Fatalf("resumed turn's terminal %s", jsonText(done))
	}
	for _, id := range queued {
		w.terminal(ctx, id)
	}
	// A replayed turn/start is acknowledged identically and not run again.
	ack2, err := w.c.CallRaw(ctx, msp.MethodTurnStart, first)
	if err != nil || string(ack1) != string(ack2) {
		t.Fatalf("replayed ack differs:\n%s\n%s (%v)", ack1, ack2, err)
	}
	page := w.checkLog(ctx)
	for _, id := range append([]string{first.CommandID}, queued...) {
		started := 0
		for _, e := range page.Events {
			if e.Method == msp.NotifyTurnStarted && strings.Contains(string(e.Params), id) {
				started++
			}
		}
		if started != 1 {
			t.Errorf("turn %s started %d times", id, started)
		}
	}
}

// TestKilledDuringBackoff kills the server while a turn waits out a
// provider's Retry-After: nothing was in flight, so after the restart the
// turn waits out the rest of the backoff and attempt 2 is the next
// request; attempts.count is 2.
func TestKilledDuringBackoff(t *testing.T) {
	dataDir := t.TempDir()
	p1 := startProcess(t, dataDir)
	ctx := testCtx(t) // after the first start, which may build mspd
	w := watchNewSession(ctx, t, p1.url)
	wait := 4000
	turn := slowTurn(w.sid, 0, scripted.Step{Status: 429, RetryAfterMs: &wait}, scripted.Step{Text: "finally"})
	if _, err := w.c.StartTurnWith(ctx, turn); err != nil {
		t.Fatal(err)
	}
	w.until(ctx, func(n client.Notification) bool { return n.Method == msp.NotifyTurnModelRetryScheduled })
	p1.kill()

	p2 := startProcess(t, dataDir)
	w.attach(ctx, p2.url)
	from := len(w.seen)
	w.until(ctx, terminalOf(turn.CommandID))
	resumed := durableOnly(w.seen[from:])
	if got, want := compact(methods(resumed)), "turn/retryScheduled, item/completed, session/tokenUsage, turn/completed"; got != want {
		t.Fatalf("after the restart:\n got %s\nwant %s", got, want)
	}
	notice := decode[msp.TurnRetryScheduledParams](t, resumed[0])
	if notice.Attempt != 1 || notice.NextAttempt != 2 || notice.Reason != "the server restarted during the backoff before attempt 2" ||
		notice.RetryDelayMs <= 0 || notice.RetryDelayMs > int64(wait) {
		t.Errorf("notice %+v", notice)
	}
	done := decode[msp.TurnCompletedParams](t, resumed[len(resumed)-1])
	if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 2 {
		t.Fatalf("terminal %s", jsonText(done))
	}
	w.checkLog(ctx)
}

// TestKilledAtRandomPoints kills the server again and again at random
// points of a session with several multi-attempt turns queued, then lets
// the last process finish: every turn completes, no cursor is delivered
// twice, and every durable event delivered is in the log as sent.
func TestKilledAtRandomPoints(t *testing.T) {
	testlane.Slow(t, "kills an mspd process six times")
	const kills = 6
	seed := time.Now().UnixNano()
	rnd := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("seed %d", seed)
	dataDir := t.TempDir()
	// Room for every kill to cost the same turn an attempt, and then some.
	p := startProcess(t, dataDir, "--max-attempts", "16")
	ctx := testCtx(t) // after the first start, which may build mspd
	w := watchNewSession(ctx, t, p.url)
	step := scripted.Step{Text: strings.Repeat("word ", 30), Chunks: 30, ChunkDelayMs: 5}
	fail := scripted.Step{Status: 503}
	var turns []string
	for range 4 {
		tp := slowTurn(w.sid, 16, fail, step, step, step, step, step, step, step, step, step, step, step, step, step, step, step)
		if _, err := w.c.StartTurnWith(ctx, tp); err != nil {
			t.Fatal(err)
		}
		turns = append(turns, tp.CommandID)
	}
	settled := func() bool {
		for _, id := range turns {
			if !slices.ContainsFunc(w.seen, terminalOf(id)) {
				return false
			}
		}
		return true
	}
	for k := range kills {
		// A random point: after some notifications, or once all is done.
		for n := rnd.IntN(60) + 1; n > 0 && !settled(); n-- {
			w.next(ctx)
		}
		p.kill()
		p = startProcess(t, dataDir, "--max-attempts", "16")
		w.attach(ctx, p.url)
		t.Logf("kill %d after %d notifications", k+1, len(w.seen))
	}
	for _, id := range turns {
		if done := w.terminal(ctx, id); done.Terminal != msp.TerminalCompleted {
			t.Errorf("turn %s ended %s", id, jsonText(done))
		}
	}
	w.checkLog(ctx)
}

// TestKilledMidStreamClosesTheOpenAnswer kills the server (SIGKILL) while
// an answer streams, a moment after it opened on an ephemeral item/started
// (before its text was first saved, so the log holds nothing of it), and
// restarts it: the answer the client saw open is closed, failed, durably
// and before the restart's retry notice, and the new attempt's answer
// follows the notice. The client resuming by cursor gets that closing, and
// view/page shows it in that order.
func TestKilledMidStreamClosesTheOpenAnswer(t *testing.T) {
	dataDir := t.TempDir()
	p1 := startProcess(t, dataDir)
	ctx := testCtx(t) // after the first start, which may build mspd
	w := watchNewSession(ctx, t, p1.url)
	turn := slowTurn(w.sid, 0, streaming, scripted.Step{Text: "second try"})
	if _, err := w.c.StartTurnWith(ctx, turn); err != nil {
		t.Fatal(err)
	}
	var cut string
	for deltas := 0; deltas < 5; {
		switch n := w.next(ctx); n.Method {
		case msp.NotifyItemStarted:
			cut = decode[msp.ItemParams](t, n).Item.ItemID
		case msp.NotifyItemDelta:
			deltas++
		}
	}
	p1.kill()

	p2 := startProcess(t, dataDir)
	w.attach(ctx, p2.url)
	from := len(w.seen)
	w.until(ctx, terminalOf(turn.CommandID))
	told := slices.ContainsFunc(w.seen[from:], func(n client.Notification) bool {
		if n.Method != msp.NotifyItemCompleted {
			return false
		}
		it := decode[msp.ItemParams](t, n).Item
		return it.ItemID == cut && it.Status == msp.ItemFailed
	})
	if !told {
		t.Errorf("the resumed client was not told the answer %s it saw open failed: %s", cut, compact(methods(w.seen[from:])))
	}

	closed, notice, next := -1, -1, -1
	for i, e := range pageAll(t, ctx, w.c, w.sid) {
		switch e.Method {
		case msp.NotifyItemCompleted:
			var p msp.ItemParams
			if err := json.Unmarshal(e.Params, &p); err != nil {
				t.Fatal(err)
			}
			switch {
			case p.Item.ItemID == cut:
				if p.Item.Status != msp.ItemFailed || closed >= 0 {
					t.Errorf("the cut answer closes (again?) as %s", p.Item.Status)
				}
				closed = i
			case p.Item.Kind == msp.ItemAgentMessage && next < 0:
				next = i
			}
		case msp.NotifyTurnRetryScheduled:
			notice = i
		}
	}
	if closed < 0 || !(closed < notice && notice < next) {
		t.Fatalf("view/page after the restart: the cut answer closed at %d, the retry notice at %d, the new attempt's answer at %d; want them in that order", closed, notice, next)
	}
	w.checkLog(ctx)
}
