package session

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/store"
	"mspd/turn"
)

// memHub is an in-memory cluster: leases, forwarding and the event bus of
// nodes sharing one store.
type memHub struct {
	mu        sync.Mutex
	leases    map[string]string // session → node
	managers  map[string]*Manager
	followers map[string]map[int]func(Notification, Position)
	lists     map[int]memListFollower
	next      int
	down      map[string]bool // nodes that died: cut off from the rest
	tools     turn.Toolbox    // what the nodes' turns may call
	lapsed    map[string]chan struct{}
	unheard   int // claims to leave unanswered, as NATS electing a leader does
}

type memListFollower struct {
	node string
	fn   func(string, Notification)
}

func newMemHub() *memHub {
	return &memHub{leases: map[string]string{}, managers: map[string]*Manager{},
		followers: map[string]map[int]func(Notification, Position){}, lists: map[int]memListFollower{},
		down: map[string]bool{}, lapsed: map[string]chan struct{}{}}
}

// lapse tells node that its own lease lapsed and it joined again, as the
// cluster package does after a node paused past its TTL; the hub drops
// its leases first (expire), which is what the lapse did.
func (h *memHub) lapse(node string) {
	h.expire(node)
	h.lapsedOf(node) <- struct{}{}
}

func (h *memHub) lapsedOf(node string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lapsed[node] == nil {
		h.lapsed[node] = make(chan struct{}, 1)
	}
	return h.lapsed[node]
}

// kill cuts a node off, as a crash would: its leases lapse, it claims and
// publishes nothing more, and commands forwarded to it fail.
func (h *memHub) kill(node string) {
	h.mu.Lock()
	h.down[node] = true
	h.mu.Unlock()
	h.expire(node)
}

func (c memNode) isDown() bool {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	return c.h.down[c.node]
}

// expire drops a node's leases, as their TTL would once it stops renewing.
func (h *memHub) expire(node string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, n := range h.leases {
		if n == node {
			delete(h.leases, id)
		}
	}
}

// memNode is one node's view of the hub.
type memNode struct {
	h    *memHub
	node string
}

func (c memNode) Node() string { return c.node }

// Lapsed implements Lapses.
func (c memNode) Lapsed() <-chan struct{} { return c.h.lapsedOf(c.node) }

func (c memNode) Leader(_ context.Context, id string) (string, error) {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	return c.h.leases[id], nil
}

func (c memNode) Claim(_ context.Context, id string) (string, error) {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	if c.h.down[c.node] {
		return "", errors.New("node down")
	}
	if c.h.unheard > 0 {
		c.h.unheard--
		return "", errors.New("no answer")
	}
	if c.h.leases[id] == "" {
		c.h.leases[id] = c.node
	}
	return c.h.leases[id], nil
}

func (c memNode) Release(id string) {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	if c.h.leases[id] == c.node {
		delete(c.h.leases, id)
	}
}

func (c memNode) Forward(ctx context.Context, leader string, cmd Command) (json.RawMessage, error) {
	c.h.mu.Lock()
	m := c.h.managers[leader]
	c.h.mu.Unlock()
	return m.Serve(ctx, cmd)
}

func (c memNode) Publish(id string, n Notification, at Position) {
	if c.isDown() {
		return
	}
	c.h.mu.Lock()
	var fns []func(Notification, Position)
	for _, fn := range c.h.followers[id] {
		fns = append(fns, fn)
	}
	c.h.mu.Unlock()
	for _, fn := range fns {
		fn(n, at)
	}
}

func (c memNode) Follow(id string, fn func(Notification, Position)) func() {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	c.h.next++
	k := c.h.next
	if c.h.followers[id] == nil {
		c.h.followers[id] = map[int]func(Notification, Position){}
	}
	c.h.followers[id][k] = fn
	return func() {
		c.h.mu.Lock()
		delete(c.h.followers[id], k)
		c.h.mu.Unlock()
	}
}

func (c memNode) PublishList(principal string, n Notification) {
	c.h.mu.Lock()
	var fns []func(string, Notification)
	for _, f := range c.h.lists {
		if f.node != c.node {
			fns = append(fns, f.fn)
		}
	}
	c.h.mu.Unlock()
	for _, fn := range fns {
		fn(principal, n)
	}
}

func (c memNode) FollowLists(fn func(string, Notification)) func() {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	c.h.next++
	k := c.h.next
	c.h.lists[k] = memListFollower{c.node, fn}
	return func() {
		c.h.mu.Lock()
		delete(c.h.lists, k)
		c.h.mu.Unlock()
	}
}

// startNode runs a manager named node on the hub over st.
func (h *memHub) startNode(t *testing.T, node string, st store.Store, model provider.Model) *Manager {
	t.Helper()
	m, err := New(context.Background(), Config{Store: st, Runner: newTestRunner(model), LogPath: "test.db",
		Logger: slog.New(slog.DiscardHandler), Cluster: memNode{h, node}, AdoptInterval: 5 * time.Millisecond, Tools: h.tools})
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.managers[node] = m
	h.mu.Unlock()
	return m
}

// twoNodes starts managers a and b on one hub over st, closed with the
// test.
func twoNodes(t *testing.T, st store.Store, model provider.Model) (h *memHub, a, b *Manager) {
	t.Helper()
	h = newMemHub()
	a = h.startNode(t, "a", st, model)
	t.Cleanup(a.Close)
	b = h.startNode(t, "b", st, model)
	t.Cleanup(b.Close)
	return h, a, b
}

// startQuietNode starts a manager on cluster that adopts no orphans (the
// test leaves each session where it put it), closed with the test.
func startQuietNode(t *testing.T, cluster Cluster, st store.Store, model provider.Model) *Manager {
	t.Helper()
	return startQuietNodeWith(t, cluster, st, model, nil)
}

// startQuietNodeWith is startQuietNode whose turns may call tools.
func startQuietNodeWith(t *testing.T, cluster Cluster, st store.Store, model provider.Model, tools turn.Toolbox) *Manager {
	t.Helper()
	m, err := New(context.Background(), Config{Store: st, Runner: newTestRunner(model), LogPath: "test.db",
		Logger: slog.New(slog.DiscardHandler), Cluster: cluster, AdoptInterval: time.Hour, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// TestClusterFollowsAndForwards: on two nodes sharing a store, a reader
// on the node that does not lead a session gets exactly the events the
// leader's reader gets, deltas included, in the same order; a turn/start
// sent to it runs on the leader and its ack is relayed unchanged, and a
// replay there is exactly-once.
func TestClusterFollowsAndForwards(t *testing.T) {
	st := openStore(t)
	h, a, b := twoNodes(t, st, newHistModel())

	onA := newRecSub()
	sid := startSession(t, a, onA)
	first := runTurn(t, a, onA, textTurn(sid, "hello")) // a leads now
	if leader, _ := (memNode{h, "a"}).Leader(context.Background(), sid); leader != "a" {
		t.Fatalf("leader %q, want a", leader)
	}
	onB := newRecSub()
	subscribe(t, b, onB, sid)
	onB.waitTerminal(t, first.TurnID)

	p := textTurn(sid, "cut") // a stream cut and a retry, streamed to both
	p.CommandID = cmdID()
	ack, launch, err := b.StartTurn(context.Background(), nil, mustJSON(p))
	if err != nil {
		t.Fatal(err)
	}
	launch()
	var res msp.TurnStartResult
	json.Unmarshal(ack, &res)
	onA.waitTerminal(t, res.TurnID)
	onB.waitTerminal(t, res.TurnID)
	// From the forwarded turn on (the first turn's deltas were gone before
	// onB subscribed) both readers got the same events.
	from := func(r *recSub) []string {
		all := cursors(t, r)
		return all[slices.Index(all, first.ViewCursor)+1:]
	}
	if got, want := from(onB), from(onA); !slices.Equal(got, want) {
		t.Fatalf("the follower's reader got\n %v\nthe leader's\n %v", got, want)
	}
	if n := len(of[msp.ItemDeltaParams](t, onB, msp.NotifyItemDelta)); n == 0 {
		t.Fatal("the follower's reader got no delta")
	}
	again, _, err := b.StartTurn(context.Background(), nil, mustJSON(p))
	if err != nil || string(again) != string(ack) {
		t.Fatalf("replay on the follower: %s, %v; want %s", again, err, ack)
	}
	started := 0
	for _, r := range records(t, st, sid) {
		if r.Method == msp.NotifyTurnStarted && strings.Contains(string(r.Params), res.TurnID) {
			started++
		}
	}
	if started != 1 {
		t.Fatalf("the forwarded turn started %d times", started)
	}
	// Reads on the follower see the leader's state.
	read, err := b.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid}))
	if err != nil || read.Session.TurnCount != 2 {
		t.Fatalf("session/read on the follower: %+v, %v", read, err)
	}
}

// TestClusterTakesOverAStoppedLeader: when the node leading a session dies
// mid-answer (its writes stop and its lease lapses), another node takes
// the session over and resumes the turn as a new attempt, saying which
// node stopped; its readers see it all in order.
func TestClusterTakesOverAStoppedLeader(t *testing.T) {
	h, onB, sid, turnID := crashMidAnswer(t, func(h *memHub, _ string) {
		h.kill("a") // nor published, and its lease lapses
	})
	c := onB.waitTerminal(t, turnID)
	if c.Terminal != msp.TerminalCompleted || c.Attempts.Count != 2 {
		t.Fatalf("terminal after the takeover %+v %+v", c, c.Attempts)
	}
	notices := of[msp.TurnRetryScheduledParams](t, onB, msp.NotifyTurnRetryScheduled)
	if len(notices) != 1 || notices[0].Reason != "node a stopped during attempt 1" {
		t.Fatalf("notices %+v", notices)
	}
	if leader, _ := (memNode{h, "b"}).Leader(context.Background(), sid); leader != "b" {
		t.Fatalf("leader %q after the takeover, want b", leader)
	}
}

// TestClusterLeadsItsOwnUnledClaim: a node holding a claim of a busy
// session it does not lead (its claim landed while the answer was lost)
// takes the session over itself: no other node would, as the claim says
// a live node leads it.
func TestClusterLeadsItsOwnUnledClaim(t *testing.T) {
	_, onB, _, turnID := crashMidAnswer(t, func(h *memHub, sid string) {
		h.mu.Lock() // a dies, and b's claim of the session is there at once
		h.down["a"] = true
		h.leases[sid] = "b"
		h.mu.Unlock()
	})
	c := onB.waitTerminal(t, turnID)
	if c.Terminal != msp.TerminalCompleted || c.Attempts.Count != 2 {
		t.Fatalf("terminal after the takeover %+v %+v", c, c.Attempts)
	}
}

// TestClusterGivesUpASessionTakenDuringALapse: node a's lease lapses
// while its turn streams (a paused, say) and b takes the session over and
// finishes the turn. When a joins again it gives the session up: its own
// attempt stops without writing, and its readers see b's ending of the
// turn rather than a turn that never ends.
func TestClusterGivesUpASessionTakenDuringALapse(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	h, a, b := twoNodes(t, st, model)
	onA, onB, sid, ack := hangOnA(t, a, b, model)

	h.expire("a") // a's lease lapses; b takes the session over
	if c := onB.waitTerminal(t, ack.TurnID); c.Terminal != msp.TerminalCompleted || c.Attempts.Count != 2 {
		t.Fatalf("terminal on b %+v %+v", c, c.Attempts)
	}
	h.lapse("a") // a hears of its lapse
	c := onA.waitTerminal(t, ack.TurnID)
	if c.Terminal != msp.TerminalCompleted || c.Attempts.Count != 2 {
		t.Fatalf("a's reader saw %+v %+v, want b's completion after 2 attempts", c, c.Attempts)
	}
	pollUntil(t, "a's attempt to stop", func() bool { return a.running.Load() == 0 })
	if a.leads(sid) {
		t.Fatal("a still leads the session b took over")
	}
	if leader, _ := (memNode{h, "a"}).Leader(context.Background(), sid); leader != "b" {
		t.Fatalf("leader %q, want b", leader)
	}
	if n := storedCount(t, st, sid, msp.NotifyTurnCompleted); n != 1 {
		t.Fatalf("%d turn/completed records, want 1", n)
	}
}

// pollUntil waits until cond, the state of other goroutines that tell
// nobody of it, holds, checking it every millisecond.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// storedCount is how many records of method session sid's stored log
// holds.
func storedCount(t *testing.T, st store.Store, sid, method string) int {
	t.Helper()
	recs, err := st.Records(context.Background(), sid, 0, store.Limit{Rows: 1000, Bytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Method == method {
			n++
		}
	}
	return n
}

// gateModel answers each request once its gate opens; deaf, it does not
// hear its context either, as a provider call that has not yet noticed.
type gateModel struct {
	started chan struct{}
	gate    chan struct{}
	deaf    bool
}

func (m *gateModel) System() string { return "gate" }

func (m *gateModel) Stream(ctx context.Context, _ provider.Request, onText func(string)) (provider.Response, error) {
	m.started <- struct{}{}
	done := ctx.Done()
	if m.deaf {
		done = nil
	}
	select {
	case <-m.gate:
	case <-done:
		return provider.Response{}, ctx.Err()
	}
	onText("done")
	return provider.Response{FinishReason: provider.FinishStop}, nil
}

// TestClusterKeepsItsSessionsAfterALapseNobodyUsed: a node whose lease
// lapsed, but whose sessions no other node took meanwhile, claims them
// again when it joins again (asking again the claims left unanswered, as
// in a NATS election) and goes on running its turn: one attempt.
func TestClusterKeepsItsSessionsAfterALapseNobodyUsed(t *testing.T) {
	model := &gateModel{started: make(chan struct{}, 1), gate: make(chan struct{})}
	h, a, _, onA, sid, ack := gatedTurnOnA(t, model)
	h.mu.Lock()
	h.unheard = 3
	h.mu.Unlock()
	h.lapse("a")
	pollUntil(t, "a's claim again", func() bool {
		leader, _ := (memNode{h, "a"}).Leader(context.Background(), sid)
		return leader == "a"
	})
	close(model.gate)
	c := onA.waitTerminal(t, ack.TurnID)
	if c.Terminal != msp.TerminalCompleted || c.Attempts.Count != 1 {
		t.Fatalf("terminal %+v %+v, want completed in 1 attempt", c, c.Attempts)
	}
	if !a.leads(sid) {
		t.Fatal("a gave up a session nobody else took")
	}
}

// gatedTurnOnA runs node a alone on a hub, over a store of its own, and a
// turn there (onA reading) whose provider call has begun and waits on
// model's gate.
func gatedTurnOnA(t *testing.T, model *gateModel) (h *memHub, a *Manager, st store.Store, onA *recSub, sid string, ack msp.TurnStartResult) {
	t.Helper()
	st = openStore(t)
	h = newMemHub()
	a = h.startNode(t, "a", st, model)
	t.Cleanup(a.Close)
	onA = newRecSub()
	sid = startSession(t, a, onA)
	ack = startTurn(t, a, textTurn(sid, "hello"))
	<-model.started
	return h, a, st, onA, sid, ack
}

// TestClusterLeadsAgainWhileItsOldAttemptEnds: a gives a session up
// after a lapse while its attempt is still in the provider's hands, then
// leads it again (the node that took it died) before that attempt ends.
// The old attempt writes nothing when it does end; the turn resumes as
// attempt 2 on a worker of its own and completes once.
func TestClusterLeadsAgainWhileItsOldAttemptEnds(t *testing.T) {
	model := &gateModel{started: make(chan struct{}, 2), gate: make(chan struct{}), deaf: true}
	h, a, st, onA, sid, ack := gatedTurnOnA(t, model)
	h.mu.Lock()
	h.leases[sid] = "b" // b took it while a was paused
	h.mu.Unlock()
	h.lapsedOf("a") <- struct{}{}
	pollUntil(t, "a to give the session up", func() bool { return !a.leads(sid) })
	h.mu.Lock()
	delete(h.leases, sid) // b died: a's adoption takes it back
	h.mu.Unlock()
	pollUntil(t, "a to lead again", func() bool { return a.leads(sid) })
	close(model.gate) // the old attempt ends now
	c := onA.waitTerminal(t, ack.TurnID)
	if c.Terminal != msp.TerminalCompleted || c.Attempts.Count != 2 {
		t.Fatalf("terminal %+v %+v, want completed by attempt 2", c, c.Attempts)
	}
	if n := storedCount(t, st, sid, msp.NotifyTurnCompleted); n != 1 {
		t.Fatalf("%d turn/completed records, want 1", n)
	}
}

// TestClusterLeadsNothingClaimedBeforeALapse: a, following a session,
// claims it for a turn/start, and is told of its own lapse before it has
// taken the session over, b having claimed it meanwhile. reclaim, which
// looks at the sessions a leads, cannot see this one yet; the takeover
// claims it again, and a neither leads it nor runs the turn: the client
// is told to try again, and the retry is forwarded to b, whose turn a's
// reader sees through the following a kept.
func TestClusterLeadsNothingClaimedBeforeALapse(t *testing.T) {
	st := openStore(t)
	h := newMemHub()
	model := newHistModel()
	b := h.startNode(t, "b", st, model)
	t.Cleanup(b.Close)
	sid := startSession(t, b, newRecSub())
	h.expire("b") // b leads it, but holds no claim: a can take one
	var a *Manager
	lapseOnce := sync.OnceFunc(func() {
		h.expire("a")
		if node, _ := (memNode{h, "b"}).Claim(context.Background(), sid); node != "b" {
			t.Errorf("b's claim went to %q", node)
		}
		h.lapsedOf("a") <- struct{}{}
		pollUntil(t, "a to count its lapse", func() bool { return a.lapses.Load() > 0 })
	})
	a = startQuietNode(t, claimHook{memNode{h, "a"}, func(string) { lapseOnce() }}, st, model)
	h.mu.Lock()
	h.managers["a"] = a
	h.mu.Unlock()
	onA := newRecSub()
	subscribe(t, a, onA, sid)

	_, _, err := a.StartTurn(context.Background(), nil, mustJSON(msp.TurnStartParams{CommandID: cmdID(), SessionID: sid,
		Input: []msp.TurnInputPart{{Type: "text", Text: "hello"}}}))
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Retryable == nil || !*me.Data.Retryable {
		t.Fatalf("turn/start on a: %v, want a retryable refusal", err)
	}
	if a.leads(sid) {
		t.Fatal("a leads a session b claimed during its lapse")
	}
	if n := storedCount(t, st, sid, msp.NotifyTurnStarted); n != 0 {
		t.Fatalf("%d turn/started records, want none", n)
	}
	ack := startTurn(t, a, textTurn(sid, "hello")) // the retry, forwarded to b
	if c := onA.waitTerminal(t, ack.TurnID); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("a's reader saw %+v, want b's turn completed", c)
	}
	if a.leads(sid) || !b.leads(sid) {
		t.Fatalf("a leads: %v, b leads: %v; want b alone", a.leads(sid), b.leads(sid))
	}
}

// claimHook is a node whose claims that come back its own call after
// first, with the claimed key, before they return.
type claimHook struct {
	memNode
	after func(key string)
}

func (c claimHook) Claim(ctx context.Context, key string) (string, error) {
	node, err := c.memNode.Claim(ctx, key)
	if err == nil && node == c.node {
		c.after(key)
	}
	return node, err
}

// crashMidAnswer runs nodes a and b on one store, starts a turn on a that
// streams and then hangs, subscribes onB on b, and stops a's writes: die
// then says what else becomes of a. It returns the hub, b's subscriber,
// the session and the turn.
func crashMidAnswer(t *testing.T, die func(h *memHub, sid string)) (*memHub, *recSub, string, string) {
	t.Helper()
	st := openStore(t)
	h := newMemHub()
	model := newHistModel()
	deadA := &crashStore{Store: st}
	a := h.startNode(t, "a", deadA, model)
	b := h.startNode(t, "b", st, model)
	t.Cleanup(b.Close)
	t.Cleanup(a.Close)

	_, onB, sid, ack := hangOnA(t, a, b, model)
	deadA.dead.Store(true) // node a dies: nothing more of it is written
	die(h, sid)
	return h, onB, sid, ack.TurnID
}

// hangOnA starts a session on a, watched there (onA) and on b (onB), and
// a turn whose first attempt streams and then hangs, until it has begun.
func hangOnA(t *testing.T, a, b *Manager, model *histModel) (onA, onB *recSub, sid string, ack msp.TurnStartResult) {
	t.Helper()
	onA = newRecSub()
	sid = startSession(t, a, onA)
	ack = startTurn(t, a, textTurn(sid, "crash")) // attempt 1 streams, then hangs
	model.waitStarted(t, "crash")
	onB = newRecSub()
	subscribe(t, b, onB, sid)
	return onA, onB, sid, ack
}

// TestClusterHandsOverOnShutdown: a node that shuts down stops its turn
// with an exact checkpoint and lets go of its lease; another node resumes
// the turn at once.
func TestClusterHandsOverOnShutdown(t *testing.T) {
	st := openStore(t)
	h := newMemHub()
	model := newHistModel()
	a := h.startNode(t, "a", st, model)
	b := h.startNode(t, "b", st, model)
	t.Cleanup(b.Close)
	onA := newRecSub()
	sid := startSession(t, a, onA)
	ack := startTurn(t, a, textTurn(sid, "crash"))
	model.waitStarted(t, "crash")
	onB := newRecSub()
	subscribe(t, b, onB, sid)
	a.Close()
	c := onB.waitTerminal(t, ack.TurnID)
	if c.Terminal != msp.TerminalCompleted || c.Attempts.Count != 2 {
		t.Fatalf("terminal after the handover %+v %+v", c, c.Attempts)
	}
	if got := of[msp.TurnRetryScheduledParams](t, onB, msp.NotifyTurnRetryScheduled); len(got) != 1 || got[0].Reason != "node a stopped during attempt 1" {
		t.Fatalf("notices %+v", got)
	}
	items := of[msp.ItemParams](t, onB, msp.NotifyItemCompleted)
	if cut := items[1].Item; cut.Status != msp.ItemFailed || *cut.Text != "working" {
		t.Fatalf("the cut attempt %+v: want failed with its text", cut)
	}
}

// lagNode is a memNode whose deliveries to followers can be held back, as
// a follower's subscription lags behind the leader.
type lagNode struct {
	memNode
	mu   sync.Mutex
	hold bool
	q    []func()
}

func (c *lagNode) Follow(id string, fn func(Notification, Position)) func() {
	return c.memNode.Follow(id, func(n Notification, at Position) {
		c.mu.Lock()
		if c.hold {
			c.q = append(c.q, func() { fn(n, at) })
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		fn(n, at)
	})
}

// flush delivers what was held back and stops holding.
func (c *lagNode) flush() {
	c.mu.Lock()
	q := c.q
	c.q, c.hold = nil, false
	c.mu.Unlock()
	for _, f := range q {
		f()
	}
}

// TestFollowerResumedAheadOfItself: a reader moving from the leader to a
// follower that lags behind it, with the cursor of a delta the follower
// has not ingested yet, is taken at its word (the follower cannot tell
// that cursor from one handed out before its load, which it never will
// get): it gets no event at or before its cursor when the follower
// catches up, and the stream after it. A follower that loaded after the
// leader handed out a cursor takes it too, rather than calling it
// missing.
func TestFollowerResumedAheadOfItself(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	h := newMemHub()
	feed := make(chan string)
	defer close(feed)
	a := h.startNode(t, "a", st, pacedModel{feed: feed})
	lb := &lagNode{memNode: memNode{h, "b"}}
	b := startQuietNode(t, lb, st, pacedModel{feed: feed})

	onA := newRecSub()
	sid := startSession(t, a, onA)
	startTurn(t, a, textTurn(sid, "go"))
	feed <- "zero"
	early := onA.waitCount(t, msp.NotifyItemDelta, 1)[0].Cursor // handed out before b loads
	onB := newRecSub()
	if err := attachAtHead(ctx, b, onB, sid); err != nil { // b loads the session at the head
		t.Fatal(err)
	}
	if err := b.attach(ctx, newRecSub(), sid, early); err != nil {
		t.Fatalf("resuming on b from %s, handed out before b loaded: %v", early, err)
	}
	lb.mu.Lock()
	lb.hold = true
	lb.mu.Unlock()
	feed <- "one"
	feed <- "two"
	last := onA.waitCount(t, msp.NotifyItemDelta, 3)[2].Cursor

	r := newRecSub()
	if err := b.attach(ctx, r, sid, last); err != nil {
		t.Fatalf("resuming on the lagging follower from %s: %v", last, err)
	}
	lb.flush()
	feed <- "three"
	r.waitCount(t, msp.NotifyItemDelta, 1)
	mine, _ := parseCursor(last)
	for _, n := range r.all() {
		if c, err := parseCursor(n.Cursor); err == nil && !mine.before(c) {
			t.Fatalf("resumed from %s, then got %s at %s", last, n.Method, n.Cursor)
		}
	}
	if got := params[msp.ItemDeltaParams](t, r.waitCount(t, msp.NotifyItemDelta, 1)[0].Frame).Delta; got != "three" {
		t.Fatalf("the first delta after the cursor: %q, want %q", got, "three")
	}
}

// dropNode loses the item/started it publishes, as NATS drops a slow
// follower's messages.
type dropNode struct{ memNode }

func (c dropNode) Publish(id string, n Notification, at Position) {
	if n.Method == msp.NotifyItemStarted {
		return
	}
	c.memNode.Publish(id, n, at)
}

// TestFollowerToldOfEphemeralEventsItMissed: a follower that never got an
// answer's item/started (its messages were dropped) sees the next delta
// skip a sub-position: its reader is told with a view/gap before that
// delta, and a reader resuming from before it gets one too.
func TestFollowerToldOfEphemeralEventsItMissed(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	h := newMemHub()
	feed := make(chan string)
	defer close(feed)
	a := startQuietNode(t, dropNode{memNode{h, "a"}}, st, pacedModel{feed: feed})
	b := h.startNode(t, "b", st, pacedModel{feed: feed})
	onA := newRecSub()
	sid := startSession(t, a, onA)
	onB := newRecSub()
	if err := attachAtHead(ctx, b, onB, sid); err != nil {
		t.Fatal(err)
	}
	startTurn(t, a, textTurn(sid, "go"))
	feed <- "one"
	onB.waitCount(t, msp.NotifyItemDelta, 1)
	got := onB.all()
	i := slices.IndexFunc(got, func(n Notification) bool { return n.Method == msp.NotifyItemDelta })
	if i < 1 || got[i-1].Method != msp.NotifyViewGap {
		t.Fatalf("reader on b: %v; want a view/gap right before the delta", methodsOf(got))
	}
	if g := params[msp.ViewGapParams](t, got[i-1].Frame); g.Next != got[i].Cursor {
		t.Fatalf("gap %+v before the delta at %s", g, got[i].Cursor)
	}
	// A reader resuming on b from the admission's last record is told too.
	admitted := onA.waitCount(t, msp.NotifyItemCompleted, 1)[0].Cursor
	r := newRecSub()
	if err := b.attach(ctx, r, sid, admitted); err != nil {
		t.Fatal(err)
	}
	if ms := methodsOf(r.all()); !slices.Contains(ms, msp.NotifyViewGap) {
		t.Fatalf("resumed on b after %s: %v, want a view/gap before the delta", admitted, ms)
	}
}

// followedAnswer is an answer streaming on node a, fed by the test, while
// node b follows the session. a's clock moves only by advance, and it
// saves a streaming text once a second of that clock has passed; what a
// publishes goes through filter (newFilterNode: nothing dropped until
// set).
type followedAnswer struct {
	a, b     *Manager
	sid      string
	turn     string
	onA, onB *recSub // a's reader; b's, subscribed before the turn
	feed     chan string
	clock    atomic.Int64 // seconds past t0
	filter   filterNode
}

func newFollowedAnswer(t *testing.T) *followedAnswer {
	t.Helper()
	ctx := context.Background()
	st := openStore(t)
	h := newMemHub()
	fa := &followedAnswer{feed: make(chan string), onA: newRecSub(), onB: newRecSub(), filter: newFilterNode(h, "a")}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var err error
	fa.a, err = New(ctx, Config{Store: st, Runner: newTestRunner(pacedModel{feed: fa.feed}), LogPath: "test.db",
		Logger: slog.New(slog.DiscardHandler), Cluster: fa.filter, AdoptInterval: time.Hour,
		TextCheckpoint: time.Second, Now: func() time.Time { return t0.Add(time.Duration(fa.clock.Load()) * time.Second) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fa.a.Close)
	fa.b = startQuietNode(t, memNode{h, "b"}, st, pacedModel{feed: fa.feed})
	fa.sid = startSession(t, fa.a, fa.onA)
	if err := attachAtHead(ctx, fa.b, fa.onB, fa.sid); err != nil {
		t.Fatal(err)
	}
	fa.turn = startTurn(t, fa.a, textTurn(fa.sid, "go")).TurnID
	return fa
}

// lose feeds text while a's deltas are dropped, and waits until a has
// streamed deltas in all and dropped those it streamed meanwhile (a
// publishes an event after its own readers have it).
func (fa *followedAnswer) lose(t *testing.T, text string, deltas int) {
	t.Helper()
	before := len(of[msp.ItemDeltaParams](t, fa.onA, msp.NotifyItemDelta))
	dropped := make(chan struct{}, deltas)
	fa.filter.set(func(n Notification, _ Position) bool {
		if n.Method != msp.NotifyItemDelta {
			return false
		}
		dropped <- struct{}{}
		return true
	})
	fa.feed <- text
	fa.onA.waitCount(t, msp.NotifyItemDelta, deltas)
	for range deltas - before {
		<-dropped
	}
	fa.filter.set(func(Notification, Position) bool { return false })
}

// rename renames the session on a and waits until b has had renames
// nameChanged events in all (the first came with the turn).
func (fa *followedAnswer) rename(t *testing.T, name string, renames int) {
	t.Helper()
	if _, err := fa.a.RenameSession(context.Background(), mustJSON(msp.SessionRenameParams{CommandID: cmdID(), SessionID: fa.sid, Name: name})); err != nil {
		t.Fatal(err)
	}
	fa.onB.waitCount(t, msp.NotifySessionNameChanged, renames)
}

// stream feeds text and waits until b has had deltas in all.
func (fa *followedAnswer) stream(t *testing.T, text string, deltas int) {
	t.Helper()
	fa.feed <- text
	fa.onB.waitCount(t, msp.NotifyItemDelta, deltas)
}

// read is session/read with items, on m.
func (fa *followedAnswer) read(t *testing.T, m *Manager) msp.SessionSnapshot {
	t.Helper()
	return readSnap(t, m, fa.sid)
}

// end finishes the answer and waits for the turn's end on b.
func (fa *followedAnswer) end(t *testing.T) {
	t.Helper()
	close(fa.feed)
	fa.onB.waitTerminal(t, fa.turn)
}

// lastItem describes a snapshot's last item: kind/status:text.
func lastItem(s msp.SessionSnapshot) string {
	if len(s.History.Items) == 0 {
		return "(none)"
	}
	it := s.History.Items[len(s.History.Items)-1]
	return string(it.Kind) + "/" + string(it.Status) + ":" + deref(it.Text)
}

// TestFollowerReadWhileAnswerStreams: session/read on a node that follows
// the session shows the answer streaming on the leader, as far as it has
// reached the follower, and its cursor stands there: a subscription from
// it gets the rest of the answer, and the text comes out once.
func TestFollowerReadWhileAnswerStreams(t *testing.T) {
	fa := newFollowedAnswer(t)
	fa.stream(t, "one ", 1)
	fa.stream(t, "two ", 2)
	snap := fa.read(t, fa.b)
	if got := lastItem(snap); got != "agentMessage/inProgress:one two " {
		t.Fatalf("session/read on the follower during the stream: last item %q, want the answer, open, with %q", got, "one two ")
	}
	last := snap.History.Items[len(snap.History.Items)-1]
	r := newRecSub()
	if err := fa.b.attach(context.Background(), r, fa.sid, snap.ViewCursor); err != nil {
		t.Fatalf("subscribing on the follower from its snapshot's cursor %s: %v", snap.ViewCursor, err)
	}
	fa.feed <- "three"
	fa.end(t)
	r.waitTerminal(t, fa.turn)
	text := deref(last.Text)
	for _, n := range r.all() {
		if n.Method == msp.NotifyItemDelta {
			if d := params[msp.ItemDeltaParams](t, n.Frame); d.ItemID == last.ItemID {
				text += d.Delta
			}
		}
	}
	if text != "one two three" {
		t.Fatalf("the snapshot's text and the deltas after its cursor make %q, want %q", text, "one two three")
	}
}

// TestFollowerReadAfterASavedText: an answer whose text was saved to the
// log (item/updated) and has streamed on since shows on a follower with
// the saved text and what followed it.
func TestFollowerReadAfterASavedText(t *testing.T) {
	fa := newFollowedAnswer(t)
	fa.stream(t, "one ", 1)
	fa.clock.Add(2)
	fa.stream(t, "two ", 2) // the text checkpoint falls due: "one two " is saved
	fa.onB.waitCount(t, msp.NotifyItemUpdated, 1)
	fa.stream(t, "three ", 3)
	snap := fa.read(t, fa.b)
	fa.end(t)
	if got := lastItem(snap); got != "agentMessage/inProgress:one two three " {
		t.Fatalf("session/read on the follower: last item %q, want the answer, open, with %q", got, "one two three ")
	}
}

// TestFollowerReadAcrossAnotherCommandsRecord: while an answer streams,
// another command's record (a rename) moves the follower's head; the
// follower's snapshot still shows the answer with all of its text, at
// the leader's cursor, before its text is saved and after.
func TestFollowerReadAcrossAnotherCommandsRecord(t *testing.T) {
	fa := newFollowedAnswer(t)
	fa.stream(t, "one ", 1)
	fa.stream(t, "two ", 2)
	fa.rename(t, "x", 2)
	fa.stream(t, "three ", 3)
	if sa, sb := fa.read(t, fa.a), fa.read(t, fa.b); lastItem(sb) != "agentMessage/inProgress:one two three " || sb.ViewCursor != sa.ViewCursor {
		t.Fatalf("an answer opened before the rename: leader %q at %s, follower %q at %s", lastItem(sa), sa.ViewCursor, lastItem(sb), sb.ViewCursor)
	}
	fa.clock.Add(2)
	fa.stream(t, "four ", 4) // saved: "one two three four "
	fa.onB.waitCount(t, msp.NotifyItemUpdated, 1)
	fa.stream(t, "five ", 5)
	fa.rename(t, "y", 3)
	fa.stream(t, "six", 6)
	sa, sb := fa.read(t, fa.a), fa.read(t, fa.b)
	fa.end(t)
	if want := "agentMessage/inProgress:one two three four five six"; lastItem(sb) != want || sb.ViewCursor != sa.ViewCursor {
		t.Fatalf("a saved answer streamed on across a rename: leader %q at %s, follower %q at %s; want %q", lastItem(sa), sa.ViewCursor, lastItem(sb), sb.ViewCursor, want)
	}
}

// TestFollowerToldOfTheLastEphemeralEventsItMissed: a follower that lost
// the last deltas before a record (the next thing it gets is durable: a
// rename) learns it from the record: its reader in the middle of the
// answer gets a view/gap, and its snapshot does not pass the answer's
// partial text off as whole.
func TestFollowerToldOfTheLastEphemeralEventsItMissed(t *testing.T) {
	fa := newFollowedAnswer(t)
	fa.stream(t, "one ", 1)
	fa.lose(t, "two ", 2)
	fa.rename(t, "x", 2)
	got := fa.onB.all()
	i := slices.IndexFunc(got, func(n Notification) bool {
		return n.Method == msp.NotifySessionNameChanged && n.Cursor == got[len(got)-1].Cursor
	})
	if i < 1 || got[i-1].Method != msp.NotifyViewGap {
		t.Fatalf("reader on b: %v; want a view/gap right before the rename", methodsOf(got))
	}
	snap := fa.read(t, fa.b)
	fa.end(t)
	if got := lastItem(snap); strings.HasPrefix(got, string(msp.ItemAgentMessage)) {
		t.Fatalf("the follower's snapshot shows %q at %s, though it missed part of the answer", got, snap.ViewCursor)
	}
}

// TestFollowerKeepsASessionWhoseDeletionFailed: a failed deletion, told
// to the nodes that follow the session, leaves it there: their readers
// are told and go on getting its events.
func TestFollowerKeepsASessionWhoseDeletionFailed(t *testing.T) {
	_, a, b := twoNodes(t, failingErasure{openStore(t)}, newHistModel())

	onA := newRecSub()
	sid := startSession(t, a, onA)
	first := runTurn(t, a, onA, textTurn(sid, "hello")) // a leads now
	onB := newRecSub()
	subscribe(t, b, onB, sid)
	onB.waitTerminal(t, first.TurnID)

	deleteNow(t, a, sid)
	if done := onB.waitCount(t, msp.NotifySessionDeleteCompleted, 1); params[msp.SessionDeleteCompletedParams](t, done[0].Frame).Outcome != msp.DeleteFailed {
		t.Fatalf("the follower's reader was told %s, want a failed deletion", done[0].Frame)
	}
	next := runTurn(t, a, onA, textTurn(sid, "still here?"))
	onB.waitTerminal(t, next.TurnID)
	if _, err := b.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid})); err != nil {
		t.Fatalf("session/read on the follower: %v", err)
	}
}
