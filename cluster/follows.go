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
// bus dropped (see the session package's ingest). Records of a node that
// died stay until it starts again (it deletes its own then); until then
// the leaders publish to nobody for it, which costs them and loses
// nothing.
type follows struct {
	node string
	kv   jetstream.KeyValue

	// mu is read for every delta a leader publishes, written only when a
	// follow record comes or goes.
	mu       sync.RWMutex
	followed map[string]map[string]bool // session → the other nodes that follow it

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
	f := &follows{node: opts.Node, kv: kv, followed: map[string]map[string]bool{}, done: make(chan struct{})}
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

// run applies the watch's updates until it stops.
func (f *follows) run() {
	defer close(f.done)
	for e := range f.watch.Updates() {
		if e == nil {
			continue // the end of the initial values
		}
		session, node, ok := parseFollowKey(e.Key())
		if !ok || node == f.node {
			continue
		}
		f.mu.Lock()
		nodes := f.followed[session]
		if e.Operation() == jetstream.KeyValuePut {
			if nodes == nil {
				nodes = map[string]bool{}
				f.followed[session] = nodes
			}
			nodes[node] = true
		} else if nodes != nil {
			delete(nodes, node)
			if len(nodes) == 0 {
				delete(f.followed, session)
			}
		}
		f.mu.Unlock()
	}
}

// isFollowed tells whether another node follows session.
func (f *follows) isFollowed(session string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.followed[session]) > 0
}

// start writes this node's follow record of session.
func (f *follows) start(session string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := f.kv.Put(ctx, followKey(session, f.node), nil)
	return err
}

// stop deletes it.
func (f *follows) stop(session string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = f.kv.Delete(ctx, followKey(session, f.node))
}

// close stops watching.
func (f *follows) close() {
	_ = f.watch.Stop()
	<-f.done
}
