package tail

// Tests of how a run ends and how it reconnects (issue 7): refusals no
// reconnect can cure end it at once; drops are redialled with capped,
// jittered backoff; status lines never split an answer line.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"mspd/client"
	"mspd/schema/msp"
	"mspd/server"
	"mspd/turn"
)

// unknownSession is a well-formed session id no server has.
const unknownSession = "0198f0aa-0000-7000-8000-0000000000ff"

// TestUnknownSessionEndsTheRun: following a session the server does not
// know looped for ever ("connection lost (msp sessionNotFound …);
// reconnecting…" four times a second). It must end at once with
// ErrSessionNotFound (exit status 3), without a reconnect.
func TestUnknownSessionEndsTheRun(t *testing.T) {
	_, hs := serve(t)
	for name, opts := range map[string]Options{
		"live":       {Follow: true},
		"from start": {Follow: true, FromStart: true},
		"no follow":  {FromStart: true},
	} {
		t.Run(name, func(t *testing.T) {
			opts.URL, opts.SessionID = wsURL(hs), unknownSession
			status := &syncBuf{}
			opts.Status = status
			// The deadline only bounds the broken behaviour, which loops.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := Run(ctx, opts, io.Discard)
			if !errors.Is(err, ErrSessionNotFound) {
				t.Fatalf("Run = %v, want ErrSessionNotFound", err)
			}
			if !strings.Contains(err.Error(), unknownSession) || status.String() != "" {
				t.Errorf("error %q (status %q): want one line naming the session, no reconnect", err, status.String())
			}
		})
	}
}

// TestUnauthorizedEndsTheRun: a wrong or missing token (HTTP 401 on the
// upgrade) ends the run with ErrUnauthorized (exit status 4), whether the
// first dial or a redial meets it.
func TestUnauthorizedEndsTheRun(t *testing.T) {
	const token = "right-token"
	var refuse atomic.Bool // a redial meets a server whose token changed
	m, hs := serveWith(t, instantRunner{}, server.Config{AuthToken: token}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if refuse.Load() {
				http.Error(w, "a valid token is required", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	sid := newSession(t, m)
	for _, tok := range []string{"wrong-token", ""} {
		err := Run(context.Background(), Options{URL: wsURL(hs), Token: tok, SessionID: sid, Follow: true}, io.Discard)
		if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "401") {
			t.Errorf("token %q: Run = %v, want ErrUnauthorized (HTTP 401)", tok, err)
		}
	}

	px := newProxy(t, hs.Listener.Addr().String())
	status := &syncBuf{}
	h := startTail(t, Options{URL: px.url(), Token: token, SessionID: sid, Follow: true, Status: status}, io.Discard)
	h.waitSubscribed(t)
	refuse.Store(true)
	px.cut()
	receive(t, h.slept, "the backoff")
	if err := h.wait(t); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("a redial refused with 401: Run = %v, want ErrUnauthorized", err)
	}
}

// TestRefusals: which failures end the run and which a reconnect may cure.
func TestRefusals(t *testing.T) {
	tl := newTailer(Options{SessionID: "s", URL: "ws://x/msp"}, io.Discard)
	mspErr := func(kind, reason string) error {
		return &msp.Error{Code: -32000, Message: kind, Data: msp.ErrorData{Kind: kind, Reason: reason}}
	}
	for _, c := range []struct {
		err  error
		want error // nil: reconnect
	}{
		{mspErr(msp.KindSessionNotFound, ""), ErrSessionNotFound},
		{mspErr(msp.KindNotFound, msp.ReasonMissingAnchor), ErrUnknownCursor},
		{mspErr("viewTruncated", ""), ErrUnknownCursor},
		{&client.RefusedError{StatusCode: http.StatusUnauthorized}, ErrUnauthorized},
		{&client.RefusedError{StatusCode: http.StatusForbidden}, ErrUnauthorized},
		{mspErr(msp.KindInvalidParams, ""), mspErr(msp.KindInvalidParams, "")},
		{mspErr(msp.KindOverloaded, ""), nil},
		{mspErr(msp.KindInternal, ""), nil},
		{mspErr(msp.KindNotFound, ""), nil},
		{&client.RefusedError{StatusCode: http.StatusBadGateway}, nil},
		{io.EOF, nil},
	} {
		got := tl.refusal(c.err)
		switch {
		case c.want == nil && got != nil:
			t.Errorf("%v: ends the run (%v); a reconnect may cure it", c.err, got)
		case c.want != nil && got == nil:
			t.Errorf("%v: reconnects for ever; want the run to end", c.err)
		case c.want != nil && !errors.Is(got, c.want) && got.Error() != c.want.Error():
			t.Errorf("%v: ends with %v, want %v", c.err, got, c.want)
		}
	}
}

// TestBackoffIsCappedAndJittered: waits double from 250 ms to 10 s, each
// drawn uniformly up to its ceiling (full jitter).
func TestBackoffIsCappedAndJittered(t *testing.T) {
	ceilings := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
		4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	highest := backoff{base: reconnectBase, max: reconnectMax, rand: func(n int64) int64 { return n - 1 }}
	for i, want := range ceilings {
		if got := highest.next(); got != want {
			t.Errorf("wait %d: ceiling %v, want %v", i+1, got, want)
		}
	}
	b := newTailer(Options{}, io.Discard).backoff
	var sum time.Duration
	const draws = 2000
	for range draws {
		b.reset()
		d := b.next()
		if d < 0 || d > reconnectBase {
			t.Fatalf("first wait %v outside [0, %v]", d, reconnectBase)
		}
		sum += d
	}
	if mean := sum / draws; mean < reconnectBase/4 || mean > reconnectBase*3/4 {
		t.Errorf("mean first wait %v: not uniform over [0, %v]", mean, reconnectBase)
	}
}

// TestReconnectBacksOff: while the server stays away, redials back off to
// the cap instead of hammering it four times a second; once a connection
// works again the next drop starts from the shortest wait; every
// "connection lost" line is followed by a "reconnected" one.
func TestReconnectBacksOff(t *testing.T) {
	m, hs := serve(t)
	sid := newSession(t, m)
	px := newProxy(t, hs.Listener.Addr().String())
	status := &syncBuf{}
	h := startTail(t, Options{URL: px.url(), SessionID: sid, Follow: true, Status: status}, io.Discard,
		func(tl *tailer) { tl.backoff.rand = func(n int64) int64 { return n - 1 } }) // each wait its ceiling
	h.waitSubscribed(t)

	px.refusing.Store(true) // the server is away: every redial fails
	px.cut()
	var waits []string
	for i := range 8 {
		if i == 7 {
			status.waitCount(t, "reconnect failed", 7)
			px.refusing.Store(false) // back for the redial after the 8th wait
		}
		waits = append(waits, receive(t, h.slept, "a backoff").String())
	}
	if got, want := strings.Join(waits, " "), "250ms 500ms 1s 2s 4s 8s 10s 10s"; got != want {
		t.Errorf("waits %s, want %s", got, want)
	}
	h.waitSubscribed(t)

	px.cut()
	if got := receive(t, h.slept, "the backoff after the next drop"); got != reconnectBase {
		t.Errorf("first wait after a working connection: %v, want %v", got, reconnectBase)
	}
	h.waitSubscribed(t)
	lines := strings.Split(strings.TrimSpace(status.String()), "\n")
	lost, back := 0, 0
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "connection lost ("):
			lost++
			if lost != back+1 {
				t.Errorf("a second connection lost before a reconnected:\n%s", status.String())
			}
		case l == "reconnected":
			back++
		case !strings.HasPrefix(l, "reconnect failed ("):
			t.Errorf("unexpected status line %q", l)
		}
	}
	if lost != 2 || back != 2 {
		t.Errorf("%d connection lost and %d reconnected lines, want 2 and 2:\n%s", lost, back, status.String())
	}
}

// gatedRunner streams "Hello " and holds the turn until release is closed;
// then it streams "world" and completes the answer "Hello world".
type gatedRunner struct{ release chan struct{} }

func (g gatedRunner) Run(ctx context.Context, spec turn.Spec, sink turn.Sink) turn.Outcome {
	turnID, text := spec.TurnID, ""
	it := msp.Item{ItemID: uuid.Must(uuid.NewV7()).String(), Kind: msp.ItemAgentMessage, Revision: 1,
		Status: msp.ItemInProgress, TurnID: &turnID, Text: &text}
	if err := sink.Emit(ctx, msp.NotifyItemStarted, &msp.ItemParams{Item: it}); err != nil {
		return turn.Outcome{Completed: msp.TurnCompletedParams{Terminal: msp.TerminalFailed}}
	}
	sink.Delta(it.ItemID, "Hello ")
	select {
	case <-g.release:
	case <-ctx.Done():
		return turn.Outcome{Completed: msp.TurnCompletedParams{Terminal: msp.TerminalCancelled}}
	}
	sink.Delta(it.ItemID, "world")
	text = "Hello world"
	it.Revision, it.Status, it.Text = 2, msp.ItemCompleted, &text
	sink.Emit(ctx, msp.NotifyItemCompleted, &msp.ItemParams{Item: it})
	return turn.Outcome{Completed: msp.TurnCompletedParams{Terminal: msp.TerminalCompleted}}
}

// TestStatusLinesStartOnTheirOwnLine: stdout and stderr are often one
// terminal. A drop in the middle of a streamed answer printed "agent:
// Hello connection lost (…); reconnecting…" on one line; the status line
// must start a line of its own, and the answer must still come out whole.
func TestStatusLinesStartOnTheirOwnLine(t *testing.T) {
	release := make(chan struct{})
	m, hs := serveWith(t, gatedRunner{release}, server.Config{}, nil)
	sid := newSession(t, m)
	px := newProxy(t, hs.Listener.Addr().String())
	terminal := &syncBuf{} // stdout and stderr on one terminal
	h := startTail(t, Options{URL: px.url(), SessionID: sid, Follow: true, Format: Pretty, Status: terminal}, terminal)
	h.waitSubscribed(t)
	runTurn(t, m, sid, "hi")
	terminal.waitFor(t, "agent: Hello ")
	px.cut()
	terminal.waitFor(t, "reconnecting…")
	receive(t, h.slept, "the backoff")
	h.waitSubscribed(t)
	close(release)
	terminal.waitFor(t, "✓ completed")

	out := terminal.String()
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, "connection lost"); i > 0 {
			t.Errorf("a status line starts mid-line: %q", l)
		}
	}
	if !strings.Contains(out, "reconnected\n") {
		t.Errorf("no reconnected line:\n%s", out)
	}
	if !strings.Contains(out, "\nagent: Hello world\n") || strings.Count(out, "world") != 1 {
		t.Errorf("the answer is not shown whole on a line of its own, once:\n%s", out)
	}
}

// TestInterruptedAnswerReadsWhole: after a status line cut an answer's
// line, the answer comes out whole on a line of its own, whether more
// deltas follow or only its completion.
func TestInterruptedAnswerReadsWhole(t *testing.T) {
	text := "Hello world"
	for name, rest := range map[string][]string{"more deltas": {"world"}, "completion only": nil} {
		var out strings.Builder
		r := newRenderer(&out, Pretty, false)
		r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "a", Delta: "Hello "}))
		r.s.interrupt()
		out.WriteString("connection lost\n")
		r.s.interrupt() // a second status line
		out.WriteString("reconnected\n")
		for _, d := range rest {
			r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "a", Delta: d}))
		}
		r.event(msp.NotifyItemCompleted, mustJSON(msp.ItemParams{Item: msp.Item{ItemID: "a", Kind: msp.ItemAgentMessage, Revision: 2, Status: msp.ItemCompleted, Text: &text}}))
		if want := "agent: Hello \nconnection lost\nreconnected\nagent: Hello world\n"; out.String() != want {
			t.Errorf("%s: %q, want %q", name, out.String(), want)
		}
	}
}

// TestCancelWhileReconnectingIsClean: Run documents ctx ending as a clean
// end (nil). While reconnecting, a failed dial leaves c nil (tail.go: `if
// c, err = t.dial(ctx); err == nil`), and the deferred `c.Close()` then
// dereferences it: Ctrl-C on `mspd tail --follow` while the server is down
// panics with a nil pointer dereference instead of exiting.
func TestCancelWhileReconnectingIsClean(t *testing.T) {
	m, hs := serve(t)
	sid := newSession(t, m)
	px := newProxy(t, hs.Listener.Addr().String())
	status := &syncBuf{}
	h := startTail(t, Options{URL: px.url(), SessionID: sid, Follow: true, Status: status}, &syncBuf{})
	h.waitSubscribed(t)
	px.ln.Close() // the server is down: redials fail
	px.cut()
	receive(t, h.slept, "the first backoff")
	receive(t, h.slept, "the backoff after a failed redial")
	status.waitFor(t, "reconnect failed")
	h.cancel() // Ctrl-C
	if err := h.wait(t); err != nil {
		t.Fatalf("Run did not end cleanly when its context ended while reconnecting: %v", err)
	}
}

// TestFollowReconnectMissesNothing: `mspd tail SESSION` (no --from, so
// live only) reconnects and resumes "by cursor" — but only once it has
// shown an event: with t.last empty the re-subscription is live only
// again, and the view/subscribe result (the head it attached after) is
// ignored. Everything the session did while the connection was down is
// silently skipped: here a whole turn.
func TestFollowReconnectMissesNothing(t *testing.T) {
	m, hs := serve(t)
	sid := newSession(t, m)
	px := newProxy(t, hs.Listener.Addr().String())
	out, status := &syncBuf{}, &syncBuf{}
	h := startTail(t, Options{URL: px.url(), SessionID: sid, Follow: true, Format: JSON, Status: status}, out)
	h.waitSubscribed(t) // live only

	px.cut() // the connection drops …
	status.waitFor(t, "connection lost")
	missed := runTurn(t, m, sid, "while you were away") // … and the session moves on
	receive(t, h.slept, "the backoff")                  // then tail redials

	h.waitSubscribed(t)
	later := runTurn(t, m, sid, "after the reconnect")
	out.waitFor(t, later)
	if !strings.Contains(out.String(), missed) {
		t.Fatalf("tail never showed turn %s, which ran while it was reconnecting:\n%s", missed, out.String())
	}
}
