package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Leases are per node, so that what a node does to keep them does not
// grow with the sessions it leads:
//
//   - a heartbeat: <Bucket>_NODES holds node → incarnation (a fresh id
//     each time the node joins), in a bucket whose entries lapse LeaseTTL
//     after their last write. The node renews it every third of LeaseTTL:
//     one KV write, whatever it leads.
//   - a claim a session: <Bucket>_CLAIMS holds session → "node
//     incarnation", written once when the node takes the session and
//     deleted when it lets go. It never lapses by itself; it counts while
//     the heartbeat of that node, in that incarnation, lives.
//
// A node that finds a claim whose heartbeat is gone (the node died, or
// came back as another incarnation) replaces it with its own, guarded by
// the claim's revision, so that of two nodes taking it over one wins. A
// node whose own heartbeat lapsed (paused past LeaseTTL, cut off from
// NATS) cannot know which of its claims were taken: it joins again as a
// new incarnation, which leaves every claim of the old one to be taken
// over, its own included, and tells Lapsed, so that the node claims again
// what it leads and gives up what another node took (session.Lapses).
// The store fences whatever the old leader still writes meanwhile (see
// the session package's Cluster section).
type leases struct {
	opts   Options
	nodes  jetstream.KeyValue // heartbeats: node → incarnation; entries lapse
	claims jetstream.KeyValue // claims: session → "node incarnation"
	log    *slog.Logger

	mu          sync.Mutex
	incarnation string            // this node's, in its heartbeat and claims
	beat        uint64            // the heartbeat's revision
	held        map[string]uint64 // session → revision of this incarnation's claim

	departed chan struct{} // a value after another node left (Departed)
	lapsed   chan struct{} // a value after this node joined again (Lapsed)
	watch    jetstream.KeyWatcher
	heard    nodeWatcher // hears of the heartbeats and of this node joining again

	stop chan struct{}
	done chan struct{}
}

// nodeWatcher hears what the heartbeats tell: another node's written or
// gone, when to sweep what the nodes gone left, and this node joining
// again after its own lapsed. The follow records need it (follows.go).
type nodeWatcher interface {
	nodeSeen(node string, alive bool)
	sweepLater()
	rewrite()
}

// Bucket name suffixes under Options.Bucket.
const (
	nodesSuffix  = "_NODES"
	claimsSuffix = "_CLAIMS"
	// legacySuffix is the bucket of the per-session leases mspd kept
	// before leases were per node.
	legacySuffix = "_LEASES"
)

// openLeases opens the buckets, refuses a deployment still running nodes
// of the old lease layout, writes this node's first heartbeat and starts
// renewing it; heard hears what the heartbeats tell.
func openLeases(ctx context.Context, js jetstream.JetStream, opts Options, heard nodeWatcher) (*leases, error) {
	nodes, err := openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:   opts.Bucket + nodesSuffix,
		TTL:      opts.LeaseTTL,
		History:  1,
		Replicas: opts.Replicas,
		Storage:  jetstream.FileStorage,
		// A heartbeat aging out leaves a marker, which the watchers of
		// departures see.
		LimitMarkerTTL: max(opts.LeaseTTL, time.Second), // the server's least
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: heartbeat bucket %s: %w", opts.Bucket+nodesSuffix, err)
	}
	claims, err := openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:   opts.Bucket + claimsSuffix,
		History:  1,
		Replicas: opts.Replicas,
		Storage:  jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: claim bucket %s: %w", opts.Bucket+claimsSuffix, err)
	}
	if err := checkNoLegacyLeases(ctx, js, opts.Bucket+legacySuffix); err != nil {
		return nil, err
	}
	l := &leases{opts: opts, nodes: nodes, claims: claims, log: opts.Logger, held: map[string]uint64{}, heard: heard,
		departed: make(chan struct{}, 1), lapsed: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if err := l.join(ctx); err != nil {
		return nil, fmt.Errorf("cluster: writing the heartbeat of node %s: %w", opts.Node, err)
	}
	// Not bound to ctx, which only bounds joining: the watch lasts as
	// long as the node.
	l.watch, err = nodes.WatchAll(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("cluster: watching the heartbeats: %w", err)
	}
	go l.watchDepartures()
	go l.renew()
	return l, nil
}

// watchDepartures tells Departed of every other node whose heartbeat goes
// (deleted, or aged out: the bucket leaves a marker) or comes back as a
// new incarnation: the claims of the one before are free. It tells heard
// of every heartbeat written or gone, and, on the live node first by
// name, to sweep after a departure and after the first look.
func (l *leases) watchDepartures() {
	seen := map[string]string{} // node → incarnation
	for e := range l.watch.Updates() {
		if e == nil { // the end of the initial values
			if l.sweeper(seen) {
				l.heard.sweepLater() // what nodes gone before this one left
			}
			continue
		}
		if e.Key() == l.opts.Node {
			continue // this node's own
		}
		was, known := seen[e.Key()]
		left := false
		if e.Operation() == jetstream.KeyValuePut {
			seen[e.Key()] = string(e.Value())
			left = known && was != string(e.Value())
			if !known {
				// Not every renewal: the follows' lock sits beside every
				// delta a leader publishes.
				l.heard.nodeSeen(e.Key(), true)
			}
		} else {
			// A deletion, or the heartbeat aging out; the marker of a
			// deletion ages out too, and is not a second departure.
			delete(seen, e.Key())
			left = known
			l.heard.nodeSeen(e.Key(), false)
			if left && l.sweeper(seen) {
				l.heard.sweepLater()
			}
		}
		if left {
			signal(l.departed)
		}
	}
}

// signal gives c (of capacity 1) a value unless one is pending, which
// covers this one too.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// sweeper tells whether this node comes first by name among the live
// ones seen: the one that deletes what the nodes gone left.
func (l *leases) sweeper(seen map[string]string) bool {
	for node := range seen {
		if node < l.opts.Node {
			return false
		}
	}
	return true
}

// checkNoLegacyLeases refuses to join while nodes of an earlier mspd,
// which kept a lease a session in bucket, hold any: the two layouts cannot
// see each other's leaders, so each would run the other's sessions too.
// Their leases lapse within their TTL once they stop; an empty legacy
// bucket is removed, so that later starts skip the check.
func checkNoLegacyLeases(ctx context.Context, js jetstream.JetStream, bucket string) error {
	try, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(try, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: looking for leases of an earlier mspd in %s: %w", bucket, err)
	}
	keys, err := kv.ListKeys(try)
	if err != nil {
		return fmt.Errorf("cluster: looking for leases of an earlier mspd in %s: %w", bucket, err)
	}
	live := 0
	for range keys.Keys() {
		live++
	}
	if live > 0 {
		return fmt.Errorf("cluster: nodes of an earlier mspd hold %d session leases in the KV bucket %s; this mspd keeps leases per node "+
			"(in %s and %s) and cannot share sessions with them: stop every node of the earlier version (their leases lapse within their "+
			"--lease-ttl), then start the nodes of this one", live, bucket,
			strings.TrimSuffix(bucket, legacySuffix)+nodesSuffix, strings.TrimSuffix(bucket, legacySuffix)+claimsSuffix)
	}
	if err := js.DeleteKeyValue(try, bucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("cluster: removing the empty lease bucket of an earlier mspd, %s: %w", bucket, err)
	}
	return nil
}

// join writes the heartbeat of a new incarnation of this node. It
// overwrites a heartbeat of an earlier one still within its TTL (a node
// restarted at once): that process is gone, and its claims with it.
func (l *leases) join(ctx context.Context) error {
	// Held through the write: no claim is made in the incarnation
	// being replaced, nor in the new one before its heartbeat lands.
	l.mu.Lock()
	defer l.mu.Unlock()
	incarnation := nuid.Next()
	rev, err := l.nodes.Put(ctx, l.opts.Node, []byte(incarnation))
	if err != nil {
		return err
	}
	l.incarnation, l.beat = incarnation, rev
	clear(l.held)
	return nil
}

// renew keeps the heartbeat alive: one KV write every third of LeaseTTL.
// A heartbeat found gone or replaced lapsed: the node joins again.
func (l *leases) renew() {
	defer close(l.done)
	t := time.NewTicker(l.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		incarnation, beat := l.incarnation, l.beat
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), l.opts.LeaseTTL/3)
		next, err := l.nodes.Update(ctx, l.opts.Node, []byte(incarnation), beat)
		if err == nil {
			l.mu.Lock()
			if l.incarnation == incarnation {
				l.beat = next
			}
			l.mu.Unlock()
		} else if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
			l.log.Warn("this node's heartbeat lapsed: its sessions may have been taken over; joining again", "node", l.opts.Node, "err", err)
			if err := l.rejoin(ctx); err != nil {
				l.log.Warn("joining again", "node", l.opts.Node, "err", err)
			}
		} else {
			l.log.Debug("renewing the heartbeat", "node", l.opts.Node, "err", err)
		}
		cancel()
	}
}

// rejoin joins again after this node's heartbeat lapsed, has what it
// follows written again, which another node may have deleted meanwhile,
// and tells Lapsed: every claim it held names the incarnation gone.
func (l *leases) rejoin(ctx context.Context) error {
	if err := l.join(ctx); err != nil {
		return err
	}
	go l.heard.rewrite()
	signal(l.lapsed)
	return nil
}

// claimValue is what a claim of this incarnation holds.
func (l *leases) claimValue() (value string, incarnation string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.opts.Node + " " + l.incarnation, l.incarnation
}

// hold records a claim this node wrote, unless it joined again meanwhile
// (the claim names the old incarnation: it does not count).
func (l *leases) hold(session string, rev uint64, incarnation string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.incarnation != incarnation {
		return false
	}
	l.held[session] = rev
	return true
}

// holder reads a claim's value: its node, and whether that node's
// heartbeat lives in the incarnation the claim names.
func (l *leases) holder(ctx context.Context, value []byte) (node string, alive bool, err error) {
	node, incarnation, ok := strings.Cut(string(value), " ")
	if !ok {
		return "", false, nil // not a claim this layout writes: anyone's
	}
	e, err := bounded(ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return l.nodes.Get(ctx, node) })
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return node, false, nil
	}
	if err != nil {
		return "", false, err
	}
	return node, string(e.Value()) == incarnation, nil
}

// leader returns the node whose live claim a session has, "" for none.
func (l *leases) leader(ctx context.Context, session string) (string, error) {
	e, err := l.getClaim(ctx, session)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	node, alive, err := l.holder(ctx, e.Value())
	if err != nil || !alive {
		return "", err
	}
	return node, nil
}

// claim makes this node the session's leader unless a live node already
// is, and returns the leader.
func (l *leases) claim(ctx context.Context, session string) (string, error) {
	l.mu.Lock()
	_, mine := l.held[session]
	l.mu.Unlock()
	if mine {
		return l.opts.Node, nil
	}
	for range 3 {
		value, incarnation := l.claimValue()
		rev, err := l.createClaim(ctx, session, value)
		if err == nil {
			if l.hold(session, rev, incarnation) {
				return l.opts.Node, nil
			}
			continue // joined again meanwhile: claim as the new incarnation
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return "", err
		}
		e, err := l.getClaim(ctx, session)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue // released between the two: try again
		}
		if err != nil {
			return "", err
		}
		node, alive, err := l.holder(ctx, e.Value())
		if err != nil {
			return "", err
		}
		if alive {
			if string(e.Value()) == value && l.hold(session, e.Revision(), incarnation) {
				return l.opts.Node, nil // this incarnation's own, written by a claim that timed out
			}
			return node, nil
		}
		// The claim of a node whose heartbeat is gone: take it over,
		// unless another node does first.
		rev, err = l.replaceClaim(ctx, session, value, e.Revision())
		if err == nil {
			if l.hold(session, rev, incarnation) {
				return l.opts.Node, nil
			}
			continue
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return "", err
		}
	}
	return "", fmt.Errorf("cluster: the claim of %s keeps changing", session)
}

// kvTimeout bounds one KV request of a claim: one sent while NATS elects
// a stream leader may never be answered, and an adoption pass must move
// on to the next session rather than wait on it. A claim written whose
// answer was lost is found again as this node's own (see claim).
const kvTimeout = 2 * time.Second

func (l *leases) getClaim(ctx context.Context, session string) (jetstream.KeyValueEntry, error) {
	return bounded(ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return l.claims.Get(ctx, session) })
}

func (l *leases) createClaim(ctx context.Context, session, value string) (uint64, error) {
	return bounded(ctx, func(ctx context.Context) (uint64, error) { return l.claims.Create(ctx, session, []byte(value)) })
}

func (l *leases) replaceClaim(ctx context.Context, session, value string, revision uint64) (uint64, error) {
	return bounded(ctx, func(ctx context.Context) (uint64, error) {
		return l.claims.Update(ctx, session, []byte(value), revision)
	})
}

// bounded runs one KV request within kvTimeout.
func bounded[T any](ctx context.Context, request func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, kvTimeout)
	defer cancel()
	return request(ctx)
}

// release deletes this node's claim of a session, unless another node
// replaced it meanwhile.
func (l *leases) release(session string) {
	l.mu.Lock()
	rev, mine := l.held[session]
	delete(l.held, session)
	l.mu.Unlock()
	if !mine {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.claims.Delete(ctx, session, jetstream.LastRevision(rev)); err != nil {
		l.log.Debug("releasing a claim", "session", session, "err", err)
	}
}

// close stops renewing the heartbeat and deletes it, so that the claims
// not released are free at once (a node that cannot reach NATS leaves its
// heartbeat to lapse within LeaseTTL).
func (l *leases) close() {
	l.stopRenewing()
	l.mu.Lock()
	beat := l.beat
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.nodes.Delete(ctx, l.opts.Node, jetstream.LastRevision(beat)); err != nil {
		l.log.Debug("deleting the heartbeat", "node", l.opts.Node, "err", err)
	}
}

// stopRenewing stops the heartbeat's renewal and the watch of departures,
// once, and waits for the renewal to end.
func (l *leases) stopRenewing() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
		_ = l.watch.Stop()
	}
	<-l.done
}
