// Package cluster lets several mspd nodes share sessions over NATS: it is
// the session.Cluster of a deployment on NATS JetStream. It owns the
// leases that make one node the leader of a session (a claim per session
// in one JetStream KV bucket, valid while its node's heartbeat in another
// lives: see leases.go), the forwarding of a
// command to a session's leader (NATS request/reply), and the bus on which
// a leader publishes a session's notifications to the nodes following it
// (core NATS; deltas only while some node follows, see follows.go; a
// follower that misses one catches up from the store). It knows nothing of MSP beyond the
// session.Notification it carries.
//
//	c, err := cluster.New(ctx, nc, js, cluster.Options{Node: "a"})
//	m, err := session.New(ctx, session.Config{..., Cluster: c})
//	c.Serve(m.Serve) // answer the commands other nodes forward here
//	...
//	m.Close()        // stops turns, lets go of leases
//	c.Close()
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"mspd/schema/msp"
	"mspd/session"
)

// Options configure a node.
type Options struct {
	// Node names this node; unique in the deployment.
	Node string
	// LeaseTTL is how long a node's heartbeat outlives its last renewal
	// (default 10 s): how soon the sessions of a node that died are taken
	// over. It is renewed every third of it.
	LeaseTTL time.Duration
	// Bucket prefixes the KV buckets of leases (default MSPD):
	// <Bucket>_NODES holds the heartbeats, <Bucket>_CLAIMS the claims.
	Bucket string
	// Replicas is the buckets' replication factor (default 1).
	Replicas int
	// Subject prefixes the core NATS subjects of forwarding and the bus
	// (default mspd-node).
	Subject string
	// Logger receives the node's logs (default slog.Default()).
	Logger *slog.Logger
}

// Cluster is one node of a deployment: a session.Cluster.
type Cluster struct {
	opts    Options
	nc      *nats.Conn
	log     *slog.Logger
	leases  *leases
	follows *follows

	mu    sync.Mutex
	serve *nats.Subscription
}

var (
	_ session.Cluster    = (*Cluster)(nil)
	_ session.Departures = (*Cluster)(nil)
	_ session.Lapses     = (*Cluster)(nil)
)

// New joins a deployment through nc and js: it opens (or creates) the
// lease buckets, writes this node's heartbeat and keeps renewing it. It
// refuses to join a deployment whose nodes keep leases the way mspd did
// before leases were per node (see checkNoLegacyLeases).
func New(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, opts Options) (*Cluster, error) {
	if opts.Node == "" {
		return nil, errors.New("cluster: Options.Node is required")
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 10 * time.Second
	}
	if opts.Bucket == "" {
		opts.Bucket = "MSPD"
	}
	if opts.Replicas <= 0 {
		opts.Replicas = 1
	}
	if opts.Subject == "" {
		opts.Subject = "mspd-node"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	f, err := openFollows(ctx, js, opts)
	if err != nil {
		return nil, err
	}
	l, err := openLeases(ctx, js, opts, f)
	if err != nil {
		f.close()
		return nil, err
	}
	return &Cluster{opts: opts, nc: nc, log: opts.Logger, leases: l, follows: f}, nil
}

// openBucket opens a KV bucket, creating it as cfg says when this node is
// the first: nodes starting together race to create it, and the losers
// open the winner's.
func openBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	for {
		// Each request on a short leash: one sent while the cluster still
		// elects its leaders may never be answered.
		try, cancel := context.WithTimeout(ctx, 5*time.Second)
		kv, err := js.KeyValue(try, cfg.Bucket)
		cancel()
		if err == nil {
			return kv, nil
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			// JetStream may still be electing its leaders: try again
			// while ctx lasts.
			if ctx.Err() != nil {
				return nil, err
			}
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		try, cancel = context.WithTimeout(ctx, 5*time.Second)
		kv, err = js.CreateKeyValue(try, cfg)
		cancel()
		if err == nil {
			return kv, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStreamInvalidConfig {
			return nil, err // no retry mends a configuration the server refuses
		}
		if !errors.Is(err, jetstream.ErrBucketExists) && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			select { // not yet: the cluster may still be electing
			case <-ctx.Done():
				return nil, err
			case <-time.After(250 * time.Millisecond):
			}
		}
		// Another node created it meanwhile, or the cluster was not ready:
		// open it, or try again.
	}
}

// errCodeStreamInvalidConfig is JetStream's refusal of a stream (here a
// bucket's) configuration.
const errCodeStreamInvalidConfig = 10052

// Node implements session.Cluster.
func (c *Cluster) Node() string { return c.opts.Node }

// Leader implements session.Cluster.
func (c *Cluster) Leader(ctx context.Context, sessionID string) (string, error) {
	return c.leases.leader(ctx, sessionID)
}

// Claim implements session.Cluster: a claim is written only where none
// is, or over one whose node's heartbeat is gone, so of two nodes
// claiming together one wins.
func (c *Cluster) Claim(ctx context.Context, sessionID string) (string, error) {
	return c.leases.claim(ctx, sessionID)
}

// Departed implements session.Departures.
func (c *Cluster) Departed() <-chan struct{} { return c.leases.departed }

// Lapsed implements session.Lapses.
func (c *Cluster) Lapsed() <-chan struct{} { return c.leases.lapsed }

// Release implements session.Cluster.
func (c *Cluster) Release(sessionID string) { c.leases.release(sessionID) }

// Close stops answering forwarded commands and renewing the heartbeat
// (claims not released then lapse with it).
func (c *Cluster) Close() {
	c.mu.Lock()
	if c.serve != nil {
		_ = c.serve.Drain()
		c.serve = nil
	}
	c.mu.Unlock()
	c.leases.close()
	c.follows.close()
}

// forwardSubject is where a node takes the commands forwarded to it.
func (c *Cluster) forwardSubject(node string) string {
	return c.opts.Subject + ".forward." + node
}

// reply is a forwarded command's answer on the wire.
type reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *msp.Error      `json:"error,omitempty"`
}

// Serve answers the commands other nodes forward to this one with fn
// (session.Manager.Serve).
func (c *Cluster) Serve(fn func(context.Context, session.Command) (json.RawMessage, error)) error {
	sub, err := c.nc.Subscribe(c.forwardSubject(c.opts.Node), func(msg *nats.Msg) {
		// Each command on its own goroutine: a long admission must not
		// hold up the others.
		go func() {
			var cmd session.Command
			var r reply
			if err := json.Unmarshal(msg.Data, &cmd); err != nil {
				r.Error = msp.ErrInternal("forwarded command unreadable: %v", err)
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				res, err := fn(ctx, cmd)
				cancel()
				if err != nil {
					var me *msp.Error
					if !errors.As(err, &me) {
						me = msp.ErrInternal("%v", err)
					}
					r.Error = me
				} else {
					r.Result = res
				}
			}
			data, err := json.Marshal(r)
			if err == nil {
				_ = msg.Respond(data)
			}
		}()
	})
	if err != nil {
		return fmt.Errorf("cluster: serving forwarded commands: %w", err)
	}
	c.mu.Lock()
	c.serve = sub
	c.mu.Unlock()
	return nil
}

// Forward implements session.Cluster. A command larger than the NATS
// connection's max_payload is refused inputTooLarge (limitBytes: that
// payload) without being sent.
func (c *Cluster) Forward(ctx context.Context, leader string, cmd session.Command) (json.RawMessage, error) {
	data, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	msg, err := c.nc.RequestWithContext(ctx, c.forwardSubject(leader), data)
	if errors.Is(err, nats.ErrMaxPayload) {
		// A turn/start with megabytes of images, say: refused as the
		// client's input, typed, rather than as a node not answering.
		e := msp.NewError(msp.CodeInputTooLarge, msp.KindInputTooLarge,
			"the request is %d bytes; one forwarded to the session's leader node takes at most %d (the NATS max_payload)", len(data), c.nc.MaxPayload())
		e.Data.LimitBytes = c.nc.MaxPayload()
		return nil, e
	}
	if err != nil {
		return nil, err
	}
	var r reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return nil, fmt.Errorf("cluster: answer of node %s unreadable: %w", leader, err)
	}
	if r.Error != nil {
		return nil, r.Error
	}
	return r.Result, nil
}

// The bus: a notification travels as its frame, its position in headers.
const (
	hMethod    = "Mspd-Method"
	hCursor    = "Mspd-Cursor"
	hSeq       = "Mspd-Seq"
	hSub       = "Mspd-Sub"
	hPrev      = "Mspd-Prev"
	hDurable   = "Mspd-Durable"
	hPrincipal = "Mspd-Principal"
	hNode      = "Mspd-Node"
)

func (c *Cluster) eventSubject(sessionID string) string {
	return c.opts.Subject + ".events." + sessionID
}

func (c *Cluster) listSubject() string { return c.opts.Subject + ".lists" }

// Publish implements session.Cluster. An ephemeral event of a session
// no other node follows goes nowhere (see follows.go).
func (c *Cluster) Publish(sessionID string, n session.Notification, at session.Position) {
	if !n.Durable && !c.follows.isFollowed(sessionID) {
		return
	}
	msg := &nats.Msg{Subject: c.eventSubject(sessionID), Data: n.Frame, Header: nats.Header{}}
	msg.Header.Set(hMethod, n.Method)
	msg.Header.Set(hCursor, n.Cursor)
	msg.Header.Set(hSeq, strconv.FormatInt(at.Seq, 10))
	msg.Header.Set(hSub, strconv.FormatInt(at.Sub, 10))
	if at.Prev > 0 {
		msg.Header.Set(hPrev, strconv.FormatInt(at.Prev, 10))
	}
	if n.Durable {
		msg.Header.Set(hDurable, "1")
	}
	if err := c.nc.PublishMsg(msg); err != nil {
		c.log.Debug("publishing a session event", "session", sessionID, "err", err)
	}
}

// Follow implements session.Cluster. NATS hands one subscription's
// messages over in order, one at a time. The follow record goes after
// the subscription, so that whatever the leader publishes once it has
// read the record reaches this node.
func (c *Cluster) Follow(sessionID string, fn func(session.Notification, session.Position)) func() {
	sub, err := c.nc.Subscribe(c.eventSubject(sessionID), func(msg *nats.Msg) {
		var at session.Position
		at.Seq, _ = strconv.ParseInt(msg.Header.Get(hSeq), 10, 64)
		at.Sub, _ = strconv.ParseInt(msg.Header.Get(hSub), 10, 64)
		at.Prev, _ = strconv.ParseInt(msg.Header.Get(hPrev), 10, 64) // absent from older nodes: 0
		fn(session.Notification{SessionID: sessionID, Method: msg.Header.Get(hMethod), Cursor: msg.Header.Get(hCursor),
			Frame: msg.Data, Durable: msg.Header.Get(hDurable) == "1"}, at)
	})
	if err != nil {
		c.log.Warn("following a session", "session", sessionID, "err", err)
		return func() {}
	}
	// A follower far behind is dropped messages by the server rather than
	// holding it up; the catch-up from the store mends durable ones.
	_ = sub.SetPendingLimits(1<<16, 64<<20)
	if err := c.follows.start(sessionID); err != nil {
		// The leader publishes its durable events anyway; its deltas
		// reach this node's readers as a view/gap.
		c.log.Warn("writing a follow record", "session", sessionID, "err", err)
	}
	return func() {
		_ = sub.Unsubscribe()
		c.follows.stop(sessionID)
	}
}

// PublishList implements session.Cluster.
func (c *Cluster) PublishList(principal string, n session.Notification) {
	msg := &nats.Msg{Subject: c.listSubject(), Data: n.Frame, Header: nats.Header{}}
	msg.Header.Set(hMethod, n.Method)
	msg.Header.Set(hPrincipal, principal)
	msg.Header.Set(hNode, c.opts.Node)
	if err := c.nc.PublishMsg(msg); err != nil {
		c.log.Debug("publishing session-list news", "err", err)
	}
}

// FollowLists implements session.Cluster: other nodes' news only.
func (c *Cluster) FollowLists(fn func(string, session.Notification)) func() {
	sub, err := c.nc.Subscribe(c.listSubject(), func(msg *nats.Msg) {
		if msg.Header.Get(hNode) == c.opts.Node {
			return
		}
		fn(msg.Header.Get(hPrincipal), session.Notification{Method: msg.Header.Get(hMethod), Frame: msg.Data})
	})
	if err != nil {
		c.log.Warn("following session-list news", "err", err)
		return func() {}
	}
	return func() { _ = sub.Unsubscribe() }
}
