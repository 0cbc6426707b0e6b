package sqlite_test

import (
	"runtime/metrics"
	"strings"
	"testing"

	"mspd/store"
)

// A read bounded by bytes stops before a large record it has no room
// for without loading it: reading a small record followed by an 8 MiB
// one, with room for the small one only, allocates far less than the
// large one. Stepping onto a row loads every column it returns, so the
// large record's params used to be copied out of SQLite only to be
// dropped, each time a page ended before it.
func TestReadStopsBeforeALargeRecordWithoutLoadingIt(t *testing.T) {
	s := openAt(t, t.TempDir())
	defer s.Close()
	const large = 8 << 20
	recs := []store.Record{
		{Seq: 1, Method: "m", Params: []byte(`{"small":true}`)},
		{Seq: 2, Method: "m", Params: []byte(`"` + strings.Repeat("x", large) + `"`)},
	}
	if err := s.Commit(t.Context(), store.Batch{SessionID: "s", Records: recs}); err != nil {
		t.Fatal(err)
	}
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(sample)
	before := sample[0].Value.Uint64()
	got, err := s.Records(t.Context(), "s", 0, store.Limit{Rows: 10, Bytes: 1 << 10})
	metrics.Read(sample)
	n := sample[0].Value.Uint64() - before
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Seq != 1 {
		t.Fatalf("read %d records, want record 1 alone", len(got))
	}
	if n > large/8 {
		t.Fatalf("a read that stopped before an %d-byte record allocated %d bytes", large, n)
	}
}
