package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"

	msqlite "modernc.org/sqlite"

	"mspd/store"
)

// commitReq is one Commit waiting for the writer.
type commitReq struct {
	ctx  context.Context
	b    store.Batch
	done chan error // buffered: the writer never blocks on a caller
	// displaced is set once an urgent batch has displaced this one from a
	// group: it is not displaced again (writer goroutine only), or while
	// notices kept coming it might never be written.
	displaced bool
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
	queue := s.reqs
	if b.Urgent {
		queue = s.urgent
	}
	select {
	case queue <- req:
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
// urgent batches first, then batches an urgent one displaced from the last
// group, up to maxGroup batches, and commits it as one transaction; a
// prune is a round of its own. It returns once Close has closed both
// queues and they are drained.
func (s *Store) writer() {
	defer close(s.writerDone)
	urgent, normal := s.urgent, s.reqs // nil once closed and drained
	group := make([]*commitReq, 0, s.maxGroup)
	var displaced []*commitReq // taken, then left for this round by an urgent batch
	for urgent != nil || normal != nil || len(displaced) > 0 {
		var first *commitReq
		if len(displaced) == 0 {
			select {
			case r, ok := <-urgent: // waiting already: it goes before anything else
				if !ok {
					urgent = nil
					continue
				}
				first = r
			default:
				select {
				case t := <-s.tasks:
					t.done <- t.run()
					continue
				case r, ok := <-urgent:
					if !ok {
						urgent = nil
						continue
					}
					first = r
				case r, ok := <-normal:
					if !ok {
						normal = nil
						continue
					}
					first = r
				}
			}
		}
		group = group[:0]
		if first != nil {
			group = append(group, first)
		}
		group = s.take(group, &urgent, s.maxGroup)
		// While retry notices arrive, a group holds few other batches: the
		// next notice waits for at most this group's commit, and a user
		// watches its countdown.
		limit, now := s.maxGroup, time.Now()
		if len(group) > 0 && group[0].b.Urgent {
			s.urgentUntil = now.Add(urgentSpell)
		}
		if now.Before(s.urgentUntil) {
			limit = min(limit, len(group)+urgentGroupNormal)
		}
		n := min(len(displaced), max(limit-len(group), 0))
		group, displaced = append(group, displaced[:n]...), displaced[n:]
		group = s.take(group, &normal, limit)
		displaced = append(displaced[:len(displaced):len(displaced)], s.commitGroup(group, &urgent)...)
		clear(group) // let finished batches be collected
	}
}

// take adds to group the batches waiting in *queue, up to limit in all;
// it sets *queue to nil when it finds it closed and drained.
func (s *Store) take(group []*commitReq, queue *chan *commitReq, limit int) []*commitReq {
	for len(group) < limit && *queue != nil {
		select {
		case r, ok := <-*queue:
			if !ok {
				*queue = nil
				return group
			}
			group = append(group, r)
		default:
			return group
		}
	}
	return group
}

// commitGroup writes a group in one transaction and answers every
// request it wrote; it returns the batches it displaced, untouched, for
// the next group. A batch that fails must leave nothing behind while its
// neighbours land: a stale sequence is found against the heads before
// anything is written, and any other failure of a batch (a command id
// already in the ledger) abandons the transaction, and the group is
// written again without that batch. Conflicts are rare, so this costs
// less than a savepoint around every batch, which SQLite pays for with a
// copy of every page the batch touches. Statements run under a background
// context: a caller's cancellation must not abort its neighbours' writes.
func (s *Store) commitGroup(group []*commitReq, urgent *chan *commitReq) (displaced []*commitReq) {
	live := group[:0]
	for _, r := range group {
		if err := r.ctx.Err(); err != nil {
			r.done <- err
			continue
		}
		if isEmpty(r.b) {
			r.done <- nil // nothing to write, nothing to conflict with
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return nil
	}
	g := &pendingGroup{reqs: live, errs: make([]error, len(live)), urgent: urgent}
	began := time.Now()
	s.groupPages = 0
	for s.writeGroup(g) {
	}
	if g.committed {
		s.countPagesWritten()
	}
	// The observer runs before the answers (a caller answered finds its
	// group counted); the checkpoint's tail (milliseconds) waits until
	// after them.
	if s.onCommit != nil {
		s.onCommit(GroupCommit{Batches: len(g.reqs), Took: time.Since(began), Pages: s.groupPages})
	}
	for i, r := range g.reqs {
		r.done <- g.errs[i]
	}
	if g.committed {
		s.notePagesWritten()
	}
	// The callers just answered wait on this goroutine's P, where Go puts
	// what a channel send wakes, and would run only once the writer
	// blocks: in the next group's fsync, a group's write later (3.4 ms a
	// wait in a trace of 100 sessions appending, before this). Yielding
	// lets them run first, so their next batches join the next group and
	// a retry notice reaches its reader a commit sooner (BENCHMARKS.md).
	runtime.Gosched()
	return g.displaced
}

// pendingGroup is a group on its way to the log.
type pendingGroup struct {
	reqs []*commitReq
	errs []error // what became of each of reqs
	// urgent is the writer's urgent queue until the group has let urgent
	// batches in, or must be written again: nil after that.
	urgent *chan *commitReq
	// displaced are batches taken for the group and left for the next one
	// when urgent batches came while it was written.
	displaced []*commitReq
	committed bool // its COMMIT returned
}

// letUrgentIn makes urgent batches that arrived while the group was being
// written its next ones, in place of reqs[i:], which wait for the next
// group: a retry notice waits for the batch being written and the commit,
// not for the rest of a group of up to maxGroup admissions and then a
// group of its own.
func (g *pendingGroup) letUrgentIn(s *Store, i int) {
	if g.urgent == nil || len(*g.urgent) == 0 || g.reqs[i].b.Urgent || g.reqs[i].displaced {
		return
	}
	urgent := s.take(nil, g.urgent, max(s.maxGroup-i, 1)) // at least one: only the writer takes
	g.urgent = nil                                        // once
	g.displaced = slices.Clone(g.reqs[i:])
	for _, r := range g.displaced {
		r.displaced = true
	}
	g.reqs = append(g.reqs[:i], urgent...)
	g.errs = append(g.errs[:i], make([]error, len(urgent))...)
	s.urgentUntil = time.Now().Add(urgentSpell)
}

// writeGroup makes one attempt at writing the batches of g that have not
// failed, recording failures in g.errs. It reports whether the group must
// be written again: a batch failed other than by a stale sequence.
func (s *Store) writeGroup(g *pendingGroup) (again bool) {
	ctx := context.Background()
	// fail gives err to every batch that has not already failed on its own,
	// after abandoning the transaction.
	fail := func(err error) bool {
		_, _ = s.w.rollback.ExecContext(ctx) // may fail: SQLite can roll back by itself on I/O errors
		clear(s.heads)                       // what was written is unknown now
		s.noteWriteFailure(err)
		for i := range g.errs {
			if g.errs[i] == nil {
				g.errs[i] = fmt.Errorf("sqlite: commit: %w", err)
			}
		}
		return false
	}
	if _, err := s.w.begin.ExecContext(ctx); err != nil {
		return fail(err)
	}
	heads := make(map[string]int64) // session → head within this transaction
	now := time.Now()               // the CreatedAt of commands that have none
	for i := 0; i < len(g.reqs); i++ {
		if s.beforeBatch != nil {
			s.beforeBatch(i)
		}
		if i > 0 {
			g.letUrgentIn(s, i)
		}
		r := g.reqs[i]
		if g.errs[i] != nil {
			continue
		}
		newHead, wrote, err := s.apply(ctx, r.b, heads, now)
		if err != nil {
			g.errs[i] = err
			delete(s.heads, r.b.SessionID) // read it again next time
			if wrote || !errors.Is(err, store.ErrConflict) {
				// Part of the batch is written, or a statement failed,
				// after which SQLite may have rolled the transaction back
				// itself (an I/O error, a full disk): the rest must not
				// run outside it. If the rollback fails there is no
				// transaction left to trust, and the group fails.
				if _, err := s.w.rollback.ExecContext(ctx); err != nil && !rolledBackAlready(err) {
					return fail(err)
				}
				// Written again as it is: letting urgent batches in now
				// would displace the batches that failed, forget their
				// answers and write them again in the next group.
				g.urgent = nil
				return true
			}
			continue // a stale sequence: nothing of it was written
		}
		if len(r.b.Records) > 0 {
			heads[r.b.SessionID] = newHead
		}
	}
	if _, err := s.w.commit.ExecContext(ctx); err != nil {
		return fail(err)
	}
	s.noteHealth(g.reqs, g.errs)
	g.committed = true
	if len(s.heads)+len(heads) > maxCachedHeads {
		clear(s.heads)
	}
	maps.Copy(s.heads, heads)
	return false
}

// noteHealth records, after a group's COMMIT, whether the store can
// write: it can if any batch landed. A group that landed nothing because
// its batches failed other than by a conflict or their callers' ending
// (a full disk fails every statement) leaves it unable until one lands.
func (s *Store) noteHealth(group []*commitReq, errs []error) {
	var failure error
	for i, r := range group {
		switch err := errs[i]; {
		case err == nil && !isEmpty(r.b):
			s.health.Wrote()
			return
		case err != nil && !errors.Is(err, store.ErrConflict) && r.ctx.Err() == nil:
			failure = err
		}
	}
	if failure != nil {
		s.noteWriteFailure(failure)
	}
}

// noteWriteFailure records err as why writes fail. The reason names no
// session or command: /readyz, which anyone may ask, shows it.
func (s *Store) noteWriteFailure(err error) {
	s.health.Failed(healthReason(err))
}

// healthReason is err without what it names: SQLite's result code.
func healthReason(err error) error {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return errors.New("sqlite: writes are failing")
	}
	what, ok := msqlite.ErrorCodeString[se.Code()]
	if !ok {
		what, ok = msqlite.ErrorCodeString[se.Code()&0xff] // the primary code of an extended one
	}
	if !ok {
		what = fmt.Sprintf("result code %d", se.Code())
	}
	return fmt.Errorf("sqlite: writes are failing: %s", what)
}

// rolledBackAlready tells whether a ROLLBACK failed because SQLite had
// already rolled the transaction back itself (a full disk, some I/O
// errors), which leaves the connection as a rollback would.
func rolledBackAlready(err error) bool {
	return strings.Contains(err.Error(), "no transaction is active")
}

// Healthy implements store.Health: why the last writes failed, when
// nothing has been written since and they failed lately.
func (s *Store) Healthy() error {
	return s.health.Err()
}

// maxCachedHeads bounds the writer's memory of session heads; past it the
// writer forgets them all and looks each up again once.
const maxCachedHeads = 1 << 16

func isEmpty(b store.Batch) bool {
	return len(b.Records) == 0 && b.Session == nil && len(b.Commands) == 0 && b.Text == nil
}

// apply writes one batch inside the open transaction and returns the
// session's new head. Conflicts are found before anything is written where
// possible; wrote tells whether a failing batch had written part of itself.
// The ledger goes first, so that a command id already there is usually
// found before anything else of the batch is written.
func (s *Store) apply(ctx context.Context, b store.Batch, heads map[string]int64, now time.Time) (newHead int64, wrote bool, err error) {
	if len(b.Records) > 0 {
		h, err := s.headOf(ctx, b.SessionID, heads)
		if err != nil {
			return 0, false, err
		}
		for i, r := range b.Records {
			if want := h + 1 + int64(i); r.Seq != want {
				return 0, false, fmt.Errorf("%w: session %q record %d has seq %d, want %d",
					store.ErrConflict, b.SessionID, i, r.Seq, want)
			}
		}
		newHead = h + int64(len(b.Records))
	} else if b.AtHead != nil {
		h, err := s.headOf(ctx, b.SessionID, heads)
		if err != nil {
			return 0, false, err
		}
		if h != *b.AtHead {
			return 0, false, fmt.Errorf("%w: session %q is at %d, its writer at %d", store.ErrConflict, b.SessionID, h, *b.AtHead)
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
			return 0, true, fmt.Errorf("sqlite: add command %q: %w", c.ID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, true, fmt.Errorf("sqlite: add command %q: %w", c.ID, err)
		}
		if n == 0 {
			return 0, wrote, fmt.Errorf("%w: command %q already in the ledger", store.ErrConflict, c.ID)
		}
		wrote = true
	}
	if len(b.Records) > 0 {
		// One statement for the batch's records.
		err := s.eventRows.exec(ctx, s.wc, len(b.Records), func(i int, args []any) []any {
			r := &b.Records[i]
			return append(args, b.SessionID, r.Seq, r.Method, []byte(r.Params))
		})
		if err != nil {
			return 0, true, fmt.Errorf("sqlite: append %q from seq %d: %w", b.SessionID, b.Records[0].Seq, err)
		}
		wrote = true
	}
	if r := b.Session; r != nil {
		created, _ := store.UnixNanos(r.CreatedAt) // validated by Commit
		updated, _ := store.UnixNanos(r.UpdatedAt)
		if _, err := s.w.upsertSession.ExecContext(ctx, r.ID, r.Owner, created, updated, r.Busy, []byte(r.State)); err != nil {
			return 0, true, fmt.Errorf("sqlite: upsert session %q: %w", r.ID, err)
		}
		wrote = true
	}
	if b.Text != nil {
		if err := s.indexText(ctx, b.SessionID, b.Text); err != nil {
			return 0, true, err
		}
	}
	return newHead, wrote, nil
}

// headOf returns a session's head as this transaction sees it: written
// earlier in it, remembered from a commit (this store is the file's only
// writer: Open holds the directory's lock), or else read.
func (s *Store) headOf(ctx context.Context, sessionID string, heads map[string]int64) (int64, error) {
	if h, ok := heads[sessionID]; ok {
		return h, nil
	}
	if h, ok := s.heads[sessionID]; ok {
		return h, nil
	}
	h, err := head(ctx, s.w.head, sessionID)
	if err != nil {
		return 0, err
	}
	heads[sessionID] = h // the committed head: valid even if this batch fails
	return h, nil
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
		res := run()
		// A task is a write too: an erasure that frees room tells that
		// the store writes again, as a client's batch would.
		if res.err == nil {
			s.health.Wrote()
		} else {
			s.noteWriteFailure(res.err)
		}
		return res
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
		for _, st := range []*sql.Stmt{s.w.deleteEvents, s.w.deleteSession, s.w.deleteCommands, s.w.deleteTokens, s.w.deleteTexts, s.w.deleteBackfill} {
			if _, err := st.ExecContext(bg, id); err != nil {
				_, _ = s.w.rollback.ExecContext(bg)
				return taskResult{err: fmt.Errorf("sqlite: delete session %q: %w", id, err)}
			}
		}
		delete(s.heads, id) // before the outcome is known: a failed commit may have landed
		if _, err := s.w.commit.ExecContext(bg); err != nil {
			_, _ = s.w.rollback.ExecContext(bg)
			return taskResult{err: fmt.Errorf("sqlite: delete session %q: %w", id, err)}
		}
		// Readers holding an older snapshot can keep the checkpoint from
		// finishing (it gives up after truncateWait); the erasure itself
		// is committed either way.
		_ = s.checkpoint(CheckpointTruncate)
		return taskResult{}
	})
	return err
}

// After an urgent batch, for urgentSpell, a group takes at most
// urgentGroupNormal batches besides the urgent ones.
const (
	urgentSpell       = 100 * time.Millisecond
	urgentGroupNormal = 32
)
