package session

// Approvals: a session's table of the approvals its log opened and
// resolved, kept the same way on the leader (appendLocked), on its
// followers (ingest) and at a load (fold), so it survives a restart and
// a takeover; and the session's side of a turn's waiting (approver).

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"mspd/schema/msp"
	"mspd/turn"
)

// approvalState is where an approval stands. It moves once, from
// requested to the resolution named for its decision, and never again:
//
//	requested ──▶ approved | approvedForSession | denied | timedOut | abort
type approvalState string

const (
	approvalRequested          approvalState = "requested"
	approvalApproved           approvalState = msp.DecisionApproved
	approvalApprovedForSession approvalState = msp.DecisionApprovedForSession
	approvalDenied             approvalState = msp.DecisionDenied
	approvalTimedOut           approvalState = msp.DecisionTimedOut
	approvalAborted            approvalState = msp.DecisionAbort
)

// approvalResolutions are the states an approval may be resolved to, by
// the decision that resolves it. A decision not listed (one a newer build
// may record) counts as a denial: it never lets a call run.
var approvalResolutions = map[string]approvalState{
	msp.DecisionApproved:           approvalApproved,
	msp.DecisionApprovedForSession: approvalApprovedForSession,
	msp.DecisionDenied:             approvalDenied,
	msp.DecisionTimedOut:           approvalTimedOut,
	msp.DecisionAbort:              approvalAborted,
}

// approval is one approval a session's log opened.
type approval struct {
	id     string
	state  approvalState
	tool   string // the tool's model-facing name: what approvedForSession grants
	itemID string
	turnID string
	seq    int64  // its approval/requested record: listPending's order
	cursor string // that record's viewCursor

	// While requested: approval/request's params (the record's, byte for
	// byte), the choices and the stage a decision must name.
	request     json.RawMessage
	choices     []msp.ApprovalChoice
	requirement msp.ApprovalRequirementRef

	// Once resolved: how, and what a person said with a denial (live
	// only: never stored, so never folded).
	resolution msp.ApprovalResolutionSummary
	feedback   string
	// settled is closed when the approval leaves requested.
	settled chan struct{}
}

// resolve moves a requested approval to the state decision names; it
// reports false for one resolved already (the first resolution holds).
func (a *approval) resolve(decision, by, cursor string) bool {
	if a.state != approvalRequested {
		return false
	}
	to, ok := approvalResolutions[decision]
	if !ok {
		to = approvalDenied
	}
	a.state = to
	a.resolution = msp.ApprovalResolutionSummary{Decision: decision, ResolvedBy: by, ViewCursor: cursor}
	a.request, a.choices = nil, nil
	close(a.settled)
	return true
}

// outcome is the resolution as the turn reads it.
func (a *approval) outcome() turn.Resolution {
	return turn.Resolution{Decision: string(a.state), By: a.resolution.ResolvedBy, Feedback: a.feedback}
}

// approvals is a session's table: every approval its log opened, by id,
// and the tools it approved for itself.
type approvals struct {
	byID    map[string]*approval
	granted map[string]bool // model-facing tool names approved for the session
	pending int             // approvals requested and not resolved
}

func newApprovals() approvals {
	return approvals{byID: map[string]*approval{}, granted: map[string]bool{}}
}

// foldsApprovals tells whether a record of method may change the table.
func foldsApprovals(method string) bool {
	return method == msp.NotifyApprovalRequested || method == msp.NotifyApprovalResolved || method == msp.NotifyTurnCompleted
}

// apply folds one durable record, record seq of the log, into the table,
// and returns the approval it opened, if it opened one. Applying a record
// twice changes nothing (a new leader catches up on records its load
// folded already).
func (t *approvals) apply(method string, params json.RawMessage, seq int64) (*approval, error) {
	switch method {
	case msp.NotifyApprovalRequested:
		var p msp.ApprovalRequestParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, fmt.Errorf("record %d: %w", seq, err)
		}
		if t.byID[p.ApprovalID] != nil {
			return nil, nil
		}
		// The params are cloned: a fold's records may share a page's buffer.
		a := &approval{id: p.ApprovalID, state: approvalRequested, tool: p.ToolName, itemID: p.ItemID, turnID: p.TurnID,
			seq: seq, cursor: p.ViewCursor, request: bytes.Clone(params), choices: p.AvailableChoices,
			requirement: p.CurrentRequirementID, settled: make(chan struct{})}
		t.byID[a.id] = a
		t.pending++
		return a, nil
	case msp.NotifyApprovalResolved:
		var p msp.ApprovalResolvedParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, fmt.Errorf("record %d: %w", seq, err)
		}
		if a := t.byID[p.ApprovalID]; a != nil && a.resolve(p.Decision, p.ResolvedBy, p.ViewCursor) {
			t.pending--
			if a.state == approvalApprovedForSession {
				t.granted[a.tool] = true
			}
		}
	case msp.NotifyTurnCompleted:
		if t.pending == 0 {
			return nil, nil
		}
		// A turn that ended left no one waiting for its approvals (only a
		// log that refused their resolution leaves any): they are
		// aborted, as its stop would have resolved them.
		var p msp.TurnCompletedParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, fmt.Errorf("record %d: %w", seq, err)
		}
		for _, a := range t.byID {
			if a.turnID == p.TurnID && a.resolve(msp.DecisionAbort, msp.ResolvedByPolicy, p.ViewCursor) {
				t.pending--
			}
		}
	}
	return nil, nil
}

// open lists the pending approvals in the order they were opened.
func (t *approvals) open() []*approval {
	if t.pending == 0 {
		return nil
	}
	out := make([]*approval, 0, t.pending)
	for _, a := range t.byID {
		if a.state == approvalRequested {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *approval) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// pointers are the pending approvals as a resume or a read lists them.
func (t *approvals) pointers() []msp.PendingRequest {
	out := []msp.PendingRequest{}
	for _, a := range t.open() {
		out = append(out, msp.PendingRequest{ApprovalID: a.id, Kind: msp.PendingApproval, ViewCursor: a.cursor})
	}
	return out
}

// Asker is a Subscriber that presents pending approvals (a connection
// sends approval/request). Ask must not block: it is called with the
// session's lock held.
type Asker interface {
	Ask(sessionID, method string, params json.RawMessage)
}

// askLocked presents approval a to sub, when sub presents approvals.
// s.mu must be held.
func (s *session) askLocked(sub Subscriber, a *approval) {
	if asker, ok := sub.(Asker); ok {
		asker.Ask(s.id, msp.RequestApproval, a.request)
	}
}

// askPendingLocked presents every pending approval to sub, which just
// subscribed: a client that comes back is asked again. s.mu must be held.
func (s *session) askPendingLocked(sub Subscriber) {
	for _, a := range s.approvals.open() {
		s.askLocked(sub, a)
	}
}

// noteLocked folds a durable record just appended or followed into the
// approvals table, and adds an approval it opened to opened, for
// askOpenedLocked once the records written with it are folded too (an
// approval the session's mode denies is opened and resolved in one
// commit, and nobody is asked). s.mu must be held.
func (s *session) noteLocked(method string, params json.RawMessage, seq int64, opened *[]*approval) {
	if !foldsApprovals(method) {
		return
	}
	a, err := s.approvals.apply(method, params, seq)
	if err != nil {
		s.m.log.Warn("folding an approval", "session", s.id, "err", err)
		return
	}
	if a != nil {
		*opened = append(*opened, a)
	}
}

// askOpenedLocked presents the approvals just opened that are still
// pending to every subscriber. s.mu must be held.
func (s *session) askOpenedLocked(opened []*approval) {
	for _, a := range opened {
		if a.state != approvalRequested {
			continue
		}
		for sub := range s.subs {
			s.askLocked(sub, a)
		}
	}
}

// noteFrameLocked folds a notification a follower received as it was
// published (its params read from its frame) and presents an approval it
// opened. The records of one commit come one by one, so a follower's
// readers may be asked for an approval whose resolution follows at once:
// their client drops it at its approval/resolved. s.mu must be held.
func (s *session) noteFrameLocked(n Notification, seq int64) {
	if !foldsApprovals(n.Method) {
		return
	}
	var f struct {
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(n.Frame, &f); err != nil {
		s.m.log.Warn("folding an approval", "session", s.id, "err", err)
		return
	}
	var opened []*approval
	s.noteLocked(n.Method, f.Params, seq, &opened)
	s.askOpenedLocked(opened)
}

// unapprovedLocked names the calls among open whose approval is pending:
// they never ran. s.mu must be held.
func (s *session) unapprovedLocked(open []msp.Item) map[string]bool {
	var out map[string]bool
	for _, it := range open {
		if a := s.approvals.byID[it.ApprovalID]; a != nil && a.state == approvalRequested {
			if out == nil {
				out = map[string]bool{}
			}
			out[it.ItemID] = true
		}
	}
	return out
}

// approver is a running turn's side of its session's approvals.
type approver struct{ s *session }

var _ turn.Approvals = approver{}

// errUnknownApproval is what a turn is told of an approval its session
// never opened.
var errUnknownApproval = errors.New("session: no such approval")

func (a approver) Gate(name string, info turn.ToolInfo) turn.Gate {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return turn.GateFor(s.st.approvalMode().Mode, info, s.approvals.granted[name])
}

func (a approver) Await(ctx context.Context, id string) (turn.Resolution, error) {
	s := a.s
	s.mu.Lock()
	ap := s.approvals.byID[id]
	if ap == nil {
		s.mu.Unlock()
		return turn.Resolution{}, errUnknownApproval
	}
	s.awaiting++
	if s.m.stopWaiting.Load() && ap.state == approvalRequested && s.park != nil {
		s.park() // a host shutting down waits for no one (see StopWaiting)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.awaiting--
		s.mu.Unlock()
	}()
	select {
	case <-ap.settled:
	case <-ctx.Done():
		return turn.Resolution{}, context.Cause(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return ap.outcome(), nil
}

func (a approver) Settle(ctx context.Context, id, decision string) (turn.Resolution, error) {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ap := s.approvals.byID[id]
	if ap == nil {
		return turn.Resolution{}, errUnknownApproval
	}
	if ap.state != approvalRequested {
		return ap.outcome(), nil // a person decided first
	}
	// A timeout is the server's policy; a stop is the user's.
	by := msp.ResolvedByPolicy
	if decision == msp.DecisionAbort {
		by = msp.ResolvedByUser
	}
	ev := turn.ApprovalResolved(id, ap.itemID, ap.turnID, turn.Resolution{Decision: decision, By: by}, "")
	if err := s.appendLocked(ctx, []event{{msp.NotifyApprovalResolved, ev}}, nil); err != nil {
		return turn.Resolution{}, err
	}
	return ap.outcome(), nil
}

func (a approver) Lookup(id string) (res turn.Resolution, resolved, known bool) {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ap := s.approvals.byID[id]
	if ap == nil {
		return turn.Resolution{}, false, false
	}
	return ap.outcome(), ap.state != approvalRequested, true
}

// DecideApproval serves approval/decide: a person's decision, checked
// against the approval as it stands (it exists, is pending, the decision
// names its current requirement and one of its choices), made durable as
// approval/resolved with its ledger entry before the ack. A refusal is
// recorded too, so a replay gets it again; the turn waiting for the
// approval goes on, with a denial's feedback, which is never stored.
func (m *Manager) DecideApproval(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	var p msp.ApprovalDecideParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, msp.ErrInvalidParams("", "approval/decide params: %v", err)
	}
	if res, ok, err := m.forward(ctx, p.SessionID, msp.MethodApprovalDecide, raw); ok {
		return res, err
	}
	s, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return nil, err
	}
	defer release()
	resp, _, err := m.ledger.run(ctx, p.CommandID, msp.MethodApprovalDecide, raw, func(a *admission) (json.RawMessage, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		ap, choice, refusal := s.checkDecision(p)
		if refusal != nil {
			return nil, a.reject(ctx, m.store, refusal)
		}
		feedback := deref(p.Feedback)
		if feedback != "" && !choice.AcceptsFeedback {
			return nil, msp.ErrInvalidParams("feedback", "choice %q takes no feedback", choice.ChoiceID)
		}
		res, err := msp.Marshal(msp.ApprovalDecideResult{ApprovalID: ap.id, CommandID: p.CommandID, Status: msp.StatusAccepted, Terminal: true})
		if err != nil {
			return nil, msp.ErrInternal("encoding ack: %v", err)
		}
		ev := turn.ApprovalResolved(ap.id, ap.itemID, ap.turnID, turn.Resolution{Decision: choice.Decision, By: msp.ResolvedByUser}, p.CommandID)
		if err := s.appendLocked(ctx, []event{{msp.NotifyApprovalResolved, ev}}, nil, a.entry(res, false)); err != nil {
			return nil, msp.ErrInternal("recording the decision: %v", err)
		}
		// Read by the waiting turn under s.mu, so before it goes on.
		ap.feedback = feedback
		return res, nil
	})
	return resp, err
}

// checkDecision finds the approval and choice a decision names, or the
// approval plane's refusal. s.mu must be held.
func (s *session) checkDecision(p msp.ApprovalDecideParams) (*approval, msp.ApprovalChoice, *msp.Error) {
	ap := s.approvals.byID[p.ApprovalID]
	switch {
	case ap == nil:
		return nil, msp.ApprovalChoice{}, msp.ErrApprovalNotFound(s.id, p.ApprovalID)
	case ap.state != approvalRequested:
		return nil, msp.ApprovalChoice{}, msp.ErrApprovalAlreadyResolved(s.id, ap.id, ap.resolution)
	case p.RequirementID != ap.requirement:
		return nil, msp.ApprovalChoice{}, msp.ErrApprovalRequirementStale(s.id, ap.requirement)
	}
	i := slices.IndexFunc(ap.choices, func(c msp.ApprovalChoice) bool { return c.ChoiceID == p.ChoiceID })
	if i < 0 {
		return nil, msp.ApprovalChoice{}, msp.ErrApprovalChoiceInvalid(s.id, ap.id, p.ChoiceID)
	}
	return ap, ap.choices[i], nil
}

// ListPendingApprovals serves approval/listPending: a read of the session
// as this node holds it (no lease, no forwarding), each pending approval
// exactly as approval/request presents it, in the order they opened.
func (m *Manager) ListPendingApprovals(ctx context.Context, raw json.RawMessage) (msp.ApprovalListPendingResult, error) {
	res := msp.ApprovalListPendingResult{Approvals: []json.RawMessage{}, UserInputs: []json.RawMessage{}}
	var p msp.ApprovalListPendingParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return res, msp.ErrInvalidParams("", "approval/listPending params: %v", err)
	}
	s, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return res, err
	}
	defer release()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.approvals.open() {
		res.Approvals = append(res.Approvals, a.request)
	}
	return res, nil
}

// approvalModeState is a session's approval mode as it took effect.
type approvalModeState struct {
	Mode          string `json:"mode"`
	Source        string `json:"source"`
	LastCommandID string `json:"lastCommandId,omitempty"`
}

// approvalMode is the mode in effect: the server default,
// promptUnmatched, for a session that never chose one.
func (st *state) approvalMode() approvalModeState {
	if st.ApprovalMode == nil {
		return approvalModeState{Mode: msp.ApprovalPromptUnmatched, Source: msp.ApprovalSourceStartup}
	}
	return *st.ApprovalMode
}

// wire renders the mode as Session and setApprovalMode's ack carry it.
func (a approvalModeState) wire() msp.EffectiveApprovalModeState {
	return msp.EffectiveApprovalModeState{LastCommandID: optional(a.LastCommandID), Mode: a.Mode, Source: a.Source}
}

// checkApprovalMode refuses a mode that is none of the server's.
func checkApprovalMode(mode, field string) error {
	if !slices.Contains(msp.ApprovalModes, mode) {
		return msp.ErrInvalidParams(field, "approval mode %q is not one of %q", mode, msp.ApprovalModes)
	}
	return nil
}

// SetApprovalMode serves session/setApprovalMode: the session's calls
// from now on follow mode (a pending approval stays pending). A change is
// durable with its session/approvalModeChanged, which names the client
// that asked; selecting the mode in effect changes nothing (noop). Either
// way the ack is in the ledger, for replays.
func (m *Manager) SetApprovalMode(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	var p msp.SessionSetApprovalModeParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, msp.ErrInvalidParams("", "session/setApprovalMode params: %v", err)
	}
	if err := checkApprovalMode(p.Mode, "mode"); err != nil {
		return nil, err
	}
	if res, ok, err := m.forward(ctx, p.SessionID, msp.MethodSessionSetApprovalMode, raw); ok {
		return res, err
	}
	s, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return nil, err
	}
	defer release()
	resp, _, err := m.ledger.run(ctx, p.CommandID, msp.MethodSessionSetApprovalMode, raw, func(a *admission) (json.RawMessage, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		ack := msp.SessionSetApprovalModeResult{ApplyOutcome: msp.ApplyNoop, CommandID: p.CommandID, Status: msp.StatusAccepted,
			EffectiveMode: s.st.approvalMode().wire()}
		var evs []event
		var st *state
		if s.st.approvalMode().Mode != p.Mode {
			next := approvalModeState{Mode: p.Mode, Source: msp.ApprovalSourceReconfigure, LastCommandID: p.CommandID}
			c := s.st.clone()
			c.ApprovalMode, st = &next, &c
			ack.ApplyOutcome, ack.EffectiveMode = msp.ApplyCompleted, next.wire()
			evs = []event{{msp.NotifySessionApprovalModeChanged, &msp.SessionApprovalModeChangedParams{
				ClientName: ClientNameFrom(ctx), CommandID: p.CommandID, Mode: p.Mode, Source: next.Source}}}
		}
		res, err := msp.Marshal(ack)
		if err != nil {
			return nil, msp.ErrInternal("encoding ack: %v", err)
		}
		if err := s.appendLocked(ctx, evs, st, a.entry(res, false)); err != nil {
			return nil, msp.ErrInternal("recording the approval mode: %v", err)
		}
		if st != nil {
			s.listChangedLocked()
		}
		return res, nil
	})
	return resp, err
}
