package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"mspd/schema/msp"
	"mspd/store"
)

// This file holds the commands that change a session as a whole: fork,
// rename, setModel and delete.

// maxNameRunes bounds a session's name.
const maxNameRunes = 200

// errDeleted refuses writes to a session being erased.
var errDeleted = errors.New("session: deleted")

// normalizeName collapses a name's whitespace and bounds its length.
func normalizeName(name string) string {
	name = strings.Join(strings.Fields(name), " ")
	if r := []rune(name); len(r) > maxNameRunes {
		name = string(r[:maxNameRunes])
	}
	return name
}

// RenameSession serves session/rename: the name is recorded with a
// session/nameChanged event and replaces the automatic one.
func (m *Manager) RenameSession(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	var p msp.SessionRenameParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, msp.ErrInvalidParams("", "session/rename params: %v", err)
	}
	if res, ok, err := m.forward(ctx, p.SessionID, msp.MethodSessionRename, raw); ok {
		return res, err
	}
	s, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return nil, err
	}
	defer release()
	resp, _, err := m.ledger.run(ctx, p.CommandID, msp.MethodSessionRename, raw, func(a *admission) (json.RawMessage, error) {
		name := normalizeName(p.Name)
		if name == "" {
			return nil, msp.ErrInvalidParams("name", "a session's name must not be empty")
		}
		res, err := msp.Marshal(msp.SessionRenameResult{CommandID: p.CommandID, Status: msp.StatusAccepted, Name: name})
		if err != nil {
			return nil, msp.ErrInternal("encoding ack: %v", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		st := s.st.clone()
		st.Name = name
		ev := event{msp.NotifySessionNameChanged, &msp.SessionNameChangedParams{Name: name}}
		if err := s.appendLocked(ctx, []event{ev}, &st, a.entry(res, false)); err != nil {
			return nil, msp.ErrInternal("renaming session: %v", err)
		}
		s.listChangedLocked()
		return res, nil
	})
	return resp, err
}

// SetModel serves session/setModel: the selection is recorded with a
// session/modelChanged event and applies from the session's next turn.
func (m *Manager) SetModel(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	var p msp.SessionSetModelParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, msp.ErrInvalidParams("", "session/setModel params: %v", err)
	}
	if res, ok, err := m.forward(ctx, p.SessionID, msp.MethodSessionSetModel, raw); ok {
		return res, err
	}
	s, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return nil, err
	}
	defer release()
	resp, _, err := m.ledger.run(ctx, p.CommandID, msp.MethodSessionSetModel, raw, func(a *admission) (json.RawMessage, error) {
		s.mu.Lock()
		current := deref(s.st.ProviderID)
		s.mu.Unlock()
		providerID := p.Model.ProviderID
		if providerID == "" {
			providerID = current
		}
		providerID, modelID, err := m.resolveSelection(providerID, p.Model.ModelID)
		if err != nil {
			return nil, err
		}
		res, err := msp.Marshal(msp.SessionSetModelResult{CommandID: p.CommandID, Status: msp.StatusAccepted})
		if err != nil {
			return nil, msp.ErrInternal("encoding ack: %v", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		st := s.st.clone()
		st.ProviderID, st.ModelID = optional(providerID), optional(modelID)
		ev := event{msp.NotifySessionModelChanged, &msp.SessionModelChangedParams{ModelID: modelID, ProviderID: providerID, Source: "user"}}
		if err := s.appendLocked(ctx, []event{ev}, &st, a.entry(res, false)); err != nil {
			return nil, msp.ErrInternal("recording the model: %v", err)
		}
		s.listChangedLocked()
		return res, nil
	})
	return resp, err
}

// resolveSelection checks a session/setModel selection against the
// configured providers; a refusal names the field under "model.".
func (m *Manager) resolveSelection(providerID, modelID string) (string, string, error) {
	if modelID == "" {
		return "", "", msp.ErrInvalidParams("model.modelId", "a model selection needs a modelId")
	}
	pid, mid, err := m.resolveModel(msp.SessionStartParams{ProviderID: optional(providerID), ModelID: modelID})
	var me *msp.Error
	if errors.As(err, &me) && me.Data.Details != nil {
		if f, ok := me.Data.Details["field"].(string); ok && f != "" {
			me.Data.Details["field"] = "model." + f
		}
	}
	return pid, mid, err
}

// ForkSession serves session/fork: a new session whose log is the
// source's, copied as recorded through its last completed turn (or the one
// named): no model is asked again, and every copied event equals the
// source's apart from the identities of the copy (its sessionId,
// viewCursor and sourceRange); turns and items keep their ids. The caller
// gets session/started and is subscribed to the fork.
func (m *Manager) ForkSession(ctx context.Context, sub Subscriber, raw json.RawMessage) (json.RawMessage, func(context.Context), error) {
	var p msp.SessionForkParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, msp.ErrInvalidParams("", "session/fork params: %v", err)
	}
	src, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	owner := PrincipalFrom(ctx)
	var started *msp.Session
	resp, _, err := m.ledger.runCreating(ctx, p.CommandID, msp.MethodSessionFork, raw, func(a *admission) (json.RawMessage, error) {
		cut, turns, err := m.forkCut(ctx, src, p.CutPoint)
		if err != nil {
			var me *msp.Error
			if errors.As(err, &me) && me.Data.Kind == msp.KindForkBoundary {
				// Recorded: a replay must not fork at a turn that
				// completed since.
				return nil, a.reject(ctx, m.store, err.(*msp.Error))
			}
			return nil, err
		}
		src.mu.Lock()
		st := state{Owner: owner, CursorSpans: m.firstSpan(), MadeBy: a.maker(p.CommandID), ProviderID: src.st.ProviderID, ModelID: src.st.ModelID, WorkspaceRoot: src.st.WorkspaceRoot,
			StartProviderID: src.st.StartProviderID,
			FirstUserPrompt: src.st.FirstUserPrompt, Name: src.st.Name, TurnCount: turns, ApprovalMode: src.st.ApprovalMode,
			MCPServers: src.st.MCPServers, Instructions: src.st.Instructions, ReasoningEffort: src.st.ReasoningEffort}
		src.mu.Unlock()
		id := newID()
		key := sessionKey(owner, id)
		if err := m.copyLog(ctx, src.key, key, id, st.CursorSpans[0].Epoch, cut); err != nil {
			return nil, msp.ErrInternal("copying the log: %v", err)
		}
		now := m.now()
		st.CreatedAt, st.UpdatedAt = now, now
		st.ForkedFrom = &msp.ForkProvenance{CommandID: p.CommandID, CutCursor: src.durable(cut),
			CutExplicit: p.CutPoint != nil, SessionID: src.id}
		wire := st.wire(id, m.cfg.LogPath)
		snap := msp.SessionSnapshot{
			Config:          st.config(),
			History:         msp.SessionHistory{Mode: msp.HistoryNone, NoneReason: msp.NoneExcluded, Snapshot: json.RawMessage("null")},
			PendingRequests: []msp.PendingRequest{},
			Session:         wire,
			ViewCursor:      durableCursor(id, st.CursorSpans[0].Epoch, cut),
		}
		if !p.ExcludeItems {
			if snap.History, _, err = m.inlineHistory(ctx, key, cut, streamed{}); err != nil {
				return nil, err
			}
		}
		res, err := msp.Marshal(snap)
		if err != nil {
			return nil, msp.ErrInternal("encoding result: %v", err)
		}
		// The row and the ledger entry land together: until then the
		// copied records belong to no session anyone can see.
		if err := m.commitNew(ctx, a, key, st, res); err != nil {
			return nil, msp.ErrInternal("creating the fork: %v", err)
		}
		started = &wire
		return res, nil
	})
	if err != nil {
		return nil, nil, err
	}
	return m.opened(owner, sub, started, resp)
}

// forkCut finds where a fork of s ends: the record of the named turn's
// terminal, or of the last terminal when none is named; turns counts the
// terminals up to it. A turn that is unknown or has not completed is
// refused forkBoundaryInvalid.
func (m *Manager) forkCut(ctx context.Context, s *session, at *msp.ForkCutPoint) (cut int64, turns int, err error) {
	s.mu.Lock()
	head := s.head
	s.mu.Unlock()
	count := 0
	for after := int64(0); after < head; {
		recs, err := m.store.Records(ctx, s.key, after, logPage(min(int(head-after), 1000)))
		if err != nil {
			return 0, 0, msp.ErrInternal("reading session log: %v", err)
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			after = r.Seq
			if r.Method != msp.NotifyTurnCompleted {
				continue
			}
			count++
			if at == nil {
				cut, turns = r.Seq, count
				continue
			}
			var p msp.TurnCompletedParams
			if err := json.Unmarshal(r.Params, &p); err != nil {
				return 0, 0, msp.ErrInternal("record %d: %v", r.Seq, err)
			}
			if p.TurnID == at.LastTurnID {
				return r.Seq, count, nil
			}
		}
	}
	if at == nil {
		return cut, turns, nil
	}
	e := msp.NewError(msp.CodeForkBoundary, msp.KindForkBoundary, "turn %s of session %s has not completed (or is unknown): a fork cuts only at a completed turn", at.LastTurnID, s.id)
	e.Data.Details = map[string]any{"field": "cutPoint.lastTurnId", "lastTurnId": at.LastTurnID}
	return 0, 0, e
}

// copyLog copies records 1..through of the session kept under from into
// the one under to, whose sessionId is id and cursor epoch epoch, each
// with its new identities (the sessionId and cursors its records carry)
// and the rest of its bytes as recorded.
func (m *Manager) copyLog(ctx context.Context, from, to, id, epoch string, through int64) error {
	const batch = 500
	for after := int64(0); after < through; {
		recs, err := m.store.Records(ctx, from, after, logPage(min(int(through-after), batch)))
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			return fmt.Errorf("log of %s ends at %d, before %d", from, after, through)
		}
		out := make([]store.Record, len(recs))
		for i, r := range recs {
			params, err := r.Params, error(nil)
			if !hidden(r.Method) { // a hidden record names no session or position
				params, err = rehead(r.Params, id, epoch, r.Seq)
			}
			if err != nil {
				return fmt.Errorf("record %d: %w", r.Seq, err)
			}
			out[i] = store.Record{Seq: r.Seq, Method: r.Method, Params: params}
			after = r.Seq
		}
		// The copy is found by what it holds, as its source is.
		if err := m.store.Commit(ctx, store.Batch{SessionID: to, Records: out, Text: textOf(PrincipalFrom(ctx), out)}); err != nil {
			return err
		}
	}
	return nil
}

// rehead gives a recorded view event the identities of its copy in
// session id (of cursor epoch epoch) at seq — sessionId, viewCursor,
// sourceRange — keeping every other member's bytes, in order, as they
// were.
func rehead(params json.RawMessage, id, epoch string, seq int64) (json.RawMessage, error) {
	pos := msp.RecordPosition{ID: newID(), Sequence: seq}
	header := map[string]any{
		"sessionId":   id,
		"viewCursor":  durableCursor(id, epoch, seq),
		"sourceRange": msp.SourceRange{First: pos, Last: pos, Stream: msp.StreamRef{ID: id, Kind: "session"}},
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("params are not an object")
	}
	var out bytes.Buffer
	out.WriteByte('{')
	member := func(key string, val []byte) {
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		out.Write(k)
		out.WriteByte(':')
		out.Write(val)
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		if h, ok := header[key]; ok {
			val, err = msp.Marshal(h)
			if err != nil {
				return nil, err
			}
			delete(header, key)
		}
		member(key, val)
	}
	for _, key := range []string{"sessionId", "sourceRange", "viewCursor"} {
		if h, ok := header[key]; ok { // a member the record lacked
			val, err := msp.Marshal(h)
			if err != nil {
				return nil, err
			}
			member(key, val)
		}
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// DeleteSession serves session/delete. The ack is recorded apart from the
// session, so a replay gets it again after the session is gone; erase,
// run once the ack is sent, stops the session's turns, erases its log,
// state and commands from the store, and tells its subscribers, the
// caller and the owner's list-taking connections with
// session/deleteCompleted. From then on every command naming it answers
// sessionNotFound.
func (m *Manager) DeleteSession(ctx context.Context, sub Subscriber, raw json.RawMessage) (json.RawMessage, func(context.Context), error) {
	var p msp.SessionDeleteParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, msp.ErrInvalidParams("", "session/delete params: %v", err)
	}
	if res, ok, err := m.forward(ctx, p.SessionID, msp.MethodSessionDelete, raw); ok {
		return res, nil, err
	}
	// The ledger answers first: a replay after the erasure finds its ack.
	var s *session
	resp, _, err := m.ledger.run(ctx, p.CommandID, msp.MethodSessionDelete, raw, func(a *admission) (json.RawMessage, error) {
		var release func()
		var err error
		if s, release, err = m.acquireErasable(ctx, p.SessionID); err != nil {
			return nil, err
		}
		release()
		res, err := msp.Marshal(msp.CommandAcceptedResult{CommandID: p.CommandID, Status: msp.StatusAccepted})
		if err != nil {
			return nil, msp.ErrInternal("encoding ack: %v", err)
		}
		cmds := []store.Command{a.entry(res, false)}
		if left, err := m.leftForMaker(ctx, s); err != nil {
			return nil, err
		} else if left != nil {
			cmds = append(cmds, *left)
		}
		// Kept apart from the session (no session id): they outlive it.
		err = m.store.Commit(ctx, store.Batch{Commands: cmds})
		if errors.Is(err, store.ErrConflict) && len(cmds) > 1 {
			// Another deletion of s, acknowledged meanwhile, left it.
			err = m.store.Commit(ctx, store.Batch{Commands: cmds[:1]})
		}
		if err != nil {
			return nil, msp.ErrInternal("recording the deletion: %v", err)
		}
		return res, nil
	})
	if err != nil {
		return nil, nil, err
	}
	if s == nil {
		// A replay: erase again in case the first one was cut short.
		if got, release, err := m.acquireErasable(ctx, p.SessionID); err == nil {
			s = got
			release()
		} else {
			return resp, nil, nil
		}
	}
	owner := PrincipalFrom(ctx)
	return resp, func(ctx context.Context) { m.erase(context.WithoutCancel(ctx), s, owner, p.CommandID, sub) }, nil
}

// leftForMaker is the ledger entry a deletion of s leaves for the command
// that made s, written with the deletion's ack so that it is there before
// that command's own entry is erased; nil when s does not know its maker
// (an older build made it) or an earlier deletion, which failed, left it.
func (m *Manager) leftForMaker(ctx context.Context, s *session) (*store.Command, error) {
	s.mu.Lock()
	mk := s.st.MadeBy
	s.mu.Unlock()
	if mk == nil {
		return nil, nil
	}
	c, err := mk.erased(s.id)
	if err != nil {
		return nil, msp.ErrInternal("encoding the deletion: %v", err)
	}
	if _, err := m.store.Command(ctx, c.ID); err == nil {
		return nil, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, msp.ErrInternal("ledger: %v", err)
	}
	return &c, nil
}

// unmark takes back the deletion of a session whose erasure failed, if
// the store still holds it as this node does: its row, and its log up to
// the head held here. Then it takes commands again (a deletion among
// them) and its subscribers keep it. Else the erasure may have got part
// of the way (or the store cannot tell): the session stays deleted, as a
// half-erased session must (nothing more is written to it, so no cursor
// of it is handed out twice), and only a deletion sent again reaches it,
// to finish the erasure (see acquireErasable). It reports whether the
// session is back.
func (m *Manager) unmark(ctx context.Context, s *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	row, rowErr := m.store.Session(ctx, s.key)
	head, headErr := m.store.Head(ctx, s.key)
	if rowErr == nil && !row.Erasing && headErr == nil && head == s.head {
		s.enter(phaseLive)
		return true
	}
	m.log.Error("a failed deletion may have erased part of the session; it stays deleted until a deletion sent again finishes", "session", s.id,
		"row", rowErr, "erasing", row.Erasing, "head", head, "held", s.head, "err", headErr)
	s.enter(phaseHalfErased)
	return false
}

// revive resumes the turn the failed erasure of s stopped, which wrote
// nothing since, as a new attempt, as the next start would. If that
// cannot be written either, the session waits for the next start, as a
// session whose log refuses its writes does.
func (m *Manager) revive(ctx context.Context, s *session) {
	s.mu.Lock()
	err := s.resumeLocked(ctx, func(pendingTurn) string { return "a failed deletion of the session stopped it" })
	if err != nil {
		s.broken = true
	}
	s.mu.Unlock()
	if err != nil {
		m.log.Error("resuming a session whose deletion failed", "session", s.id, "err", err)
		return
	}
	m.kick(s)
}

// erase stops a session and removes it from the store and from memory.
func (m *Manager) erase(ctx context.Context, s *session, owner, commandID string, caller Subscriber) {
	// Two deletions acknowledged together run one after the other: the
	// second finds the session erased, or revived and stops it again.
	s.erasing.Lock()
	defer s.erasing.Unlock()
	s.mu.Lock()
	if !s.phase.deleted() {
		// A half-erased session stays so while it is erased again, and
		// an erased one erased: a deletion sent again still reaches the
		// first, and nothing is written to either.
		s.enter(phaseErasing)
	}
	if s.cancel != nil {
		s.cancel()
	}
	worker := s.workerDone
	s.mu.Unlock()
	if worker != nil {
		<-worker // the running turn writes nothing more
	}
	done := msp.SessionDeleteCompletedParams{CommandID: commandID, Outcome: msp.DeleteCompleted, SessionID: s.id}
	if err := m.store.DeleteSession(ctx, s.key); err != nil {
		m.log.Error("deleting session", "session", s.id, "err", err)
		done.Outcome, done.Reason, done.PhysicalChange = msp.DeleteFailed, "storageFailure", "possible"
		// Back before anyone is told, so that a command sent on the news
		// finds it; what the revived turn writes follows the news.
		if m.unmark(ctx, s) {
			defer m.revive(ctx, s)
		}
	} else {
		m.forget(s)
	}
	raw, err := msp.Marshal(done)
	if err != nil {
		return
	}
	n := Notification{Method: msp.NotifySessionDeleteCompleted, Frame: msp.EncodeNotification(msp.NotifySessionDeleteCompleted, raw, m.now().UnixMilli())}
	// The subscribers as they are now: a subscription that was catching
	// up meanwhile registers either before this, and is told here, or
	// after, and is told by the farewell.
	s.mu.Lock()
	if done.Outcome == msp.DeleteCompleted {
		s.erasedLocked(&n)
	}
	subs := make([]Subscriber, 0, len(s.subs)+1)
	for sub := range s.subs {
		subs = append(subs, sub)
	}
	s.mu.Unlock()
	told := map[Subscriber]bool{}
	for _, sub := range append(subs, caller) {
		if sub != nil && !told[sub] {
			told[sub] = true
			sub.Deliver(n)
		}
	}
	m.listeners.deliver(owner, func(sub Subscriber) bool { return told[sub] }, n)
	if c := m.cfg.Cluster; c != nil {
		c.Publish(s.key, n, Position{}) // the followers' subscribers
		c.PublishList(owner, n)
	}
}
