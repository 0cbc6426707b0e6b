package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"mspd/store"
)

// ErrClosed is returned by every method called after Close.
var ErrClosed = errors.New("jetstream: store closed")

// ErrOutcomeUnknown is wrapped by the error Commit returns when it could not
// learn, within Options.CommitTimeout, whether its batch was written: the
// server did not answer and kept not answering the retries that would have
// told. The batch may or may not be in the stream.
var ErrOutcomeUnknown = errors.New("jetstream: commit outcome unknown")

// Defaults for Options.
const (
	DefaultStream        = "MSPD"
	DefaultSubject       = "mspd"
	DefaultTimeout       = 5 * time.Second
	DefaultCommitTimeout = 30 * time.Second
	// MaxStreams bounds Options.Streams: every listing reads each stream's
	// index, and a commandId is looked up in each.
	MaxStreams = 64
)

// Options configure Open. The zero value is valid: stream MSPD on subjects
// mspd.>, one replica.
type Options struct {
	// Stream names the JetStream stream holding everything (default MSPD);
	// with several Streams, the first (stream 0).
	Stream string
	// Subject is the stream's subject prefix (default mspd): the stream
	// binds <Subject>.> and nothing else may publish there.
	Subject string
	// Streams is how many streams the sessions are spread over (default 1,
	// at most MaxStreams): stream 0 is Stream on Subject, stream i > 0 is
	// <Stream>_<i> on <Subject>-<i>. New sessions go to the stream of their
	// id's hash; existing ones stay where they are. Every node of a
	// deployment must open it with the same value, and it may grow but
	// never shrink (see the package doc's "Streams").
	Streams int
	// Replicas is the stream's replication factor: 1 (default), 3 or 5.
	// Every node of a deployment must open the stream with the same value;
	// Open updates an existing stream to it.
	Replicas int
	// Timeout bounds each request of a read, a prune or a delete when ctx
	// has no earlier deadline (default 5s).
	Timeout time.Duration
	// CommitTimeout bounds how long Commit, once it has started writing,
	// keeps asking for the outcome before giving up with ErrOutcomeUnknown
	// (default 30s). It must stay well below the stream's duplicate window
	// (2 minutes), which is what makes asking again safe.
	CommitTimeout time.Duration

	// idleTTL is how long an idle busy entry stays before it expires
	// (default defaultIdleTTL; tests shorten it).
	idleTTL time.Duration
}

// defaultIdleTTL is how long an idle busy entry stays. Any value is
// correct, as BusySessions skips idle entries; it bounds how many it reads
// (the sessions gone idle within it: at 1,667 turns/s, ~1,700 rows an
// adoption pass). One second is the server's least.
const defaultIdleTTL = time.Second

func (o Options) withDefaults() (Options, error) {
	if o.Stream == "" {
		o.Stream = DefaultStream
	}
	if o.Subject == "" {
		o.Subject = DefaultSubject
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Streams == 0 {
		o.Streams = 1
	}
	if o.Streams < 1 || o.Streams > MaxStreams {
		return o, fmt.Errorf("jetstream: streams %d: want 1 to %d", o.Streams, MaxStreams)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.CommitTimeout <= 0 {
		o.CommitTimeout = DefaultCommitTimeout
	}
	if o.idleTTL < time.Second { // the server's least TTL
		o.idleTTL = defaultIdleTTL
	}
	if o.Replicas != 1 && o.Replicas != 3 && o.Replicas != 5 {
		return o, fmt.Errorf("jetstream: replicas %d: want 1, 3 or 5", o.Replicas)
	}
	if strings.ContainsAny(o.Stream, ".*> \t\r\n/\\") {
		return o, fmt.Errorf("jetstream: invalid stream name %q", o.Stream)
	}
	if strings.ContainsAny(o.Subject, "*> \t\r\n") || strings.HasPrefix(o.Subject, ".") ||
		strings.HasSuffix(o.Subject, ".") || strings.Contains(o.Subject, "..") {
		return o, fmt.Errorf("jetstream: invalid subject prefix %q", o.Subject)
	}
	return o, nil
}

// shard is one stream of a Store: the store.Store protocol on a single
// JetStream stream, whose sessions live there alone (see the package doc's
// "Streams"). Store routes each call to its shard, or merges theirs.
type shard struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	stream jetstream.Stream
	opts   Options
	subj   subjects
	// api is the JetStream API prefix, e.g. "$JS.API.".
	api string
	// verify makes reads confirm with the stream leader that nothing
	// follows what a possibly lagging replica served (see the package doc).
	verify bool
	// batches bounds this shard's multi-message batches in flight, below
	// the server's per-stream limit.
	batches chan struct{}
	// replies receives direct-get batches.
	replies *inbox
	// purgeFault, set by tests, fails the purges it returns an error for.
	purgeFault func(filter string) error
	// replicaAnswer, set by tests, stands in for a replica's answer to a
	// batch of last messages (directLast), given the one it gave.
	replicaAnswer func(subjects []string, msgs []storedMsg, upTo uint64) ([]storedMsg, uint64)
	// health remembers a commit that ran out of time (Healthy).
	health store.WriteHealth

	// mu orders close against the operations under way: they hold it for
	// reading from start to end, close takes it for writing.
	mu     sync.RWMutex
	closed bool
}

// maxBatchesInFlight is this store's share of the server's limit of 50
// open atomic batches per stream.
const maxBatchesInFlight = 16

// attach creates or updates the stream to config(opts) and returns a
// shard on it, whatever layout the stream holds. opts has its defaults
// and names this shard's stream and subject prefix.
func attach(ctx context.Context, js jetstream.JetStream, opts Options, config func(Options) jetstream.StreamConfig) (*shard, error) {
	created, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	st, err := js.CreateOrUpdateStream(created, config(opts))
	if err != nil {
		return nil, fmt.Errorf("jetstream: create stream %s: %w", opts.Stream, err)
	}
	replies, err := newInbox(js.Conn())
	if err != nil {
		return nil, err
	}
	return &shard{
		replies: replies,
		js:      js,
		nc:      js.Conn(),
		stream:  st,
		opts:    opts,
		subj:    subjects{prefix: opts.Subject},
		api:     apiPrefix(js.Options()),
		verify:  opts.Replicas > 1,
		batches: make(chan struct{}, maxBatchesInFlight),
	}, nil
}

// shardOptions are the options of stream i: stream 0 keeps Stream and
// Subject, so a deployment from before there were several streams is
// stream 0 unchanged; the others get a suffix (a subject prefix of its own
// token, so that no two streams' subjects overlap).
func (o Options) shardOptions(i int) Options {
	if i > 0 {
		o.Stream = fmt.Sprintf("%s_%d", o.Stream, i)
		o.Subject = fmt.Sprintf("%s-%d", o.Subject, i)
	}
	return o
}

// streamConfig is the stream one shard's sessions live in.
func streamConfig(o Options) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        o.Stream,
		Description: "mspd session logs, session rows and the commandId ledger",
		Subjects:    []string{o.Subject + ".>"},
		Storage:     jetstream.FileStorage,
		Replicas:    o.Replicas,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		// One Commit is one atomic batch across logs, rows and ledger.
		AllowAtomicPublish: true,
		// Range reads are direct-get batches.
		AllowDirect: true,
		// A row replaces its predecessor with Nats-Rollup: sub.
		AllowRollup: true,
		// An idle busy entry expires (Nats-TTL). The server turns this on
		// for a stream created without it, and never back off.
		AllowMsgTTL: true,
		Duplicates:  2 * time.Minute,
	}
}

// apiPrefix is the subject prefix of js's API, as nats.go computes it.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	default:
		return jetstream.DefaultAPIPrefix
	}
}

// enter admits an operation unless the store is closed; the caller calls
// the returned func when done.
func (s *shard) enter() (func(), error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, ErrClosed
	}
	return s.mu.RUnlock, nil
}

// healthy is Store.Healthy for this shard's stream.
func (s *shard) healthy() error {
	if st := s.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("jetstream: the NATS connection is %s", st)
	}
	return s.health.Err()
}

// close waits for the shard's operations under way, then refuses new ones
// and drops its reply subscription. The connection is the Store's.
func (s *shard) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.replies.close(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("jetstream: close %s: %w", s.opts.Stream, err)
	}
	return nil
}

// timeout bounds ctx by Options.Timeout for one request.
func (s *shard) timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.Timeout)
}
