package session

// The session lifecycle: session/start, resume, read and list, and the
// model a session uses.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"mspd/schema/msp"
	"mspd/store"
)

// StartSession serves session/start. The returned attach subscribes the
// caller after the result's viewCursor; call it once the result is sent.
func (m *Manager) StartSession(ctx context.Context, sub Subscriber, raw json.RawMessage) (json.RawMessage, func(context.Context), error) {
	var p msp.SessionStartParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, msp.ErrInvalidParams("", "session/start params: %v", err)
	}
	if p.SessionID != "" {
		if _, err := uuid.Parse(p.SessionID); err != nil {
			return nil, nil, msp.ErrInvalidParams("sessionId", "sessionId must be a UUID")
		}
	}
	if err := checkWorkspaceRoots(p); err != nil {
		return nil, nil, err
	}
	if p.ApprovalMode != nil {
		if err := checkApprovalMode(*p.ApprovalMode, "approvalMode"); err != nil {
			return nil, nil, err
		}
	}
	if err := m.checkSessionServers(p, raw); err != nil {
		return nil, nil, err
	}
	if err := checkInstructions(p.Config); err != nil {
		return nil, nil, err
	}
	owner := PrincipalFrom(ctx)
	var started *msp.Session
	resp, _, err := m.ledger.runCreating(ctx, p.CommandID, msp.MethodSessionStart, raw, func(a *admission) (json.RawMessage, error) {
		// Resolved only for a new command: a replay gets its recorded
		// answer even after the configured providers changed.
		providerID, modelID, err := m.resolveModel(p)
		if err != nil {
			return nil, err
		}
		id, key := p.SessionID, ""
		if id == "" {
			id = newID()
			key = sessionKey(owner, id)
		} else {
			// The id is the caller's own: another principal's session of
			// that id is another session, and tells nothing here.
			if key, err = m.keyOf(ctx, id); err != nil {
				return nil, err
			}
			// Two starts naming one new sessionId: one creates it, the
			// other is refused.
			release := m.ledger.lock("session:" + key)
			defer release()
			if _, err := m.store.Session(ctx, key); err == nil {
				return nil, a.reject(ctx, m.store, msp.ErrCommandRejected(p.CommandID, msp.ReasonSessionIDConflict, "session %s already exists", id))
			} else if !errors.Is(err, store.ErrNotFound) {
				return nil, msp.ErrInternal("checking session: %v", err)
			}
		}
		now := m.now()
		st := state{CreatedAt: now, UpdatedAt: now, Owner: owner, CursorSpans: m.firstSpan(), MadeBy: a.maker(p.CommandID)}
		st.ProviderID, st.ModelID = optional(providerID), optional(modelID)
		st.StartProviderID = st.ProviderID
		root := p.WorkspaceRoot
		if root == "" && len(p.WorkspaceRoots) > 0 {
			root = p.WorkspaceRoots[0]
		}
		st.WorkspaceRoot = optional(root)
		if p.ApprovalMode != nil {
			st.ApprovalMode = &approvalModeState{Mode: *p.ApprovalMode, Source: msp.ApprovalSourceStartup, LastCommandID: p.CommandID}
		}
		if p.Config != nil && len(p.Config.MCPServers) > 0 {
			st.MCPServers = p.Config.MCPServers
		}
		if p.Config != nil {
			st.Instructions = p.Config.Instructions
		}
		wire := st.wire(id, m.cfg.LogPath)
		res, err := msp.Marshal(msp.SessionStartResult{Session: wire, ViewCursor: durableCursor(id, st.CursorSpans[0].Epoch, 0)})
		if err != nil {
			return nil, msp.ErrInternal("encoding result: %v", err)
		}
		if err := m.commitNew(ctx, a, key, st, res); err != nil {
			return nil, msp.ErrInternal("creating session: %v", err)
		}
		started = &wire
		return res, nil
	})
	if err != nil {
		return nil, nil, err
	}
	return m.opened(owner, sub, started, resp)
}

// commitNew writes the row of a new session, kept under key, with the
// ledger entry of the command that made it, in one commit.
func (m *Manager) commitNew(ctx context.Context, a *admission, key string, st state, res json.RawMessage) error {
	stRaw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	row := store.Session{ID: key, Owner: st.Owner, CreatedAt: st.CreatedAt, UpdatedAt: st.UpdatedAt, State: stRaw}
	return m.store.Commit(ctx, store.Batch{SessionID: key, Session: &row, Commands: []store.Command{a.entry(res, false)}})
}

// opened announces a session just made (started is nil for a replay) with
// session/started — upstream hosts send it before the response — and
// returns the attach that subscribes its creator after the result's
// viewCursor.
func (m *Manager) opened(owner string, sub Subscriber, started *msp.Session, resp json.RawMessage) (json.RawMessage, func(context.Context), error) {
	if started != nil {
		m.broadcast(owner, sub, msp.NotifySessionStarted, msp.SessionStartedParams{Session: *started})
	}
	var res msp.SessionStartResult
	if err := json.Unmarshal(resp, &res); err != nil {
		return nil, nil, msp.ErrInternal("stored result unreadable: %v", err)
	}
	return resp, m.attachAfter(sub, nil, res.Session.SessionID, res.ViewCursor), nil
}

// resolveModel picks the provider and model of a new session.
func (m *Manager) resolveModel(p msp.SessionStartParams) (string, string, error) {
	requested := ""
	if p.ProviderID != nil {
		requested = *p.ProviderID
	}
	if m.cfg.Catalog != nil {
		return m.cfg.Catalog.Resolve(requested, p.ModelID)
	}
	if requested != "" && m.cfg.ProviderID != "" && requested != m.cfg.ProviderID {
		return "", "", msp.ErrInvalidParams("providerId", "provider %q is not configured (this server runs %q)", requested, m.cfg.ProviderID)
	}
	model := m.cfg.ModelID
	if p.ModelID != "" {
		model = p.ModelID
	}
	return m.cfg.ProviderID, model, nil
}

// ResumeSession serves session/resume. With a cursor the result carries no
// history and attach delivers exactly the events after the cursor; without
// one it carries the folded items (within the history budget). A resume is
// a read: it changes nothing, so nothing of it is recorded, and a repeated
// one gets a fresh answer.
func (m *Manager) ResumeSession(ctx context.Context, sub Subscriber, raw json.RawMessage) (json.RawMessage, func(context.Context), error) {
	var p msp.SessionResumeParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, msp.ErrInvalidParams("", "session/resume params: %v", err)
	}
	if err := checkResumeConfig(p); err != nil {
		return nil, nil, err
	}
	s, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	if p.Cursor != nil {
		if _, err := s.checkCursor(*p.Cursor); err != nil {
			return nil, nil, err
		}
	}
	// Re-attaching: the old subscription ends before the head is read (a
	// refused resume leaves it alone).
	s.detach(sub)
	var snap msp.SessionSnapshot
	switch {
	case p.Cursor != nil:
		snap, err = m.snapshot(ctx, s, false, msp.NoneCursorSuffix)
	case p.ExcludeItems:
		snap, err = m.snapshot(ctx, s, false, msp.NoneExcluded)
	default:
		snap, err = m.snapshot(ctx, s, true, "")
	}
	if err != nil {
		return nil, nil, err
	}
	res, err := msp.Marshal(snap)
	if err != nil {
		return nil, nil, msp.ErrInternal("encoding result: %v", err)
	}
	after := snap.ViewCursor
	if p.Cursor != nil {
		after = *p.Cursor
	}
	return res, m.attachAfter(sub, s, s.id, after), nil
}

// ReadSession serves session/read: a point-in-time read that never
// subscribes. Items are excluded unless asked for.
func (m *Manager) ReadSession(ctx context.Context, raw json.RawMessage) (msp.SessionSnapshot, error) {
	var p msp.SessionReadParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return msp.SessionSnapshot{}, msp.ErrInvalidParams("", "session/read params: %v", err)
	}
	s, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return msp.SessionSnapshot{}, err
	}
	defer release()
	if p.ExcludeItems == nil || *p.ExcludeItems {
		return m.snapshot(ctx, s, false, msp.NoneExcluded)
	}
	return m.snapshot(ctx, s, true, "")
}

// snapshot renders a session with its head and, when inline is set, its
// folded items; noneReason explains an omitted history. Inline items
// include the answer streaming now, as far as it has streamed (on a
// follower, as far as it has reached it), and the cursor returned is that
// far: a client that subscribes after it gets the rest of the stream, not
// the part its items hold already. A follower that may have missed part
// of the stream gives the log's items where the log stands before the
// hole, and that durable cursor: the subscription from it replays the
// records after it and reports the hole.
func (m *Manager) snapshot(ctx context.Context, s *session, inline bool, noneReason string) (msp.SessionSnapshot, error) {
	s.mu.Lock()
	if err := s.freshLocked(ctx); err != nil {
		s.mu.Unlock()
		return msp.SessionSnapshot{}, err
	}
	wire, config, usage := s.st.wire(s.id, m.cfg.LogPath), s.st.config(), s.window.context().Usage
	pending := s.approvals.pointers()
	at := s.at(s.head, 0)
	var live streamed
	if inline && s.role == roleLeader {
		live.open = make(map[string]msp.Item, len(s.open))
		for id, oi := range s.open {
			live.open[id] = oi.current()
		}
	} else if inline {
		live = s.deltas.snapshot()
	}
	at.sub = s.sub
	s.mu.Unlock()
	snap := msp.SessionSnapshot{
		Config:          config,
		ContextUsage:    usage,
		History:         msp.SessionHistory{Mode: msp.HistoryNone, NoneReason: noneReason, Snapshot: json.RawMessage("null")},
		PendingRequests: pending,
		Session:         wire,
		ViewCursor:      s.durable(at.seq),
	}
	if !inline {
		return snap, nil
	}
	h, whole, err := m.inlineHistory(ctx, s.key, at.seq, live)
	if err == nil && !whole {
		// Some of what streamed may be missing: the items stand where the
		// log does before the hole, and a subscription from there replays
		// the rest and reports the hole itself.
		at = s.at(min(at.seq, max(live.lost.seq, 1)), 0)
		snap.ViewCursor = at.String()
		h, _, err = m.inlineHistory(ctx, s.key, at.seq, streamed{})
	}
	if err != nil {
		return snap, err
	}
	snap.History = h
	if h.Mode == msp.HistoryInline {
		snap.ViewCursor = at.String()
	}
	return snap, nil
}

// inlineHistory folds the items of the session kept under key through
// record through for a resume, a read or a fork, with the items still open
// as streamed so far (live); past the history budget the history is left
// for the client to page (mode none, historyBudget). The fold stops once
// its items outgrow the budget, and the items are measured by their
// records' sizes, the open ones alone encoded again: so a history too large
// to inline is never held whole. whole is false when a follower's items are
// the log's alone, because some of what streamed after it may be missing.
func (m *Manager) inlineHistory(ctx context.Context, key string, through int64, live streamed) (h msp.SessionHistory, whole bool, err error) {
	none := msp.SessionHistory{Mode: msp.HistoryNone, NoneReason: msp.NoneHistoryBudget, Snapshot: json.RawMessage("null")}
	budget := m.cfg.HistoryBudget
	f, err := fold(ctx, m.store, key, foldSpec{through: through, items: true, budget: budget})
	if err != nil {
		return none, false, msp.ErrInternal("reading session log: %v", err)
	}
	if f.over {
		return none, true, nil
	}
	open, whole := live.open, true
	var tails map[string]*streamText
	if live.follower {
		if open, tails, whole = live.rebuild(f); !whole {
			open, tails = nil, nil
		}
	}
	// Each open item's text streamed on past its record: it is measured
	// as it now stands.
	resize := func(i int) {
		n, _ := msp.Marshal(f.items[i])
		f.encoded += len(n) - f.itemBytes[i]
		f.itemBytes[i] = len(n)
	}
	for i := range f.items {
		it := &f.items[i]
		changed := false
		if it.Status == msp.ItemInProgress {
			if tail, ok := tails[it.ItemID]; ok {
				tail.appendTo(it)
				changed = true
			}
		}
		if o, ok := open[it.ItemID]; ok {
			if it.Status == msp.ItemInProgress && o.Revision >= it.Revision {
				it.Text, it.Summary, changed = o.Text, o.Summary, true
			}
			delete(open, it.ItemID)
		}
		if changed {
			resize(i)
		}
	}
	for _, it := range open {
		f.items, f.itemBytes = append(f.items, it), append(f.itemBytes, 0) // items stream one at a time: it is the last
		resize(len(f.items) - 1)
	}
	// The array's brackets and commas.
	if f.encoded+len(f.items)+1 > budget {
		return none, whole, nil
	}
	if f.items == nil {
		f.items = []msp.Item{}
	}
	return msp.SessionHistory{Items: f.items, Mode: msp.HistoryInline, Snapshot: json.RawMessage("null")}, whole, nil
}

// ListSessions serves session/list: newest first, paged.
func (m *Manager) ListSessions(ctx context.Context, raw json.RawMessage) (msp.SessionListResult, error) {
	var p msp.SessionListParams
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &p); err != nil {
			return msp.SessionListResult{}, msp.ErrInvalidParams("", "session/list params: %v", err)
		}
	}
	limit := 50
	if p.Limit != nil {
		limit = min(max(*p.Limit, 1), 200)
	}
	var after *store.SessionKey
	if p.Cursor != nil {
		k, err := decodeListCursor(*p.Cursor)
		if err != nil {
			return msp.SessionListResult{}, msp.ErrInvalidParams("cursor", "unknown session/list cursor")
		}
		after = &k
	}
	// Only the caller's own sessions are listed: the store reads them
	// alone, through its owner index. One more than the page tells whether
	// another follows.
	rows, applied, err := m.listRows(ctx, p.Filter, after, limit+1)
	if err != nil {
		return msp.SessionListResult{}, err
	}
	res := msp.SessionListResult{AppliedFilter: applied, Sessions: make([]msp.Session, 0, min(len(rows), limit))}
	for i, row := range rows {
		if i == limit {
			c := encodeListCursor(store.SessionKey{UpdatedAt: rows[i-1].UpdatedAt, ID: rows[i-1].ID})
			res.NextCursor = &c
			break
		}
		var st state
		if err := json.Unmarshal(row.State, &st); err != nil {
			return msp.SessionListResult{}, msp.ErrInternal("session %s state unreadable: %v", row.ID, err)
		}
		s := st.wire(wireID(row.Owner, row.ID), m.cfg.LogPath)
		if row.Match != "" {
			s.Match = &msp.SessionMatch{Snippet: snippet(row.Match, row.terms)}
		}
		res.Sessions = append(res.Sessions, s)
	}
	return res, nil
}

// listRow is a row of session/list with where it matched.
type listRow struct {
	store.Session
	Match string
	terms store.Terms
}

// listRows reads a page of the caller's rows, through the store's search
// when a filter is given (answered with its canonical echo).
func (m *Manager) listRows(ctx context.Context, f *msp.SessionListFilter, after *store.SessionKey, limit int) ([]listRow, *msp.SessionListFilter, error) {
	principal := PrincipalFrom(ctx)
	if f == nil {
		rows, err := m.store.Sessions(ctx, principal, after, limit)
		if err != nil {
			return nil, nil, msp.ErrInternal("listing sessions: %v", err)
		}
		out := make([]listRow, len(rows))
		for i, r := range rows {
			out[i] = listRow{Session: r}
		}
		return out, nil, nil
	}
	lf, err := canonicalFilter(f, principal)
	if err != nil {
		return nil, nil, err
	}
	if lf.none {
		return nil, &lf.applied, nil
	}
	hits, err := m.store.Search(ctx, lf.query, after, limit)
	if err != nil {
		return nil, nil, msp.ErrInternal("searching sessions: %v", err)
	}
	out := make([]listRow, len(hits))
	for i, h := range hits {
		out[i] = listRow{Session: h.Session, Match: h.Match, terms: lf.query.Content}
	}
	return out, &lf.applied, nil
}

// SessionModel returns the provider and model a session uses.
func (m *Manager) SessionModel(ctx context.Context, sessionID string) (providerID, modelID string, err error) {
	s, release, err := m.acquire(ctx, sessionID)
	if err != nil {
		return "", "", err
	}
	defer release()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.freshLocked(ctx); err != nil {
		return "", "", err
	}
	return deref(s.st.ProviderID), deref(s.st.ModelID), nil
}

// Session list cursors are their own opaque family: the position of the
// last session of a page.
func encodeListCursor(k store.SessionKey) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(k.UpdatedAt.UnixNano(), 10) + ":" + k.ID))
}

func decodeListCursor(s string) (store.SessionKey, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return store.SessionKey{}, err
	}
	ns, id, ok := strings.Cut(string(b), ":")
	if !ok {
		return store.SessionKey{}, errors.New("malformed")
	}
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return store.SessionKey{}, err
	}
	return store.SessionKey{UpdatedAt: time.Unix(0, n), ID: id}, nil
}
