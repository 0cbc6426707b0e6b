package tail

// Tests of the retry line on a terminal (issue 10): it counts down in
// place, once a second, and settles as "retried" or "cancelled" on
// evidence; elsewhere it prints once. The clock is fake: no test waits.

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"mspd/schema/msp"
)

const turn1 = "0198f0aa-0000-7000-8000-00000000t001"

func rateLimited(attempt int, delayMs int64) json.RawMessage {
	return mustJSON(msp.TurnModelRetryScheduledParams{TurnID: turn1, Attempt: attempt, NextAttempt: attempt + 1,
		MaxAttempts: 5, RetryDelayMs: delayMs, System: "openai", ErrorKind: "rateLimited", HTTPStatus: 429})
}

func agentItem(method, status string) (string, json.RawMessage) {
	turn, text := turn1, "Hello"
	return method, mustJSON(msp.ItemParams{Item: msp.Item{ItemID: "a2", Kind: msp.ItemAgentMessage, Status: status, TurnID: &turn, Text: &text}})
}

func turnEnded(terminal string, attempts int) json.RawMessage {
	return mustJSON(msp.TurnCompletedParams{TurnID: turn1, Terminal: terminal, Attempts: &msp.Attempts{Count: attempts}})
}

// retryLine is the retry line with when in the middle.
func retryLine(when string) string {
	return "⟳ openai · rate limited (429) · " + when + " · attempt 2/5"
}

// TestRetryCountsDownOnATerminal: the line is redrawn in place each
// second (CR, the line, clear to its end), says "retrying now" once the
// wait is over, and becomes "retried" when the next attempt's answer
// starts, which then streams on the line below.
func TestRetryCountsDownOnATerminal(t *testing.T) {
	clk, v := newFakeClock(), &vt{}
	scr := clk.terminal(v)
	r := scr.renderer(Pretty, false, "")
	r.event(msp.NotifyTurnStarted, mustJSON(msp.TurnStartedParams{TurnID: turn1}))
	r.event(msp.NotifyTurnModelRetryScheduled, rateLimited(1, 3000))
	wantScreen(t, v, "── turn 0000t001 ──", retryLine("retrying in 3s"))
	if row, col := v.cursor(); row != 1 || col == 0 {
		t.Fatalf("the cursor is at %d:%d, want it at the end of the live line", row, col)
	}
	for _, left := range []string{"2s", "1s"} {
		clk.advance(t, time.Second)
		wantScreen(t, v, "── turn 0000t001 ──", retryLine("retrying in "+left))
		if !strings.HasSuffix(v.bytes(), "\r"+retryLine("retrying in "+left)+"\x1b[K") {
			t.Fatalf("not redrawn in place with CR and clear-to-end-of-line: %q", v.bytes())
		}
	}
	clk.advance(t, time.Second)
	wantScreen(t, v, "── turn 0000t001 ──", retryLine("retrying now"))
	if clk.ticking() {
		t.Error("the ticker still runs though nothing counts down any more")
	}

	r.event(agentItem(msp.NotifyItemStarted, msp.ItemInProgress))
	r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "a2", Delta: "Hello"}))
	wantScreen(t, v, "── turn 0000t001 ──", retryLine("retried"), "agent: Hello")
}

// TestRetryCancelledDuringTheWait: Stop during the wait ends the turn
// cancelled with the announced attempt never made: the line says so.
func TestRetryCancelledDuringTheWait(t *testing.T) {
	clk, v := newFakeClock(), &vt{}
	scr := clk.terminal(v)
	r := scr.renderer(Pretty, false, "")
	r.event(msp.NotifyTurnModelRetryScheduled, rateLimited(1, 5000))
	clk.advance(t, time.Second)
	r.event(msp.NotifyTurnCompleted, turnEnded(msp.TerminalCancelled, 1))
	wantScreen(t, v, retryLine("cancelled"), "■ cancelled")
	if clk.ticking() {
		t.Error("the ticker outlives the countdown")
	}
	if row, col := v.cursor(); row != 2 || col != 0 {
		t.Errorf("the cursor is at %d:%d, want the start of the next line", row, col)
	}
}

// TestRetrySettlesOnEvidenceOnly: what settles a wait, and how; what does
// not (the turn's user message, a restarted server announcing the same
// wait again).
func TestRetrySettlesOnEvidenceOnly(t *testing.T) {
	type ev struct {
		method string
		params json.RawMessage
	}
	item := func(method, status string) ev { m, p := agentItem(method, status); return ev{m, p} }
	user := "hi"
	turn := turn1
	for _, c := range []struct {
		name   string
		events []ev
		want   []string
	}{
		{"the next attempt's item, seen only completed", []ev{item(msp.NotifyItemCompleted, msp.ItemCompleted)},
			[]string{retryLine("retried"), "agent: Hello"}},
		{"a delta", []ev{{msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "a2", Delta: "Hi"})}},
			[]string{retryLine("retried"), "agent: Hi"}},
		{"the announced attempt failed too", []ev{{msp.NotifyTurnModelRetryScheduled, rateLimited(2, 2000)}},
			[]string{retryLine("retried"), "⟳ openai · rate limited (429) · retrying in 2s · attempt 3/5"}},
		{"the terminal counts the attempt", []ev{{msp.NotifyTurnCompleted, turnEnded(msp.TerminalFailed, 2)}},
			[]string{retryLine("retried"), "✗ failed"}},
		{"the turn failed before the attempt", []ev{{msp.NotifyTurnCompleted, turnEnded(msp.TerminalFailed, 1)}},
			[]string{retryLine("not retried"), "✗ failed"}},
		{"a user message is no attempt", []ev{{msp.NotifyItemCompleted, mustJSON(msp.ItemParams{Item: msp.Item{ItemID: "u", Kind: msp.ItemUserMessage, Status: msp.ItemCompleted, TurnID: &turn, Text: &user}})}},
			[]string{"you: hi", retryLine("retrying in 3s")}},
		{"the same wait announced again", []ev{{msp.NotifyTurnModelRetryScheduled, rateLimited(1, 1000)}},
			[]string{retryLine("retrying in 1s")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk, v := newFakeClock(), &vt{}
			r := clk.terminal(v).renderer(Pretty, false, "")
			r.event(msp.NotifyTurnModelRetryScheduled, rateLimited(1, 3000))
			for _, e := range c.events {
				r.event(e.method, e.params)
			}
			wantScreen(t, v, c.want...)
		})
	}
}

// TestRetryPrintsOnceOffATerminal: piped, or as JSON or raw output, the
// notice is one line as it came, with no control sequences and no ticker.
func TestRetryPrintsOnceOffATerminal(t *testing.T) {
	var out bytes.Buffer
	r := newRenderer(&out, Pretty, false)
	r.event(msp.NotifyTurnModelRetryScheduled, rateLimited(1, 1200))
	r.event(agentItem(msp.NotifyItemStarted, msp.ItemInProgress))
	if want := "⟳ openai · rate limited (429) · retrying in 1.2s · attempt 2/5\n"; out.String() != want {
		t.Errorf("piped: %q, want %q", out.String(), want)
	}
	for _, format := range []string{JSON, Raw} {
		clk, v := newFakeClock(), &vt{}
		tl := newTailer(Options{SessionID: "s", Terminal: true, Format: format, Clock: clk}, v)
		tl.one.r.event(msp.NotifyTurnModelRetryScheduled, rateLimited(1, 1200))
		if strings.ContainsAny(v.bytes(), "\r\x1b") || clk.ticking() {
			t.Errorf("-o %s on a terminal: %q, ticking %v", format, v.bytes(), clk.ticking())
		}
	}
}

// TestRetryDeadlineFromEmission: live, the wait counts from when the
// server emitted the notice; a clock ahead of the server's never makes it
// longer than announced.
func TestRetryDeadlineFromEmission(t *testing.T) {
	for _, c := range []struct {
		name    string
		emitted time.Duration // relative to now
		want    string
	}{
		{"emitted 2s ago", -2 * time.Second, "retrying in 1s"},
		{"emitted in the future", 5 * time.Second, "retrying in 3s"},
		{"over before it arrived", -10 * time.Second, "retrying now"},
	} {
		clk, v := newFakeClock(), &vt{}
		r := clk.terminal(v).renderer(Pretty, false, "")
		r.eventAt(msp.NotifyTurnModelRetryScheduled, rateLimited(1, 3000), clk.Now().Add(c.emitted).UnixMilli())
		if got := v.screen(); len(got) != 1 || got[0] != retryLine(c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, retryLine(c.want))
		}
	}
}

// TestStatusLineAboveTheCountdown: a status line (stderr, the same
// terminal) goes above the countdown, which stays the last line and keeps
// counting.
func TestStatusLineAboveTheCountdown(t *testing.T) {
	clk, v := newFakeClock(), &vt{}
	tl := newTailer(Options{SessionID: "s", Terminal: true, Clock: clk, Status: v}, v)
	tl.scr.tickDone = func() { clk.done <- struct{}{} }
	tl.one.r.event(msp.NotifyTurnModelRetryScheduled, rateLimited(1, 3000))
	tl.status("connection lost (EOF); reconnecting…")
	wantScreen(t, v, "connection lost (EOF); reconnecting…", retryLine("retrying in 3s"))
	clk.advance(t, time.Second)
	wantScreen(t, v, "connection lost (EOF); reconnecting…", retryLine("retrying in 2s"))
}

// TestCountdownsOfSeveralSessions: following every session, each
// session's wait has a live line of its own at the bottom; other lines
// scroll above them, and a settled one leaves the live lines.
func TestCountdownsOfSeveralSessions(t *testing.T) {
	clk, v := newFakeClock(), &vt{}
	scr := clk.terminal(v)
	a, b := scr.renderer(Pretty, false, "trip"), scr.renderer(Pretty, false, "monads")
	a.event(msp.NotifyTurnModelRetryScheduled, rateLimited(1, 3000))
	b.event(msp.NotifyTurnModelRetryScheduled, rateLimited(1, 5000))
	b.event(msp.NotifyTurnStarted, mustJSON(msp.TurnStartedParams{TurnID: "x-00000002"}))
	wantScreen(t, v, "[monads] ── turn 00000002 ──", "[trip] "+retryLine("retrying in 3s"), "[monads] "+retryLine("retrying in 5s"))
	clk.advance(t, time.Second)
	wantScreen(t, v, "[monads] ── turn 00000002 ──", "[trip] "+retryLine("retrying in 2s"), "[monads] "+retryLine("retrying in 4s"))
	a.event(agentItem(msp.NotifyItemCompleted, msp.ItemCompleted))
	wantScreen(t, v, "[monads] ── turn 00000002 ──", "[trip] "+retryLine("retried"), "[trip] agent: Hello",
		"[monads] "+retryLine("retrying in 4s"))
	clk.advance(t, time.Second)
	wantScreen(t, v, "[monads] ── turn 00000002 ──", "[trip] "+retryLine("retried"), "[trip] agent: Hello",
		"[monads] "+retryLine("retrying in 3s"))

	scr.close() // the run ends during the wait: the line stays, the cursor moves on
	if row, col := v.cursor(); row != 4 || col != 0 || clk.ticking() {
		t.Errorf("after close: cursor %d:%d, ticking %v", row, col, clk.ticking())
	}
}

// TestCountdownFitsTheTerminal: a line wider than the terminal wraps, and
// CR then returns only to its last row, so each redraw would leave a copy
// behind. While it counts down the line is cut to the width, the reason
// giving way; settled, it is printed whole.
func TestCountdownFitsTheTerminal(t *testing.T) {
	clk, v := newFakeClock(), &vt{}
	tl := newTailer(Options{SessionID: "s", Terminal: true, Width: 50, Clock: clk}, v)
	tl.scr.tickDone = func() { clk.done <- struct{}{} }
	reason := "provider stream failed: the server closed the connection before the answer ended"
	notice := mustJSON(msp.TurnRetryScheduledParams{TurnID: turn1, Attempt: 1, NextAttempt: 2, MaxAttempts: 5, RetryDelayMs: 3000, Reason: reason})
	tl.one.r.event(msp.NotifyTurnRetryScheduled, notice)
	clk.advance(t, time.Second)
	got := v.screen()
	if len(got) != 1 || len([]rune(got[0])) > 49 || !strings.HasSuffix(got[0], "… · retrying in 2s · attempt 2/5") {
		t.Fatalf("live line %q: want it within 49 columns, the time left and the attempt kept", got)
	}
	tl.one.r.event(agentItem(msp.NotifyItemStarted, msp.ItemInProgress))
	wantScreen(t, v, "⟳ "+reason+" · retried · attempt 2/5")
}
