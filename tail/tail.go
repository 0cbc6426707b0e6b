package tail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"mspd/client"
	"mspd/schema/msp"
)

// ErrUnknownCursor reports a starting cursor the session never had; a
// script can start over from the beginning.
var ErrUnknownCursor = errors.New("tail: the session has no such cursor")

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
	// Status receives progress lines (reconnecting…), never data.
	Status io.Writer
}

// Run follows a session, writing what it sees to out, until the log ends
// (no Follow), Count is reached, or ctx is done — all clean ends (nil).
func Run(ctx context.Context, opts Options, out io.Writer) error {
	if opts.Status == nil {
		opts.Status = io.Discard
	}
	t := &tailer{opts: opts, r: newRenderer(out, opts.Format, opts.Color)}
	err := t.run(ctx)
	if errors.Is(err, errDone) || ctx.Err() != nil {
		return nil
	}
	return err
}

// errDone ends the run cleanly.
var errDone = errors.New("done")

type tailer struct {
	opts  Options
	r     *renderer
	last  string // cursor of the last event shown
	shown int
}

func (t *tailer) run(ctx context.Context) error {
	c, err := t.dial(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	if t.opts.FromStart || t.opts.From != "" {
		var from *string
		if t.opts.From != "" {
			from, t.last = &t.opts.From, t.opts.From
		}
		if err := t.page(ctx, c, from, ""); err != nil {
			return err
		}
	}
	if !t.opts.Follow {
		return errDone
	}
	backoff := 250 * time.Millisecond
	for {
		err := t.follow(ctx, c)
		if errors.Is(err, errDone) || errors.Is(err, ErrUnknownCursor) || ctx.Err() != nil {
			return err
		}
		c.Close()
		fmt.Fprintf(t.opts.Status, "connection lost (%v); reconnecting…\n", err)
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			var next *client.Client
			if next, err = t.dial(ctx); err == nil {
				c = next
				backoff = 250 * time.Millisecond
				break
			}
			fmt.Fprintf(t.opts.Status, "reconnect failed (%v); retrying in %s\n", err, backoff)
		}
	}
}

func (t *tailer) dial(ctx context.Context) (*client.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return client.Dial(dctx, t.opts.URL, client.Options{ClientName: "mspd_tail", Token: t.opts.Token})
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
		return classify(err)
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
			return classify(err)
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

// classify turns an unknown-cursor refusal into ErrUnknownCursor.
func classify(err error) error {
	var me *msp.Error
	if errors.As(err, &me) && me.Data.Kind == msp.KindNotFound && me.Data.Reason == msp.ReasonMissingAnchor {
		return fmt.Errorf("%w: %s", ErrUnknownCursor, me.Message)
	}
	return err
}
