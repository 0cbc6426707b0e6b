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
	// ErrNoSession reports a server with no session to follow, when none
	// was named.
	ErrNoSession = errors.New("no session to follow: the server has none")
)

// Options configure Run.
type Options struct {
	// URL is the server's MSP WebSocket endpoint.
	URL string
	// Token authenticates to a server that requires one.
	Token string
	// SessionID is the session to follow; empty, the most recently active
	// one (the first of session/list), named on Status.
	SessionID string
	// All follows every session of the principal, live: those running
	// when the run starts, and each one that starts, is renamed or starts a
	// turn later on, from that turn's start. Lines are prefixed with the
	// session's name (or short id), one per event. Not with From,
	// FromStart or Raw; always Follow.
	All bool
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
	// Status receives progress lines (connection lost…, reconnected,
	// following…), never data.
	Status io.Writer
	// Terminal says the output is a terminal: Pretty retry notices count
	// down in place.
	Terminal bool
	// Width is the terminal's width in columns (0: 80); a line counting
	// down is cut to fit, since a wrapped one cannot be redrawn in place.
	Width int
	// Clock drives the countdowns (nil: the real clock).
	Clock Clock
	// Keys, when set, are a person's key presses (a terminal's input, one
	// byte a key): with Pretty output they decide the approvals the run
	// shows, the oldest first — a approves the call once, s approves the
	// tool for the rest of the session, d denies the call. Other keys do
	// nothing.
	Keys io.Reader
}

// Run follows a session (or every one, with All), writing what it sees to
// out, until the log ends (no Follow), Count is reached, or ctx is done —
// all clean ends (nil). A dropped connection is redialled with backoff and
// resumed by cursor; a refusal no reconnect can cure ends the run with
// ErrSessionNotFound, ErrUnknownCursor, ErrNoSession or ErrUnauthorized.
func Run(ctx context.Context, opts Options, out io.Writer) error {
	if opts.All && (opts.From != "" || opts.FromStart || opts.Format == Raw) {
		return errors.New("following every session shows live events only, as pretty text or JSON")
	}
	t := newTailer(opts, out)
	defer t.scr.close()
	return t.runClean(ctx)
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
	scr   *screen
	one   *followed // the session followed, without All
	paged bool      // the log asked for (From, FromStart) has been shown
	shown int
	// stream runs one connection: one session's, or every session's.
	stream func(ctx context.Context, c *client.Client) error

	backoff backoff
	// sleep waits d or until ctx is done (tests make it instant).
	sleep func(ctx context.Context, d time.Duration) error
	// onSubscribe, when set, runs once a connection is following: after
	// each view/subscribe succeeds, or with All once the sessions running
	// are followed (tests wait for it rather than for time).
	onSubscribe func()
	// dec decides approvals by key press (Options.Keys); nil without.
	dec *decider
}

// followed is a session a run shows.
type followed struct {
	id   string
	name string
	r    *renderer
	last string // cursor of the last event shown
}

func newTailer(opts Options, out io.Writer) *tailer {
	if opts.Status == nil {
		opts.Status = io.Discard
	}
	term := opts.Terminal && opts.Format != JSON && opts.Format != Raw
	t := &tailer{
		opts:    opts,
		scr:     newScreen(out, term, opts.Clock),
		backoff: backoff{base: reconnectBase, max: reconnectMax, rand: rand.Int64N},
		sleep:   sleepCtx,
	}
	if opts.Width > 0 {
		t.scr.width = opts.Width
	}
	if opts.Keys != nil && opts.Format == Pretty {
		t.dec = newDecider(t)
	}
	t.stream = t.streamOne
	if opts.All {
		t.stream = newAll(t).stream
	} else if opts.SessionID != "" {
		t.one = t.follow(opts.SessionID, "")
		t.one.last = opts.From
	}
	return t
}

// follow returns a new session to show.
func (t *tailer) follow(id, name string) *followed {
	f := &followed{id: id, name: name}
	label := ""
	if t.opts.All {
		label = f.label()
	}
	f.r = t.scr.renderer(t.opts.Format, t.opts.Color, label)
	return f
}

// label is what names the session on its lines: its name, cut short, or
// the end of its id.
func (f *followed) label() string {
	if f.name == "" {
		return short(f.id)
	}
	return clip(oneLine(f.name), 24)
}

// rename takes a session's new name for its lines.
func (f *followed) rename(name string) {
	if name == "" || name == f.name {
		return
	}
	f.name = name
	if f.r.label != "" {
		f.r.s.mu.Lock()
		f.r.label = f.label()
		f.r.s.mu.Unlock()
	}
}

// describe names a session in a status line: 019…(“Paris trip”).
func (f *followed) describe() string {
	if f.name == "" {
		return f.id
	}
	return f.id + " (“" + oneLine(f.name) + "”)"
}

// runClean is run with the clean ends (errDone, ctx done) as nil.
func (t *tailer) runClean(ctx context.Context) error {
	if t.dec != nil {
		kctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go t.dec.readKeys(kctx, t.opts.Keys)
	}
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
		t.setConn(c)
		err := t.stream(ctx, c)
		t.setConn(nil)
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

// status writes a progress line. The current line is cleared first — a
// pretty answer streaming on it ends, countdowns are taken away and drawn
// again after: stdout and stderr are often one terminal, and a status line
// must not land in the middle of an answer.
func (t *tailer) status(format string, args ...any) {
	t.scr.mu.Lock()
	defer t.scr.mu.Unlock()
	t.scr.interrupt()
	fmt.Fprintf(t.opts.Status, format+"\n", args...)
	t.scr.resume()
}

func (t *tailer) dial(ctx context.Context) (*client.Client, error) {
	opts := client.Options{ClientName: "mspd_tail"}
	if t.opts.All {
		opts.Capabilities = []string{capabilitySessionListStream}
	}
	return dial(ctx, t.opts.URL, t.opts.Token, opts)
}

// capabilitySessionListStream asks the server for news of the session
// list: session/started, session/listChanged, session/deleteCompleted.
const capabilitySessionListStream = "sessionListStream"

// dial connects with a token, giving up after 10 s.
func dial(ctx context.Context, url, token string, opts client.Options) (*client.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	opts.Token = token
	return client.Dial(dctx, url, opts)
}

// pickLatest follows the most recently active session, saying which.
func (t *tailer) pickLatest(ctx context.Context, c *client.Client) error {
	var res msp.SessionListResult
	if err := c.Call(ctx, msp.MethodSessionList, msp.SessionListParams{Limit: new(1)}, &res); err != nil {
		return err
	}
	if len(res.Sessions) == 0 {
		return ErrNoSession
	}
	s := res.Sessions[0]
	t.opts.SessionID = s.SessionID
	t.one = t.follow(s.SessionID, s.Name)
	t.one.last = t.opts.From
	t.status("following %s", t.one.describe())
	return nil
}

// streamOne runs one connection of a single session (the latest, when
// none was named): the log asked for (once, resuming after the last event
// shown if a drop interrupted it), then live events.
func (t *tailer) streamOne(ctx context.Context, c *client.Client) error {
	if t.one == nil {
		if err := t.pickLatest(ctx, c); err != nil {
			return err
		}
	}
	f := t.one
	if !t.paged && (t.opts.FromStart || t.opts.From != "") {
		var from *string
		if f.last != "" {
			after := f.last
			from = &after
		}
		if err := t.page(ctx, c, f, from, ""); err != nil {
			return err
		}
	}
	t.paged = true
	if !t.opts.Follow {
		return errDone
	}
	if err := t.subscribe(ctx, c, f); err != nil {
		return err
	}
	t.connected()
	for {
		n, err := c.Next(ctx)
		if err != nil {
			return err
		}
		if n.IsRequest() {
			var shown *followed
			if sessionOf(n) == f.id {
				shown = f
			}
			if err := t.request(ctx, c, shown, n); err != nil {
				return err
			}
			continue
		}
		if sid := sessionOf(n); sid != f.id {
			continue // broadcasts (session/started) and other sessions
		}
		if err := t.route(ctx, c, f, n); err != nil {
			return err
		}
	}
}

// setConn tells the decider, if any, which connection decisions go on.
func (t *tailer) setConn(c *client.Client) {
	if t.dec != nil {
		t.dec.connected(c)
	}
}

// connected notes a connection that follows: the next drop starts its
// backoff afresh.
func (t *tailer) connected() {
	t.backoff.reset()
	if t.onSubscribe != nil {
		t.onSubscribe()
	}
}

// subscribe attaches the connection to f after the last event shown, or
// live from the head when none was.
func (t *tailer) subscribe(ctx context.Context, c *client.Client, f *followed) error {
	p := msp.ViewSubscribeParams{SessionID: f.id}
	if f.last != "" {
		p.After = &f.last
	}
	var res msp.ViewCursorResult
	if err := c.Call(ctx, msp.MethodViewSubscribe, p, &res); err != nil {
		return err
	}
	if f.last == "" {
		// Live from the head: a reconnect must resume from here, not from
		// its own "now", or what happened while it was away is lost.
		f.last = res.ViewCursor
	}
	return nil
}

// route shows one of f's notifications, filling a view/gap from the log.
func (t *tailer) route(ctx context.Context, c *client.Client, f *followed, n client.Notification) error {
	if n.Method != msp.NotifyViewGap {
		return t.show(f, n.Method, n.Params, n.Cursor(), n.EmittedAtMs)
	}
	var g msp.ViewGapParams
	json.Unmarshal(n.Params, &g)
	f.r.event(n.Method, n.Params)
	return t.page(ctx, c, f, &g.After, g.Next)
}

// sessionOf returns params.sessionId ("" for a notification without one).
func sessionOf(n client.Notification) string {
	var h struct {
		SessionID string `json:"sessionId"`
	}
	json.Unmarshal(n.Params, &h)
	return h.SessionID
}

// page renders f's log after from (nil: from the start) up to, not
// including, the event at until (empty: to the end).
func (t *tailer) page(ctx context.Context, c *client.Client, f *followed, from *string, until string) error {
	for {
		var res msp.ViewPageResult
		err := c.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: f.id, Cursor: from, Limit: 200}, &res)
		if err != nil {
			return err
		}
		for _, e := range res.Events {
			cur := client.Notification{Params: e.Params}.Cursor()
			if cur == until {
				return nil
			}
			if err := t.show(f, e.Method, e.Params, cur, 0); err != nil {
				return err
			}
		}
		if res.NextCursor == nil {
			return nil
		}
		from = res.NextCursor
	}
}

// show renders one of f's events, emitted at emittedAtMs (0 when read
// from the log).
func (t *tailer) show(f *followed, method string, params json.RawMessage, cursor string, emittedAtMs int64) error {
	if method == msp.NotifySessionNameChanged {
		var p msp.SessionNameChangedParams
		json.Unmarshal(params, &p)
		f.rename(p.Name) // lines after it carry the new name
	}
	if method == msp.NotifyApprovalResolved && t.dec != nil {
		// Its prompt goes before its outcome shows.
		var p msp.ApprovalResolvedParams
		json.Unmarshal(params, &p)
		t.dec.resolved(p.ApprovalID)
	}
	f.r.eventAt(method, params, emittedAtMs)
	if cursor != "" {
		f.last = cursor
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
	if errors.Is(err, ErrNoSession) {
		return err
	}
	if u := unauthorized(err, t.opts.URL); u != nil {
		return u
	}
	var me *msp.Error
	if !errors.As(err, &me) {
		return nil
	}
	switch me.Data.Kind {
	case msp.KindSessionNotFound:
		if t.opts.All {
			return nil // a session deleted under us: the run goes on
		}
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

// unauthorized returns ErrUnauthorized, with the detail, when err is the
// server refusing the token, or nil.
func unauthorized(err error, url string) error {
	var re *client.RefusedError
	if errors.As(err, &re) && (re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden) {
		return fmt.Errorf("%w (HTTP %d from %s): pass --token or set MSPD_AUTH_TOKEN", ErrUnauthorized, re.StatusCode, url)
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
