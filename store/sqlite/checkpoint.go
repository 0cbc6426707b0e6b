package sqlite

// Checkpoints: copying the write-ahead log back into the database file, on
// a connection of its own rather than in the writer's commits.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	msqlite "modernc.org/sqlite"
)

// DefaultCheckpointPages is how many pages the writer lets the
// write-ahead log gain before it asks for a checkpoint, unless
// WithCheckpointPages says otherwise: 16 MiB of 4 KiB pages. Each
// checkpoint costs two fsyncs and a tail copied on the writer whatever its
// size, and a page written many times in between (a session row, an
// index's interior pages) is copied once, so fewer, larger ones are
// cheaper: a quarter as many as at SQLite's own wal_autocheckpoint
// default of 1,000 halved the writer's time in checkpoints and raised
// durable events/s by 3–18% (BENCHMARKS.md). The price: a session's
// erasure truncates the log on the writer, copying up to this many pages
// first (about 30 ms here against 8 ms at 1,000).
const DefaultCheckpointPages = 4000

// openCheckpoints opens the checkpoint connection and starts the goroutine
// that runs checkpoints on it. SQLite would otherwise run one inside the
// COMMIT that crosses its mark, on the writer, holding up that
// group's callers and every batch queued behind it (a sixth of the
// writer's time when appending from 100 sessions). On a connection of its
// own a PASSIVE checkpoint runs beside the writer and blocks no one.
func (s *Store) openCheckpoints(ctx context.Context, path string) error {
	// The counter the writer steers by must exist, or the log would grow
	// without end.
	if err := s.wc.Raw(func(dc any) error {
		if _, ok := dc.(msqlite.DBStatus); !ok {
			return errors.New("the driver does not report pages written (sqlite3_db_status)")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	var err error
	// synchronous=FULL: the checkpoint syncs the database file before the
	// log may be reused, or a power loss could take committed pages. The
	// busy timeout is truncateWait, not the store's: only a truncating
	// checkpoint ever waits (for readers), and it waits on the writer.
	busy := fmt.Sprintf("_pragma=busy_timeout(%d)", truncateWait.Milliseconds())
	if s.cdb, err = sql.Open("sqlite", path+"?"+busy+"&_pragma=synchronous(FULL)"); err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.cdb.SetMaxOpenConns(1)
	if s.cc, err = s.cdb.Conn(ctx); err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.ckptDue = make(chan struct{}, 1)
	s.ckptDone = make(chan struct{})
	go func() {
		defer close(s.ckptDone)
		for range s.ckptDue {
			_ = s.checkpoint(CheckpointBackground) // a failed one is retried with the next
			s.ckptRan.Store(true)
		}
	}()
	return nil
}

// truncateWait bounds how long a truncating checkpoint (after a session's
// erasure) waits for readers of older snapshots to finish. It runs on the
// writer, so every commit waits with it; past the bound it gives up,
// reported Blocked, and the next truncation empties the log.
const truncateWait = 100 * time.Millisecond

// countPagesWritten adds the pages the last commit wrote to the log.
// Writer goroutine only, right after the COMMIT.
func (s *Store) countPagesWritten() {
	n := s.takePagesWritten()
	s.walPages += n
	s.groupPages += n
}

// notePagesWritten, after countPagesWritten and the answers, asks for a
// checkpoint every s.checkpointPages. Writer goroutine only, between
// transactions.
//
// SQLite starts the log over from its beginning only when a write begins
// with every frame copied into the database file, and a checkpoint beside
// the writer never gets that far: the writer commits while it copies. So
// once one has run, the writer copies the tail written meanwhile itself,
// on the checkpoint connection: a few pages, and then the log is reused
// rather than grown (TestLogStaysBounded).
func (s *Store) notePagesWritten() {
	if s.ckptRan.Swap(false) {
		_ = s.checkpoint(CheckpointTail)
	}
	if s.walPages < s.checkpointPages {
		return
	}
	s.walPages = 0
	select {
	case s.ckptDue <- struct{}{}:
	default: // one is due already
	}
}

// takePagesWritten returns the pages the writer's connection has written
// to the log since the last call. Writer goroutine only (or Open's).
func (s *Store) takePagesWritten() int {
	var n int
	_ = s.wc.Raw(func(dc any) error {
		var err error
		n, _, err = dc.(msqlite.DBStatus).Status(msqlite.DBStatusCacheWrite, true)
		return err
	})
	return n
}

// Kinds of Checkpoint: why one ran.
const (
	// CheckpointBackground is asked for every WithCheckpointPages pages and
	// runs beside the writer.
	CheckpointBackground = "background"
	// CheckpointTail is the writer copying what was written while a
	// background checkpoint ran, so that the log can start over.
	CheckpointTail = "tail"
	// CheckpointTruncate empties the log after a session's erasure, so
	// that no copy of what was erased stays in it.
	CheckpointTruncate = "truncate"
)

// Checkpoint is one checkpoint of the write-ahead log, as
// WithCheckpointObserver reports it.
type Checkpoint struct {
	// Kind is CheckpointBackground, CheckpointTail or CheckpointTruncate.
	Kind string
	// Frames is how many frames the log held; Copied how many of them
	// are in the database file now.
	Frames, Copied int
	// Blocked is true when a reader kept the checkpoint from finishing:
	// a truncating one then leaves the log as it was.
	Blocked bool
	// Err is why it failed, if it did.
	Err error
}

// checkpoint runs one checkpoint of kind on the checkpoint connection, one
// at a time.
func (s *Store) checkpoint(kind string) error {
	mode := "PASSIVE"
	if kind == CheckpointTruncate {
		mode = "TRUNCATE"
	}
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	c := Checkpoint{Kind: kind}
	var busy int
	if err := s.cc.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &c.Frames, &c.Copied); err != nil {
		c.Err = fmt.Errorf("sqlite: checkpoint: %w", err)
	}
	c.Blocked = busy != 0
	if s.onCheckpoint != nil {
		s.onCheckpoint(c)
	}
	return c.Err
}

// closeCheckpoints stops the checkpoint goroutine once the writer has
// stopped asking.
func (s *Store) closeCheckpoints() {
	if s.ckptDue != nil {
		close(s.ckptDue)
		<-s.ckptDone
	}
}
