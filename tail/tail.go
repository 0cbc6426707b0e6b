package tail

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"mspd/client"
	"mspd/schema/msp"
)

// Refusals that reconnecting cannot cure: Run ends with one of them
// (wrapped, with the detail) at once instead of retrying for ever.
var (
	// ErrUnknownCursor reports a cursor the session never had, or one
	// older than what the server keeps; a script can start over from the
	// beginning (--from-start).
	ErrUnknownCursor = errors.New("the session has no such cursor")
	// ErrSessionNotFound reports a session the server does not know.
	ErrSessionNotFound = errors.New("no such session")
	// ErrUnauthorized reports a server that refused the token (HTTP 401 or
	// 403 on the WebSocket upgrade).
	ErrUnauthorized = errors.New("the server refused the token")
)

// Options configure Run.
type Options struct {
	// URL is the server's MSP WebSocket endpoint.
	URL string
	// Token authenticates to a server that requires one.
	Token string
	// SessionID is the session to follow.
	SessionID string
	// From is a cursor to start after; with FromStart the whole log is
	// shown first; with neither, only what happens from now on.
	From      string
	FromStart bool
	// Follow keeps reading live events (reconnecting and resuming by
	// cursor when the connection drops); without it Run stops at the end
	// of the log.
	Follow bool
	// Format is Pretty, JSON or Raw.
	Format string
	// Color paints Pretty output with ANSI colours.
	Color bool
	// Count stops after this many notifications (0: no limit).
	Count int
	// Status receives progress lines (connection lost…, reconnected),
	// never data.
	Status io.Writer
}

// Run follows a session, writing what it sees to out, until the log ends
// (no Follow), Count is reached, or ctx is done — all clean ends (nil). A
// dropped connection is redialled with backoff and resumed by cursor; a
// refusal no reconnect can cure ends the run with ErrSessionNotFound,
// ErrUnknownCursor or ErrUnauthorized.
func Run(ctx context.Context, opts Options, out io.Writer) error {
	return newTailer(opts, out).runClean(ctx)
}

// errDone ends the run cleanly.
var errDone = errors.New("done")

// Reconnect backoff: 250 ms doubling to 10 s, full jitter.
const (
	reconnectBase = 250 * time.Millisecond
	reconnectMax  = 10 * time.Second
)

type tailer struct {
	opts  Options
	r     *renderer
	last  string // cursor of the last event shown (or opts.From)
	paged bool   // the log asked for (From, FromStart) has been shown
	shown int

	backoff backoff
	// sleep waits d or until ctx is done (tests make it instant).
	sleep func(ctx context.Context, d time.Duration) error
	// onSubscribe, when set, runs after each view/subscribe succeeds
	// (tests wait for it rather than for time).
	onSubscribe func()
}

func newTailer(opts Options, out io.Writer) *tailer {
	if opts.Status == nil {
		opts.Status = io.Discard
	}
	return &tailer{
		opts:    opts,
		r:       newRenderer(out, opts.Format, opts.Color),
		last:    opts.From,
		backoff: backoff{base: reconnectBase, max: reconnectMax, rand: rand.Int64N},
		sleep:   sleepCtx,
	}
}

// runClean is run with the clean ends (errDone, ctx done) as nil.
func (t *tailer) runClean(ctx context.Context) error {
	err := t.run(ctx)
	if errors.Is(err, errDone) || ctx.Err() != nil {
		return nil
	}
	return err
}

func (t *tailer) run(ctx context.Context) error {
	c, err := t.dial(ctx)
	if err != nil {
		return cmp.Or(t.refusal(err), err)
	}
	for {
		err := t.stream(ctx, c)
		c.Close()
		if errors.Is(err, errDone) || ctx.Err() != nil {
			return err
		}
		if r := t.refusal(err); r != nil {
			return r
		}
		t.status("connection lost (%v); reconnecting…", err)
		if c, err = t.reconnect(ctx); err != nil {
			return err
		}
		t.status("reconnected")
	}
}

// reconnect redials, backing off, until it connects, ctx is done or the
// server refuses in a way no retry cures.
func (t *tailer) reconnect(ctx context.Context) (*client.Client, error) {
	wait := t.backoff.next()
	for {
		if err := t.sleep(ctx, wait); err != nil {
			return nil, err
		}
		c, err := t.dial(ctx)
		switch {
		case err == nil:
			return c, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		if r := t.refusal(err); r != nil {
			return nil, r
		}
		wait = t.backoff.next()
		t.status("reconnect failed (%v); retrying in %s", err, wait.Round(time.Millisecond))
	}
}

// status writes a progress line. A pretty answer streaming on the
// current line is ended first: stdout and stderr are often one terminal,
// and a status line must not land in the middle of an answer.
func (t *tailer) status(format string, args ...any) {
	t.r.interrupt()
	fmt.Fprintf(t.opts.Status, format+"\n", args...)
}

func (t *tailer) dial(ctx context.Context) (*client.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return client.Dial(dctx, t.opts.URL, client.Options{ClientName: "mspd_tail", Token: t.opts.Token})
}

// stream runs one connection: the log asked for (once, resuming after
// the last event shown if a drop interrupted it), then live events.
func (t *tailer) stream(ctx context.Context, c *client.Client) error {
	if !t.paged && (t.opts.FromStart || t.opts.From != "") {
		var from *string
		if t.last != "" {
			after := t.last
			from = &after
		}
		if err := t.page(ctx, c, from, ""); err != nil {
			return err
		}
	}
	t.paged = true
	if !t.opts.Follow {
		return errDone
	}
	return t.follow(ctx, c)
}

// follow subscribes after the last event shown and renders live events,
// filling any view/gap from the log.
func (t *tailer) follow(ctx context.Context, c *client.Client) error {
	p := msp.ViewSubscribeParams{SessionID: t.opts.SessionID}
	if t.last != "" {
		p.After = &t.last
	}
	var res msp.ViewCursorResult
	if err := c.Call(ctx, msp.MethodViewSubscribe, p, &res); err != nil {
		return err
	}
	t.backoff.reset() // a working connection: the next drop starts afresh
	if t.onSubscribe != nil {
		t.onSubscribe()
	}
	if t.last == "" {
		// Live from the head: a reconnect must resume from here, not from
		// its own "now", or what happened while it was away is lost.
		t.last = res.ViewCursor
	}
	for {
		n, err := c.Next(ctx)
		if err != nil {
			return err
		}
		if n.Method == msp.NotifyViewGap {
			var g msp.ViewGapParams
			json.Unmarshal(n.Params, &g)
			if g.SessionID != t.opts.SessionID {
				continue
			}
			t.r.event(n.Method, n.Params)
			if err := t.page(ctx, c, &g.After, g.Next); err != nil {
				return err
			}
			continue
		}
		var h struct {
			SessionID string `json:"sessionId"`
		}
		if json.Unmarshal(n.Params, &h); h.SessionID != t.opts.SessionID {
			continue // broadcasts (session/started) and other sessions
		}
		if err := t.show(n.Method, n.Params, n.Cursor()); err != nil {
			return err
		}
	}
}

// page renders the log after from (nil: from the start) up to, not
// including, the event at until (empty: to the end).
func (t *tailer) page(ctx context.Context, c *client.Client, from *string, until string) error {
	for {
		var res msp.ViewPageResult
		err := c.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: t.opts.SessionID, Cursor: from, Limit: 200}, &res)
		if err != nil {
			return err
		}
		for _, e := range res.Events {
			cur := client.Notification{Params: e.Params}.Cursor()
			if cur == until {
				return nil
			}
			if err := t.show(e.Method, e.Params, cur); err != nil {
				return err
			}
		}
		if res.NextCursor == nil {
			return nil
		}
		from = res.NextCursor
	}
}

func (t *tailer) show(method string, params json.RawMessage, cursor string) error {
	t.r.event(method, params)
	if cursor != "" {
		t.last = cursor
	}
	t.shown++
	if t.opts.Count > 0 && t.shown >= t.opts.Count {
		return errDone
	}
	return nil
}

// kindViewTruncated is MSP's refusal of a cursor older than what the
// server keeps (mspd keeps its whole log; other servers may not).
const kindViewTruncated = "viewTruncated"

// refusal returns what the run ends with when err is a refusal that
// reconnecting cannot cure — a wrong token, an unknown session or cursor,
// a request the server will never accept — or nil when a retry may help
// (a dropped connection, an overloaded or restarting server).
func (t *tailer) refusal(err error) error {
	var re *client.RefusedError
	if errors.As(err, &re) && (re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden) {
		return fmt.Errorf("%w (HTTP %d from %s): pass --token or set MSPD_AUTH_TOKEN", ErrUnauthorized, re.StatusCode, t.opts.URL)
	}
	var me *msp.Error
	if !errors.As(err, &me) {
		return nil
	}
	switch me.Data.Kind {
	case msp.KindSessionNotFound:
		return fmt.Errorf("%w %s", ErrSessionNotFound, t.opts.SessionID)
	case msp.KindNotFound:
		if me.Data.Reason == msp.ReasonMissingAnchor {
			return fmt.Errorf("%w: %s (start over with --from-start)", ErrUnknownCursor, me.Message)
		}
	case kindViewTruncated:
		return fmt.Errorf("%w: %s (start over with --from-start)", ErrUnknownCursor, me.Message)
	case msp.KindInvalidParams, msp.KindInvalidRequest, msp.KindMethodNotFound:
		return err
	}
	return nil
}

// backoff is capped exponential backoff with full jitter: the n-th wait
// is uniform in [0, min(max, base·2ⁿ)], so tails that lost one server
// do not all come back at the same instant.
type backoff struct {
	base, max time.Duration
	n         int
	rand      func(n int64) int64 // uniform in [0, n)
}

func (b *backoff) next() time.Duration {
	ceil := min(b.base<<b.n, b.max)
	if ceil < b.max {
		b.n++
	}
	return time.Duration(b.rand(int64(ceil) + 1))
}

func (b *backoff) reset() { b.n = 0 }

// sleepCtx waits d, or until ctx is done (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
