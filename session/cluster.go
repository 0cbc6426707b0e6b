package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"mspd/schema/msp"
	"mspd/store"
)

// A session's leader and followers, and takeover: the package doc
// (doc.go) says how they work in its Cluster section, and in Locking what
// a Cluster may do under a session's lock.

// Cluster is what a manager needs of the other nodes; nil means this
// node is the only one (it leads every session). It names a session by
// its key (sessionKey), not by its sessionId, which two principals'
// sessions may share.
type Cluster interface {
	// Node names this node.
	Node() string
	// Leader returns the node leading a session, "" when none does.
	Leader(ctx context.Context, sessionID string) (string, error)
	// Claim makes this node the session's leader unless a live node
	// already is, and keeps renewing the lease until Release; it returns
	// the leader, this node or another.
	Claim(ctx context.Context, sessionID string) (string, error)
	// Release lets go of a session's lease.
	Release(sessionID string)
	// Forward runs a command on a session's leader and returns its answer:
	// the result, or an *msp.Error.
	Forward(ctx context.Context, leader string, cmd Command) (json.RawMessage, error)
	// Publish sends a notification of a session this node leads to the
	// nodes following it, at its position.
	Publish(sessionID string, n Notification, at Position)
	// Follow calls fn with every notification published for a session
	// until the returned stop is called.
	Follow(sessionID string, fn func(n Notification, at Position)) (stop func())
	// PublishList and FollowLists carry session-list news (session/started,
	// session/listChanged, session/deleteCompleted) of a principal to the
	// other nodes' list-taking connections.
	PublishList(principal string, n Notification)
	FollowLists(fn func(principal string, n Notification)) (stop func())
}

// Departures is what a Cluster may also be: one that tells when another
// node left (its heartbeat lapsed or was deleted, or it came back as a
// new process), so that the sessions it led and left busy are taken over
// at once rather than at the next AdoptInterval.
type Departures interface {
	// Departed receives a value after a node left; departures close
	// together may share one.
	Departed() <-chan struct{}
}

// Lapses is what a Cluster may also be: one that tells when this node's
// own lease lapsed (it was paused, or cut off from the others, past its
// TTL) and it joined again. Another node may have taken over any session
// it leads meanwhile; the manager then claims each again and gives up
// those another node leads now (Manager.reclaim), rather than running
// their turns beside the new leader until the store fences its writes.
type Lapses interface {
	// Lapsed receives a value after this node joined again; lapses close
	// together may share one.
	Lapsed() <-chan struct{}
}

// Position is where a published notification stands in its session's
// view.
type Position struct {
	// Seq and Sub are its view position: Sub 0 for durable record Seq,
	// else the Sub-th ephemeral event after it.
	Seq, Sub int64
	// Prev, on the first record of a commit, is the last sub-position the
	// leader handed out after record Seq-1 (0: none). A follower that got
	// fewer of them lost the rest: nothing else tells it, since the next
	// event it gets is durable.
	Prev int64
}

// Command is a state-changing request forwarded to a session's leader.
type Command struct {
	Principal string `json:"principal"`
	// ClientName is the requesting connection's clientInfo.name.
	ClientName string          `json:"clientName,omitempty"`
	Method     string          `json:"method"`
	Params     json.RawMessage `json:"params"`
}

type forwardedKey struct{}

// Serve runs a command forwarded by another node: as its principal, here,
// never forwarded again (a node that no longer leads the session answers
// overloaded, and the client retries).
func (m *Manager) Serve(ctx context.Context, cmd Command) (json.RawMessage, error) {
	ctx = context.WithValue(WithClientName(WithPrincipal(ctx, cmd.Principal), cmd.ClientName), forwardedKey{}, true)
	var res json.RawMessage
	var after func(context.Context)
	var err error
	switch cmd.Method {
	case msp.MethodTurnStart:
		var launch func()
		res, launch, err = m.StartTurn(ctx, nil, cmd.Params)
		if launch != nil {
			after = func(context.Context) { launch() }
		}
	case msp.MethodTurnInterrupt, msp.MethodTurnCancel:
		res, err = m.StopTurn(ctx, cmd.Method, cmd.Params)
	case msp.MethodTurnUnqueue:
		res, err = m.Unqueue(ctx, cmd.Params)
	case msp.MethodSessionRename:
		res, err = m.RenameSession(ctx, cmd.Params)
	case msp.MethodSessionSetModel:
		res, err = m.SetModel(ctx, cmd.Params)
	case msp.MethodSessionCompact:
		var launch func()
		res, launch, err = m.CompactSession(ctx, nil, cmd.Params)
		if launch != nil {
			after = func(context.Context) { launch() }
		}
	case msp.MethodSessionSetApprovalMode:
		res, err = m.SetApprovalMode(ctx, cmd.Params)
	case msp.MethodSessionSetReasoningEffort:
		res, err = m.SetReasoningEffort(ctx, cmd.Params)
	case msp.MethodApprovalDecide:
		res, err = m.DecideApproval(ctx, cmd.Params)
	case msp.MethodSessionDelete:
		res, after, err = m.DeleteSession(ctx, nil, cmd.Params)
	default:
		return nil, msp.NewError(msp.CodeMethodNotFound, msp.KindMethodNotFound, "%s is not forwarded between nodes", cmd.Method)
	}
	if err == nil && after != nil {
		after(context.WithoutCancel(ctx))
	}
	return res, err
}

// forward sends a state-changing command to its session's leader when
// that is another node; handled reports whether it answered the command
// (forwarded it, or refused it with err). When it did not, the command
// runs here: this node leads the session (it claims one nobody leads),
// or there is no cluster, or no such session.
func (m *Manager) forward(ctx context.Context, sessionID, method string, raw json.RawMessage) (res json.RawMessage, handled bool, err error) {
	c := m.cfg.Cluster
	if c == nil {
		return nil, false, nil
	}
	key, err := m.keyOf(ctx, sessionID)
	if err != nil {
		return nil, true, err
	}
	if exists, err := m.checkOwner(ctx, key, sessionID); err != nil {
		if !exists && isNotFound(err) {
			// Nothing to lead: the command answers it here (a replay
			// of a session's deletion finds its ack in the ledger).
			return nil, false, nil
		}
		return nil, true, err
	}
	// Leases are the store's keys: alice's session X and bob's are led
	// apart. The leader resolves the key again from the principal.
	lapses := m.lapses.Load()
	leader, err := c.Claim(ctx, key)
	if err != nil {
		return nil, true, unavailable("finding the leader of session %s: %v", sessionID, err)
	}
	if leader == c.Node() {
		if err := m.lead(ctx, key, sessionID, lapses); err != nil {
			// Not its writer after all (the store failed the takeover):
			// the command would meet a follower's refusal. The lease goes,
			// as adoptOrphans lets it go, and the client tries again.
			c.Release(key)
			return nil, true, unavailable("taking session %s over: %v", sessionID, err)
		}
		return nil, false, nil
	}
	if ctx.Value(forwardedKey{}) != nil {
		return nil, true, unavailable("this node no longer leads session %s", sessionID)
	}
	res, err = c.Forward(ctx, leader, Command{Principal: PrincipalFrom(ctx), ClientName: ClientNameFrom(ctx), Method: method, Params: raw})
	var me *msp.Error
	if err != nil && !errors.As(err, &me) {
		err = unavailable("node %s, which leads session %s, did not answer: %v", leader, sessionID, err)
	}
	return res, true, err
}

// isNotFound tells whether err is a sessionNotFound.
func isNotFound(err error) bool {
	var me *msp.Error
	return errors.As(err, &me) && me.Data.Kind == msp.KindSessionNotFound
}

// unavailable is a retryable refusal: the session's leader is changing.
func unavailable(format string, args ...any) *msp.Error {
	e := msp.NewError(msp.CodeOverloaded, msp.KindOverloaded, format, args...)
	retry := true
	e.Data.Retryable = &retry
	return e
}

// lead makes session id, kept under key, whose lease this node now holds
// its writer: it stops following, catches up from the store and, when a
// turn was left running by the node that led it before, resumes it.
// lapses is m.lapses as it was before the lease was claimed: when this
// node was told of a lapse of its own since, the claim may be another
// node's by now, and reclaim, which looks at the sessions led, did not
// see this one yet, so the session is claimed again first, before
// anything changes (a session another node holds stays a follower, its
// following untouched).
func (m *Manager) lead(ctx context.Context, key, id string, lapses uint64) error {
	s, release, err := m.load(ctx, key, id)
	if err != nil {
		if isNotFound(err) {
			return nil // the command answers it
		}
		return err
	}
	defer release()
	// Claimed again outside s.mu (a claim may wait on NATS); the count is
	// checked again under it, where reclaim, which counts first, looks
	// at the role: either reclaim finds this session led, or this sees
	// its lapse.
	for {
		if now := m.lapses.Load(); now != lapses {
			if err := m.stillClaimed(ctx, key); err != nil {
				return err
			}
			lapses = now
		}
		s.mu.Lock()
		if m.lapses.Load() == lapses {
			break
		}
		s.mu.Unlock()
	}
	if s.role == roleLeader {
		s.mu.Unlock()
		m.kick(s) // in case a takeover was cut short before its worker
		return nil
	}
	if s.unfollow != nil {
		s.unfollow()
		s.unfollow = nil
	}
	// What was appended since the last event followed reaches the
	// subscribers, in order, before anything this node writes.
	err = s.rereadLocked(ctx)
	if err == nil {
		s.role = roleLeader
		if err = s.recoverLocked(ctx); err != nil {
			s.role = roleFollower
		}
	}
	if err != nil {
		// Still a follower: the caller lets go of the lease, and this
		// node or another tries again.
		s.unfollow = m.cfg.Cluster.Follow(key, s.ingest)
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	m.kick(s)
	return nil
}

// rereadLocked reads the session again from the store (refreshLocked)
// and fans out to its subscribers the records appended since the head it
// had, as a node does when its role changes. s.mu must be held.
func (s *session) rereadLocked(ctx context.Context) error {
	from := s.head
	if err := s.refreshLocked(ctx); err != nil {
		return err
	}
	return s.catchUpLocked(ctx, from)
}

// catchUpLocked fans out the stored records after seq from, up to head.
// s.mu must be held.
func (s *session) catchUpLocked(ctx context.Context, from int64) error {
	var opened []*approval
	defer func() { s.askOpenedLocked(opened) }()
	for from < s.head {
		recs, err := s.m.store.Records(ctx, s.key, from, logPage(int(min(s.head-from, 256))))
		if err != nil {
			return msp.ErrInternal("reading session log: %v", err)
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			if !hidden(r.Method) {
				s.fanOutLocked(s.recordNotification(r, nil))
			}
			s.noteLocked(r.Method, r.Params, r.Seq, &opened)
			from = r.Seq
		}
	}
	return nil
}

// ingest applies a notification the session's leader published: a
// durable event advances the head, an ephemeral one (a delta, an answer's
// item/started) its sub-position. Records missed on the way are read from
// the store first; ephemeral events missed on the way (a slow follower's
// messages are dropped) are gone, and its readers are told with a
// view/gap.
func (s *session) ingest(n Notification, pos Position) {
	seq, sub := pos.Seq, pos.Sub
	s.mu.Lock()
	defer s.mu.Unlock()
	// The cluster names it by its key. s.id is read under s.mu: a leader's
	// events can arrive while read, which follows before it loads, still
	// names the session.
	n.SessionID = s.id
	deletion := n.Method == msp.NotifySessionDeleteCompleted
	if s.role == roleLeader || s.phase == phaseLoading {
		return // its own, or a session whose load failed
	}
	if s.phase.deleted() && !(s.phase == phaseHalfErased && deletion) {
		return // a half-erased session hears only of a deletion sent again
	}
	if deletion {
		for sub := range s.subs {
			s.tellDeletion(sub, n)
		}
		if _, erased := Erased(n); erased {
			s.erasedLocked(&n)
			go s.m.forget(s) // m.mu is not taken under s.mu
			return
		}
		if s.phase == phaseHalfErased {
			return // still half-erased
		}
		// A failed deletion leaves the session as it was, or half-erased:
		// the row says which, as it did to the leader, and is read before
		// the session serves anything more (see acquireAs).
		s.stale = true
		s.enter(phaseUnsettled)
		go s.m.settle(s)
		return
	}
	through := seq - 1 // the records before a durable event
	if sub > 0 {
		through = seq // and the one an ephemeral event follows
	}
	if c, err := parseCursor(n.Cursor); err == nil && c.epoch != epochAt(s.spanList(), ephemeralSpanSeq(seq, sub)) || through > s.head {
		// The leader opened a cursor epoch span this node has not heard
		// of (its first record may be among those to catch up, or have
		// come between this node's reads of the row and of the head):
		// the row, written with that record, holds it.
		s.reloadSpansLocked()
	}
	at := s.at(seq, sub)
	if !s.at(s.head, s.sub).before(at) {
		return // already seen
	}
	if through > s.head {
		// Messages were dropped: whatever ephemeral events came among the
		// records to catch up are gone too, and nothing says whether any
		// did. Readers are told before the first of those records.
		s.missedLocked(s.at(s.head, s.sub), s.at(through-1, math.MaxInt64))
		head := s.head
		s.head = through
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := s.catchUpLocked(ctx, head)
		cancel()
		if err != nil {
			s.head = head
			s.m.log.Warn("following a session: catching up", "session", s.id, "err", err)
			return
		}
		s.sub, s.stale = 0, true
	}
	if sub > 0 {
		if sub > s.sub+1 {
			s.missedLocked(s.at(seq, s.sub), s.at(seq, sub-1))
		}
		s.sub = sub
		s.deltas.add(at, n.Method, n.Frame)
		s.fanOutLocked(n)
		return
	}
	if pos.Prev > s.sub && seq == s.head+1 {
		// The last ephemeral events before this record never came.
		s.missedLocked(s.at(s.head, s.sub), s.at(s.head, pos.Prev))
	}
	s.head, s.sub = seq, 0
	switch n.Method {
	case msp.NotifyTurnCompleted:
		s.deltas.reset()
	}
	s.stale = true
	s.fanOutLocked(n)
	s.noteFrameLocked(n, seq)
}

// reloadSpansLocked reads a follower's cursor epoch spans from the row
// again. s.mu must be held.
func (s *session) reloadSpansLocked() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, _, err := s.m.readState(ctx, s.key, s.id)
	if err != nil {
		s.m.log.Warn("following a session: reading its cursor epochs", "session", s.id, "err", err)
		return
	}
	s.setSpans(st.spans())
}

// missedLocked notes that the ephemeral events after last, through
// through, never reached this follower: they are lost for its resuming
// readers, and its subscribers, which got everything up to last, get a
// view/gap before the next event. s.mu must be held.
func (s *session) missedLocked(last, through cursor) {
	s.deltas.lose(through)
	for sub := range s.subs {
		if g, due := s.gapsDue[sub]; due {
			// Reported with the next event already, from where the
			// reader is; it now must be, whatever that event is.
			g.midItem = true
			s.gapsDue[sub] = g
			continue
		}
		s.gapsDue[sub] = dueGap{after: last.String(), midItem: true}
	}
}

// freshLocked brings a follower's state (its row) up to its log before
// it is served. s.mu must be held.
func (s *session) freshLocked(ctx context.Context) error {
	if s.role == roleLeader || !s.stale {
		return nil
	}
	st, erasing, err := s.m.readState(ctx, s.key, s.id)
	if isNotFound(err) || err == nil && erasing {
		s.enter(phaseHalfErased) // or erased: the news was missed
		return msp.ErrSessionNotFound(s.id)
	}
	if err != nil {
		return err
	}
	s.st, s.stale = st, false
	if s.phase == phaseUnsettled {
		s.enter(phaseLive)
	}
	s.setSpans(st.spans())
	return nil
}

// settle brings a follower's state up to its log now (see freshLocked),
// rather than at the next command that reads it.
func (m *Manager) settle(s *session) {
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.freshLocked(ctx); err != nil && !isNotFound(err) {
		m.log.Warn("following a session: reading its row", "session", s.id, "err", err)
	}
}

// letGoLocked ends what a node holds for a session it unloads: its MCP
// servers, and its lease or its following. s.mu must be held.
func (s *session) letGoLocked() {
	s.closeServersLocked()
	c := s.m.cfg.Cluster
	if c == nil {
		return
	}
	if s.unfollow != nil {
		s.unfollow()
		s.unfollow = nil
	}
	if s.role == roleLeader {
		s.role = roleFollower
		c.Release(s.key)
	}
}

// forget drops an erased session from memory, with its lease or its
// following, unless a newer load of it has taken its place.
func (m *Manager) forget(s *session) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.sessions[s.key]
	if l != nil && l.s != s {
		return // a newer load holds the lease or the following now
	}
	delete(m.sessions, s.key)
	s.mu.Lock()
	s.letGoLocked()
	s.mu.Unlock()
}

// publishLocked sends a notification of a session this node leads to its
// followers. s.mu must be held.
func (s *session) publishLocked(n Notification, at Position) {
	if c := s.m.cfg.Cluster; c != nil && s.role == roleLeader {
		c.Publish(s.key, n, at)
	}
}

// adoptOrphans takes over the busy sessions nobody leads: their leader
// stopped, or let go on shutdown. A claim this node holds of a session it
// does not lead (a claim that landed while its answer was lost, in a
// NATS leader election say) is this node's to lead too: nobody else
// would. Sessions are taken over adoptWorkers at a time: after a node
// dies, its busy sessions wait on this pass.
func (m *Manager) adoptOrphans(ctx context.Context) {
	c := m.cfg.Cluster
	rows, err := m.store.BusySessions(ctx)
	if err != nil {
		m.log.Warn("listing busy sessions", "err", err)
		return
	}
	work := make(chan store.Session)
	var wg sync.WaitGroup
	for range min(adoptWorkers, len(rows)) {
		wg.Go(func() {
			for row := range work {
				m.adopt(ctx, c, row)
			}
		})
	}
	for _, row := range rows {
		work <- row
	}
	close(work)
	wg.Wait()
}

// adoptWorkers is how many sessions one node takes over at once.
const adoptWorkers = 16

// adopt takes over one busy session unless a live node, other than this
// one, leads it, or this node already does.
func (m *Manager) adopt(ctx context.Context, c Cluster, row store.Session) {
	if leader, err := c.Leader(ctx, row.ID); err != nil || leader != "" && leader != c.Node() {
		return
	}
	if m.leads(row.ID) {
		return
	}
	lapses := m.lapses.Load()
	leader, err := c.Claim(ctx, row.ID)
	if err != nil || leader != c.Node() {
		return
	}
	id := wireID(row.Owner, row.ID)
	if err := m.lead(ctx, row.ID, id, lapses); err != nil {
		m.log.Warn("taking a session over", "session", id, "err", err)
		c.Release(row.ID)
		return
	}
	m.log.Info("took a session over", "session", id)
}

// leads tells whether this node has session key loaded as its leader.
func (m *Manager) leads(key string) bool {
	m.mu.Lock()
	l := m.sessions[key]
	m.mu.Unlock()
	if l == nil || l.s == nil {
		return false
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.s.role == roleLeader
}

// adoptLoop runs adoptOnce every interval, and at once when the cluster
// tells of a node that left, and reclaim whenever it tells of this node's
// own lapse, until the manager closes.
func (m *Manager) adoptLoop(interval time.Duration) {
	var departed, lapsed <-chan struct{}
	if d, ok := m.cfg.Cluster.(Departures); ok {
		departed = d.Departed()
	}
	if l, ok := m.cfg.Cluster.(Lapses); ok {
		lapsed = l.Lapsed()
	}
	m.everyOr(interval, departed, func() { m.adoptOnce(interval) })
	if lapsed != nil {
		m.everyOr(0, lapsed, m.reclaim)
	}
}

// reclaim claims again, after this node's lease lapsed, every session it
// leads, and gives up those another node leads now (demoteLocked). A
// lapse often comes with NATS electing its leaders, when a claim may go
// unanswered: each is asked again until it answers, for up to
// reclaimPatience a session; one that never does is kept, as before the
// lapse, and the store fences it if another node took it. A session
// being taken over as it runs is not led yet; lead claims it again.
func (m *Manager) reclaim() {
	m.lapses.Add(1) // before the sessions are looked at: lead checks it
	c := m.cfg.Cluster
	for _, s := range m.loadedSessions() {
		s.mu.Lock()
		leader := s.role == roleLeader
		s.mu.Unlock()
		if !leader {
			continue
		}
		node, err := m.claimPatiently(m.ctx, s.key)
		if err != nil {
			m.log.Warn("claiming a session again after this node's lease lapsed", "session", s.id, "err", err)
			continue
		}
		if node == c.Node() {
			continue // nobody took it meanwhile: this node's still
		}
		ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
		s.mu.Lock()
		s.demoteLocked(ctx)
		s.mu.Unlock()
		cancel()
		m.log.Warn("gave up a session after this node's lease lapsed", "session", s.id, "leader", node)
	}
}

// stillClaimed claims session key again (claimPatiently), for a node
// told of its own lapse while it took the session over, and fails unless
// the claim is still this node's.
func (m *Manager) stillClaimed(ctx context.Context, key string) error {
	node, err := m.claimPatiently(ctx, key)
	if err != nil {
		return fmt.Errorf("claiming it again after this node's lease lapsed: %w", err)
	}
	if node != m.cfg.Cluster.Node() {
		return fmt.Errorf("node %s took it while this node's lease lapsed", node)
	}
	return nil
}

// reclaimPatience bounds how long reclaim asks for the claim of one
// session a node leads, after a lapse.
const reclaimPatience = 10 * time.Second

// claimPatiently asks the cluster to claim a session until it answers,
// pausing between tries, for up to reclaimPatience or until ctx ends.
func (m *Manager) claimPatiently(ctx context.Context, key string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, reclaimPatience)
	defer cancel()
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		node, err := m.cfg.Cluster.Claim(ctx, key)
		if err == nil {
			return node, nil
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(pause):
		}
	}
}

// demoteLocked makes a session this node led, and another node may lead
// now, a follower here: its running turn stops as a stopping host stops
// it but writes nothing (appendLocked refuses a follower), its MCP
// servers close, it follows the leader, and its subscribers are caught up
// on what the new leader wrote before the following began. s.mu must be
// held.
func (s *session) demoteLocked(ctx context.Context) {
	if s.role != roleLeader {
		return
	}
	s.role = roleFollower
	s.term++ // its worker, when one runs, ends without writing (finish)
	s.launched, s.resume, s.stopDue = false, nil, ""
	if s.park != nil {
		s.park()
	}
	s.closeServersLocked()
	if s.unfollow == nil {
		// Before the head is read again, as read does: ingest waits for
		// s.mu, and skips what the catch-up fanned out.
		s.unfollow = s.m.cfg.Cluster.Follow(s.key, s.ingest)
	}
	if err := s.rereadLocked(ctx); err != nil {
		// Its row is read again before it serves (freshLocked); the next
		// event followed finds the gap and reads the store.
		s.stale = true
		s.m.log.Warn("catching up a session given up", "session", s.id, "err", err)
	}
}

// adoptOnce runs one pass of adoptOrphans, bounded by the longer of
// interval and 30 s.
func (m *Manager) adoptOnce(interval time.Duration) {
	ctx, cancel := context.WithTimeout(m.ctx, max(interval, 30*time.Second))
	defer cancel()
	m.adoptOrphans(ctx)
}

// nodeReason words why a turn resumes: the node that ran it stopped.
func (m *Manager) stoppedNode(a pendingTurn) string {
	if c := m.cfg.Cluster; c != nil && a.Node != "" && a.Node != c.Node() {
		return fmt.Sprintf("node %s stopped", a.Node)
	}
	return "the server restarted"
}
