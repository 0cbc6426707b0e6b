package session

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"mspd/schema/msp"
	"mspd/store"
	"mspd/turn"
)

// The scheduler runs each session's turns, one at a time and in order:
// the active turn first when it is being resumed, then the queue. A turn
// ends with a durable terminal, or — when the host stops it — stays
// active in the stored row with a checkpoint, and the next process resumes
// it as a new attempt. Queued turns are durable intake: they launch after
// a restart, in order, exactly once.

// writeTries bounds how often a scheduler write (a launch, a terminal) is
// tried before the scheduler gives up on the session until the next start.
const writeTries = 5

// kick makes sure a goroutine is running s's queue: one of the pool's,
// which keeps the stack a turn grows.
func (m *Manager) kick(s *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.working || s.broken || s.phase.deleted() || s.role != roleLeader || m.ctx.Err() != nil || m.draining.Load() {
		return
	}
	s.working = true
	done := make(chan struct{})
	s.workerDone = done
	m.turns.add()
	m.workers.add()
	m.pool.Go(func() {
		defer m.turns.done()
		defer m.workers.done()
		defer close(done)
		m.work(s)
	})
}

// work runs s's turns until there is nothing (more) it may run.
func (m *Manager) work(s *session) {
	for {
		ctx, spec, term, ok := m.launchNext(s)
		if !ok {
			return
		}
		m.running.Add(1)
		var out turn.Outcome
		if tools, err := m.turnTools(ctx, s); err != nil && ctx.Err() == nil {
			out = refusedTurn(spec, err)
		} else {
			// Stopped while its servers connected, the turn ends (or
			// stops for the next process) as the runner ends any.
			if tools != nil {
				spec.Tools = tools
			}
			out = m.cfg.Runner.Run(ctx, spec, sink{s: s})
		}
		m.running.Add(-1)
		if !m.finish(s, spec, out, term) {
			if m.ledAgain(s, term) {
				m.kick(s) // the turn it resumed waits for a worker of its own
			}
			return
		}
	}
}

// launchNext returns the turn to run next: the active one when it is to
// be resumed, else the first queued one, whose turn/started and userMessage
// item it appends. ok is false when there is nothing to run, the host is
// draining or stopping, or the log keeps refusing the launch (the turn then
// stays queued, durably, for the next kick or start), or this node no
// longer leads the session. term is the session's leading term it runs in.
func (m *Manager) launchNext(s *session) (_ context.Context, _ turn.Spec, term uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.ctx.Err() != nil || m.draining.Load() || s.broken || s.phase.deleted() || s.role != roleLeader {
		s.working = false
		return nil, turn.Spec{}, 0, false
	}
	term = s.term
	if a := s.st.Active; a != nil && (s.resume != nil || s.launched) {
		// Resumed after a restart, or launched with its admission.
		spec := m.specLocked(s, *a)
		spec.Resume, s.resume, s.launched = s.resume, nil, false
		ctx := m.runCtxLocked(s)
		if s.stopDue == a.TurnID {
			s.cancel() // stopped before it ran: it ends cancelled at once
		}
		s.stopDue = ""
		return ctx, spec, term, true
	}
	if s.st.Active != nil || len(s.st.Queue) == 0 {
		s.working = false
		return nil, turn.Spec{}, 0, false
	}
	var backoff time.Duration
	for try := 1; ; try++ {
		st := s.st.clone()
		pt := st.Queue[0]
		st.Queue = st.Queue[1:]
		err := s.launchLocked(m.ctx, pt, &st, nil)
		if err == nil {
			// As launched: with its start and its effort (launchLocked).
			return m.runCtxLocked(s), m.specLocked(s, *s.st.Active), term, true
		}
		// The turn stays queued, in memory and in the stored row: dropping
		// it would leave its wait unsettled for good.
		m.log.Error("launching turn", "session", s.id, "turn", pt.TurnID, "try", try, "err", err)
		if try == writeTries || !m.pauseLocked(s, &backoff) {
			s.working = false
			return nil, turn.Spec{}, 0, false
		}
	}
}

// launchLocked makes pt the active turn in st and appends its turn/started
// and userMessage item (and, for a session's first turn, its name), after
// the records before (a turn launched with its admission: its images) and
// with cmds, in one commit. s.mu must be held.
func (s *session) launchLocked(ctx context.Context, pt pendingTurn, st *state, before []event, cmds ...store.Command) error {
	m := s.m
	pt.StartedAt, pt.StartSeq = m.now(), s.head+1+int64(len(before))
	pt.ReasoningEffort = st.turnEffort(pt.ReasoningEffort)
	if c := m.cfg.Cluster; c != nil {
		pt.Node = c.Node()
	}
	st.Active = &pt
	label := pt.Text
	if strings.TrimSpace(label) == "" && len(pt.Images) > 0 {
		label = "[image]"
	}
	if st.FirstUserPrompt == "" && pt.Compact == "" {
		st.FirstUserPrompt = firstLine(label, 200)
	}
	text, turnID := pt.Text, pt.TurnID
	user := msp.Item{ItemID: cmp.Or(pt.UserItemID, newID()), Kind: msp.ItemUserMessage, Revision: 1, Status: msp.ItemCompleted,
		TurnID: &turnID, Text: &text, CommandID: pt.CommandID, DisplayText: pt.DisplayText, RecordedAt: wireTime(m.now()),
		Attachments: attachments(pt.Images), Regenerates: pt.Regenerates}
	evs := append(before[:len(before):len(before)],
		event{msp.NotifyTurnStarted, &msp.TurnStartedParams{CommandID: pt.CommandID, TurnID: pt.TurnID, Regenerates: pt.Regenerates}})
	if pt.Compact != "" {
		// session/compact's turn: no message of the user's.
		if err := s.appendLocked(ctx, evs, st, cmds...); err != nil {
			return err
		}
		s.listChangedLocked()
		return nil
	}
	evs = append(evs, event{msp.NotifyItemCompleted, &msp.ItemParams{Item: user}})
	if st.Name == "" {
		// Named from its first message, as it starts, not after the
		// answer.
		st.Name = normalizeName(firstLine(label, 80))
		evs = append(evs, event{msp.NotifySessionNameChanged, &msp.SessionNameChangedParams{Name: st.Name}})
	}
	if err := s.appendLocked(ctx, evs, st, cmds...); err != nil {
		return err
	}
	if pt.Regenerates != "" {
		s.history = s.window.supersede(s.history, pt.Regenerates)
	}
	s.window.latest.begin(user, len(s.history), s.window.cut)
	s.history = appendHistory(s.history, user)
	s.listChangedLocked()
	return nil
}

// specLocked is what the runner needs of an active turn.
func (m *Manager) specLocked(s *session, a pendingTurn) turn.Spec {
	spec := turn.Spec{
		SessionID: s.id,
		TurnID:    a.TurnID,
		// History is only ever appended to, or replaced whole, so the
		// turn shares its prefix rather than copying a long chat every
		// turn; the cap makes an append on either side reallocate.
		History:        s.history[:len(s.history):len(s.history)],
		ProviderID:     deref(s.st.ProviderID),
		Model:          deref(s.st.ModelID),
		MaxTokens:      a.MaxTokens,
		MaxSteps:       a.MaxSteps,
		ResponseSchema: a.ResponseSchema,
		Retry:          a.Retry,
		Tools:          m.cfg.Tools,
		Approvals:      approver{s},
		Instructions:   s.st.Instructions,
		Images:         imageLoader{m.store, s.key},
		Context:        s.window.context(),
		Compact:        a.Compact,
	}
	spec.ReasoningEffort = a.ReasoningEffort
	return spec
}

// runCtxLocked is a running turn's context: the user's stop cancels it
// alone (s.cancel), the host's stop (Manager.Close) all of them with
// turn.ErrHostStopping, and a draining host the one waiting for a
// person's approval the same way (s.park).
func (m *Manager) runCtxLocked(s *session) context.Context {
	ctx, cancel := context.WithCancelCause(m.ctx)
	s.cancel = func() { cancel(context.Canceled) }
	s.park = func() { cancel(turn.ErrHostStopping) }
	return ctx
}

// pauseLocked waits out a failed write before the next try, with s.mu
// released meanwhile; backoff doubles from 100 ms to 2 s. It returns false
// when the manager stops: what was not written stays in the stored row for
// the next start.
func (m *Manager) pauseLocked(s *session, backoff *time.Duration) bool {
	*backoff = min(max(2**backoff, 100*time.Millisecond), 2*time.Second)
	s.mu.Unlock()
	defer s.mu.Lock()
	select {
	case <-m.ctx.Done():
		return false
	case <-time.After(*backoff):
		return true
	}
}

// finish records how a run went: the terminal together with the state
// that retires the turn, or, for a turn the host stopped, its checkpoint.
// It reports whether the worker may go on with the session.
func (m *Manager) finish(s *session, spec turn.Spec, out turn.Outcome, term uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		s.cancel()
		s.cancel, s.park = nil, nil
	}
	if s.role != roleLeader || s.term != term {
		// Given up to another node while it ran (demoteLocked), and
		// perhaps led here again since: nothing of this run is this
		// node's to write, whatever it ended in (a sink write a follower
		// refused fails a turn). The leader resumes from what is stored.
		s.working = false
		return false
	}
	if s.phase.deleted() {
		s.working = false
		return false // erased: nothing of it is written any more
	}
	// Writes land even while the manager stops; log lines about the turn
	// carry its trace id.
	ctx := context.WithoutCancel(m.ctx)
	lctx := trace.ContextWithSpanContext(ctx, out.Trace)
	held := turnEvents(out.Held)
	if out.Stopped != nil {
		st := s.st.clone()
		if st.Active != nil {
			st.Active.Checkpoint = out.Stopped
		}
		if err := s.emitLocked(ctx, held, &st); err != nil {
			// The last notice's checkpoint stays: the next start resumes
			// from it, counting the attempt that was in flight.
			m.log.WarnContext(lctx, "recording a stopped turn's checkpoint", "session", s.id, "turn", spec.TurnID, "err", err)
		}
		s.working = false
		return false
	}
	done := out.Completed
	done.TurnID = spec.TurnID
	var backoff time.Duration
	for try := 1; ; try++ {
		// Built afresh on each try: turns may have been queued meanwhile.
		st := s.st.clone()
		st.Active = nil
		st.TurnCount++
		// The last attempt's closing events and the terminal: one write.
		err := s.emitLocked(ctx, append(held[:len(held):len(held)], event{msp.NotifyTurnCompleted, &done}), &st)
		if err == nil {
			break
		}
		m.log.ErrorContext(lctx, "appending turn terminal", "session", s.id, "turn", spec.TurnID, "try", try, "err", err)
		if try == writeTries || !m.pauseLocked(s, &backoff) {
			m.abandonLocked(s, done, err)
			return false
		}
	}
	// The items' final states are durable now; a reader resuming from
	// inside the turn gets a view/gap and pages them.
	s.deltas.reset()
	s.listChangedLocked()
	// The turn's steps, tool calls and answer, as a load would fold them:
	// without their reasoning, which no later turn sends.
	s.history = append(s.history, withoutReasoning(out.Messages)...)
	s.window.turnCompleted(spec.TurnID, len(s.history))
	return true
}

// ledAgain tells whether this node leads s again in a later term than
// term, the one a worker that just ended ran in.
func (m *Manager) ledAgain(s *session, term uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.role == roleLeader && s.term != term
}

// abandonLocked gives up on a session whose log refuses the turn's
// terminal: its readers are told the turn failed (a terminal that is not
// durable, at an ephemeral cursor), and the session takes no more commands
// until the next start, which finds the turn still active in the stored
// row and resumes it. Nothing loops on a broken store.
func (m *Manager) abandonLocked(s *session, done msp.TurnCompletedParams, cause error) {
	s.broken, s.working = true, false
	done.Terminal = msp.TerminalFailed
	done.Error = &msp.TurnError{Kind: msp.TurnErrorLog, Retryable: true,
		Message: fmt.Sprintf("the session log refuses writes (%v); the turn resumes when the server restarts", cause)}
	at := s.nextEphemeralLocked()
	if s.head == s.loadedHead {
		// No commit since the load: the process before may have handed
		// out sub-positions of this head, so the terminal takes the last
		// one, which the load counts as lost. Nothing follows it here:
		// the session is broken until the next start.
		at.sub = math.MaxInt64
	}
	done.SessionID, done.ViewCursor, done.SourceRange = s.id, at.String(), nil
	raw, err := msp.Marshal(&done)
	if err != nil {
		return
	}
	s.fanOutLocked(Notification{SessionID: s.id, Method: msp.NotifyTurnCompleted, Cursor: at.String(),
		Frame: msp.EncodeNotification(msp.NotifyTurnCompleted, raw, m.now().UnixMilli())})
}

// recoverLocked prepares what a previous process left running: its open
// items close as failed (their deltas died with it; the text known is
// kept), the lost attempt's answer among them even when it opened on an
// ephemeral event and left no trace in the log, and its active turn is
// set to resume, the attempt that was in flight counted. Queued turns
// stay queued. s.mu must be held.
func (s *session) recoverLocked(ctx context.Context) error {
	return s.resumeLocked(ctx, s.m.stoppedNode)
}

// resumeLocked is recoverLocked for a turn that stopped for another
// reason than its process: stopped says what stopped it, for the notice
// of its next attempt. s.mu must be held.
func (s *session) resumeLocked(ctx context.Context, stopped func(pendingTurn) string) error {
	if s.phase.deleted() {
		return nil // half-erased: nothing is written to it
	}
	var evs []event
	closing := func(it msp.Item) {
		it.Revision++
		it.Status = msp.ItemFailed
		it.Truncated = true
		if it.Kind == msp.ItemCompaction {
			// Its summary was not kept; the turn's next attempt runs on.
			it.Text, it.Truncated, it.Outcome = nil, false, msp.CompactionFailed
			it.FailureReason = "the server stopped during the compaction"
		}
		it.RecordedAt = wireTime(s.m.now())
		evs = append(evs, event{msp.NotifyItemCompleted, &msp.ItemParams{Item: it}})
	}
	// An open answer was streaming: its attempt was in flight. Open tool
	// calls are the active turn's to settle, by its replay rule; one of
	// no active turn (none should be) fails with its outcome unknown.
	inFlight := false
	var calls []msp.Item
	for _, oi := range s.open {
		it := oi.item
		switch {
		case it.Kind != msp.ItemToolCall:
			inFlight = true
			closing(oi.current())
		case s.st.Active != nil && it.TurnID != nil && *it.TurnID == s.st.Active.TurnID:
			calls = append(calls, it)
		default:
			it.Revision++
			it.Status, it.FailureKind = msp.ItemFailed, turn.FailureUnknownOutcome
			it.FailureReason = "the server stopped during the call; whether it took effect is unknown"
			it.RecordedAt = wireTime(s.m.now())
			evs = append(evs, event{msp.NotifyItemCompleted, &msp.ItemParams{Item: it}})
		}
	}
	slices.SortFunc(calls, func(a, b msp.Item) int {
		return cmp.Or(cmp.Compare(a.RecordedAt, b.RecordedAt), cmp.Compare(a.ItemID, b.ItemID))
	})
	var res *turn.Resumption
	if a := s.st.Active; a != nil {
		so, err := s.turnSoFar(ctx, *a)
		if err != nil {
			return err
		}
		r, lost := resumption(*a, inFlight, s.m.now(), stopped(*a))
		r.Usage, r.OpenCalls, r.Unapproved = so.usage, calls, s.unapprovedLocked(calls)
		res = &r
		// The lost attempt's answer may have opened on an ephemeral
		// event, which died with the process: a client that saw it open
		// is told it failed, as it is of a discarded attempt's.
		if id := turn.AnswerItemID(a.TurnID, lost); lost > 0 && s.open[id] == nil && !so.closed[id] {
			turnID, empty := a.TurnID, ""
			closing(msp.Item{ItemID: id, Kind: msp.ItemAgentMessage, Revision: 1, Status: msp.ItemInProgress, TurnID: &turnID, Text: &empty})
		}
	}
	if len(evs) > 0 {
		if err := s.appendLocked(ctx, evs, nil); err != nil {
			return err
		}
		for id, oi := range s.open {
			if oi.item.Kind != msp.ItemToolCall || !slices.ContainsFunc(calls, func(c msp.Item) bool { return c.ItemID == id }) {
				delete(s.open, id)
			}
		}
	}
	s.resume = res
	return nil
}

// resumption decides how a turn lost with its process goes on; who says
// what stopped ("the server restarted", "node b stopped"). A stopping
// host recorded exactly where the turn stood. A process that died left
// its last retry notice's checkpoint, marked once the next request began:
// if it had begun, or an item was streaming, that attempt counts as lost
// (so a turn that keeps crashing the server runs out of attempts); a
// process that died during a backoff lost nothing, and the backoff's rest
// is waited out. The mark, not this node's clock, says which: clocks of
// two nodes can disagree. A checkpoint without it (an older build's) goes
// by the clock: the attempt counts once it was due.
//
// lostAttempt is the number of the attempt cut off in flight, 0 when none
// was.
func resumption(a pendingTurn, inFlight bool, now time.Time, who string) (res turn.Resumption, lostAttempt int) {
	cp := turn.Checkpoint{}
	if a.Checkpoint != nil {
		cp = *a.Checkpoint
	}
	made, lost := cp.Attempts, cp.Lost
	if !cp.Stopped {
		lost = inFlight || a.Checkpoint == nil
		if cp.Begun != nil {
			lost = lost || *cp.Begun
		} else {
			lost = lost || !now.Before(cp.NextAt) // an older build's checkpoint
		}
		if lost {
			made++
		}
	}
	res = turn.Resumption{Attempts: made, MaxTokens: cp.MaxTokens, StartedAt: a.StartedAt, Step: cp.Step, StepBase: cp.StepBase,
		Route: cp.Route, StoppedBy: who}
	if res.StartedAt.IsZero() {
		res.StartedAt = now // admitted by an older build
	}
	if lost {
		res.Reason = fmt.Sprintf("%s during attempt %d", who, made)
		return res, made
	}
	res.Reason = fmt.Sprintf("%s during the backoff before attempt %d", who, made+1)
	res.Delay = cp.NextAt.Sub(now)
	return res, 0
}

// turnRecord is what the log holds of the active turn so far.
type turnRecord struct {
	usage  *msp.TokenUsage // the sum its responses reported; nil when none did
	closed map[string]bool // the items it completed
}

// turnSoFar reads the active turn's records: the usage of its
// session/tokenUsage events and the items it completed.
func (s *session) turnSoFar(ctx context.Context, a pendingTurn) (turnRecord, error) {
	so := turnRecord{closed: map[string]bool{}}
	after := max(a.StartSeq-1, 0)
	for {
		recs, err := s.m.store.Records(ctx, s.key, after, logPage(1000))
		if err != nil {
			return so, err
		}
		if len(recs) == 0 {
			return so, nil
		}
		for _, r := range recs {
			after = r.Seq
			switch r.Method {
			case msp.NotifyItemCompleted:
				var p msp.ItemParams
				if err := json.Unmarshal(r.Params, &p); err != nil {
					return so, fmt.Errorf("record %d: %w", r.Seq, err)
				}
				so.closed[p.Item.ItemID] = true
			case msp.NotifySessionTokenUsage:
				var p msp.SessionTokenUsageParams
				if err := json.Unmarshal(r.Params, &p); err != nil {
					return so, fmt.Errorf("record %d: %w", r.Seq, err)
				}
				if p.TurnID != a.TurnID {
					continue
				}
				if so.usage == nil {
					so.usage = &msp.TokenUsage{}
				}
				so.usage.InputTokens += p.Usage.InputTokens
				so.usage.OutputTokens += p.Usage.OutputTokens
				so.usage.CachedTokens += p.Usage.CachedTokens
				so.usage.ReasoningTokens += p.Usage.ReasoningTokens
			}
		}
	}
}

// Drain makes the manager refuse new turns (overloaded, retryable) and
// launch no queued ones, while running turns go on; part of a graceful
// shutdown.
func (m *Manager) Drain() { m.draining.Store(true) }

// StopWaiting stops the turns waiting for a person's approval as the host
// stops them (their approvals stay pending, for the next process to ask
// again), and those that start waiting later: a graceful shutdown waits
// for running turns to finish, not for people.
func (m *Manager) StopWaiting() {
	m.stopWaiting.Store(true)
	loaded := m.loadedSessions()
	for _, s := range loaded {
		s.mu.Lock()
		if s.awaiting > 0 && s.park != nil {
			s.park()
		}
		s.mu.Unlock()
	}
}

// CancelRunning stops every running turn as a user's stop would: each
// ends with a durable cancelled terminal. For a stdio host whose client
// closed stdin (MSP's orderly drain); queued turns stay queued.
func (m *Manager) CancelRunning() {
	loaded := m.loadedSessions()
	for _, s := range loaded {
		s.mu.Lock()
		if s.cancel != nil {
			s.cancel()
		}
		s.mu.Unlock()
	}
}

// WaitIdle waits until no turn runs, or ctx ends.
func (m *Manager) WaitIdle(ctx context.Context) error {
	select {
	case <-m.workers.idle():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sink is how a running turn appends to its session.
type sink struct{ s *session }

func (k sink) Emit(ctx context.Context, method string, params msp.ViewParams) error {
	return k.s.emit(ctx, method, params)
}

func (k sink) EmitRetry(ctx context.Context, next turn.Checkpoint, events []turn.Event) error {
	return k.s.emitRetry(ctx, next, turnEvents(events))
}

func (k sink) BeginAttempt(ctx context.Context, cp turn.Checkpoint) error {
	return k.s.emitRetry(ctx, cp, nil)
}

func (k sink) Delta(itemID, text string) { k.s.delta(itemID, "", text) }

// DeltaField implements turn.FieldSink.
func (k sink) DeltaField(itemID, field, text string) { k.s.delta(itemID, field, text) }

var _ turn.FieldSink = sink{}

// emitRetry appends a retried attempt's closing events and its notice
// (none when a retried request begins) and, in the same commit, the
// checkpoint the active turn resumes from.
func (s *session) emitRetry(ctx context.Context, next turn.Checkpoint, evs []event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st.clone()
	if st.Active != nil {
		st.Active.Checkpoint = &next
	}
	return s.emitLocked(ctx, evs, &st)
}
