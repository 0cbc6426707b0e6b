package daemon

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"mspd/client"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// startTest runs a daemon on a free loopback port over dir.
func startTest(t *testing.T, dir string) *Daemon {
	t.Helper()
	d, err := New(context.Background(), Config{DataDir: dir, Provider: "scripted", Listen: "127.0.0.1:0",
		RetryBudget: Budget{Tokens: -1}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(context.Background()) })
	return d
}

// follow reads notifications until one satisfies done, remembering the
// last cursor; it returns what it read.
func follow(ctx context.Context, t *testing.T, c *client.Client, cursor *string, done func(client.Notification) bool) []client.Notification {
	t.Helper()
	var seen []client.Notification
	for {
		n, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("%v after %d notifications", err, len(seen))
		}
		seen = append(seen, n)
		if cur := n.Cursor(); cur != "" {
			*cursor = cur
		}
		if done(n) {
			return seen
		}
	}
}

func is(method string) func(client.Notification) bool {
	return func(n client.Notification) bool { return n.Method == method }
}

// TestGracefulStopDuringBackoff: a shutdown whose deadline has passed
// while a turn waits out a provider's Retry-After stops it there; the
// connected client is closed once it has every event, and the next
// process, resumed from the client's cursor, waits out the rest of the
// delay and runs attempt 2, counted.
func TestGracefulStopDuringBackoff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	d1 := startTest(t, dir)
	c, err := client.Dial(ctx, d1.URL(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sid, cursor := start.Session.SessionID, start.ViewCursor
	const wait = 3000
	ack, err := c.StartTurn(ctx, sid, scripted.Script(scripted.Step{Status: 429, RetryAfterMs: new(wait)}, scripted.Step{Text: "finally"}))
	if err != nil {
		t.Fatal(err)
	}
	follow(ctx, t, c, &cursor, is(msp.NotifyTurnModelRetryScheduled))
	stopped, stop := context.WithCancel(context.Background())
	stop() // no grace: the turn stops in its backoff
	if err := d1.Close(stopped); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for {
		n, err := c.Next(ctx)
		if err != nil {
			break // closed as going away
		}
		if n.Method == msp.NotifyTurnCompleted {
			t.Fatalf("the shutdown ended the turn: %s", n.Params)
		}
		if cur := n.Cursor(); cur != "" {
			cursor = cur
		}
	}

	d2 := startTest(t, dir)
	c2, err := client.Dial(ctx, d2.URL(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Resume(ctx, sid, &cursor); err != nil {
		t.Fatal(err)
	}
	seen := follow(ctx, t, c2, &cursor, is(msp.NotifyTurnCompleted))
	var notices []msp.TurnRetryScheduledParams
	var done msp.TurnCompletedParams
	for _, n := range seen {
		switch n.Method {
		case msp.NotifyTurnRetryScheduled:
			var p msp.TurnRetryScheduledParams
			n.Decode(&p)
			notices = append(notices, p)
		case msp.NotifyTurnCompleted:
			n.Decode(&done)
		case msp.NotifyViewGap:
			t.Errorf("a gap after a graceful stop: %s", n.Params)
		}
	}
	if len(notices) != 1 || notices[0].NextAttempt != 2 || notices[0].RetryDelayMs <= 0 || notices[0].RetryDelayMs > wait {
		t.Errorf("notices after the restart: %+v", notices)
	}
	if done.TurnID != ack.TurnID || done.Terminal != msp.TerminalCompleted || done.Attempts == nil || done.Attempts.Count != 2 {
		t.Errorf("terminal %+v", done)
	}
}
