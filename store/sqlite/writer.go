package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"time"

	"mspd/store"
)

// commitReq is one Commit waiting for the writer.
type commitReq struct {
	ctx  context.Context
	b    store.Batch
	done chan error // buffered: the writer never blocks on a caller
}

// Commit implements store.Store. It returns when the batch is durable or
// known to be rejected; see the package doc for how batches are grouped.
func (s *Store) Commit(ctx context.Context, b store.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := b.Validate(); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	req := &commitReq{ctx: ctx, b: b, done: make(chan error, 1)}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	if isEmpty(b) {
		s.mu.RUnlock()
		return nil
	}
	select {
	case s.reqs <- req:
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err()
	}
	s.mu.RUnlock()
	// No select on ctx here: once enqueued the batch may be written at any
	// moment, and returning early would report failure for a write that
	// then lands. The writer drops it instead if ctx ends before its turn.
	return <-req.done
}

// writer owns the write connection. Each round takes whatever is queued,
// up to maxGroup batches, and commits it as one transaction; a prune is a
// round of its own.
func (s *Store) writer() {
	defer close(s.writerDone)
	group := make([]*commitReq, 0, s.maxGroup)
	for {
		var first *commitReq
		select {
		case t := <-s.tasks:
			t.done <- t.run()
			continue
		case r, ok := <-s.reqs:
			if !ok {
				return
			}
			first = r
		}
		group = append(group[:0], first)
	drain:
		for len(group) < s.maxGroup {
			select {
			case r, ok := <-s.reqs:
				if !ok {
					break drain
				}
				group = append(group, r)
			default:
				break drain
			}
		}
		s.commitGroup(group)
		clear(group) // let finished batches be collected
	}
}

// commitGroup writes a group in one transaction, each batch inside its own
// savepoint, and answers every request. Statements run under a background
// context: a caller's cancellation must not abort its neighbours' writes.
func (s *Store) commitGroup(group []*commitReq) {
	ctx := context.Background()
	errs := make([]error, len(group))
	defer func() {
		for i, r := range group {
			r.done <- errs[i]
		}
	}()
	// fail gives err to every batch that has not already failed on its own,
	// after abandoning the transaction.
	fail := func(err error) {
		_, _ = s.w.rollback.ExecContext(ctx) // may fail: SQLite can roll back by itself on I/O errors
		for i := range errs {
			if errs[i] == nil {
				errs[i] = fmt.Errorf("sqlite: commit: %w", err)
			}
		}
	}

	live := 0
	for i, r := range group {
		if err := r.ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		if isEmpty(r.b) {
			continue // nothing to write, nothing to conflict with
		}
		live++
	}
	if live == 0 {
		return
	}
	if s.onCommit != nil {
		began := time.Now()
		defer func() { s.onCommit(live, time.Since(began)) }()
	}

	if _, err := s.w.begin.ExecContext(ctx); err != nil {
		fail(err)
		return
	}
	heads := make(map[string]int64) // session → head within this transaction
	now := time.Now()               // the CreatedAt of commands that have none
	for i, r := range group {
		if errs[i] != nil || isEmpty(r.b) {
			continue
		}
		if _, err := s.w.savepoint.ExecContext(ctx); err != nil {
			fail(err)
			return
		}
		newHead, err := s.apply(ctx, r.b, heads, now)
		if err != nil {
			errs[i] = err
			if _, rerr := s.w.rollbackTo.ExecContext(ctx); rerr != nil {
				fail(rerr)
				return
			}
		}
		if _, err := s.w.release.ExecContext(ctx); err != nil {
			fail(err)
			return
		}
		if err == nil && len(r.b.Records) > 0 {
			heads[r.b.SessionID] = newHead
		}
	}
	if _, err := s.w.commit.ExecContext(ctx); err != nil {
		fail(err)
	}
}

func isEmpty(b store.Batch) bool {
	return len(b.Records) == 0 && b.Session == nil && len(b.Commands) == 0
}

// apply writes one batch inside the open savepoint and returns the
// session's new head. Conflicts are found before anything is written where
// possible; the savepoint undoes the rest.
func (s *Store) apply(ctx context.Context, b store.Batch, heads map[string]int64, now time.Time) (int64, error) {
	var newHead int64
	if len(b.Records) > 0 {
		h, ok := heads[b.SessionID]
		if !ok {
			var err error
			if h, err = head(ctx, s.w.head, b.SessionID); err != nil {
				return 0, err
			}
			heads[b.SessionID] = h // the committed head; valid even if this batch is rolled back
		}
		for i, r := range b.Records {
			if want := h + 1 + int64(i); r.Seq != want {
				return 0, fmt.Errorf("%w: session %q record %d has seq %d, want %d",
					store.ErrConflict, b.SessionID, i, r.Seq, want)
			}
		}
		for _, r := range b.Records {
			if _, err := s.w.insertEvent.ExecContext(ctx, b.SessionID, r.Seq, r.Method, []byte(r.Params)); err != nil {
				return 0, fmt.Errorf("sqlite: append %q seq %d: %w", b.SessionID, r.Seq, err)
			}
		}
		newHead = h + int64(len(b.Records))
	}
	if r := b.Session; r != nil {
		created, _ := store.UnixNanos(r.CreatedAt) // validated by Commit
		updated, _ := store.UnixNanos(r.UpdatedAt)
		if _, err := s.w.upsertSession.ExecContext(ctx, r.ID, created, updated, r.Busy, []byte(r.State)); err != nil {
			return 0, fmt.Errorf("sqlite: upsert session %q: %w", r.ID, err)
		}
	}
	for _, c := range b.Commands {
		created := store.ClampUnixNanos(now)
		if !c.CreatedAt.IsZero() {
			created, _ = store.UnixNanos(c.CreatedAt) // validated by Commit
		}
		var sessionID any // NULL: a command of no session
		if id := cmp.Or(c.SessionID, b.SessionID); id != "" {
			sessionID = id
		}
		res, err := s.w.insertCommand.ExecContext(ctx, c.ID, c.Digest, []byte(c.Response), c.IsError, created, sessionID)
		if err != nil {
			return 0, fmt.Errorf("sqlite: add command %q: %w", c.ID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("sqlite: add command %q: %w", c.ID, err)
		}
		if n == 0 {
			return 0, fmt.Errorf("%w: command %q already in the ledger", store.ErrConflict, c.ID)
		}
	}
	return newHead, nil
}

// task is work the writer runs as a round of its own, between two commit
// groups: a prune, a session's erasure.
type task struct {
	run  func() taskResult
	done chan taskResult // buffered: the writer never blocks on a caller
}

type taskResult struct {
	n   int
	err error
}

// runTask hands run to the writer and waits for its result. ctx bounds the
// wait for the writer to take it; once taken, it runs to the end.
func (s *Store) runTask(ctx context.Context, run func() taskResult) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	t := &task{done: make(chan taskResult, 1), run: func() taskResult {
		if err := ctx.Err(); err != nil {
			return taskResult{err: err}
		}
		return run()
	}}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return 0, ErrClosed
	}
	select {
	case s.tasks <- t:
	case <-ctx.Done():
		s.mu.RUnlock()
		return 0, ctx.Err()
	}
	s.mu.RUnlock()
	res := <-t.done
	return res.n, res.err
}

// PruneCommands implements store.Store. The delete is a transaction of its
// own on the writer, between two commit groups, so a limit of a few hundred
// keeps the write lock for about one fsync.
func (s *Store) PruneCommands(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, ctx.Err()
	}
	return s.runTask(ctx, func() taskResult {
		res, err := s.w.pruneCommands.ExecContext(context.Background(), store.ClampUnixNanos(before), limit)
		if err != nil {
			return taskResult{err: fmt.Errorf("sqlite: prune commands: %w", err)}
		}
		n, err := res.RowsAffected()
		if err != nil {
			return taskResult{err: fmt.Errorf("sqlite: prune commands: %w", err)}
		}
		return taskResult{n: int(n)}
	})
}

// DeleteSession implements store.Store: one transaction erases the
// session's log, row and commands (secure_delete overwrites them), then a
// checkpoint truncates the write-ahead log, which would otherwise keep
// copies of what was erased until it is next reset.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	_, err := s.runTask(ctx, func() taskResult {
		bg := context.Background()
		if _, err := s.w.begin.ExecContext(bg); err != nil {
			return taskResult{err: fmt.Errorf("sqlite: delete session %q: %w", id, err)}
		}
		for _, st := range []*sql.Stmt{s.w.deleteEvents, s.w.deleteSession, s.w.deleteCommands} {
			if _, err := st.ExecContext(bg, id); err != nil {
				_, _ = s.w.rollback.ExecContext(bg)
				return taskResult{err: fmt.Errorf("sqlite: delete session %q: %w", id, err)}
			}
		}
		if _, err := s.w.commit.ExecContext(bg); err != nil {
			_, _ = s.w.rollback.ExecContext(bg)
			return taskResult{err: fmt.Errorf("sqlite: delete session %q: %w", id, err)}
		}
		// Readers holding an older snapshot can keep the checkpoint from
		// finishing; the erasure itself is committed either way.
		_, _ = s.wc.ExecContext(bg, "PRAGMA wal_checkpoint(TRUNCATE)")
		return taskResult{}
	})
	return err
}
