package session

// Compaction on the session's side: session/compact, and what the session
// keeps of its context window — the latest session/contextUsage, where
// its history may be cut, and the history its turns send, which a
// completed compaction item shortens to its summary and the turns after
// its boundary (turn.SummaryMessage). The log keeps every record, so
// session/read, view/page and a fork see every turn; the fold rebuilds
// the shortened history from the latest compaction item after a restart,
// and a fork cut before a compaction does not have it.

import (
	"context"
	"encoding/json"
	"fmt"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/store"
	"mspd/turn"
)

// contextWindow is what a session knows of its model's context window.
type contextWindow struct {
	usage *msp.ContextUsage // the latest session/contextUsage; nil before any
	// cut is where the history may be cut: after the last turn that
	// completed since the latest compaction; nil when none did.
	cut *turn.Cut
	// base is the history's length that has nothing to compact: 1 (the
	// summary) after a compaction, 0 before any.
	base     int
	lastTurn string // the latest turn that completed
	// latest is the latest turn with a user message, which a turn/start
	// may regenerate (versions.go): where it begins in the history.
	latest exchange
}

// turnCompleted notes turnID's terminal, the history then historyLen
// messages long: a turn that added to it may be compacted from now on.
func (w *contextWindow) turnCompleted(turnID string, historyLen int) {
	w.lastTurn = turnID
	w.latest.ended(turnID)
	if historyLen > w.base {
		w.cut = &turn.Cut{At: historyLen, Through: turnID}
	}
}

// compacted applies a completed compaction item to history h: the
// messages before its boundary give way to its summary. One whose
// boundary is not the session's cut (none should be) leaves h whole:
// sending too much is safe, sending too little is not.
func (w *contextWindow) compacted(h []provider.Message, it msp.Item) []provider.Message {
	if it.Kind != msp.ItemCompaction || it.Outcome != msp.CompactionCompacted || it.Text == nil {
		return h
	}
	c := w.cut
	if c == nil || c.Through != it.SummarizedThrough || c.At > len(h) {
		return h
	}
	out := make([]provider.Message, 0, 1+len(h)-c.At)
	out = append(append(out, turn.SummaryMessage(*it.Text)), h[c.At:]...)
	w.cut, w.base = nil, 1
	w.latest.compacted(it.SummarizedThrough, len(h)-len(out))
	return out
}

// context is what a turn launched now knows of the window.
func (w *contextWindow) context() turn.Context {
	c := turn.Context{}
	if w.usage != nil {
		u := *w.usage
		c.Usage = &u
	}
	if w.cut != nil {
		cut := *w.cut
		c.Cut = &cut
	}
	return c
}

// fold takes a record of the log into the window: a terminal, with the
// history folded so far historyLen long, or a session/contextUsage.
func (w *contextWindow) fold(r store.Record, historyLen int) error {
	switch r.Method {
	case msp.NotifyTurnCompleted:
		var p struct {
			TurnID string `json:"turnId"`
		}
		if err := json.Unmarshal(r.Params, &p); err != nil {
			return fmt.Errorf("record %d: %w", r.Seq, err)
		}
		w.turnCompleted(p.TurnID, historyLen)
	case msp.NotifySessionContextUsage:
		var p msp.SessionContextUsageParams
		if err := json.Unmarshal(r.Params, &p); err != nil {
			return fmt.Errorf("record %d: %w", r.Seq, err)
		}
		w.usage = &p.ContextUsage
	}
	return nil
}

// noteTurnEventsLocked keeps the window and the history in step with a
// running turn's events just appended: its session/contextUsage, and a
// completed compaction, which shortens what the next turns send. s.mu
// must be held.
func (s *session) noteTurnEventsLocked(evs []event) {
	for _, ev := range evs {
		switch p := ev.params.(type) {
		case *msp.SessionContextUsageParams:
			u := p.ContextUsage
			s.window.usage = &u
		case *msp.ItemParams:
			if ev.method == msp.NotifyItemCompleted && p.Item.Kind == msp.ItemCompaction {
				s.history = s.window.compacted(s.history, p.Item)
			}
		}
	}
}

// CompactSession serves session/compact: it admits a compaction of the
// session's context as a turn of its own (its turn id the command's id),
// launched at once when the session is idle and queued behind its turns
// otherwise; the ack is admission. A session with nothing to compact (no
// turn completed since it began or since its latest compaction, and none
// running or queued) answers noop, no_compactable_history, recorded like
// any ack. A turnId other than the session's latest is refused
// commandRejected missing_run. launch is StartTurn's.
func (m *Manager) CompactSession(ctx context.Context, sub Subscriber, raw json.RawMessage) (json.RawMessage, func(), error) {
	var p msp.SessionCompactParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, msp.ErrInvalidParams("", "session/compact params: %v", err)
	}
	if res, ok, err := m.forward(ctx, p.SessionID, msp.MethodSessionCompact, raw); ok {
		return res, func() {}, err
	}
	s, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	resp, _, err := m.ledger.run(ctx, p.CommandID, msp.MethodSessionCompact, raw, func(a *admission) (json.RawMessage, error) {
		if err := m.refuseWhileDraining(); err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if latest := s.latestTurnLocked(); p.TurnID != "" && p.TurnID != latest {
			// Recorded: a replay must not compact for a turn admitted since.
			return nil, a.reject(ctx, m.store, msp.ErrCommandRejected(p.CommandID, msp.ReasonMissingRun,
				"turn %s is not the latest turn of session %s: only the latest one's context can be compacted", p.TurnID, s.id))
		}
		if err := m.checkProvider(s.st.ProviderID); err != nil {
			return nil, err
		}
		ack := msp.SessionCompactResult{CommandID: p.CommandID, Status: msp.StatusAccepted}
		if !s.st.busy() && s.window.cut == nil {
			ack.Status, ack.Reason = msp.CompactNoop, msp.ReasonNoCompactableHistory
			res, err := msp.Marshal(ack)
			if err != nil {
				return nil, msp.ErrInternal("encoding ack: %v", err)
			}
			if err := s.appendLocked(ctx, nil, nil, a.entry(res, false)); err != nil {
				return nil, msp.ErrInternal("recording session/compact: %v", err)
			}
			return res, nil
		}
		if err := m.checkQueueLocked(s); err != nil {
			return nil, err
		}
		res, err := msp.Marshal(ack)
		if err != nil {
			return nil, msp.ErrInternal("encoding ack: %v", err)
		}
		pt := pendingTurn{TurnID: p.CommandID, CommandID: p.CommandID, Compact: msp.CompactionManual, AdmittedAt: m.now()}
		if err := m.admitLocked(ctx, s, sub, pt, nil, a.entry(res, false)); err != nil {
			return nil, msp.ErrInternal("admitting the compaction: %v", err)
		}
		return res, nil
	})
	if err != nil {
		return nil, nil, err
	}
	return resp, func() {
		s.releaseHeld()
		m.kick(s)
	}, nil
}

// latestTurnLocked is the session's latest turn: the last queued, else
// the running one, else the last that completed; "" for none. s.mu must
// be held.
func (s *session) latestTurnLocked() string {
	switch {
	case len(s.st.Queue) > 0:
		return s.st.Queue[len(s.st.Queue)-1].TurnID
	case s.st.Active != nil:
		return s.st.Active.TurnID
	}
	return s.window.lastTurn
}
