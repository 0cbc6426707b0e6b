package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"mspd/internal/workpool"
	"mspd/observe"
	"mspd/provider"
	"mspd/schema/msp"
	"mspd/store"
	"mspd/turn"
)

// TurnRunner runs one turn's model call; turn.Runner implements it.
type TurnRunner interface {
	Run(ctx context.Context, spec turn.Spec, sink turn.Sink) turn.Outcome
}

// Catalog knows the configured providers and their models.
type Catalog interface {
	// Resolve checks a session/start's providerId and modelId (empty for
	// "the default") and returns what the session will use. A refusal is
	// an *msp.Error naming the field.
	Resolve(providerID, modelID string) (provider, model string, err error)
	// Serves tells whether a provider is configured.
	Serves(providerID string) bool
}

// Models tells what a configured model takes; the daemon's catalog
// implements it.
type Models interface {
	// Info is what the catalog knows of a provider's model ("" for the
	// defaults).
	Info(providerID, modelID string) provider.ModelInfo
}

// Config configures a Manager.
type Config struct {
	// Store holds every session durably.
	Store store.Store
	// Runner runs turns.
	Runner TurnRunner
	// LogPath is reported as every Session's path: where its log lives,
	// or "" (no path a client may use) on a server of several principals.
	LogPath string
	// ProviderID and ModelID are the defaults a new session reports when
	// there is no Catalog.
	ProviderID string
	ModelID    string
	// Catalog, when set, resolves the provider and model a session/start
	// asks for (and their defaults); unknown ones are refused.
	Catalog Catalog
	// Models, when set, tells which models take images: a turn with
	// images for one that takes none is refused. Nil: every model does.
	Models Models
	// MaxQueuedTurns bounds each session's turn queue (default 16); a
	// turn/start beyond it is refused as backpressured.
	MaxQueuedTurns int
	// HistoryBudget bounds the inline history a resume or read returns, in
	// bytes of encoded items (default 512 KiB); above it the client pages.
	// A resume's result is kept in the commandId ledger so that a replay
	// gets it again, so this also bounds what each resume stores.
	HistoryBudget int
	// MaxFrameBytes is the transports' frame limit (default 10 MiB): no
	// event, page or history this manager produces may outgrow it.
	MaxFrameBytes int
	// TextCheckpoint is how often a streaming item's text is saved to the
	// log (item/updated), so that a crash loses at most that much of it
	// (default 1 s; negative: never).
	TextCheckpoint time.Duration
	// Tools are the tools every session's turns may call; nil offers
	// none.
	Tools turn.Toolbox
	// SessionServers, when set, takes the MCP servers clients name in
	// session/start (config.mcpServers) and adds their tools to their
	// session's turns; nil refuses them (capabilityRequired).
	SessionServers SessionServers
	// IdleUnload is how long a session with no subscriber and no turn
	// stays in memory after its last use (default 10 min); it is reloaded
	// from the store on demand.
	IdleUnload time.Duration
	// Now tells the time (default time.Now).
	Now func() time.Time
	// Logger receives operational logs (default slog.Default()).
	Logger *slog.Logger
	// Metrics counts turns and retry notices as they are written; nil
	// counts nothing here (Stats still reports the gauges).
	Metrics *observe.Metrics
	// Cluster, when set, shares the sessions with other nodes over the
	// same store: one leader per session, the rest follow (see Cluster).
	Cluster Cluster
	// AdoptInterval is how often a clustered node looks for busy sessions
	// nobody leads, to take them over (default 2 s).
	AdoptInterval time.Duration
}

// Manager owns every loaded session.
type Manager struct {
	cfg    Config
	store  store.Store
	ledger *ledger
	log    *slog.Logger

	ctx      context.Context // ends when the manager closes; parents every turn
	cancel   context.CancelCauseFunc
	turns    tally          // every goroutine the manager started
	workers  tally          // the goroutines running turns
	closing  tally          // sessions' MCP servers being stopped
	pool     *workpool.Pool // where turns run
	draining atomic.Bool    // no new turns: a graceful shutdown is under way
	// stopWaiting stops turns that wait for a person (StopWaiting).
	stopWaiting atomic.Bool
	// lapses counts the lapses of this node's own lease it was told of
	// (reclaim): a claim made before one may since be another node's.
	lapses atomic.Uint64

	stats   counters
	running atomic.Int64 // turns inside Runner.Run

	mu        sync.Mutex
	sessions  map[string]*loading
	listeners *listeners

	unfollowLists func() // stops taking other nodes' session-list news

	// run names this manager's run (a process start): the first records
	// it writes to a session open a cursor epoch span of their own.
	run string
}

// loading is a session being or having been loaded.
type loading struct {
	done chan struct{}
	// s and err are what the load read, set once under Manager.mu before
	// done is closed: read them after done, or under Manager.mu.
	s   *session
	err error
	// pins counts callers using s right now and lastUsed when the last
	// one let go; both guarded by Manager.mu. A session is unloaded only
	// when unpinned, unsubscribed and idle (see sweep).
	pins     int
	lastUsed time.Time
}

// New starts a manager over cfg.Store. Turns that were running or queued
// when a previous process died are settled first with a durable failed
// terminal, so every turn-wait ends.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	if cfg.Store == nil || cfg.Runner == nil {
		return nil, errors.New("session: Config needs a Store and a Runner")
	}
	if cfg.MaxQueuedTurns <= 0 {
		cfg.MaxQueuedTurns = 16
	}
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = 10 << 20
	}
	if cfg.HistoryBudget <= 0 {
		cfg.HistoryBudget = 512 << 10
	}
	cfg.HistoryBudget = min(cfg.HistoryBudget, frameBudget(cfg.MaxFrameBytes))
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.IdleUnload <= 0 {
		cfg.IdleUnload = 10 * time.Minute
	}
	if cfg.TextCheckpoint == 0 {
		cfg.TextCheckpoint = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Manager{
		cfg:       cfg,
		store:     cfg.Store,
		ledger:    newLedger(cfg.Store),
		log:       cfg.Logger,
		sessions:  make(map[string]*loading),
		pool:      workpool.New(workpool.DefaultMaxIdle, workpool.DefaultIdleFor),
		listeners: newListeners(),
		run:       newEpoch(),
	}
	m.stats.metrics = cfg.Metrics
	m.ctx, m.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	if c := cfg.Cluster; c != nil {
		// A node starting takes over what nobody leads; the others'
		// sessions are theirs.
		m.adoptOrphans(ctx)
		m.unfollowLists = c.FollowLists(func(principal string, n Notification) {
			m.listeners.deliver(principal, func(Subscriber) bool { return false }, n)
		})
		if cfg.AdoptInterval <= 0 {
			cfg.AdoptInterval = 2 * time.Second
			m.cfg.AdoptInterval = cfg.AdoptInterval
		}
		m.adoptLoop(cfg.AdoptInterval)
	} else if err := m.recover(ctx); err != nil {
		return nil, err
	}
	m.every(max(min(cfg.IdleUnload/4, time.Minute), time.Millisecond), func() { m.sweep() })
	return m, nil
}

// every runs fn each interval on a goroutine of its own until the
// manager closes (Close waits for it).
func (m *Manager) every(interval time.Duration, fn func()) { m.everyOr(interval, nil, fn) }

// everyOr is every, also running fn when trigger delivers (a nil
// trigger never does); with interval 0, only then.
func (m *Manager) everyOr(interval time.Duration, trigger <-chan struct{}, fn func()) {
	m.turns.add()
	go func() {
		defer m.turns.done()
		var tick <-chan time.Time
		if interval > 0 {
			t := time.NewTicker(interval)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-m.ctx.Done():
				return
			case <-tick:
			case <-trigger:
			}
			fn()
		}
	}()
}

// sweep unloads sessions nobody uses: unpinned, without subscribers,
// without a running or queued turn, and unused for cfg.IdleUnload. Their
// log stays in the store; the next use loads them again. Session locks are
// taken without Manager.mu held, so a slow commit stalls no lookup.
func (m *Manager) sweep() int {
	cutoff := m.now().Add(-m.cfg.IdleUnload)
	type candidate struct {
		id string
		l  *loading
	}
	var cands []candidate
	m.mu.Lock()
	for id, l := range m.sessions {
		if l.pins == 0 && l.s != nil && !l.lastUsed.After(cutoff) {
			cands = append(cands, candidate{id, l})
		}
	}
	m.mu.Unlock()
	unloaded := 0
	for _, c := range cands {
		s := c.l.s
		s.mu.Lock()
		idle := s.idleLocked()
		s.mu.Unlock()
		if !idle {
			continue // the common case, decided without holding m.mu
		}
		// Decide for good under both locks, in their order: nobody can
		// pin, subscribe or queue a turn in between.
		m.mu.Lock()
		if m.sessions[c.id] == c.l && c.l.pins == 0 {
			s.mu.Lock()
			// No erasure may be running on it either: one that failed
			// would revive a session no longer in memory.
			if s.idleLocked() && s.erasing.TryLock() {
				delete(m.sessions, c.id)
				unloaded++
				s.letGoLocked()
				s.erasing.Unlock()
			}
			s.mu.Unlock()
		}
		m.mu.Unlock()
	}
	return unloaded
}

// idleLocked tells whether s may be unloaded as far as it knows: nobody
// reads it and nothing runs on it. A half-erased session's turn, stopped
// by its deletion, never ends (nothing more is written to it), so it
// counts as idle. s.mu must be held.
func (s *session) idleLocked() bool {
	return len(s.subs) == 0 && !s.working && (s.phase == phaseHalfErased || !s.st.busy())
}

// Close stops the manager: running turns stop without ending (their
// attempt in flight is discarded, its text kept) and stay active in the
// store with a checkpoint, for the next process to resume; queued turns
// stay queued. It waits for them to record that.
func (m *Manager) Close() {
	m.cancel(turn.ErrHostStopping)
	m.turns.wait()
	m.pool.Close()
	m.mu.Lock()
	for _, l := range m.sessions {
		if l.s != nil {
			l.s.mu.Lock()
			l.s.closeServersLocked()
			l.s.mu.Unlock()
		}
	}
	m.mu.Unlock()
	m.closing.wait()
	if c := m.cfg.Cluster; c != nil {
		// Let go of every lease, so that another node takes the sessions
		// over at once rather than when the leases lapse.
		m.unfollowLists()
		m.mu.Lock()
		for id, l := range m.sessions {
			if l.s != nil {
				l.s.mu.Lock()
				if l.s.unfollow != nil {
					l.s.unfollow()
				}
				leader := l.s.role == roleLeader
				l.s.mu.Unlock()
				if leader {
					c.Release(id)
				}
			}
		}
		m.mu.Unlock()
	}
}

func (m *Manager) now() time.Time { return m.cfg.Now() }

// frameBudget is the payload one frame may carry: the limit less room for
// the envelope and a result's other members.
func frameBudget(maxFrame int) int { return maxFrame - min(64<<10, maxFrame/4) }

func (m *Manager) frameBudget() int { return frameBudget(m.cfg.MaxFrameBytes) }

// ReadBytes bounds every read of a session's log that serves a client:
// one store read returns at most this many bytes of params past its
// first record, which comes whatever its size (store.Limit). A view/page
// ends early at it, with the cursor to go on from; a subscription's
// replay, the folds of a load, a resume, a read and a fork, a fork's cut
// and its copy all page through the log by it. So a request holds at most
// this much of the log at a time, or one record when that is larger, plus
// what it builds from it (a fold's items are bounded by HistoryBudget).
const ReadBytes = 4 << 20

// logPage is a read of up to rows records within ReadBytes.
func logPage(rows int) store.Limit { return store.Limit{Rows: rows, Bytes: ReadBytes} }

// Listen registers sub, a connection of principal, for news of that
// principal's session list (taken when sub.Broadcasts() says so); Detach
// undoes it.
func (m *Manager) Listen(sub Subscriber, principal string) { m.listeners.add(sub, principal) }

// loadedSessions returns the sessions loaded now, to work on each under
// its own lock with Manager.mu released.
func (m *Manager) loadedSessions() []*session {
	m.mu.Lock()
	defer m.mu.Unlock()
	var loaded []*session
	for _, l := range m.sessions {
		if l.s != nil {
			loaded = append(loaded, l.s)
		}
	}
	return loaded
}

// Detach removes sub from the list news and from every session it follows.
func (m *Manager) Detach(sub Subscriber) {
	m.listeners.remove(sub)
	for _, s := range m.loadedSessions() {
		s.unsubscribe(sub)
	}
}

// acquire returns a session of ctx's principal, loading it from the store
// once, pinned in memory until release is called. Another principal's
// session is reported as not found, so its existence does not leak.
func (m *Manager) acquire(ctx context.Context, id string) (s *session, release func(), err error) {
	return m.acquireAs(ctx, id, false)
}

// acquireErasable is acquire for session/delete, which also reaches a
// session whose erasure failed partway, to finish it.
func (m *Manager) acquireErasable(ctx context.Context, id string) (s *session, release func(), err error) {
	return m.acquireAs(ctx, id, true)
}

func (m *Manager) acquireAs(ctx context.Context, id string, erasing bool) (s *session, release func(), err error) {
	key, err := m.keyOf(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if _, err := m.checkOwner(ctx, key, id); err != nil {
		return nil, nil, err
	}
	s, release, err = m.load(ctx, key, id)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	var unsure error
	if s.phase == phaseUnsettled {
		// Told of a failed deletion and not yet sure the erasure left the
		// session whole: read the row first, so that nothing of a session
		// half-erased is served (nor forked into a live one).
		unsure = s.freshLocked(ctx)
	}
	gone := s.phase.deleted() && !(erasing && s.phase == phaseHalfErased)
	s.mu.Unlock()
	if gone || s.owner != PrincipalFrom(ctx) {
		release()
		return nil, nil, msp.ErrSessionNotFound(id)
	}
	if unsure != nil {
		release()
		return nil, nil, unsure
	}
	return s, release, nil
}

// checkOwner refuses another principal's request for a session before it
// costs a load: from the session itself when it is in memory, else from
// its row alone, so that it costs no more than a request for a session
// that does not exist (neither a load and replay of the whole log, nor, on
// a cluster, a lease claimed and a follow begun), nor takes longer.
// exists is false when the store has no such session; a session still
// loading is let through, and acquire checks it once loaded. key is where
// the session of id is kept (keyOf).
func (m *Manager) checkOwner(ctx context.Context, key, id string) (exists bool, err error) {
	m.mu.Lock()
	l, resident := m.sessions[key]
	m.mu.Unlock()
	if resident {
		select {
		case <-l.done:
			if l.s != nil && l.s.owner != PrincipalFrom(ctx) {
				return true, msp.ErrSessionNotFound(id)
			}
		default:
		}
		return true, nil
	}
	st, _, err := m.readState(ctx, key, id)
	if err != nil {
		return !isNotFound(err), err
	}
	if st.Owner != PrincipalFrom(ctx) {
		return true, msp.ErrSessionNotFound(id)
	}
	return true, nil
}

// readState reads the state of session id from its row in the store,
// under key; erasing tells that its erasure was cut short
// (store.Session.Erasing).
func (m *Manager) readState(ctx context.Context, key, id string) (st state, erasing bool, err error) {
	row, err := m.store.Session(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return st, false, msp.ErrSessionNotFound(id)
	} else if err != nil {
		return st, false, msp.ErrInternal("loading session: %v", err)
	}
	if err := json.Unmarshal(row.State, &st); err != nil {
		return st, false, msp.ErrInternal("session %s state unreadable: %v", id, err)
	}
	return st, row.Erasing, nil
}

// load returns session id, kept under key, whoever owns it, loading it
// from the store once, pinned in memory until release is called.
func (m *Manager) load(ctx context.Context, key, id string) (s *session, release func(), err error) {
	m.mu.Lock()
	l, ok := m.sessions[key]
	if !ok {
		l = &loading{done: make(chan struct{})}
		m.sessions[key] = l
	}
	l.pins++
	m.mu.Unlock()
	unpin := func() {
		m.mu.Lock()
		l.pins--
		l.lastUsed = m.now()
		m.mu.Unlock()
	}
	if !ok {
		// Loaded for every caller waiting on it, so not cut short when
		// this one's request ends; published under m.mu, which Close,
		// CancelRunning and forget walk the entries under.
		s, err := m.read(context.WithoutCancel(ctx), key, id)
		m.mu.Lock()
		l.s, l.err = s, err
		if err != nil {
			delete(m.sessions, key) // let a later call try again
		}
		m.mu.Unlock()
		close(l.done)
	} else {
		select {
		case <-l.done:
		case <-ctx.Done():
			unpin()
			return nil, nil, ctx.Err()
		}
	}
	if l.err != nil {
		unpin()
		return nil, nil, l.err
	}
	return l.s, sync.OnceFunc(unpin), nil
}

// read builds the session kept under key from its row and log; id, what
// the caller named it, names it in a refusal. On a cluster, a session
// this node does not lead follows its leader's events from the start.
func (m *Manager) read(ctx context.Context, key, id string) (*session, error) {
	s := &session{id: id, key: key, m: m, subs: make(map[Subscriber]struct{}), gapsDue: make(map[Subscriber]dueGap), floors: make(map[Subscriber]cursor),
		open: make(map[string]*openItem), approvals: newApprovals()}
	if m.cfg.Cluster == nil {
		s.role = roleLeader
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.role == roleFollower {
		// Following starts before the head is read, so that nothing
		// appended meanwhile is missed; ingest waits for s.mu.
		s.unfollow = m.cfg.Cluster.Follow(key, s.ingest)
	}
	if err := s.refreshLocked(ctx); err != nil {
		if s.unfollow != nil {
			s.unfollow()
		}
		return nil, err
	}
	// Named as its owner names it, whoever asked: a request naming its
	// key as an id (another principal's, refused by acquire) must not
	// give it that name on the wire.
	s.owner, s.id = s.st.Owner, wireID(s.st.Owner, key)
	return s, nil
}

// refreshLocked (re)reads a session's row, head and log from the store:
// a session loading or unsettled goes live, unless its row says that an
// erasure was cut short. s.mu must be held.
func (s *session) refreshLocked(ctx context.Context) error {
	m := s.m
	st, erasing, err := m.readState(ctx, s.key, s.id)
	if err != nil {
		return err
	}
	s.st = st
	s.setSpans(st.spans())
	if erasing {
		s.enter(phaseHalfErased)
		return nil
	}
	s.queued.Store(int32(len(s.st.Queue)))
	if s.head, err = m.store.Head(ctx, s.key); err != nil {
		return msp.ErrInternal("loading session: %v", err)
	}
	s.sub = 0
	f, err := fold(ctx, m.store, s.key, foldSpec{provider: deref(s.st.StartProviderID)})
	if err != nil {
		return msp.ErrInternal("loading session log: %v", err)
	}
	s.history, s.spend, s.approvals, s.window = f.history, f.spend, f.approvals, f.window
	// The ephemeral events streamed before this load are gone with the
	// process or the memory that held them.
	s.loadedHead = s.head
	if s.head > 0 {
		s.deltas.loseAllThrough(s.head)
	}
	clear(s.open)
	for itemID, it := range f.open {
		oi := &openItem{item: it, savedAt: m.now()}
		oi.text.seed(it)
		oi.saved = oi.text.Len()
		s.open[itemID] = oi
	}
	if s.phase == phaseLoading || s.phase == phaseUnsettled {
		s.enter(phaseLive)
	}
	return nil
}

// recover picks up the turns a previous process left running or queued:
// open items close as failed, the running turn resumes as a new attempt,
// and the queue goes on.
func (m *Manager) recover(ctx context.Context) error {
	rows, err := m.store.BusySessions(ctx)
	if err != nil {
		return fmt.Errorf("session: listing busy sessions: %w", err)
	}
	for _, row := range rows {
		id := wireID(row.Owner, row.ID)
		s, release, err := m.load(ctx, row.ID, id)
		if err != nil {
			return fmt.Errorf("session: recovering %s: %w", id, err)
		}
		s.mu.Lock()
		err = s.recoverLocked(ctx)
		s.mu.Unlock()
		if err == nil {
			m.kick(s)
		}
		release()
		if err != nil {
			return fmt.Errorf("session: recovering %s: %w", id, err)
		}
		m.log.Info("resuming the turns of a previous process", "session", id)
	}
	return nil
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
