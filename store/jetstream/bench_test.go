package jetstream_test

import (
	"fmt"
	"testing"
	"time"

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
