package tail

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"

	"mspd/client"
	"mspd/schema/msp"
)

// all follows every session of the principal on one connection granted
// the session-list news: the sessions running when it starts, then each one
// the news says was started, renamed, or started or ended a turn. A session
// stays followed until it is deleted.
type all struct {
	*tailer
	follows map[string]*followed
	joined  bool // a connection has listed the sessions running
}

func newAll(t *tailer) *all { return &all{tailer: t, follows: make(map[string]*followed)} }

// since is where a newly found session's display starts.
type since int

const (
	sinceNow   since = iota // live events only
	sinceTurn               // the start of its running turn
	sinceStart              // the start of its log
)

// maxBacklog bounds how far back a session's log is read for the start of
// its turn; a start further back shows live events only.
const maxBacklog = 1000

// stream runs one connection: the sessions followed before a drop resume
// after their last event shown, the sessions running are found, then news
// and events are handled as they come.
func (a *all) stream(ctx context.Context, c *client.Client) error {
	for _, id := range slices.Sorted(maps.Keys(a.follows)) {
		f := a.follows[id]
		if err := a.subscribe(ctx, c, f); err != nil {
			if !isNotFound(err) {
				return err
			}
			a.unfollow(f, "it is gone")
		}
	}
	running, err := a.findRunning(ctx, c)
	if err != nil {
		return err
	}
	if !a.joined {
		a.status("following every session (%d running)", running)
		a.joined = true
	}
	a.connected()
	for {
		n, err := c.Next(ctx)
		if err != nil {
			return err
		}
		if err := a.handle(ctx, c, n); err != nil {
			return err
		}
	}
}

// findRunning follows each running session not followed yet and returns
// how many are running: on the first connection from now on; on a later
// one, from the start of the turn, which began while the run was away.
func (a *all) findRunning(ctx context.Context, c *client.Client) (int, error) {
	from := sinceTurn
	if !a.joined {
		from = sinceNow
	}
	running := 0
	var cursor *string
	for {
		var res msp.SessionListResult
		if err := c.Call(ctx, msp.MethodSessionList, msp.SessionListParams{Cursor: cursor, Limit: new(200)}, &res); err != nil {
			return running, err
		}
		for _, s := range res.Sessions {
			if s.Status != msp.SessionRunning {
				continue
			}
			running++
			if a.follows[s.SessionID] == nil {
				if err := a.attach(ctx, c, s, from); err != nil {
					return running, err
				}
			}
		}
		if res.NextCursor == nil {
			return running, nil
		}
		cursor = res.NextCursor
	}
}

// handle takes one notification: news of the list, or a followed
// session's event.
func (a *all) handle(ctx context.Context, c *client.Client, n client.Notification) error {
	if n.IsRequest() {
		return a.request(ctx, c, a.follows[sessionOf(n)], n)
	}
	switch n.Method {
	case msp.NotifySessionStarted, msp.NotifySessionListChanged:
		var p msp.SessionListChangedParams // session/started has the same shape
		if n.Decode(&p) != nil || p.Session.SessionID == "" {
			return nil
		}
		return a.found(ctx, c, p.Session, n.Method == msp.NotifySessionStarted)
	case msp.NotifySessionDeleteCompleted:
		var p msp.SessionDeleteCompletedParams
		n.Decode(&p)
		if f := a.follows[p.SessionID]; f != nil && p.Outcome == msp.DeleteCompleted {
			a.unfollow(f, "deleted")
		}
		return nil
	}
	f := a.follows[sessionOf(n)]
	if f == nil {
		return nil
	}
	return a.route(ctx, c, f, n)
}

// found follows a session the news named, unless it is followed already
// (then it may have a new name). A new session shows from its start, a
// running one from its turn's start, any other live.
func (a *all) found(ctx context.Context, c *client.Client, s msp.Session, isNew bool) error {
	if f := a.follows[s.SessionID]; f != nil {
		f.rename(s.Name)
		return nil
	}
	switch {
	case isNew && s.TurnCount == 0 && s.ForkedFrom == nil:
		return a.attach(ctx, c, s, sinceStart)
	case s.Status == msp.SessionRunning && s.ActiveTurnID != nil:
		return a.attach(ctx, c, s, sinceTurn)
	}
	return a.attach(ctx, c, s, sinceNow)
}

// attach follows s from where from says; a session deleted meanwhile is
// let go.
func (a *all) attach(ctx context.Context, c *client.Client, s msp.Session, from since) error {
	f := a.follow(s.SessionID, s.Name)
	a.follows[f.id] = f
	a.status("following %s", f.describe())
	var err error
	switch from {
	case sinceNow:
		err = a.subscribe(ctx, c, f)
	case sinceTurn:
		var turnID string
		if s.ActiveTurnID != nil {
			turnID = *s.ActiveTurnID
		}
		err = a.catchUp(ctx, c, f, func(e msp.ViewEvent) bool { return startsTurn(e, turnID) })
	default:
		err = a.catchUp(ctx, c, f, nil)
	}
	if isNotFound(err) {
		a.unfollow(f, "it is gone")
		return nil
	}
	return err
}

// catchUp shows f's log back to the first event begin picks (nil: the
// whole log), then subscribes after it, so live events follow without a
// hole or a repeat. A start beyond maxBacklog events shows live events
// only.
func (a *all) catchUp(ctx context.Context, c *client.Client, f *followed, begin func(msp.ViewEvent) bool) error {
	var backlog []msp.ViewEvent // newest first
	reached := false            // begin's event, or the log's start
	var before *string
	for !reached && len(backlog) < maxBacklog {
		var res msp.ViewPageResult
		err := c.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: f.id, Cursor: before, Direction: msp.Backward, Limit: 200}, &res)
		if err != nil {
			return err
		}
		for i := len(res.Events) - 1; i >= 0 && !reached; i-- {
			backlog = append(backlog, res.Events[i])
			reached = begin != nil && begin(res.Events[i])
		}
		if res.NextCursor == nil {
			reached = true
		}
		before = res.NextCursor
	}
	if !reached {
		f.last = cursorOf(backlog[0]) // live from the newest event
		backlog = nil
	}
	for i := len(backlog) - 1; i >= 0; i-- {
		if err := a.show(f, backlog[i].Method, backlog[i].Params, cursorOf(backlog[i]), 0); err != nil {
			return err
		}
	}
	if f.last != "" {
		return a.subscribe(ctx, c, f)
	}
	// The log was empty: live from the head, then what the log gained
	// between the page and the subscription.
	if err := a.subscribe(ctx, c, f); err != nil {
		return err
	}
	return a.showThrough(ctx, c, f, f.last)
}

// showThrough shows f's log from its start through the event at head, the
// cursor a live subscription began after; when no event has that cursor
// (it is the head of an empty log), the subscription delivers them all.
func (a *all) showThrough(ctx context.Context, c *client.Client, f *followed, head string) error {
	var events []msp.ViewEvent
	var from *string
	for len(events) < maxBacklog {
		var res msp.ViewPageResult
		if err := c.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: f.id, Cursor: from, Limit: 200}, &res); err != nil {
			return err
		}
		events = append(events, res.Events...)
		if i := slices.IndexFunc(events, func(e msp.ViewEvent) bool { return cursorOf(e) == head }); i >= 0 {
			for _, e := range events[:i+1] {
				if err := a.show(f, e.Method, e.Params, cursorOf(e), 0); err != nil {
					return err
				}
			}
			return nil
		}
		if res.NextCursor == nil {
			return nil
		}
		from = res.NextCursor
	}
	return nil
}

// unfollow stops showing f; a countdown it showed ends, as the session's
// turns did.
func (a *all) unfollow(f *followed, why string) {
	delete(a.follows, f.id)
	a.scr.mu.Lock()
	if f.r.wait != nil {
		f.r.settle("cancelled")
	}
	a.scr.mu.Unlock()
	a.status("stopped following %s: %s", f.describe(), why)
}

// startsTurn tells whether e is turnID's turn/started.
func startsTurn(e msp.ViewEvent, turnID string) bool {
	if e.Method != msp.NotifyTurnStarted {
		return false
	}
	var p msp.TurnStartedParams
	return json.Unmarshal(e.Params, &p) == nil && p.TurnID == turnID
}

func cursorOf(e msp.ViewEvent) string { return client.Notification{Params: e.Params}.Cursor() }

// isNotFound tells whether err is the server not knowing the session.
func isNotFound(err error) bool {
	var me *msp.Error
	return errors.As(err, &me) && me.Data.Kind == msp.KindSessionNotFound
}
