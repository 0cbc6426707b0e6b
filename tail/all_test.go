package tail

// Tests of following without naming a session (issue 10): the most
// recent one, or every one with All.

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"mspd/schema/msp"
	"mspd/server"
	"mspd/session"
	"mspd/turn"
)

// heldRunner holds each turn whose message starts with "hold" until
// release is closed; every other turn ends at once.
type heldRunner struct{ release chan struct{} }

func (h heldRunner) Run(ctx context.Context, spec turn.Spec, _ turn.Sink) turn.Outcome {
	if last := spec.History[len(spec.History)-1]; strings.HasPrefix(last.Text, "hold") {
		select {
		case <-h.release:
		case <-ctx.Done():
			return turn.Outcome{Completed: msp.TurnCompletedParams{Terminal: msp.TerminalCancelled}}
		}
	}
	return turn.Outcome{Completed: msp.TurnCompletedParams{Terminal: msp.TerminalCompleted}}
}

func deleteSession(t *testing.T, m *session.Manager, sid string) {
	t.Helper()
	_, erase, err := m.DeleteSession(context.Background(), nopSub{}, mustJSON(msp.SessionDeleteParams{CommandID: cmd(), SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	erase(context.Background())
}

// TestTailWithoutSessionFollowsTheLatest: with no session named, tail
// follows the most recently active one and says which on stderr; with no
// session at all it ends at once with ErrNoSession.
func TestTailWithoutSessionFollowsTheLatest(t *testing.T) {
	m, hs := serve(t)
	err := Run(context.Background(), Options{URL: wsURL(hs), Follow: true}, io.Discard)
	if !errors.Is(err, ErrNoSession) {
		t.Fatalf("no session: Run = %v, want ErrNoSession", err)
	}

	older, newer := newSession(t, m), newSession(t, m)
	runTurn(t, m, newer, "explain monads")
	runTurn(t, m, older, "plan a Paris trip") // now the most recently active
	if err := m.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, status := &syncBuf{}, &syncBuf{}
	if err := Run(context.Background(), Options{URL: wsURL(hs), FromStart: true, Status: status}, out); err != nil {
		t.Fatal(err)
	}
	if want := "following " + older + " (“plan a Paris trip”)\n"; status.String() != want {
		t.Errorf("status %q, want %q", status.String(), want)
	}
	if !strings.Contains(out.String(), "you: plan a Paris trip") || strings.Contains(out.String(), "monads") {
		t.Errorf("showed another session than the latest:\n%s", out.String())
	}
}

// TestAllFollowsEverySession: --all shows each session's events on lines
// prefixed by its name (or short id): a session idle when it began, from
// the start of the turn that woke it (the user's message included, though
// the news came after it); a session started later, from its start; and
// it stops following a session deleted.
func TestAllFollowsEverySession(t *testing.T) {
	m, hs := serve(t)
	trip := newSession(t, m)
	runTurn(t, m, trip, "plan a Paris trip")
	if err := m.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, status := &syncBuf{}, &syncBuf{}
	h := startTail(t, Options{URL: wsURL(hs), All: true, Follow: true, Status: status}, out)
	h.waitSubscribed(t)
	status.waitFor(t, "following every session (0 running)\n")

	runTurn(t, m, trip, "and the museums?")
	out.waitFor(t, "[plan a Paris trip] you: and the museums?\n")
	status.waitFor(t, "following "+trip+" (“plan a Paris trip”)\n")

	later := newSession(t, m) // started after the run began
	status.waitFor(t, "following "+later+"\n")
	runTurn(t, m, later, "explain monads")
	out.waitFor(t, "["+short(later)+"] you: explain monads\n") // no name yet: it comes from this message
	out.waitFor(t, "[explain monads] ✓ completed")

	deleteSession(t, m, trip)
	status.waitFor(t, "stopped following "+trip+" (“plan a Paris trip”): deleted\n")
	runTurn(t, m, later, "and functors?")
	out.waitFor(t, "[explain monads] you: and functors?\n")

	got := out.String()
	if strings.Count(got, "you: and the museums?") != 1 || strings.Contains(got, "you: plan a Paris trip") {
		t.Errorf("a turn shown twice, or one from before the run:\n%s", got)
	}
}

// TestAllResumesAfterADrop: after a reconnect, a session followed resumes
// after the last event shown (nothing it did meanwhile is lost), and a
// session that started a turn while the run was away is shown from that
// turn's start.
func TestAllResumesAfterADrop(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	m, hs := serveWith(t, heldRunner{release}, server.Config{}, nil)
	trip := newSession(t, m)
	px := newProxy(t, hs.Listener.Addr().String())
	out, status := &syncBuf{}, &syncBuf{}
	h := startTail(t, Options{URL: px.url(), All: true, Follow: true, Format: Pretty, Status: status}, out)
	h.waitSubscribed(t)
	runTurn(t, m, trip, "plan a Paris trip")
	out.waitFor(t, "you: plan a Paris trip\n")

	px.cut()
	status.waitFor(t, "connection lost")
	runTurn(t, m, trip, "while you were away")
	away := newSession(t, m)
	runTurn(t, m, away, "hold on, I am running")
	receive(t, h.slept, "the backoff")
	h.waitSubscribed(t)

	out.waitFor(t, "you: while you were away\n")
	out.waitFor(t, "[hold on, I am running] you: hold on, I am running\n")
	status.waitFor(t, "following "+away)
}
