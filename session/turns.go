package session

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/turn"
)

// StartTurn serves turn/start: it admits the turn durably (started or
// queued behind the running one) and returns the ack. launch starts the
// session's queue; call it once the ack is sent, so that turn/started
// follows the ack on the wire.
func (m *Manager) StartTurn(ctx context.Context, raw json.RawMessage) (json.RawMessage, func(), error) {
	var p msp.TurnStartParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, msp.ErrInvalidParams("", "turn/start params: %v", err)
	}
	s, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	resp, _, err := m.ledger.run(ctx, p.CommandID, msp.MethodTurnStart, raw, func(a *admission) (json.RawMessage, error) {
		// Checked only for a new command: a replay gets its recorded ack
		// even after the configuration (frame size, providers) changed.
		text, err := m.checkTurn(p)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := m.checkProvider(s.st.ProviderID); err != nil {
			return nil, err
		}
		if len(s.st.Queue) >= m.cfg.MaxQueuedTurns {
			e := msp.NewError(msp.CodeBackpressured, msp.KindBackpressured, "session %s already has %d queued turns", s.id, len(s.st.Queue))
			e.Data.Capacity = m.cfg.MaxQueuedTurns
			retry := true
			e.Data.Retryable = &retry
			return nil, e
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
		pt := pendingTurn{TurnID: ack.TurnID, CommandID: p.CommandID, Text: text, DisplayText: p.DisplayText,
			ResponseSchema: p.ResponseSchema, Retry: p.Retry, AdmittedAt: m.now()}
		if p.MaxTokens != nil {
			pt.MaxTokens = *p.MaxTokens
		}
		st := s.st.clone()
		st.Queue = append(st.Queue, pt)
		if err := s.appendLocked(ctx, nil, &st, a.entry(res, false)); err != nil {
			return nil, msp.ErrInternal("admitting turn: %v", err)
		}
		return res, nil
	})
	if err != nil {
		return nil, nil, err
	}
	// Kicked for a replay too: the first admission's launch may have been
	// lost with its connection, and a kick with nothing queued does nothing.
	return resp, func() { m.kick(s) }, nil
}

// checkTurn validates a new turn/start and returns its input text.
func (m *Manager) checkTurn(p msp.TurnStartParams) (string, error) {
	text, err := inputText(p.Input)
	if err != nil {
		return "", err
	}
	// The input comes back as the userMessage item: that event must fit a
	// frame.
	if encoded, _ := msp.Marshal(text); len(encoded) > m.frameBudget() {
		e := msp.NewError(msp.CodeInputTooLarge, msp.KindInputTooLarge, "turn input encodes to %d bytes; at most %d fit one frame", len(encoded), m.frameBudget())
		e.Data.LimitBytes = int64(m.frameBudget())
		return "", e
	}
	if p.IfBusy != "" && p.IfBusy != msp.IfBusyQueue {
		e := msp.ErrInvalidParams("ifBusy", "ifBusy %q is not supported by this host; use \"queue\"", p.IfBusy)
		e.Data.Reason = "unsupported"
		return "", e
	}
	if len(p.ResponseSchema) > 0 {
		if _, err := turn.CompileSchema(p.ResponseSchema); err != nil {
			return "", msp.ErrInvalidParams("responseSchema", "%v", err)
		}
	}
	return text, nil
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

// inputText joins a turn's text parts; mspd's models take text only.
func inputText(parts []msp.TurnInputPart) (string, error) {
	if len(parts) == 0 {
		return "", msp.ErrInvalidParams("input", "input must have at least one part")
	}
	var b strings.Builder
	for i, part := range parts {
		if part.Type != "text" {
			return "", msp.ErrInvalidParams(fmt.Sprintf("input.%d.type", i), "input part type %q is not supported by this host (text only)", part.Type)
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(part.Text)
	}
	if strings.TrimSpace(b.String()) == "" {
		return "", msp.ErrInvalidParams("input.0.text", "input has no text")
	}
	return b.String(), nil
}

// StopTurn serves turn/interrupt and turn/cancel: the active turn (the
// named one, or the current one when none is named) is cancelled; its
// terminal follows as turn/completed "cancelled". Queued turns stay queued.
func (m *Manager) StopTurn(ctx context.Context, method string, raw json.RawMessage) (json.RawMessage, error) {
	var p msp.TurnStopParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, msp.ErrInvalidParams("", "%s params: %v", method, err)
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

// kick makes sure a goroutine is running s's queue.
func (m *Manager) kick(s *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.working || m.ctx.Err() != nil {
		return
	}
	s.working = true
	m.turns.Add(1)
	go func() {
		defer m.turns.Done()
		m.work(s)
	}()
}

// work runs s's queued turns in order until the queue is empty.
func (m *Manager) work(s *session) {
	for {
		ctx, spec, ok := m.launchNext(s)
		if !ok {
			return
		}
		out := m.cfg.Runner.Run(ctx, spec, sink{s: s})
		m.finish(s, spec, out)
	}
}

// launchNext takes the next queued turn and appends turn/started and its
// userMessage item; ok is false when there is nothing (more) to run.
func (m *Manager) launchNext(s *session) (context.Context, turn.Spec, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var backoff time.Duration
	for {
		if len(s.st.Queue) == 0 || m.ctx.Err() != nil {
			s.working = false
			return nil, turn.Spec{}, false
		}
		st := s.st.clone()
		pt := st.Queue[0]
		st.Queue = st.Queue[1:]
		st.Active = &pt
		if st.FirstUserPrompt == "" {
			st.FirstUserPrompt = firstLine(pt.Text, 200)
		}
		text := pt.Text
		turnID := pt.TurnID
		user := msp.Item{ItemID: newID(), Kind: msp.ItemUserMessage, Revision: 1, Status: msp.ItemCompleted,
			TurnID: &turnID, Text: &text, CommandID: pt.CommandID, DisplayText: pt.DisplayText, RecordedAt: wireTime(m.now())}
		evs := []event{
			{msp.NotifyTurnStarted, &msp.TurnStartedParams{CommandID: pt.CommandID, TurnID: pt.TurnID}},
			{msp.NotifyItemCompleted, &msp.ItemParams{Item: user}},
		}
		if err := s.appendLocked(m.ctx, evs, &st); err != nil {
			// The log refuses writes. The turn stays queued, in memory and
			// in the stored row, and the launch is tried again: dropping
			// it would leave its wait unsettled for good.
			m.log.Error("launching turn; retrying", "session", s.id, "turn", pt.TurnID, "err", err)
			if !m.pauseLocked(s, &backoff) {
				s.working = false
				return nil, turn.Spec{}, false
			}
			continue
		}
		s.history = append(s.history, provider.Message{Role: provider.RoleUser, Text: text})
		ctx, cancel := context.WithCancel(m.ctx)
		s.cancel = cancel
		spec := turn.Spec{
			SessionID:      s.id,
			TurnID:         pt.TurnID,
			History:        append([]provider.Message(nil), s.history...),
			ProviderID:     deref(st.ProviderID),
			Model:          deref(st.ModelID),
			MaxTokens:      pt.MaxTokens,
			ResponseSchema: pt.ResponseSchema,
			Retry:          pt.Retry,
		}
		return ctx, spec, true
	}
}

// pauseLocked waits out a failed write before the next try, with s.mu
// released meanwhile; backoff doubles from 100 ms to 5 s. It returns false
// when the manager closes: what was not written stays in the stored row
// for the next start to settle.
func (m *Manager) pauseLocked(s *session, backoff *time.Duration) bool {
	*backoff = min(max(2**backoff, 100*time.Millisecond), 5*time.Second)
	s.mu.Unlock()
	defer s.mu.Lock()
	select {
	case <-m.ctx.Done():
		return false
	case <-time.After(*backoff):
		return true
	}
}

// finish appends a turn's terminal together with the state that retires it.
func (m *Manager) finish(s *session, spec turn.Spec, out turn.Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		s.cancel()
		s.cancel = nil
	}
	done := out.Completed
	done.TurnID = spec.TurnID
	// Shutting down, not stopped by a user: say why.
	if done.Terminal == msp.TerminalCancelled && m.ctx.Err() != nil && done.Reason == "" {
		done.Reason = "host shutting down"
	}
	// The terminal must land even while the manager shuts down. Until it
	// does, the turn stays active: retiring it in memory would let the
	// next state write drop it from the stored row, unsettled for good.
	ctx := context.WithoutCancel(m.ctx)
	var backoff time.Duration
	for {
		// Built afresh on each try: turns may have been queued meanwhile.
		st := s.st.clone()
		st.Active = nil
		st.TurnCount++
		err := s.appendLocked(ctx, []event{{msp.NotifyTurnCompleted, &done}}, &st)
		if err == nil {
			break
		}
		m.log.Error("appending turn terminal; retrying", "session", s.id, "turn", spec.TurnID, "err", err)
		if !m.pauseLocked(s, &backoff) {
			return // the stored row still holds the turn: the next start settles it
		}
	}
	// The items' final states are durable now; a reader resuming from
	// inside the turn gets a view/gap and pages them.
	s.deltas.reset()
	if done.Terminal == msp.TerminalCompleted && out.Answer != "" {
		s.history = append(s.history, provider.Message{Role: provider.RoleAssistant, Text: out.Answer})
	}
}

// settleAbandoned closes what a dead process left open: its open items
// fail, its running turn fails with hostRestarted, and queued turns that
// never launched fail with launchError (no turn/started).
func (s *session) settleAbandoned(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st.clone()
	var evs []event
	for _, oi := range s.open {
		it := oi.item
		it.Revision++
		it.Status = msp.ItemFailed
		// Its deltas were ephemeral and died with the process: the text
		// is what is known, marked as cut short.
		text := oi.text.String()
		it.Text = &text
		it.Truncated = true
		evs = append(evs, event{msp.NotifyItemCompleted, &msp.ItemParams{Item: it}})
	}
	if st.Active != nil {
		evs = append(evs, event{msp.NotifyTurnCompleted, &msp.TurnCompletedParams{TurnID: st.Active.TurnID,
			Terminal: msp.TerminalFailed, Reason: "the host restarted while the turn was running",
			Error: &msp.TurnError{Kind: msp.TurnErrorHostRestarted, Message: "the server restarted while this turn was running", Retryable: true}}})
		st.TurnCount++
		st.Active = nil
	}
	for _, q := range st.Queue {
		evs = append(evs, event{msp.NotifyTurnCompleted, &msp.TurnCompletedParams{TurnID: q.TurnID,
			Terminal: msp.TerminalFailed, Reason: "the host restarted before the turn launched",
			Error: &msp.TurnError{Kind: msp.TurnErrorLaunch, Message: "the server restarted before this queued turn launched", Retryable: true}}})
	}
	st.Queue = nil
	if err := s.appendLocked(ctx, evs, &st); err != nil {
		return err
	}
	clear(s.open)
	return nil
}

func firstLine(s string, limit int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > limit {
		return string(r[:limit])
	}
	return s
}

// sink is how a running turn appends to its session.
type sink struct{ s *session }

func (k sink) Emit(ctx context.Context, method string, params msp.ViewParams) error {
	return k.s.emit(ctx, method, params)
}

func (k sink) Delta(itemID, text string) { k.s.delta(itemID, text) }

var _ turn.Sink = sink{}
