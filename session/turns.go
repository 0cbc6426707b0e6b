package session

import (
	"context"
	"encoding/json"
	"strings"

	"mspd/schema/msp"
	"mspd/store"
	"mspd/turn"
)

// StartTurn serves turn/start: it admits the turn durably and returns the
// ack. A turn for an idle session is launched in the same commit as its
// admission (turn/started and the userMessage item: one fsync, not two);
// otherwise it is queued behind the running one. launch starts the
// session's worker; call it once the ack is sent: the caller (sub, may be
// nil) is given the turn's events only then, so that turn/started follows
// the ack on its wire.
func (m *Manager) StartTurn(ctx context.Context, sub Subscriber, raw json.RawMessage) (json.RawMessage, func(), error) {
	var p msp.TurnStartParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, msp.ErrInvalidParams("", "turn/start params: %v", err)
	}
	if res, ok, err := m.forward(ctx, p.SessionID, msp.MethodTurnStart, raw); ok {
		return res, func() {}, err
	}
	s, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	// Every way this admission succeeds commits its ledger entry.
	resp, _, err := m.ledger.runAdmitFirst(ctx, p.CommandID, msp.MethodTurnStart, raw, func(a *admission) (json.RawMessage, error) {
		// A replay that fails these checks, or that passes them and then
		// conflicts in its commit, gets its recorded ack: even after the
		// configuration (frame size, providers) changed.
		in, err := m.checkTurn(p)
		if err != nil {
			return nil, err
		}
		if err := m.refuseWhileDraining(); err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := m.checkProvider(s.st.ProviderID); err != nil {
			return nil, err
		}
		pt := pendingTurn{TurnID: p.CommandID, CommandID: p.CommandID, Text: in.text, UserItemID: newID(), DisplayText: p.DisplayText}
		if p.Regenerate != "" {
			if pt, err = m.regenerationLocked(ctx, s, a, p, in); err != nil {
				return nil, err
			}
		} else if err := m.checkImagesTaken(&s.st, in); err != nil {
			return nil, err
		}
		if err := m.checkQueueLocked(s); err != nil {
			return nil, err
		}
		ack := msp.TurnStartResult{CommandID: p.CommandID, Status: msp.StatusAccepted, TurnID: p.CommandID,
			Disposition: msp.DispositionStarted, StartedNewTurn: true}
		if s.st.busy() {
			ack.Disposition, ack.StartedNewTurn = msp.DispositionQueued, false
		}
		res, err := msp.Marshal(ack)
		if err != nil {
			return nil, msp.ErrInternal("encoding ack: %v", err)
		}
		pt.ResponseSchema, pt.Retry, pt.ReasoningEffort, pt.AdmittedAt = p.ResponseSchema, p.Retry, p.ReasoningEffort, m.now()
		// Its images are stored once, here, ahead of the rest of the
		// admission's commit (a regeneration's are its turn's, stored).
		images, stored := s.imageRecords(pt.UserItemID, in)
		if len(stored) > 0 {
			pt.Images = stored
		}
		if p.MaxTokens != nil {
			pt.MaxTokens = *p.MaxTokens
		}
		if p.MaxSteps != nil {
			pt.MaxSteps = *p.MaxSteps
		}
		if err := m.admitLocked(ctx, s, sub, pt, images, a.entry(res, false)); err != nil {
			return nil, msp.ErrInternal("admitting turn: %v", err)
		}
		return res, nil
	})
	if err != nil {
		return nil, nil, err
	}
	// Kicked for a replay too: the first admission's launch may have been
	// lost with its connection, and a kick with nothing to run does nothing.
	return resp, func() {
		s.releaseHeld()
		m.kick(s)
	}, nil
}

// admitLocked commits an admitted turn (pt, with its images' records and
// the command's ledger entry): launched in the same commit when the session
// is idle and can run it — sub is then held so that the turn's events follow
// the ack on its wire — and queued behind the running turn otherwise.
// s.mu must be held.
func (m *Manager) admitLocked(ctx context.Context, s *session, sub Subscriber, pt pendingTurn, before []event, entry store.Command) error {
	st := s.st.clone()
	if !s.st.busy() && !s.working && !s.broken && m.ctx.Err() == nil {
		if sub != nil {
			s.held = &heldFanout{sub: sub}
		}
		if err := s.launchLocked(ctx, pt, &st, before, entry); err != nil {
			s.held = nil
			return err
		}
		s.launched = true
		return nil
	}
	st.Queue = append(st.Queue, pt)
	return s.appendLocked(ctx, before, &st, entry)
}

// refuseWhileDraining refuses a new turn while the server shuts down:
// overloaded, retryable on its successor.
func (m *Manager) refuseWhileDraining() error {
	if !m.draining.Load() {
		return nil
	}
	e := msp.NewError(msp.CodeOverloaded, msp.KindOverloaded, "the server is shutting down; retry on its successor")
	retry := true
	e.Data.Retryable = &retry
	return e
}

// checkQueueLocked refuses a turn that s's full queue has no room for:
// backpressured, retryable. s.mu must be held.
func (m *Manager) checkQueueLocked(s *session) error {
	if len(s.st.Queue) < m.cfg.MaxQueuedTurns {
		return nil
	}
	e := msp.NewError(msp.CodeBackpressured, msp.KindBackpressured, "session %s already has %d queued turns", s.id, len(s.st.Queue))
	e.Data.Capacity = m.cfg.MaxQueuedTurns
	retry := true
	e.Data.Retryable = &retry
	return e
}

// checkTurn validates a new turn/start and returns its input.
func (m *Manager) checkTurn(p msp.TurnStartParams) (turnInput, error) {
	in, err := readInput(p.Input)
	if p.Regenerate != "" {
		in, err = checkRegenerateInput(p)
	}
	if err != nil {
		return in, err
	}
	// The input comes back as the userMessage item: that event must fit a
	// frame (its images do not: the item names them).
	if encoded, _ := msp.Marshal(in.text); len(encoded) > m.frameBudget() {
		e := msp.NewError(msp.CodeInputTooLarge, msp.KindInputTooLarge, "turn input encodes to %d bytes; at most %d fit one frame", len(encoded), m.frameBudget())
		e.Data.LimitBytes = int64(m.frameBudget())
		return in, e
	}
	if p.IfBusy != "" && p.IfBusy != msp.IfBusyQueue {
		e := msp.ErrInvalidParams("ifBusy", "ifBusy %q is not supported by this host; use \"queue\"", p.IfBusy)
		e.Data.Reason = "unsupported"
		return in, e
	}
	if p.ReasoningEffort != "" {
		if err := msp.CheckReasoningEffort(p.ReasoningEffort, "reasoningEffort"); err != nil {
			return in, err
		}
	}
	if len(p.ResponseSchema) > 0 {
		if _, err := turn.CompileSchema(p.ResponseSchema); err != nil {
			return in, msp.ErrInvalidParams("responseSchema", "%v", err)
		}
	}
	return in, nil
}

// checkProvider refuses a turn of a session whose provider this server no
// longer runs (it was configured when the session started): its model id
// must not silently go to another provider.
func (m *Manager) checkProvider(providerID *string) error {
	id := deref(providerID)
	if id == "" {
		return nil // the default provider, whichever it is
	}
	served := id == m.cfg.ProviderID
	if m.cfg.Catalog != nil {
		served = m.cfg.Catalog.Serves(id)
	}
	if served {
		return nil
	}
	e := msp.ErrInvalidParams("sessionId", "the session's provider %q is not configured on this server", id)
	e.Data.Reason = "providerNotConfigured"
	e.Data.Details["providerId"] = id
	return e
}

// StopTurn serves turn/interrupt and turn/cancel: the active turn (the
// named one, or the current one when none is named) is cancelled; its
// terminal follows as turn/completed "cancelled". Queued turns stay queued.
func (m *Manager) StopTurn(ctx context.Context, method string, raw json.RawMessage) (json.RawMessage, error) {
	var p msp.TurnStopParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, msp.ErrInvalidParams("", "%s params: %v", method, err)
	}
	if res, ok, err := m.forward(ctx, p.SessionID, method, raw); ok {
		return res, err
	}
	if p.Retract {
		e := msp.ErrInvalidParams("retract", "retract is not supported by this host: the turn's input stays in the session")
		e.Data.Reason = "unsupported"
		return nil, e
	}
	s, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return nil, err
	}
	defer release()
	resp, _, err := m.ledger.run(ctx, p.CommandID, method, raw, func(a *admission) (json.RawMessage, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		active := s.st.Active
		if active == nil || (p.TurnID != "" && p.TurnID != active.TurnID) {
			target := p.TurnID
			if target == "" {
				target = "the current turn"
			}
			// Recorded: a replay of this command must not stop a turn that
			// started since.
			return nil, a.reject(ctx, m.store, msp.ErrCommandRejected(p.CommandID, msp.ReasonMissingRun, "%s is not running", target))
		}
		res, err := msp.Marshal(msp.CommandAck{CommandID: p.CommandID, Status: msp.StatusAccepted, TurnID: active.TurnID})
		if err != nil {
			return nil, msp.ErrInternal("encoding ack: %v", err)
		}
		if err := s.appendLocked(ctx, nil, nil, a.entry(res, false)); err != nil {
			return nil, msp.ErrInternal("recording %s: %v", method, err)
		}
		if s.cancel != nil {
			s.cancel()
		} else {
			// Its worker has not taken it yet (it was just admitted, or
			// is to be resumed): it starts stopped.
			s.stopDue = active.TurnID
		}
		return res, nil
	})
	return resp, err
}

// Unqueue serves turn/unqueue: a queued turn is withdrawn before it
// launches and turn/unqueued settles it.
func (m *Manager) Unqueue(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	var p msp.TurnStopParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, msp.ErrInvalidParams("", "turn/unqueue params: %v", err)
	}
	if res, ok, err := m.forward(ctx, p.SessionID, msp.MethodTurnUnqueue, raw); ok {
		return res, err
	}
	s, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return nil, err
	}
	defer release()
	resp, _, err := m.ledger.run(ctx, p.CommandID, msp.MethodTurnUnqueue, raw, func(a *admission) (json.RawMessage, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		st := s.st.clone()
		at := -1
		for i, q := range st.Queue {
			if q.TurnID == p.TurnID {
				at = i
			}
		}
		if at < 0 {
			return nil, a.reject(ctx, m.store, msp.ErrCommandRejected(p.CommandID, msp.ReasonNotQueued, "turn %s is not queued", p.TurnID))
		}
		q := st.Queue[at]
		st.Queue = append(st.Queue[:at], st.Queue[at+1:]...)
		res, err := msp.Marshal(msp.CommandAck{CommandID: p.CommandID, Status: msp.StatusAccepted, TurnID: q.TurnID})
		if err != nil {
			return nil, msp.ErrInternal("encoding ack: %v", err)
		}
		ev := event{msp.NotifyTurnUnqueued, &msp.TurnUnqueuedParams{CommandID: q.CommandID, TurnID: q.TurnID}}
		if err := s.appendLocked(ctx, []event{ev}, &st, a.entry(res, false)); err != nil {
			return nil, msp.ErrInternal("unqueueing turn: %v", err)
		}
		return res, nil
	})
	return resp, err
}

func firstLine(s string, limit int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > limit {
		return string(r[:limit])
	}
	return s
}
