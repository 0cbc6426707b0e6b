package jetstream

import (
	"context"
	"strconv"
	"sync"
	"time"

	"mspd/store"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// CommitAt commits b as though the session's head were record seq at
// stream sequence stream, skipping Commit's own head check: what the
// server's guard sees when another writer appended after the head was read.
func CommitAt(ctx context.Context, st *Store, b store.Batch, seq int64, stream uint64) error {
	s := st.shards[0]
	return s.publish(ctx, s.messages(b, headPos{seq: seq, stream: stream}, time.Now(), nil))
}

// HeadAt returns a session's head and its stream sequence.
func HeadAt(ctx context.Context, st *Store, id string) (int64, uint64, error) {
	s := st.shards[0]
	h, err := s.head(ctx, id)
	return h.seq, h.stream, err
}

// CommitTwice sends b's messages, then again as Commit does when it did
// not hear the first answer, and returns both outcomes.
func CommitTwice(ctx context.Context, st *Store, b store.Batch) (first, second error) {
	s := st.shards[0]
	h, err := s.head(ctx, b.SessionID)
	if err != nil {
		return err, err
	}
	msgs := s.messages(b, h, time.Now(), nil)
	return s.publish(ctx, msgs), s.publishAfter(ctx, msgs, true)
}

// FailPurges makes s's purges of the filters fail returns an error for.
func FailPurges(st *Store, fail func(filter string) error) {
	s := st.shards[0]
	s.purgeFault = fail
}

// LogFilter is the filter that matches every page of a session's log.
func LogFilter(st *Store, id string) string {
	s := st.shards[0]
	return s.subj.log(id)
}

// PurgeNow purges filter at once, whatever FailPurges says: a purge that
// lands though its caller hears a failure (its answer lost).
func PurgeNow(ctx context.Context, st *Store, filter string) error {
	s := st.shards[0]
	return s.stream.Purge(ctx, jetstream.WithPurgeSubject(filter))
}

// CommitLegacyRow writes row as a store from before the owner index did:
// without its owner header and without an index entry.
func CommitLegacyRow(ctx context.Context, st *Store, row *store.Session) error {
	s := st.shards[0]
	m := rowMsg(s.subj.row(row.ID), row)
	m.Header.Del(hdrOwner)
	return s.publish(ctx, []*nats.Msg{m})
}

// RowAt reads a session's row and its stream sequence.
func RowAt(ctx context.Context, st *Store, id string) (store.Session, uint64, error) {
	s := st.shards[0]
	m, err := s.get(ctx, getRequest{LastFor: s.subj.row(id)})
	if err != nil {
		return store.Session{}, 0, err
	}
	row, err := decodeRow(id, m)
	return row, m.seq, err
}

// WithIdleTTL sets how long an idle busy entry stays (whole seconds, at
// least one).
func WithIdleTTL(o Options, d time.Duration) Options {
	o.idleTTL = d
	return o
}

// ConnectAsBefore opens a store as mspd did before the layout marker: the
// stream created or updated without message TTLs, nothing indexed, no
// marker read or written. Write with CommitAsBefore and CommitLegacyRow.
func ConnectAsBefore(ctx context.Context, url string, opts Options) (*Store, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	if opts, err = opts.withDefaults(); err != nil {
		nc.Close()
		return nil, err
	}
	sh, err := attach(ctx, js, opts, func(o Options) jetstream.StreamConfig {
		c := streamConfig(o)
		c.AllowMsgTTL = false
		return c
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &Store{shards: []*shard{sh}, gens: []int{1}, nc: nc, ownConn: true}, nil
}

// CommitAsBefore commits b as mspd did before the busy index: without
// its busy entry.
func CommitAsBefore(ctx context.Context, st *Store, b store.Batch) error {
	s := st.shards[0]
	h, err := s.head(ctx, b.SessionID)
	if err != nil {
		return err
	}
	var msgs []*nats.Msg
	for _, m := range s.messages(b, h, time.Now(), nil) {
		if _, err := s.subj.busyID(m.Subject); err != nil { // not a busy entry
			msgs = append(msgs, m)
		}
	}
	return s.publish(ctx, msgs)
}

// BusyEntries names the subjects of the busy index that hold a message,
// with how many each holds, as the stream leader counts them.
func BusyEntries(ctx context.Context, st *Store) (map[string]uint64, error) {
	s := st.shards[0]
	view, err := s.subjectsOn(ctx, s.subj.busyAll())
	return view.subjects, err
}

// LayoutVersion reads the layout marker's version (0: none).
func LayoutVersion(ctx context.Context, st *Store) (int64, error) {
	s := st.shards[0]
	v, _, err := s.layout(ctx)
	return v, err
}

// MarkLayout writes a layout marker of version v, as an mspd of that
// layout would.
func MarkLayout(ctx context.Context, st *Store, v int) error {
	s := st.shards[0]
	m := nats.NewMsg(s.subj.layout())
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Header.Set(hdrLayout, strconv.Itoa(v))
	_, err := s.js.PublishMsg(ctx, m)
	return err
}

// StreamAllowsTTL tells whether s's stream takes per-message TTLs.
func StreamAllowsTTL(ctx context.Context, st *Store) (bool, error) {
	s := st.shards[0]
	info, err := s.stream.Info(ctx)
	if err != nil {
		return false, err
	}
	return info.Config.AllowMsgTTL, nil
}

// StreamOf names the stream session id lives in (or would be created in).
func StreamOf(ctx context.Context, s *Store, id string) (string, error) {
	sh, err := s.locate(ctx, id)
	if err != nil {
		return "", err
	}
	return sh.opts.Stream, nil
}

// StreamCounts is the stream counts the store's deployment has used, as
// its Open recorded them.
func StreamCounts(s *Store) []int { return s.gens }

// FreezeReplicas makes the replicas answer every batch of last messages
// with what they held when each subject was first asked for, as of the
// first batch's sequence: replicas that stopped applying the leader's
// writes.
func FreezeReplicas(st *Store) {
	for _, s := range st.shards {
		var mu sync.Mutex
		held := map[string]storedMsg{}
		var asOf uint64
		s.replicaAnswer = func(subjects []string, msgs []storedMsg, upTo uint64) ([]storedMsg, uint64) {
			mu.Lock()
			defer mu.Unlock()
			if asOf == 0 {
				asOf = upTo
			}
			for _, m := range msgs {
				if _, ok := held[m.subject]; !ok {
					held[m.subject] = m
				}
			}
			var out []storedMsg
			for _, subject := range subjects {
				if m, ok := held[subject]; ok {
					out = append(out, m)
				}
			}
			return out, asOf
		}
	}
}

// ReplicasCaught tells whether every replica of every stream of the store
// has applied all its leader holds, as the leader sees them.
func ReplicasCaught(ctx context.Context, st *Store) (bool, error) {
	for _, s := range st.shards {
		info, err := s.stream.Info(ctx)
		if err != nil {
			return false, err
		}
		if info.Cluster == nil {
			continue
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Lag > 0 {
				return false, nil
			}
		}
	}
	return true, nil
}
