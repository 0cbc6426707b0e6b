// Package cluster lets several mspd nodes share sessions over NATS: it is
// the session.Cluster of a deployment on NATS JetStream. It owns the
// leases that make one node the leader of a session (a JetStream KV
// bucket whose entries lapse when not renewed), the forwarding of a
// command to a session's leader (NATS request/reply), and the bus on which
// a leader publishes a session's notifications to the nodes following it
// (core NATS, durable events and deltas alike; a follower that misses one
// catches up from the store). It knows nothing of MSP beyond the
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
	// LeaseTTL is how long a lease outlives its holder's last renewal
	// (default 10 s): how soon a session of a node that died is taken
	// over. It is renewed every third of it.
	LeaseTTL time.Duration
	// Bucket names the KV bucket of leases (default MSPD_LEASES).
	Bucket string
	// Replicas is the bucket's replication factor (default 1).
	Replicas int
	// Subject prefixes the core NATS subjects of forwarding and the bus
	// (default mspd-node).
	Subject string
	// Logger receives the node's logs (default slog.Default()).
	Logger *slog.Logger
}

// Cluster is one node of a deployment: a session.Cluster.
type Cluster struct {
	opts Options
	nc   *nats.Conn
	kv   jetstream.KeyValue
	log  *slog.Logger

	mu    sync.Mutex
	held  map[string]uint64 // session → revision of this node's lease
	serve *nats.Subscription

	stop chan struct{}
	done chan struct{}
}

var _ session.Cluster = (*Cluster)(nil)

// New joins a deployment through nc and js: it opens (or creates) the
// lease bucket and starts renewing the leases this node takes.
func New(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, opts Options) (*Cluster, error) {
	if opts.Node == "" {
		return nil, errors.New("cluster: Options.Node is required")
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 10 * time.Second
	}
	if opts.Bucket == "" {
		opts.Bucket = "MSPD_LEASES"
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
	kv, err := leaseBucket(ctx, js, opts)
	if err != nil {
		return nil, fmt.Errorf("cluster: lease bucket %s: %w", opts.Bucket, err)
	}
	c := &Cluster{opts: opts, nc: nc, kv: kv, log: opts.Logger, held: map[string]uint64{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go c.renew()
	return c, nil
}

// leaseBucket opens the lease bucket, creating it when this node is the
// first: nodes starting together race to create it, and the losers open
// the winner's.
func leaseBucket(ctx context.Context, js jetstream.JetStream, opts Options) (jetstream.KeyValue, error) {
	for {
		// Each request on a short leash: one sent while the cluster still
		// elects its leaders may never be answered.
		try, cancel := context.WithTimeout(ctx, 5*time.Second)
		kv, err := js.KeyValue(try, opts.Bucket)
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
		kv, err = js.CreateKeyValue(try, jetstream.KeyValueConfig{
			Bucket:   opts.Bucket,
			TTL:      opts.LeaseTTL,
			History:  1,
			Replicas: opts.Replicas,
			Storage:  jetstream.FileStorage,
		})
		cancel()
		if err == nil {
			return kv, nil
		}
		if ctx.Err() != nil {
			return nil, err
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

// Node implements session.Cluster.
func (c *Cluster) Node() string { return c.opts.Node }

// Leader implements session.Cluster.
func (c *Cluster) Leader(ctx context.Context, sessionID string) (string, error) {
	e, err := c.kv.Get(ctx, sessionID)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return string(e.Value()), nil
}

// Claim implements session.Cluster: a lease is created only where none
// lives, so of two nodes claiming together one wins.
func (c *Cluster) Claim(ctx context.Context, sessionID string) (string, error) {
	c.mu.Lock()
	_, mine := c.held[sessionID]
	c.mu.Unlock()
	if mine {
		return c.opts.Node, nil
	}
	for range 3 {
		rev, err := c.kv.Create(ctx, sessionID, []byte(c.opts.Node))
		if err == nil {
			c.mu.Lock()
			c.held[sessionID] = rev
			c.mu.Unlock()
			return c.opts.Node, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return "", err
		}
		leader, err := c.Leader(ctx, sessionID)
		if err != nil {
			return "", err
		}
		if leader != "" {
			return leader, nil
		}
		// Gone between the two: try again.
	}
	return "", fmt.Errorf("cluster: the lease of %s keeps changing", sessionID)
}

// Release implements session.Cluster.
func (c *Cluster) Release(sessionID string) {
	c.mu.Lock()
	rev, mine := c.held[sessionID]
	delete(c.held, sessionID)
	c.mu.Unlock()
	if !mine {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.kv.Delete(ctx, sessionID, jetstream.LastRevision(rev)); err != nil {
		c.log.Debug("releasing a lease", "session", sessionID, "err", err)
	}
}

// renew keeps this node's leases alive; a lease it can no longer renew
// (another node took it) is dropped.
func (c *Cluster) renew() {
	defer close(c.done)
	t := time.NewTicker(c.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		c.mu.Lock()
		held := make(map[string]uint64, len(c.held))
		for id, rev := range c.held {
			held[id] = rev
		}
		c.mu.Unlock()
		for id, rev := range held {
			ctx, cancel := context.WithTimeout(context.Background(), c.opts.LeaseTTL/3)
			next, err := c.kv.Update(ctx, id, []byte(c.opts.Node), rev)
			cancel()
			c.mu.Lock()
			if _, still := c.held[id]; still {
				if err == nil {
					c.held[id] = next
				} else if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
					c.log.Warn("lost the lease of a session", "session", id, "err", err)
					delete(c.held, id)
				}
			}
			c.mu.Unlock()
		}
	}
}

// Close stops renewing leases (those not released lapse) and answering
// forwarded commands.
func (c *Cluster) Close() {
	c.mu.Lock()
	if c.serve != nil {
		_ = c.serve.Drain()
		c.serve = nil
	}
	c.mu.Unlock()
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
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

// Publish implements session.Cluster.
func (c *Cluster) Publish(sessionID string, n session.Notification, at session.Position) {
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
// messages over in order, one at a time.
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
	return func() { _ = sub.Unsubscribe() }
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
