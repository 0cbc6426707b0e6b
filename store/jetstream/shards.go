package jetstream

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"mspd/store"
)

// Store is a store.Store on one or more JetStream streams (Options.Streams):
// each session lives in one of them, and the methods that span sessions
// merge what each stream holds. Create it with Open or Connect; see the
// package doc for the layout.
type Store struct {
	shards []*shard
	// gens is the stream counts the deployment has used, oldest first; the
	// last is len(shards). A session is looked for in its home stream
	// under each (see locate).
	gens []int
	nc   *nats.Conn
	// ownConn is closed by Close (set by Connect).
	ownConn bool

	// placed remembers where locate found sessions, when there is more
	// than one generation to look in.
	placed placements

	// mu orders Close against the operations under way: they hold it for
	// reading from start to end, Close takes it for writing.
	mu     sync.RWMutex
	closed bool
}

var _ store.Store = (*Store)(nil)

// Open creates the streams described by opts on js, or updates existing
// ones to it, brings streams written in an older layout up to this one
// (see upgrade), records the stream count in stream 0's layout marker and
// returns a Store on them. It refuses fewer streams than the deployment
// already uses (ErrFewerStreams). The connection stays the caller's.
func Open(ctx context.Context, js jetstream.JetStream, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	mk, err := readMarker(ctx, js, opts)
	if err != nil {
		return nil, err
	}
	if h := mk.history; len(h) > 0 && opts.Streams < h[len(h)-1] {
		return nil, fewerStreams(opts.Streams, h)
	}
	s := &Store{nc: js.Conn()}
	for i := range opts.Streams {
		sh, err := attach(ctx, js, opts.shardOptions(i), streamConfig)
		if err == nil {
			s.shards = append(s.shards, sh)
			err = sh.upgrade(ctx)
		}
		if err != nil {
			s.closeShards()
			return nil, err
		}
	}
	if s.gens, err = s.shards[0].recordStreams(ctx, opts.Streams, mk.history); err != nil {
		s.closeShards()
		return nil, err
	}
	return s, nil
}

// Connect dials the NATS server at url (a comma-separated list of URLs is
// fine) and opens the store on it; Close closes the connection.
func Connect(ctx context.Context, url string, opts Options, natsOpts ...nats.Option) (*Store, error) {
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("mspd")}, natsOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	s, err := Open(ctx, js, opts)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.ownConn = true
	return s, nil
}

// recordStreams makes stream 0's marker list n as the current stream
// count, after those of history (what Open read before it touched the
// streams, when the marker has no list yet), and returns the list. A
// deployment that only ever used one stream keeps its layout 2 marker. The
// write is guarded by the marker read, so that of two nodes opening at
// once one writes and the other reads what it wrote.
func (s *shard) recordStreams(ctx context.Context, n int, history []int) ([]int, error) {
	for attempt := 0; ; attempt++ {
		mk, seq, err := s.readLayout(ctx)
		if err != nil {
			return nil, err
		}
		if mk.version == layoutVersion { // the list is there: it wins
			history = mk.history
		}
		switch last := len(history) - 1; {
		case last >= 0 && n < history[last]:
			return nil, fewerStreams(n, history)
		case last >= 0 && n == history[last]:
			return history, nil
		}
		counts := append(slices.Clone(history), n)
		if len(counts) == 1 && n == 1 {
			return counts, nil // layout 2 says as much
		}
		err = s.publish(ctx, []*nats.Msg{s.markerMsg(layoutVersion, counts, seq)})
		if errors.Is(err, store.ErrConflict) && attempt < maxMarkerWrites {
			continue // another node wrote it first: read theirs
		}
		if err != nil {
			return nil, fmt.Errorf("jetstream: recording the stream count: %w", err)
		}
		return counts, nil
	}
}

// maxMarkerWrites bounds recordStreams' attempts: each conflict is
// another node's marker, read and accepted the next time round, so more
// than a few means something else rewrites it.
const maxMarkerWrites = 8

// enter admits an operation unless the store is closed; the caller calls
// the returned func when done.
func (s *Store) enter() (func(), error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, ErrClosed
	}
	return s.mu.RUnlock, nil
}

// Healthy implements store.Health: without its NATS connection (lost, and
// being retried) no commit can land; with it, a stream that has left a
// commit unanswered for CommitTimeout (no leader, no quorum) takes none
// either, until one lands or store.HealthMemory passes.
func (s *Store) Healthy() error {
	for _, sh := range s.shards {
		if err := sh.healthy(); err != nil {
			return err
		}
	}
	return nil
}

// Close waits for the operations under way, then refuses new ones. It
// closes the connection only when Connect made it. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.closeShards()
	if s.ownConn {
		s.nc.Close()
		return nil // the subscriptions went with it
	}
	return err
}

func (s *Store) closeShards() error {
	var errs []error
	for _, sh := range s.shards {
		errs = append(errs, sh.close())
	}
	return errors.Join(errs...)
}

// home is the stream a session's id hashes to among n.
func home(id string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(id))
	return int(h.Sum64() % uint64(n))
}

// streamOf is the shard a batch writes to: its session's, or stream 0's
// for a batch of ledger entries alone.
func (s *Store) streamOf(ctx context.Context, b store.Batch) (*shard, error) {
	id := b.SessionID
	if id == "" && b.Session != nil {
		id = b.Session.ID
	}
	if id == "" && len(b.Records) == 0 && b.Session == nil && b.Text == nil {
		return s.shards[0], nil
	}
	return s.locate(ctx, id)
}

// locate finds the shard a session lives in: its home under the current
// stream count, or under an earlier one if it was made then; a session
// found in none (a new one) belongs to its current home. With one
// generation that is the hash alone; with more it is a get of the row
// (and of the log's head, for a log without a row) in each candidate until
// one holds it, remembered once found.
func (s *Store) locate(ctx context.Context, id string) (*shard, error) {
	current := home(id, s.gens[len(s.gens)-1])
	if len(s.gens) == 1 {
		return s.shards[current], nil
	}
	if i, ok := s.placed.get(id); ok {
		return s.shards[i], nil
	}
	tried := make(map[int]bool, len(s.gens))
	for g := len(s.gens) - 1; g >= 0; g-- {
		i := home(id, s.gens[g])
		if tried[i] {
			continue
		}
		tried[i] = true
		held, err := s.shards[i].holds(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("jetstream: locating session %q: %w", id, err)
		}
		if held {
			s.placed.put(id, i)
			return s.shards[i], nil
		}
	}
	return s.shards[current], nil
}

// holds tells whether the shard's stream has a row or a record of the
// session.
func (s *shard) holds(ctx context.Context, id string) (bool, error) {
	for _, filter := range []string{s.subj.row(id), s.subj.log(id)} {
		_, err := s.get(ctx, getRequest{LastFor: filter})
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, errNoMsg) {
			return false, err
		}
	}
	return false, nil
}

// maxPlacements bounds the sessions placements remembers; past it, it
// starts over (a miss costs a lookup per generation, nothing else).
const maxPlacements = 1 << 16

// placements remembers which shard sessions were found in. A session never
// moves while it exists; its erasure forgets it.
type placements struct {
	mu sync.Mutex
	at map[string]int
}

func (p *placements) get(id string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.at[id]
	return i, ok
}

func (p *placements) put(id string, i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at == nil || len(p.at) >= maxPlacements {
		p.at = make(map[string]int)
	}
	p.at[id] = i
}

func (p *placements) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.at, id)
}

// Commit implements store.Store: the batch goes to its session's stream as
// one atomic publish (see the package doc). With several streams its
// ledger entries are first looked up in the others, whose guards it cannot
// carry: a command id admitted there is a conflict too.
func (s *Store) Commit(ctx context.Context, b store.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validate(b); err != nil {
		return err
	}
	done, err := s.enter()
	if err != nil {
		return err
	}
	defer done()
	sh, err := s.streamOf(ctx, b)
	if err != nil {
		return err
	}
	if err := s.admittedElsewhere(ctx, sh, b.Commands); err != nil {
		return err
	}
	return sh.commit(ctx, b)
}

// admittedElsewhere fails with ErrConflict when a command id is in the
// ledger of another shard than sh. The other shards are asked at once.
func (s *Store) admittedElsewhere(ctx context.Context, sh *shard, cmds []store.Command) error {
	if len(s.shards) == 1 || len(cmds) == 0 {
		return nil
	}
	_, err := eachShard(ctx, s.shards, func(ctx context.Context, _ int, other *shard) (struct{}, error) {
		if other == sh {
			return struct{}{}, nil
		}
		for _, c := range cmds {
			_, err := other.command(ctx, c.ID)
			if err == nil {
				return struct{}{}, fmt.Errorf("%w: command %q is in the ledger of stream %s", store.ErrConflict, c.ID, other.opts.Stream)
			}
			if !errors.Is(err, store.ErrNotFound) {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	return err
}

// Records implements store.Store.
func (s *Store) Records(ctx context.Context, sessionID string, after int64, lim store.Limit) ([]store.Record, error) {
	return onSession(s, ctx, sessionID, func(sh *shard) ([]store.Record, error) {
		return sh.Records(ctx, sessionID, after, lim)
	})
}

// RecordsBefore implements store.Store.
func (s *Store) RecordsBefore(ctx context.Context, sessionID string, before int64, lim store.Limit) ([]store.Record, error) {
	return onSession(s, ctx, sessionID, func(sh *shard) ([]store.Record, error) {
		return sh.RecordsBefore(ctx, sessionID, before, lim)
	})
}

// Head implements store.Store.
func (s *Store) Head(ctx context.Context, sessionID string) (int64, error) {
	return onSession(s, ctx, sessionID, func(sh *shard) (int64, error) { return sh.Head(ctx, sessionID) })
}

// Session implements store.Store.
func (s *Store) Session(ctx context.Context, id string) (store.Session, error) {
	return onSession(s, ctx, id, func(sh *shard) (store.Session, error) { return sh.Session(ctx, id) })
}

// onSession runs fn on the shard session id lives in.
func onSession[T any](s *Store, ctx context.Context, id string, fn func(*shard) (T, error)) (T, error) {
	var zero T
	done, err := s.enter()
	if err != nil {
		return zero, err
	}
	defer done()
	sh, err := s.locate(ctx, id)
	if err != nil {
		return zero, err
	}
	return fn(sh)
}

// BusySessions implements store.Store: each stream's busy index, read at
// once, sorted by id.
func (s *Store) BusySessions(ctx context.Context) ([]store.Session, error) {
	done, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer done()
	each, err := eachShard(ctx, s.shards, func(ctx context.Context, _ int, sh *shard) ([]store.Session, error) {
		return sh.BusySessions(ctx)
	})
	if err != nil {
		return nil, err
	}
	out := slices.Concat(each...)
	slices.SortFunc(out, func(a, b store.Session) int { return compareKeys(0, a.ID, 0, b.ID) })
	return out, nil
}

// Command implements store.Store: a command id is looked up in every
// stream at once; the first stream holding it answers (see the package
// doc on why it is in at most one).
func (s *Store) Command(ctx context.Context, id string) (store.Command, error) {
	done, err := s.enter()
	if err != nil {
		return store.Command{}, err
	}
	defer done()
	if len(s.shards) == 1 {
		return s.shards[0].command(ctx, id)
	}
	found := make([]*store.Command, len(s.shards))
	_, err = eachShard(ctx, s.shards, func(ctx context.Context, i int, sh *shard) (struct{}, error) {
		c, err := sh.command(ctx, id)
		if err == nil {
			found[i] = &c
		} else if !errors.Is(err, store.ErrNotFound) {
			return struct{}{}, err
		}
		return struct{}{}, nil
	})
	if err != nil {
		return store.Command{}, err
	}
	for _, c := range found {
		if c != nil {
			return *c, nil
		}
	}
	return store.Command{}, fmt.Errorf("jetstream: command %q: %w", id, store.ErrNotFound)
}

// eachShard runs fn on every shard at once, with its index in shards,
// and returns their results in shard order.
func eachShard[T any](ctx context.Context, shards []*shard, fn func(context.Context, int, *shard) (T, error)) ([]T, error) {
	out := make([]T, len(shards))
	if len(shards) == 1 {
		var err error
		out[0], err = fn(ctx, 0, shards[0])
		return out, err
	}
	g, gctx := errgroup.WithContext(ctx)
	for i, sh := range shards {
		g.Go(func() (err error) {
			out[i], err = fn(gctx, i, sh)
			return err
		})
	}
	return out, g.Wait()
}

// DeleteSession implements store.Store: the session is erased in its
// stream (see the package doc), and the ledger entries naming it in the
// others (written in batches of no session, which go to stream 0) with it.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done, err := s.enter()
	if err != nil {
		return err
	}
	defer done()
	sh, err := s.locate(ctx, id)
	if err != nil {
		return err
	}
	var others []*shard
	for _, o := range s.shards {
		if o != sh {
			others = append(others, o)
		}
	}
	if err := sh.deleteSession(ctx, id, others); err != nil {
		return err
	}
	s.placed.forget(id)
	return nil
}
