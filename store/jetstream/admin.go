package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// PruneCommands implements store.Store. The ledger has no index by
// CreatedAt (entries are keyed by command id, and CreatedAt is the
// caller's), so each call reads the ledger's entries, picks the limit
// oldest created before before, and deletes those by stream sequence. The
// read is O(ledger), which the retention window bounds.
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
	type entry struct {
		created int64
		seq     uint64
	}
	cutoff := clampNanos(before)
	var old []entry
	err = s.scan(ctx, s.subj.commands(), 0, func(m storedMsg) (bool, error) {
		created, err := headerInt(m, hdrCreated)
		if err != nil {
			return false, err
		}
		if created < cutoff {
			old = append(old, entry{created, m.seq})
		}
		return true, nil
	})
	if err != nil {
		return 0, fmt.Errorf("jetstream: prune commands: %w", err)
	}
	slices.SortFunc(old, func(a, b entry) int { return cmp.Or(cmp.Compare(a.created, b.created), cmp.Compare(a.seq, b.seq)) })
	n := 0
	for _, e := range old[:min(limit, len(old))] {
		err := s.deleteMsg(ctx, e.seq)
		if errors.Is(err, errNoMsg) {
			continue // gone already: another pruner, or its session's deletion
		}
		if err != nil {
			return n, fmt.Errorf("jetstream: prune commands: %w", err)
		}
		n++
	}
	return n, nil
}

// deleteMsg deletes one message by stream sequence.
func (s *Store) deleteMsg(ctx context.Context, seq uint64) error {
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	err := s.stream.DeleteMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return errNoMsg
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeMessageNotFound {
		return errNoMsg
	}
	return err
}

// DeleteSession implements store.Store: it purges the session's log, then
// the ledger entries that name it, then its row. These are three purges,
// not one atomic step; the row goes last, so a deletion cut short leaves
// the session listed and DeleteSession, run again, finishes it.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done, err := s.enter()
	if err != nil {
		return err
	}
	defer done()
	if id == "" {
		return nil // no session has that id; "=" is the token of no session in the ledger
	}
	for _, filter := range []string{s.subj.log(id), s.subj.commandsOf(id), s.subj.row(id)} {
		if err := s.purge(ctx, filter); err != nil {
			return fmt.Errorf("jetstream: delete session %q: %w", id, err)
		}
	}
	return nil
}

func (s *Store) purge(ctx context.Context, filter string) error {
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	return s.stream.Purge(ctx, jetstream.WithPurgeSubject(filter))
}
