package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mspd/store"
)

// One group of batches where some fail: a stale sequence (found before
// anything is written) and a batch whose second command is already in the
// ledger (found after its first command is written, so the group is
// written again without it). Exactly the failing batches leave nothing
// behind, the rest land in the same group, and the heads the writer
// remembers afterwards are the committed ones.
func TestFailingBatchesInOneGroup(t *testing.T) {
	ctx := context.Background()
	const n = 48
	gate := make(chan struct{})
	groups := make(chan int, 2) // the priming group's size, then the tested one's
	s, err := Open(filepath.Join(t.TempDir(), "mspd.db"), WithCommitObserver(func(g GroupCommit) {
		batches := g.Batches
		select {
		case groups <- batches:
		default:
		}
		<-gate // hold the writer until the next group is queued whole
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	primed := make(chan error, 1)
	go func() { primed <- s.Commit(ctx, store.Batch{Commands: []store.Command{{ID: "taken", Digest: "d"}}}) }()
	if got := <-groups; got != 1 {
		t.Fatalf("priming group of %d batches", got)
	}
	errs := make([]error, n)
	done := make(chan struct{}, n)
	for i := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			id := fmt.Sprintf("s%d", i)
			b := store.Batch{
				SessionID: id,
				Records:   []store.Record{{Seq: 1, Method: "m", Params: []byte(`{"i":` + fmt.Sprint(i) + `}`)}},
				Session:   &store.Session{ID: id, CreatedAt: time.Now(), UpdatedAt: time.Now(), Busy: true, State: []byte(`{}`)},
				Commands:  []store.Command{{ID: "c-" + id, Digest: "d"}},
			}
			switch i % 3 {
			case 0:
				b.Commands = append(b.Commands, store.Command{ID: "taken", Digest: "d"})
			case 1:
				b.Records[0].Seq = 2
			}
			errs[i] = s.Commit(ctx, b)
		}()
	}
	for len(s.reqs) < n { // a condition, not a time: every batch queued
		select {
		case <-done:
			t.Fatal("a commit returned before the writer was let go")
		default:
		}
		runtime.Gosched()
	}
	close(gate)
	if err := <-primed; err != nil {
		t.Fatal(err)
	}
	for range n {
		<-done
	}
	if got := <-groups; got != n {
		t.Errorf("the batches were written in a group of %d, want %d", got, n)
	}
	for i, err := range errs {
		id := fmt.Sprintf("s%d", i)
		head, herr := s.Head(ctx, id)
		_, cerr := s.Command(ctx, "c-"+id)
		_, rerr := s.Session(ctx, id)
		if herr != nil {
			t.Fatal(herr)
		}
		if i%3 != 2 {
			if !errors.Is(err, store.ErrConflict) || head != 0 || !errors.Is(cerr, store.ErrNotFound) || !errors.Is(rerr, store.ErrNotFound) {
				t.Errorf("%s: err %v, head %d, command %v, row %v; want a conflict that left nothing", id, err, head, cerr, rerr)
			}
		} else if err != nil || head != 1 || cerr != nil || rerr != nil {
			t.Errorf("%s: err %v, head %d, command %v, row %v; want all of it", id, err, head, cerr, rerr)
		}
	}
	// The heads remembered are the committed ones: every session takes
	// its next record, and only that.
	for i := range n {
		id := fmt.Sprintf("s%d", i)
		next := int64(1)
		if i%3 == 2 {
			next = 2
		}
		if err := s.Commit(ctx, store.Batch{SessionID: id, Records: []store.Record{{Seq: next + 1, Method: "m", Params: []byte(`{}`)}}}); !errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: seq %d after head %d: %v, want a conflict", id, next+1, next-1, err)
		}
		if err := s.Commit(ctx, store.Batch{SessionID: id, Records: []store.Record{{Seq: next, Method: "m", Params: []byte(`{}`)}}}); err != nil {
			t.Errorf("%s: seq %d: %v", id, next, err)
		}
	}
}

// Urgent batches queued behind more than a group's worth of others are
// written in the next group, and the others still land.
func TestUrgentBatchesGoFirst(t *testing.T) {
	ctx := context.Background()
	const group, normal, urgent = 4, 12, 2
	gate, later := make(chan struct{}), make(chan struct{})
	var groups atomic.Int32
	s, err := Open(filepath.Join(t.TempDir(), "mspd.db"), WithMaxGroup(group), WithCommitObserver(func(GroupCommit) {
		// The observer runs before a group's callers are answered: the
		// priming group waits until everything is queued, the group after
		// the tested one until the tested one's answers are counted.
		switch groups.Add(1) {
		case 1:
			<-gate
		case 3:
			<-later
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	primed := make(chan error, 1)
	go func() { primed <- s.Commit(ctx, store.Batch{Commands: []store.Command{{ID: "prime", Digest: "d"}}}) }()
	for groups.Load() == 0 {
		runtime.Gosched()
	}
	type answer struct {
		i   int
		err error
	}
	done := make(chan answer, normal+urgent)
	commit := func(i int, urgent bool) {
		id := fmt.Sprintf("s%d", i)
		err := s.Commit(ctx, store.Batch{SessionID: id, Urgent: urgent, Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`{}`)}}})
		done <- answer{i, err}
	}
	for i := range normal {
		go commit(i, false)
	}
	for len(s.reqs) < cap(s.reqs) { // full: the rest wait to send
		runtime.Gosched()
	}
	for i := normal; i < normal+urgent; i++ {
		go commit(i, true)
	}
	for len(s.urgent) < urgent {
		runtime.Gosched()
	}
	close(gate)
	if err := <-primed; err != nil {
		t.Fatal(err)
	}
	var first []int // the group after the priming one
	for range group {
		a := <-done
		if a.err != nil {
			t.Fatal(a.err)
		}
		first = append(first, a.i)
	}
	for i := normal; i < normal+urgent; i++ {
		if !slices.Contains(first, i) {
			t.Errorf("urgent batch %d was not in the first group after the priming one: %v", i, first)
		}
	}
	close(later)
	for range normal + urgent - group {
		if a := <-done; a.err != nil {
			t.Fatal(a.err)
		}
	}
	for i := range normal + urgent {
		if h, err := s.Head(ctx, fmt.Sprintf("s%d", i)); err != nil || h != 1 {
			t.Errorf("s%d: head %d, %v", i, h, err)
		}
	}
}

// While retry notices arrive, a group holds the urgent batches and at
// most urgentGroupNormal others, so that the next notice waits for a small
// commit, not for a full group of admissions.
func TestGroupsStaySmallWhileNoticesArrive(t *testing.T) {
	ctx := context.Background()
	const normal = 100
	gate, entered := make(chan struct{}), make(chan struct{})
	sizes := make(chan int, normal+2)
	s, err := Open(filepath.Join(t.TempDir(), "mspd.db"), WithCommitObserver(func(g GroupCommit) {
		n := g.Batches
		if len(sizes) == 0 {
			close(entered)
			<-gate // the priming group waits until everything is queued
		}
		sizes <- n
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	primed := make(chan error, 1)
	go func() { primed <- s.Commit(ctx, store.Batch{Commands: []store.Command{{ID: "prime", Digest: "d"}}}) }()
	<-entered // the writer holds the priming group: nothing else joins it
	done := make(chan error, normal+1)
	commit := func(id string, urgent bool) {
		done <- s.Commit(ctx, store.Batch{SessionID: id, Urgent: urgent, Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`{}`)}}})
	}
	for i := range normal {
		go commit(fmt.Sprintf("s%d", i), false)
	}
	for len(s.reqs) < normal {
		runtime.Gosched()
	}
	go commit("notice", true)
	for len(s.urgent) < 1 {
		runtime.Gosched()
	}
	close(gate)
	if err := <-primed; err != nil {
		t.Fatal(err)
	}
	for range normal + 1 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if prime, first := <-sizes, <-sizes; prime != 1 || first != 1+urgentGroupNormal {
		t.Fatalf("groups of %d, then %d batches; want the notice and %d others", prime, first, urgentGroupNormal)
	}
}

// testCheckpointPages is the checkpoint interval of the tests that fill
// the log: small, so that they fill it with few commits.
const testCheckpointPages = 500

// The writer leaves checkpoints to a connection of its own: once the log
// has gained testCheckpointPages, one runs there and copies the log into the
// database file, and reads see every record after it.
func TestCheckpointsRunBesideTheWriter(t *testing.T) {
	ctx := context.Background()
	ran := make(chan Checkpoint, 16)
	path := filepath.Join(t.TempDir(), "mspd.db")
	s, err := Open(path, WithCheckpointPages(testCheckpointPages), WithCheckpointObserver(func(c Checkpoint) {
		if c.Err != nil {
			t.Error(c.Err)
		}
		if c.Kind == CheckpointBackground {
			select {
			case ran <- c:
			default:
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// A record of two kilobytes, one a commit: a page or more each.
	params := []byte(`{"p":"` + strings.Repeat("x", 2000) + `"}`)
	const records = testCheckpointPages + 10
	for seq := int64(1); seq <= records; seq++ {
		if err := s.Commit(ctx, store.Batch{SessionID: "s", Records: []store.Record{{Seq: seq, Method: "m", Params: params}}}); err != nil {
			t.Fatal(err)
		}
	}
	var r Checkpoint
	select {
	case r = <-ran:
	case <-time.After(time.Minute):
		t.Fatalf("no checkpoint ran after %d pages or more", records)
	}
	if r.Frames < testCheckpointPages || r.Copied == 0 {
		t.Errorf("checkpoint of %d frames copied %d, want at least %d frames, some copied", r.Frames, r.Copied, testCheckpointPages)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if after.Size() <= before.Size() {
		t.Errorf("database file %d bytes after the checkpoint, %d before: nothing was copied into it", after.Size(), before.Size())
	}
	if h, err := s.Head(ctx, "s"); err != nil || h != records {
		t.Errorf("head %d, %v; want %d", h, err, records)
	}
}

// Under a steady load of commits from many sessions the write-ahead log is
// reused, not grown: checkpoints beside the writer never copy the frames
// written while they run, so without the writer copying that tail the log
// would grow by every page ever written.
func TestLogStaysBounded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(filepath.Join(dir, "mspd.db"), WithCheckpointPages(testCheckpointPages))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Records of nearly a page each: the log gains at least a page a
	// record, 6 × testCheckpointPages in all.
	params := []byte(`{"p":"` + strings.Repeat("x", 3500) + `"}`)
	const writers, records = 16, 6 * testCheckpointPages
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			id := fmt.Sprintf("s%d", w)
			var err error
			for seq := int64(1); seq <= records/writers && err == nil; seq++ {
				err = s.Commit(ctx, store.Batch{SessionID: id, Records: []store.Record{{Seq: seq, Method: "m", Params: params}}})
			}
			errs <- err
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	wal, err := os.Stat(filepath.Join(dir, "mspd.db-wal"))
	if err != nil {
		t.Fatal(err)
	}
	// A frame is a page and its 24-byte header; a checkpoint is asked for
	// every testCheckpointPages, and the tail is copied when it is done.
	const frame, limit = 4096 + 24, 4 * testCheckpointPages
	if frames := wal.Size() / frame; frames > limit {
		t.Errorf("write-ahead log of %d frames after %d records of a page or more, want at most %d", frames, records, limit)
	}
}

// Rows written by another program (the sqlite3 shell, an import) are read
// as written even when they hold TEXT rather than BLOB params, and a
// session whose log another program appended to fails one commit, not
// every one after it: the head the writer remembered is read again.
func TestRowsWrittenByOthers(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mspd.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Commit(ctx, store.Batch{SessionID: "s", Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`{"n":1}`)}}}); err != nil {
		t.Fatal(err)
	}
	other := rawConn(t, path)
	for _, q := range []string{
		`INSERT INTO events (session_id, seq, method, params) VALUES ('t', 1, 'm', '{"t":1}'), ('t', 2, 'm', '{"t":2}'), ('t', 3, 'm', '{"t":3}')`,
		`INSERT INTO events (session_id, seq, method, params) VALUES ('s', 2, 'm', '{"n":2}')`,
	} {
		if _, err := other.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := s.Records(ctx, "t", 0, store.Limit{Rows: 10, Bytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, string(r.Params))
	}
	if want := []string{`{"t":1}`, `{"t":2}`, `{"t":3}`}; !slices.Equal(got, want) {
		t.Errorf("TEXT params read back as %q, want %q", got, want)
	}
	// The writer still believes s ends at 1: seq 2 collides with the row
	// written behind its back, and fails.
	if err := s.Commit(ctx, store.Batch{SessionID: "s", Records: []store.Record{{Seq: 2, Method: "m", Params: []byte(`{}`)}}}); err == nil {
		t.Fatal("a commit over another program's row succeeded")
	}
	if err := s.Commit(ctx, store.Batch{SessionID: "s", Records: []store.Record{{Seq: 3, Method: "m", Params: []byte(`{"n":3}`)}}}); err != nil {
		t.Fatalf("the next commit after the true head: %v", err)
	}
	if h, err := s.Head(ctx, "s"); err != nil || h != 3 {
		t.Errorf("head %d, %v; want 3", h, err)
	}
}

// A reader holding an old snapshot keeps a session's erasure from
// truncating the write-ahead log, but only for a moment, whatever the
// store's busy timeout: the erasure runs on the writer, so every commit
// waits behind it. The truncate is reported blocked, and the next one
// empties the log.
func TestErasureDoesNotWaitForReaders(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "mspd.db")
	truncates := make(chan Checkpoint, 4)
	s, err := Open(path, WithBusyTimeout(time.Hour), WithCheckpointObserver(func(c Checkpoint) {
		if c.Kind == CheckpointTruncate {
			truncates <- c
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	record := func(session string, seq int64) {
		t.Helper()
		if err := s.Commit(ctx, store.Batch{SessionID: session, Records: []store.Record{{Seq: seq, Method: "m", Params: []byte(`{}`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	record("gone", 1)
	record("kept", 1)
	tx, err := rawConn(t, path).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("reader sees %d records, %v", n, err)
	}
	record("kept", 2) // the reader's snapshot is an old one now

	erased := make(chan error, 1)
	go func() { erased <- s.DeleteSession(ctx, "gone") }()
	select {
	case err := <-erased:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the erasure waited for the reader to finish")
	}
	if c := <-truncates; !c.Blocked {
		t.Errorf("truncate %+v beside an older snapshot, want it blocked", c)
	}
	record("kept", 3)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession(ctx, "kept"); err != nil {
		t.Fatal(err)
	}
	if c := <-truncates; c.Blocked || c.Err != nil {
		t.Errorf("truncate %+v with no reader left, want it complete", c)
	}
}

// A store whose writes fail for want of space says so (store.Health,
// which /readyz reports) until a write lands again; a batch refused for a
// conflict says nothing of the store.
func TestHealthFollowsTheWrites(t *testing.T) {
	ctx := t.Context()
	s, err := Open(filepath.Join(t.TempDir(), "mspd.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var _ store.Health = s
	record := func(seq int64, size int) error {
		return s.Commit(ctx, store.Batch{SessionID: "s", Records: []store.Record{{Seq: seq, Method: "m",
			Params: []byte(`{"p":"` + strings.Repeat("x", size) + `"}`)}}})
	}
	if err := record(1, 10); err != nil {
		t.Fatal(err)
	}
	if err := record(1, 10); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a stale sequence: %v, want ErrConflict", err)
	}
	if err := s.Healthy(); err != nil {
		t.Fatalf("after a conflict: unhealthy: %v", err)
	}
	// The database may not grow: as a full disk would have it.
	if _, err := s.wc.ExecContext(ctx, `PRAGMA max_page_count = 1`); err != nil {
		t.Fatal(err)
	}
	if err := record(2, 100_000); err == nil {
		t.Fatal("a record the database has no room for landed")
	}
	if err := s.Healthy(); err == nil {
		t.Fatal("a store that could not write reports itself healthy")
	}
	if _, err := s.wc.ExecContext(ctx, `PRAGMA max_page_count = 1073741823`); err != nil {
		t.Fatal(err)
	}
	if err := record(2, 100_000); err != nil {
		t.Fatal(err)
	}
	if err := s.Healthy(); err != nil {
		t.Fatalf("after a write landed: unhealthy: %v", err)
	}
}

// A retry notice (an urgent batch) that arrives while a group is being
// written goes into that group's commit, in place of the batches not yet
// written, which go in the next group: the notice waits for the batch
// being written, not for the rest of the group and then a group of its
// own. Everything lands, each batch once.
func TestUrgentBatchJoinsTheGroupUnderWay(t *testing.T) {
	ctx := context.Background()
	const n = 8
	gate := make(chan struct{})
	groups := make(chan int, 3) // the priming group's size, then the next two
	var landed []string         // what the group under way had committed, read as it did
	var s *Store
	nth := 0
	s, err := Open(filepath.Join(t.TempDir(), "mspd.db"), WithCommitObserver(func(g GroupCommit) {
		if nth++; nth == 2 { // the group under way, after its COMMIT
			for _, id := range []string{"notice", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"} {
				if head, err := s.Head(ctx, id); err == nil && head == 1 {
					landed = append(landed, id)
				}
			}
		}
		select {
		case groups <- g.Batches:
		default:
		}
		<-gate // hold the writer until the next group is queued whole
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	batch := func(id string, urgent bool) store.Batch {
		return store.Batch{SessionID: id, Urgent: urgent,
			Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`{}`)}}}
	}
	primed := make(chan error, 1)
	go func() { primed <- s.Commit(ctx, batch("prime", false)) }()
	if got := <-groups; got != 1 {
		t.Fatalf("priming group of %d batches", got)
	}
	done := make(chan struct{}, n+1)
	for i := range n {
		go func() {
			if err := s.Commit(ctx, batch(fmt.Sprintf("s%d", i), false)); err != nil {
				t.Error(err)
			}
			done <- struct{}{}
		}()
	}
	for len(s.reqs) < n { // a condition, not a time: every batch queued
		runtime.Gosched()
	}
	// While the group of n is written, at its second batch, a notice comes.
	var once sync.Once
	s.beforeBatch = func(i int) {
		if i != 1 {
			return
		}
		once.Do(func() {
			go func() {
				if err := s.Commit(ctx, batch("notice", true)); err != nil {
					t.Error(err)
				}
				done <- struct{}{}
			}()
			for len(s.urgent) == 0 {
				runtime.Gosched()
			}
		})
	}
	close(gate)
	if err := <-primed; err != nil {
		t.Fatal(err)
	}
	if got := <-groups; got != 2 {
		t.Errorf("the group under way committed %d batches, want 2: its first and the notice", got)
	}
	if got := <-groups; got != n-1 {
		t.Errorf("the next group committed %d batches, want the %d the notice displaced", got, n-1)
	}
	for range n + 1 {
		<-done
	}
	if len(landed) != 2 || landed[0] != "notice" {
		t.Errorf("the group under way committed %v; want the notice and the one batch written before it came", landed)
	}
	for i := range n {
		if head, err := s.Head(ctx, fmt.Sprintf("s%d", i)); err != nil || head != 1 {
			t.Errorf("s%d: head %d, %v; want its one record", i, head, err)
		}
	}
}

// A group's callers are answered as soon as its COMMIT returns, before
// the writer copies the tail of a background checkpoint (milliseconds of
// the writer's time that need not delay them). Without that order the
// observer below waits for a commit that is answered only after it
// returns, and the test deadlocks (go test's -timeout reports it).
func TestCommitAnsweredBeforeTheCheckpointTail(t *testing.T) {
	ctx := context.Background()
	background := make(chan struct{}, 1)
	var second atomic.Pointer[chan struct{}] // closed when the second commit returns
	s, err := Open(filepath.Join(t.TempDir(), "mspd.db"), WithCheckpointPages(1), WithCheckpointObserver(func(c Checkpoint) {
		switch c.Kind {
		case CheckpointBackground:
			select {
			case background <- struct{}{}:
			default:
			}
		case CheckpointTail:
			if done := second.Load(); done != nil {
				<-*done // the commit that led to this tail has been answered
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	commit := func(seq int64) error {
		return s.Commit(ctx, store.Batch{SessionID: "s", Records: []store.Record{{Seq: seq, Method: "m", Params: []byte(`{}`)}}})
	}
	if err := commit(1); err != nil {
		t.Fatal(err)
	}
	<-background // ran beside the writer: the next group copies its tail
	done := make(chan struct{})
	second.Store(&done)
	if err := commit(2); err != nil {
		t.Fatal(err)
	}
	close(done)
	if head, err := s.Head(ctx, "s"); err != nil || head != 2 {
		t.Fatalf("head %d, %v; want 2", head, err)
	}
}

// Callers the writer has answered run before it takes its next group, so
// that what they commit next joins that group rather than one of its own.
// With one P the order is Go's alone: without the writer's yield an
// answered caller waited until the writer blocked (in the next group's
// fsync, or for want of work), and 8 callers' 30 rounds took 51–77
// groups, against 33–35 with it.
func TestAnsweredCallersJoinTheNextGroup(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctx := context.Background()
	const callers, rounds = 8, 30
	var groups atomic.Int64
	s, err := Open(filepath.Join(t.TempDir(), "mspd.db"), WithCommitObserver(func(GroupCommit) { groups.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			for seq := int64(1); seq <= rounds; seq++ {
				b := store.Batch{SessionID: fmt.Sprintf("s%d", i), Records: []store.Record{{Seq: seq, Method: "m", Params: []byte(`{}`)}}}
				if err := s.Commit(ctx, b); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// A group a round, and a few more while the callers start.
	if n, most := groups.Load(), int64(rounds+rounds/2); n > most {
		t.Fatalf("%d commits from %d callers took %d groups; want at most %d", callers*rounds, callers, n, most)
	}
}

// A batch's records and a message's tokens are written by multi-row
// INSERTs of at most maxRowsPerInsert rows: runs longer than that, and
// of every length up to it, land whole and in order.
func TestMultiRowInsertsInChunks(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "mspd.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var head int64
	for _, n := range []int{1, 2, 3, maxRowsPerInsert - 1, maxRowsPerInsert, maxRowsPerInsert + 1, 2*maxRowsPerInsert + 5} {
		recs := make([]store.Record, n)
		for i := range recs {
			head++
			recs[i] = store.Record{Seq: head, Method: "m", Params: fmt.Appendf(nil, `{"n":%d}`, head)}
		}
		if err := s.Commit(ctx, store.Batch{SessionID: "s", Records: recs}); err != nil {
			t.Fatalf("a batch of %d records: %v", n, err)
		}
	}
	got, err := s.Records(ctx, "s", 0, store.Limit{Rows: 1000, Bytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(got)) != head {
		t.Fatalf("read %d records, want %d", len(got), head)
	}
	for i, r := range got {
		if want := fmt.Sprintf(`{"n":%d}`, i+1); r.Seq != int64(i+1) || string(r.Params) != want {
			t.Fatalf("record %d = seq %d %s, want seq %d %s", i, r.Seq, r.Params, i+1, want)
		}
	}

	// A message of more distinct tokens than one statement's rows: each
	// is found, the last chunk's too.
	words := make([]string, 2*maxRowsPerInsert+3)
	for i := range words {
		words[i] = fmt.Sprintf("word%03d", i)
	}
	now := time.Now()
	row := &store.Session{ID: "s", Owner: "o", CreatedAt: now, UpdatedAt: now, State: []byte(`{}`)}
	if err := s.Commit(ctx, store.Batch{SessionID: "s", Session: row, AtHead: &head,
		Text: &store.Text{Messages: []string{strings.Join(words, " ")}}}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{words[0], words[maxRowsPerInsert-1], words[maxRowsPerInsert], words[len(words)-1]} {
		hits, err := s.Search(ctx, store.Query{Owner: "o", Content: store.Terms{AllOf: []string{w}}}, nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) != 1 {
			t.Errorf("searching %q: %d hits, want 1", w, len(hits))
		}
	}
}
