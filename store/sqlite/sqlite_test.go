package sqlite_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"mspd/store"
	"mspd/store/sqlite"
	"mspd/store/storetest"
)

func openAt(t testing.TB, dir string, opts ...sqlite.Option) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(filepath.Join(dir, "mspd.db"), opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T, dir string) store.Store {
		return openAt(t, dir)
	})
}

// Small groups force a busy writer to split the queue over several
// transactions, exercising the drain bound.
func TestStoreSmallGroups(t *testing.T) {
	storetest.Run(t, func(t *testing.T, dir string) store.Store {
		return openAt(t, dir, sqlite.WithMaxGroup(2), sqlite.WithReadConns(1))
	})
}

func TestOpenCreatesParentDir(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "a", "b"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCommitAfterCloseIsErrClosed(t *testing.T) {
	s := openAt(t, t.TempDir())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	err := s.Commit(context.Background(), store.Batch{SessionID: "s", Records: []store.Record{{Seq: 1, Method: "m"}}})
	if !errors.Is(err, sqlite.ErrClosed) {
		t.Fatalf("Commit after Close = %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// One group holding a conflicting batch between good ones: only the
// conflicting batch fails. Many goroutines release at once so the writer
// sees them queued together.
func TestConflictInGroupIsIsolated(t *testing.T) {
	s := openAt(t, t.TempDir())
	defer s.Close()
	ctx := context.Background()
	const n = 64
	start := make(chan struct{})
	errs := make([]error, n)
	done := make(chan int, n)
	for i := range n {
		go func() {
			<-start
			seq := int64(1)
			if i%4 == 0 {
				seq = 2 // a gap: always a conflict
			}
			errs[i] = s.Commit(ctx, store.Batch{
				SessionID: fmt.Sprintf("s%d", i),
				Records:   []store.Record{{Seq: seq, Method: "m", Params: []byte(`{}`)}},
			})
			done <- i
		}()
	}
	close(start)
	for range n {
		<-done
	}
	for i, err := range errs {
		head, herr := s.Head(ctx, fmt.Sprintf("s%d", i))
		if herr != nil {
			t.Fatal(herr)
		}
		if i%4 == 0 {
			if !errors.Is(err, store.ErrConflict) || head != 0 {
				t.Errorf("s%d: err %v head %d, want ErrConflict and 0", i, err, head)
			}
		} else if err != nil || head != 1 {
			t.Errorf("s%d: err %v head %d, want nil and 1", i, err, head)
		}
	}
}

func TestRejectsUnstorableTime(t *testing.T) {
	s := openAt(t, t.TempDir())
	defer s.Close()
	err := s.Commit(context.Background(), store.Batch{Session: &store.Session{ID: "s", UpdatedAt: time.Now()}})
	if err == nil || errors.Is(err, store.ErrConflict) {
		t.Fatalf("Commit with a zero CreatedAt = %v, want an invalid-batch error", err)
	}
}

const crashDirEnv = "MSPD_SQLITE_CRASH_DIR"

// TestSurvivesSIGKILL re-runs the test binary as a child that commits from
// several goroutines and prints each acknowledged seq, SIGKILLs it mid-write,
// and checks that the reopened file holds every acknowledged record in a
// dense log. (It cannot simulate power loss; synchronous=FULL covers that.)
func TestSurvivesSIGKILL(t *testing.T) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		crashChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSurvivesSIGKILL$")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]int64{}
	lines := bufio.NewScanner(out)
	total := 0
	for lines.Scan() {
		var id string
		var seq int64
		if _, err := fmt.Sscanf(lines.Text(), "%s %d", &id, &seq); err != nil {
			continue // test framework chatter
		}
		acked[id] = max(acked[id], seq)
		if total++; total == 400 {
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = cmd.Wait()
	if total < 400 {
		t.Fatalf("child acknowledged only %d commits before exiting", total)
	}

	s := openAt(t, dir)
	defer s.Close()
	ctx := context.Background()
	for id, seq := range acked {
		head, err := s.Head(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if head < seq {
			t.Errorf("%s: head %d after SIGKILL, but seq %d was acknowledged", id, head, seq)
		}
		rs, err := s.Records(ctx, id, 0, store.Limit{Rows: int(head) + 1, Bytes: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rs {
			if want := record(int64(i + 1)); r.Seq != want.Seq || string(r.Params) != string(want.Params) {
				t.Fatalf("%s: record %d is %d %q", id, i, r.Seq, r.Params)
			}
		}
	}
}

func crashChild(dir string) {
	s, err := sqlite.Open(filepath.Join(dir, "mspd.db"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // never outlive a dead parent for long
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			id := fmt.Sprintf("s%d", g)
			for seq := int64(1); ctx.Err() == nil; seq++ {
				if err := s.Commit(ctx, store.Batch{SessionID: id, Records: []store.Record{record(seq)}}); err != nil {
					return
				}
				mu.Lock()
				fmt.Printf("%s %d\n", id, seq)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	os.Exit(0)
}

func record(seq int64) store.Record {
	return store.Record{
		Seq:    seq,
		Method: "item/completed",
		Params: fmt.Appendf(nil, `{"threadId":"t","item":{"id":"i%d","type":"agentMessage","text":"hello, world"}}`, seq),
	}
}

func reportAppends(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}

// BenchmarkCommitSerial is one caller appending one record per Commit: the
// latency of a lone durable append, one fsync each.
func BenchmarkCommitSerial(b *testing.B) {
	s := openAt(b, b.TempDir())
	defer s.Close()
	ctx := context.Background()
	var seq int64
	for b.Loop() {
		seq++
		if err := s.Commit(ctx, store.Batch{SessionID: "s", Records: []store.Record{record(seq)}}); err != nil {
			b.Fatal(err)
		}
	}
	reportAppends(b)
}

// BenchmarkCommitParallel is many callers, each on its own session,
// appending one record per Commit: group commit shares each fsync among
// all the commits queued behind it.
func BenchmarkCommitParallel(b *testing.B) {
	s := openAt(b, b.TempDir())
	defer s.Close()
	ctx := context.Background()
	var sessions atomic.Int64
	b.SetParallelism(32) // 32 × GOMAXPROCS concurrent sessions
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprintf("s%d", sessions.Add(1))
		var seq int64
		for pb.Next() {
			seq++
			if err := s.Commit(ctx, store.Batch{SessionID: id, Records: []store.Record{record(seq)}}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportAppends(b)
}

// fillLog writes total records of about 665 bytes of params each (the
// mean of mspbench's resumed log) to session "s".
func fillLog(b *testing.B, s *sqlite.Store, total int64) {
	ctx := context.Background()
	pad := strings.Repeat("x", 580)
	for from := int64(1); from <= total; from += 500 {
		rs := make([]store.Record, 500)
		for i := range rs {
			rs[i] = record(from + int64(i))
			rs[i].Params = fmt.Appendf(nil, `{"threadId":"t","item":{"id":"i%d","type":"agentMessage","text":"%s"}}`, from+int64(i), pad)
		}
		if err := s.Commit(ctx, store.Batch{SessionID: "s", Records: rs}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecords reads a page of 100 after a cursor from a 10k-record log.
func BenchmarkRecords(b *testing.B) {
	s := openAt(b, b.TempDir())
	defer s.Close()
	ctx := context.Background()
	const total, page = 10000, 100
	fillLog(b, s, total)
	var after int64
	for b.Loop() {
		rs, err := s.Records(ctx, "s", after, store.Limit{Rows: page, Bytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		if len(rs) != page {
			b.Fatalf("read %d records after %d", len(rs), after)
		}
		after = (after + 997) % (total - page)
	}
}

// BenchmarkRecordsLog reads a whole 10k-record log as a replay does:
// pages of 256 records within 4 MiB (session.ReadBytes).
func BenchmarkRecordsLog(b *testing.B) {
	s := openAt(b, b.TempDir())
	defer s.Close()
	ctx := context.Background()
	const total = 10000
	fillLog(b, s, total)
	cpu0 := processCPU()
	for b.Loop() {
		var after int64
		for after < total {
			rs, err := s.Records(ctx, "s", after, store.Limit{Rows: 256, Bytes: 4 << 20})
			if err != nil || len(rs) == 0 {
				b.Fatalf("read %d records after %d: %v", len(rs), after, err)
			}
			after = rs[len(rs)-1].Seq
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*total), "ns/record")
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N*total), "cpu-ns/record")
}

// processCPU is the CPU time this process has used, user and system:
// unlike wall time, it hardly moves with what else runs on the machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestDeleteLeavesNoTrace: after DeleteSession not a byte of the
// session's text remains in the database file or its write-ahead log.
func TestDeleteLeavesNoTrace(t *testing.T) {
	dir := t.TempDir()
	s, err := sqlite.Open(filepath.Join(dir, "mspd.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const marker = "Zebra-Marker-7731"
	ctx := t.Context()
	for i := range 50 {
		b := store.Batch{SessionID: "secret", Records: []store.Record{{Seq: int64(i + 1), Method: "m",
			Params: []byte(`{"text":"` + marker + strings.Repeat(" padding", 200) + `"}`)}},
			Commands: []store.Command{{ID: fmt.Sprintf("c%d", i), Digest: "d", Response: []byte(`{"echo":"` + marker + `"}`)}}}
		if i == 0 {
			b.Session = &store.Session{ID: "secret", CreatedAt: time.Now(), UpdatedAt: time.Now(), State: []byte(`{"name":"` + marker + `"}`)}
		}
		if err := s.Commit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Commit(ctx, store.Batch{SessionID: "other", Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`{}`)}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession(ctx, "secret"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mspd.db", "mspd.db-wal"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(marker)) {
			t.Errorf("%s still holds %q after the session was deleted", name, marker)
		}
	}
}

// TestFilesPrivate: the database and its write-ahead log and index, which
// hold every conversation, are readable by their owner alone, even in a
// directory that already existed with wider permissions (--data ., a
// container's volume); a file that exists keeps its mode.
func TestFilesPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(filepath.Join(dir, "mspd.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Commit(t.Context(), store.Batch{SessionID: "s", Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`{}`)}}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mspd.db", "mspd.db-wal", "mspd.db-shm"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %v: readable by others than its owner", name, st.Mode().Perm())
		}
	}

	shared := filepath.Join(t.TempDir(), "shared.db")
	if err := os.WriteFile(shared, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	s2, err := sqlite.Open(shared)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if st, err := os.Stat(shared); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("an existing database's mode became %v, %v; want it kept (0640)", st.Mode().Perm(), err)
	}
}

// BenchmarkSessionsBesideOthers lists bob's one session beside alice's
// thousands.
func BenchmarkSessionsBesideOthers(b *testing.B) {
	storetest.BenchSessionsBesideOthers(b, func(b *testing.B) store.Store {
		s := openAt(b, b.TempDir())
		b.Cleanup(func() { s.Close() })
		return s
	}, 0, 4000)
}

// BenchmarkSearch finds the one chat of bob's 1,000 that mentions a word,
// beside 10,000 chats of other owners, each about 2 KB of text.
func BenchmarkSearch(b *testing.B) {
	storetest.BenchSearch(b, func(b *testing.B) store.Store {
		s := openAt(b, b.TempDir())
		b.Cleanup(func() { s.Close() })
		return s
	}, 1000, 10000)
}
