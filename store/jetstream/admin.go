package jetstream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mspd/store"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// PruneCommands implements store.Store. The ledger has no index by
// CreatedAt (entries are keyed by command id, and CreatedAt is the
// caller's), so each call reads every stream's ledger entries, picks the
// limit oldest created before before, and deletes those by stream
// sequence. The read is O(ledger), which the retention window bounds.
func (s *Store) PruneCommands(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	done, err := s.enter()
	if err != nil {
		return 0, err
	}
	defer done()
	if limit <= 0 {
		return 0, nil
	}
	cutoff := store.ClampUnixNanos(before)
	each, err := eachShard(ctx, s.shards, func(ctx context.Context, _ int, sh *shard) ([]ledgerEntry, error) {
		return sh.ledgerBefore(ctx, cutoff)
	})
	if err != nil {
		return 0, fmt.Errorf("jetstream: prune commands: %w", err)
	}
	old := slices.Concat(each...)
	slices.SortFunc(old, func(a, b ledgerEntry) int {
		return cmp.Or(cmp.Compare(a.created, b.created), cmp.Compare(a.shard.opts.Stream, b.shard.opts.Stream), cmp.Compare(a.seq, b.seq))
	})
	n := 0
	for _, e := range old {
		if n == limit {
			break
		}
		err := e.shard.deleteMsg(ctx, e.seq)
		if errors.Is(err, errNoMsg) {
			// Gone already: another pruner, its session's deletion, or a
			// deletion a lagging replica had not applied when it was read.
			continue
		}
		if err != nil {
			return n, fmt.Errorf("jetstream: prune commands: %w", err)
		}
		n++
	}
	return n, nil
}

// ledgerEntry is a ledger entry PruneCommands may delete.
type ledgerEntry struct {
	created int64
	shard   *shard
	seq     uint64
}

// ledgerBefore reads the shard's ledger entries created before cutoff
// (Unix nanoseconds).
func (s *shard) ledgerBefore(ctx context.Context, cutoff int64) ([]ledgerEntry, error) {
	var old []ledgerEntry
	err := s.scan(ctx, s.subj.commands(), 0, nil, func(m storedMsg) (bool, error) {
		created, err := headerInt(m, hdrCreated)
		if err != nil {
			return false, err
		}
		if created < cutoff {
			old = append(old, ledgerEntry{created, s, m.seq})
		}
		return true, nil
	})
	return old, err
}

// deleteMsg deletes one message by stream sequence, through the leader.
func (s *shard) deleteMsg(ctx context.Context, seq uint64) error {
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	body, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NoErase bool   `json:"no_erase"`
	}{seq, true})
	if err != nil {
		return err
	}
	resp, err := s.nc.RequestWithContext(ctx, s.api+"STREAM.MSG.DELETE."+s.opts.Stream, body)
	if err != nil {
		return err
	}
	var r struct {
		Error   *jetstream.APIError `json:"error"`
		Success bool                `json:"success"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return err
	}
	switch {
	case r.Error != nil && r.Error.ErrorCode == errCodeDeleteFailed && strings.Contains(r.Error.Description, "no message found"):
		return errNoMsg
	case r.Error != nil:
		return r.Error
	case !r.Success:
		return fmt.Errorf("jetstream: delete of %d unsuccessful", seq)
	}
	return nil
}

// deleteSession is Store.DeleteSession on the shard holding the session;
// the ledger entries naming it in the others go too. Its purges are not
// one transaction, so the row is first replaced by a tombstone (Erasing):
// an erasure cut short reads back as such, never as a live session whose
// log has gone. The row goes last.
func (s *shard) deleteSession(ctx context.Context, id string, others []*shard) error {
	done, err := s.enter()
	if err != nil {
		return err
	}
	defer done()
	if id == "" {
		return nil // no session has that id; "=" is the token of no session in the ledger
	}
	if err := s.markErasing(ctx, id); err != nil {
		return fmt.Errorf("jetstream: delete session %q: marking it erased: %w", id, err)
	}
	purged := s.purge(ctx, s.subj.log(id))
	// A writer fenced only by the head (a leader whose lease lapsed) may
	// have overwritten the tombstone before the log went; once it has gone
	// every fenced commit fails, so marking again now makes the mark hold.
	// Marked even when the purge reports a failure: it may have landed
	// with its answer lost.
	if err := s.markErasing(ctx, id); err != nil {
		if purged != nil {
			return fmt.Errorf("jetstream: delete session %q: %w", id, errors.Join(purged, err))
		}
		return fmt.Errorf("jetstream: delete session %q: marking it erased: %w", id, err)
	}
	if purged != nil {
		return fmt.Errorf("jetstream: delete session %q: %w", id, purged)
	}
	// The other streams' ledger entries, the index entries and the search
	// text go before the row, so that none outlives its row; they are found
	// under whatever owner.
	for _, o := range others {
		if err := o.purge(ctx, o.subj.commandsOf(id)); err != nil {
			return fmt.Errorf("jetstream: delete session %q: %w", id, err)
		}
	}
	for _, filter := range []string{s.subj.commandsOf(id), s.subj.textAny(id), s.subj.ownedAny(id), s.subj.busy(id), s.subj.row(id)} {
		if err := s.purge(ctx, filter); err != nil {
			return fmt.Errorf("jetstream: delete session %q: %w", id, err)
		}
	}
	return nil
}

// markErasing replaces a session's row (and its index entries) by its
// tombstone, unless it has none (nothing to mark: the session is gone, or
// never was) or is marked. The tombstone is not busy, so its busy entry
// says idle: an erasure cut short leaves nothing for BusySessions.
func (s *shard) markErasing(ctx context.Context, id string) error {
	m, err := s.get(ctx, getRequest{LastFor: s.subj.row(id)})
	if errors.Is(err, errNoMsg) {
		return nil
	}
	if err != nil {
		return err
	}
	row, err := decodeRow(id, m)
	if err != nil || row.Erasing {
		return err
	}
	row.Busy, row.Erasing = false, true
	msg := rowMsg(s.subj.row(id), &row)
	msg.Header.Set(jetstream.MsgIDHeader, "mspd-"+nuid.Next())
	return s.publish(ctx, []*nats.Msg{msg, indexMsg(s.subj.owned(row.Owner, id), &row),
		busyMsg(s.subj.busy(id), false, s.opts.idleTTL)})
}

func (s *shard) purge(ctx context.Context, filter string) error {
	if s.purgeFault != nil {
		if err := s.purgeFault(filter); err != nil {
			return err
		}
	}
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	return s.stream.Purge(ctx, jetstream.WithPurgeSubject(filter))
}
