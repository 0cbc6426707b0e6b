package jetstream_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"mspd/store"
	msjs "mspd/store/jetstream"
	"mspd/store/storetest"
)

// BenchmarkCommit commits a turn-sized batch — three records, the row and
// a ledger entry — to one session, on one server that fsyncs every write.
func BenchmarkCommit(b *testing.B) {
	s := connect(b, startServer(b, b.TempDir()).ClientURL(), msjs.Options{})
	row := &store.Session{ID: "s", CreatedAt: time.Now(), UpdatedAt: time.Now(), State: []byte(`{"turns":1}`)}
	seq := int64(0)
	for i := 0; b.Loop(); i++ {
		rs := make([]store.Record, 3)
		for j := range rs {
			seq++
			rs[j] = store.Record{Seq: seq, Method: "item/completed", Params: []byte(`{"item":{"type":"message","text":"hello"}}`)}
		}
		err := s.Commit(b.Context(), store.Batch{SessionID: "s", Records: rs, Session: row,
			Commands: []store.Command{{ID: fmt.Sprint("c", i), Digest: "d", Response: []byte(`{}`)}}})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecordsTail reads the last ten records of a 1,000-record
// session interleaved with another: a subscriber catching up.
func BenchmarkRecordsTail(b *testing.B) {
	s := connect(b, startServer(b, b.TempDir()).ClientURL(), msjs.Options{})
	for seq := int64(1); seq <= 1000; seq += 10 {
		for _, id := range []string{"a", "b"} {
			rs := make([]store.Record, 10)
			for j := range rs {
				rs[j] = store.Record{Seq: seq + int64(j), Method: "m", Params: []byte(`{"text":"0123456789abcdef"}`)}
			}
			if err := s.Commit(b.Context(), store.Batch{SessionID: id, Records: rs}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("Records", func(b *testing.B) {
		for b.Loop() {
			rs, err := s.Records(b.Context(), "a", 990, store.Limit{Rows: 100, Bytes: 1 << 30})
			if err != nil || len(rs) != 10 {
				b.Fatalf("Records = %d, %v", len(rs), err)
			}
		}
	})
	b.Run("Head", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Head(b.Context(), "a"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSessionsBesideOthers lists bob's one session beside alice's
// thousands, on one server.
func BenchmarkSessionsBesideOthers(b *testing.B) {
	storetest.BenchSessionsBesideOthers(b, func(b *testing.B) store.Store {
		return connect(b, startServer(b, b.TempDir()).ClientURL(), msjs.Options{})
	}, 0, 4000)
}

// BenchmarkSearch finds the one chat of bob's 1,000 that mentions a word,
// beside 10,000 chats of other owners, each about 2 KB of text, on one
// server.
func BenchmarkSearch(b *testing.B) {
	storetest.BenchSearch(b, func(b *testing.B) store.Store {
		return connect(b, startServer(b, b.TempDir()).ClientURL(), msjs.Options{})
	}, 1000, 10000)
}

// BenchmarkBusySessionsBeside reads the 10 busy sessions beside 1,000,
// then 10,000 idle ones, on one server: what each node's adoption pass
// reads every 2 s. The idle sessions are measured once their idle busy
// entries have expired, as a store holds them between their turns.
func BenchmarkBusySessionsBeside(b *testing.B) {
	srv := startServer(b, b.TempDir())
	s := connect(b, srv.ClientURL(), msjs.Options{})
	at := time.Unix(1_700_000_000, 0).UTC()
	row := func(id string, busy bool) *store.Session {
		return &store.Session{ID: id, Owner: "alice", CreatedAt: at, UpdatedAt: at, Busy: busy, State: []byte(`{"owner":"alice"}`)}
	}
	for i := range 10 {
		id := fmt.Sprintf("busy-%02d", i)
		mustCommit(b, s, store.Batch{SessionID: id, Session: row(id, true)})
	}
	idle := 0
	for _, n := range []int{1000, 10000} {
		commitAll(b, s, idle, n, func(i int) store.Batch {
			id := fmt.Sprintf("idle-%05d", i)
			return store.Batch{SessionID: id, Session: row(id, false)}
		})
		idle = n
		waitBusySubjects(b, srv.ClientURL(), 10)
		b.Run(fmt.Sprintf("idle=%d", n), func(b *testing.B) {
			for b.Loop() {
				rows, err := s.BusySessions(b.Context())
				if err != nil || len(rows) != 10 {
					b.Fatalf("BusySessions = %d rows, %v; want 10", len(rows), err)
				}
			}
		})
	}
}

// commitAll commits batch(i) for i in [from, to), 16 at a time.
func commitAll(b *testing.B, s store.Store, from, to int, batch func(int) store.Batch) {
	b.Helper()
	var g errgroup.Group
	g.SetLimit(16)
	for i := from; i < to; i++ {
		g.Go(func() error { return s.Commit(b.Context(), batch(i)) })
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}

// waitBusySubjects waits until the stream holds n busy entries (those of
// the sessions that went idle have expired), asking the server directly.
func waitBusySubjects(b *testing.B, url string, n int) {
	b.Helper()
	js := dialJetStream(b, url)
	st, err := js.Stream(b.Context(), msjs.DefaultStream)
	if err != nil {
		b.Fatal(err)
	}
	// Expiry is the server's own doing, with no event to wait on: ask it
	// until the idle entries are gone.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	bound := time.After(time.Minute)
	for {
		info, err := st.Info(b.Context(), jetstream.WithSubjectFilter(msjs.DefaultSubject+".busy.*"))
		if err != nil {
			b.Fatal(err)
		}
		if len(info.State.Subjects) <= n {
			return
		}
		select {
		case <-tick.C:
		case <-bound:
			b.Fatalf("%d busy subjects after a minute, want %d", len(info.State.Subjects), n)
		}
	}
}

// BenchmarkCommitStreams commits turn-sized batches (three records, the
// row and a ledger entry) from 32 writers over 100 sessions, on 1, 2 and
// 4 streams of one in-process server with file storage that fsyncs every
// write. ns/op is per commit; commits/s is the rate; cpu-µs/commit is the
// process's CPU (server and client: they share it) per commit, from
// getrusage around the run.
func BenchmarkCommitStreams(b *testing.B) {
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			s := connect(b, startServer(b, b.TempDir()).ClientURL(), msjs.Options{Streams: n})
			sessions := make([]benchSession, 100)
			for i := range sessions {
				sessions[i].id = fmt.Sprintf("bench-%03d", i)
			}
			var next, cmd atomic.Uint64
			b.SetParallelism(16) // 32 writers on 2 CPUs
			before := cpuTime(b)
			start := time.Now()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ss := &sessions[next.Add(1)%uint64(len(sessions))]
					if err := ss.commit(b.Context(), s, cmd.Add(1)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			took, cpu := time.Since(start), cpuTime(b)-before
			b.ReportMetric(float64(b.N)/took.Seconds(), "commits/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/commit")
		})
	}
}

// benchSession is one session of BenchmarkCommitStreams: its writers take
// turns, as a session's one leader commits one batch at a time.
type benchSession struct {
	mu  sync.Mutex
	id  string
	seq int64
}

func (ss *benchSession) commit(ctx context.Context, s store.Store, cmd uint64) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	rs := make([]store.Record, 3)
	for j := range rs {
		rs[j] = store.Record{Seq: ss.seq + int64(j) + 1, Method: "item/completed", Params: []byte(`{"item":{"type":"message","text":"hello"}}`)}
	}
	now := time.Now()
	err := s.Commit(ctx, store.Batch{SessionID: ss.id, Records: rs,
		Session:  &store.Session{ID: ss.id, Owner: "alice", CreatedAt: now, UpdatedAt: now, State: []byte(`{"turns":1}`)},
		Commands: []store.Command{{ID: fmt.Sprint("c", cmd), Digest: "d", Response: []byte(`{}`)}}})
	if err == nil {
		ss.seq += int64(len(rs))
	}
	return err
}

// cpuTime is the CPU time, user and system, this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
