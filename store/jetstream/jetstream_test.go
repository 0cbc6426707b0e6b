package jetstream_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"mspd/internal/testlane"
	"mspd/store"
	msjs "mspd/store/jetstream"
	"mspd/store/storetest"
)

// The suite on one server per directory: a reopen restarts the server on
// the same directory, so durability is JetStream's own.
func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T, dir string) store.Store {
		srv := startServer(t, dir)
		s, err := msjs.Connect(t.Context(), srv.ClientURL(), msjs.Options{})
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}
		return serverStore{Store: s, srv: srv}
	})
}

// The suite on a three-node cluster with three replicas, each subtest on a
// stream of its own, each store (and each reopen) on the next node: reads
// go through other nodes than the writes did.
func TestStoreCluster(t *testing.T) {
	testlane.Slow(t, "starts a three-node cluster")
	nodes := &roundRobin{urls: startCluster(t)}
	storetest.Run(t, func(t *testing.T, dir string) store.Store {
		stream, subject := nameFor(dir)
		// Creating a replicated stream takes the cluster's meta leader a
		// round of its own; the suite's subtests run at once, and on a
		// loaded machine one can outlast a request's timeout (CI saw
		// 5 s): a node retries, as the daemon does while it opens.
		var s *msjs.Store
		eventually(t, time.Minute, func() (err error) {
			s, err = msjs.Connect(t.Context(), nodes.next(), msjs.Options{Stream: stream, Subject: subject, Replicas: 3})
			return err
		})
		return s
	})
}

// Two stores on one stream — two nodes — race for every seq of one
// session with batches of three records: each round exactly one batch
// lands whole and the other gets ErrConflict, so the log is dense and no
// two writers' records interleave.
func TestConcurrentWritersGuard(t *testing.T) {
	srv := startServer(t, t.TempDir())
	writers := []*msjs.Store{connect(t, srv.ClientURL(), msjs.Options{}), connect(t, srv.ClientURL(), msjs.Options{})}
	const rounds, size = 40, 3
	for round := range rounds {
		head := int64(round * size)
		errs := make([]error, len(writers))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for w, s := range writers {
			wg.Go(func() {
				var rs []store.Record
				for i := range int64(size) {
					rs = append(rs, store.Record{Seq: head + 1 + i, Method: "m", Params: fmt.Appendf(nil, `{"w":%d,"r":%d}`, w, round)})
				}
				<-start
				errs[w] = s.Commit(t.Context(), store.Batch{SessionID: "s", Records: rs,
					Commands: []store.Command{{ID: fmt.Sprintf("c%d-%d", w, round), Digest: "d"}}})
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for w, err := range errs {
			switch {
			case err == nil:
				won++
			case !isConflict(err):
				t.Fatalf("round %d writer %d: %v", round, w, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d writers won (errors %v), want exactly 1", round, won, errs)
		}
	}
	for _, s := range writers {
		rs, err := s.Records(t.Context(), "s", 0, store.Limit{Rows: rounds*size + 10, Bytes: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != rounds*size {
			t.Fatalf("%d records, want %d", len(rs), rounds*size)
		}
		for i, r := range rs {
			if r.Seq != int64(i+1) {
				t.Fatalf("record %d has seq %d", i, r.Seq)
			}
			// Each batch is one writer's: the records of a round agree.
			if first := rs[i-i%size]; string(r.Params) != string(first.Params) {
				t.Fatalf("seq %d is %s but its batch began with %s: writers interleaved", r.Seq, r.Params, first.Params)
			}
		}
	}
}

// Logs longer than a page are read from any cursor without a gap, forward
// and backward, across page boundaries and scan chunks, with another
// session's records interleaved in the stream.
func TestRecordsAcrossPages(t *testing.T) {
	s := connect(t, startServer(t, t.TempDir()).ClientURL(), msjs.Options{})
	const n = 300
	for seq := int64(1); seq <= n; seq += 7 {
		for _, id := range []string{"a", "b"} {
			var rs []store.Record
			for q := seq; q < seq+7 && q <= n; q++ {
				rs = append(rs, store.Record{Seq: q, Method: "m", Params: fmt.Appendf(nil, `"%s%d"`, id, q)})
			}
			mustCommit(t, s, store.Batch{SessionID: id, Records: rs})
		}
	}
	for _, after := range []int64{0, 1, 30, 31, 32, 33, 63, 64, 65, 150, 299, 300} {
		for _, limit := range []int{1, 5, 40, 280, 1000} {
			rs, err := s.Records(t.Context(), "b", after, store.Limit{Rows: limit, Bytes: 1 << 30})
			if err != nil {
				t.Fatal(err)
			}
			if want := min(int64(limit), n-after); int64(len(rs)) != want {
				t.Fatalf("Records(after %d, limit %d): %d records, want %d", after, limit, len(rs), want)
			}
			for i, r := range rs {
				if r.Seq != after+1+int64(i) || string(r.Params) != fmt.Sprintf(`"b%d"`, r.Seq) {
					t.Fatalf("Records(after %d, limit %d)[%d] = %d %s", after, limit, i, r.Seq, r.Params)
				}
			}
			before, err := s.RecordsBefore(t.Context(), "a", after+1, store.Limit{Rows: limit, Bytes: 1 << 30})
			if err != nil {
				t.Fatal(err)
			}
			want := min(int64(limit), after)
			if int64(len(before)) != want || (want > 0 && (before[0].Seq != after+1-want || before[want-1].Seq != after)) {
				t.Fatalf("RecordsBefore(%d, %d) = %d records, want %d ending at %d", after+1, limit, len(before), want, after)
			}
		}
	}
}
