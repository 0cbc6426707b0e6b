package cluster

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Follows: a leader publishes a session's ephemeral events (deltas, an
// answer's item/started) on the bus only while another node follows the
// session; its durable events always go, so that a follower never waits
// on the store for one. A node that follows a session writes a follow
// record (<Bucket>_FOLLOWS, key "<session>.<node>", both base64url) and
// deletes it when it stops; every node watches the bucket and keeps the
// sessions others follow in memory.
//
// A follower starts following before the leader has heard of it: the
// ephemeral events of that moment (a millisecond or so) do not reach it,
// and its readers are told of them with a view/gap, as of any event the
// bus dropped (see the session package's ingest).
//
// A record counts while its node's heartbeat lives (or the node writes
// records, which only a live node does): a leader publishes nothing for
// a node that died. Its records are deleted a lease TTL after its
// heartbeat went, by one node (the live one first by name), each guarded
// by its revision, so that a record written since stays; a node whose
// own heartbeat lapsed, and which joins again still following, writes
// its records again. A node started again deletes those of its earlier
// process itself.
type follows struct {
	node  string
	kv    jetstream.KeyValue
	grace time.Duration // how long after a node left its records are deleted

	// mu is read for every delta a leader publishes, written only when a
	// follow record or a heartbeat comes or goes.
	mu       sync.RWMutex
	followed map[string]map[string]uint64 // session → another node that follows it → its record's revision
	alive    map[string]bool              // the other nodes whose heartbeat lives
	mine     map[string]bool              // the sessions this node follows

	watch jetstream.KeyWatcher
	done  chan struct{}
}

const followsSuffix = "_FOLLOWS"

// followKeyEncoding turns ids into KV key tokens: letters, digits, '-'
// and '_' only, so that no id can reach into another's key.
var followKeyEncoding = base64.RawURLEncoding

func followKey(session, node string) string {
	return followKeyEncoding.EncodeToString([]byte(session)) + "." + followKeyEncoding.EncodeToString([]byte(node))
}

func parseFollowKey(key string) (session, node string, ok bool) {
	s, n, found := strings.Cut(key, ".")
	if !found {
		return "", "", false
	}
	sb, err1 := followKeyEncoding.DecodeString(s)
	nb, err2 := followKeyEncoding.DecodeString(n)
	if err1 != nil || err2 != nil {
		return "", "", false
	}
	return string(sb), string(nb), true
}

// openFollows opens the bucket, deletes the records an earlier process
// of this node left, and starts watching.
func openFollows(ctx context.Context, js jetstream.JetStream, opts Options) (*follows, error) {
	kv, err := openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:   opts.Bucket + followsSuffix,
		History:  1,
		Replicas: opts.Replicas,
		Storage:  jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: follow bucket %s: %w", opts.Bucket+followsSuffix, err)
	}
	f := &follows{node: opts.Node, kv: kv, grace: opts.LeaseTTL, followed: map[string]map[string]uint64{}, alive: map[string]bool{},
		mine: map[string]bool{}, done: make(chan struct{})}
	if err := f.forgetEarlier(ctx); err != nil {
		return nil, err
	}
	f.watch, err = kv.WatchAll(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("cluster: watching the follow records: %w", err)
	}
	go f.run()
	return f, nil
}

// forgetEarlier deletes this node's records of an earlier process: it
// follows nothing yet.
func (f *follows) forgetEarlier(ctx context.Context) error {
	keys, err := f.kv.ListKeysFiltered(ctx, "*."+followKeyEncoding.EncodeToString([]byte(f.node)))
	if err != nil {
		return fmt.Errorf("cluster: listing this node's follow records: %w", err)
	}
	var stale []string
	for k := range keys.Keys() {
		stale = append(stale, k)
	}
	for _, k := range stale {
		if err := f.kv.Delete(ctx, k); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("cluster: deleting a follow record of an earlier process: %w", err)
		}
	}
	return nil
}

// run applies the watch's updates until it stops. A record written
// since the watch began says its node is alive; one of the initial
// values may be a dead node's.
func (f *follows) run() {
	defer close(f.done)
	initial := true
	for e := range f.watch.Updates() {
		if e == nil {
			initial = false // the end of the initial values
			continue
		}
		session, node, ok := parseFollowKey(e.Key())
		if !ok || node == f.node {
			continue
		}
		f.mu.Lock()
		nodes := f.followed[session]
		if e.Operation() == jetstream.KeyValuePut {
			if nodes == nil {
				nodes = map[string]uint64{}
				f.followed[session] = nodes
			}
			nodes[node] = e.Revision()
			if !initial {
				f.alive[node] = true // only a live node writes one
			}
		} else if nodes != nil {
			delete(nodes, node)
			if len(nodes) == 0 {
				delete(f.followed, session)
			}
		}
		f.mu.Unlock()
	}
}

// nodeSeen tells of another node's heartbeat: written (alive) or gone.
func (f *follows) nodeSeen(node string, alive bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if alive {
		f.alive[node] = true
	} else {
		delete(f.alive, node)
	}
}

// sweepLater sweeps a grace from now, when the nodes' records and
// heartbeats seen by then tell which nodes are gone.
func (f *follows) sweepLater() { time.AfterFunc(f.grace, f.sweep) }

// sweep deletes the records of every node whose heartbeat is gone, each
// only while it holds the revision seen here: a node that came back and
// wrote its record again keeps it.
func (f *follows) sweep() {
	type record struct {
		key string
		rev uint64
	}
	select {
	case <-f.done:
		return // the node closed meanwhile
	default:
	}
	var dead []record
	f.mu.RLock()
	for session, nodes := range f.followed {
		for node, rev := range nodes {
			if !f.alive[node] {
				dead = append(dead, record{followKey(session, node), rev})
			}
		}
	}
	f.mu.RUnlock()
	for _, r := range dead {
		// A revision changed meanwhile leaves the record; NATS out of
		// reach leaves the rest to the next departure's sweep.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = f.kv.Delete(ctx, r.key, jetstream.LastRevision(r.rev))
		cancel()
	}
}

// rewrite writes this node's records again: it joined again after its
// heartbeat lapsed, and another node may have deleted them meanwhile.
func (f *follows) rewrite() {
	f.mu.RLock()
	sessions := make([]string, 0, len(f.mine))
	for s := range f.mine {
		sessions = append(sessions, s)
	}
	f.mu.RUnlock()
	for _, s := range sessions {
		if err := f.start(s); err != nil {
			return // NATS is out of reach: the next rejoin writes them
		}
	}
}

// isFollowed tells whether another node, alive, follows session.
func (f *follows) isFollowed(session string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for node := range f.followed[session] {
		if f.alive[node] {
			return true
		}
	}
	return false
}

// start writes this node's follow record of session.
func (f *follows) start(session string) error {
	f.mu.Lock()
	f.mine[session] = true
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := f.kv.Put(ctx, followKey(session, f.node), nil)
	return err
}

// stop deletes it.
func (f *follows) stop(session string) {
	f.mu.Lock()
	delete(f.mine, session)
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = f.kv.Delete(ctx, followKey(session, f.node))
}

// close stops watching.
func (f *follows) close() {
	_ = f.watch.Stop()
	<-f.done
}
