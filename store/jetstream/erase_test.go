package jetstream_test

import (
	"errors"
	"testing"
	"time"

	"mspd/store"
	msjs "mspd/store/jetstream"
)

// An erasure cut short after the log's purge leaves the row as a
// tombstone: Session reads it back Erasing (never as a live session
// whose log has gone), listings and recovery leave it out, a reopened
// store still says so, and DeleteSession run again finishes it.
func TestErasureCutShortReadsBackErasing(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, dir)
	s := connect(t, srv.ClientURL(), msjs.Options{})
	at := time.Unix(1_700_000_000, 0).UTC()
	row := func(id string) *store.Session {
		return &store.Session{ID: id, CreatedAt: at, UpdatedAt: at, Busy: true, State: []byte(`{"owner":"alice"}`)}
	}
	for _, id := range []string{"gone", "kept"} {
		mustCommit(t, s, store.Batch{SessionID: id, Session: row(id),
			Records:  []store.Record{{Seq: 1, Method: "m", Params: []byte(`1`)}, {Seq: 2, Method: "m", Params: []byte(`2`)}},
			Commands: []store.Command{{ID: "c-" + id, Digest: "d"}}})
	}
	cut := errors.New("purge cut short")
	msjs.FailPurges(s, func(filter string) error {
		if filter != msjs.LogFilter(s, "gone") {
			return cut // the log went; the ledger and the row did not
		}
		return nil
	})
	if err := s.DeleteSession(t.Context(), "gone"); !errors.Is(err, cut) {
		t.Fatalf("DeleteSession = %v, want the purge's failure", err)
	}
	check := func(s *msjs.Store, when string) {
		t.Helper()
		got, err := s.Session(t.Context(), "gone")
		if err != nil || !got.Erasing || got.Busy || string(got.State) != `{"owner":"alice"}` {
			t.Fatalf("%s: Session = %+v, %v; want the row, Erasing, not busy", when, got, err)
		}
		if head, err := s.Head(t.Context(), "gone"); err != nil || head != 0 {
			t.Fatalf("%s: Head = %d, %v; want 0 (the log was purged)", when, head, err)
		}
		for name, list := range map[string]func() ([]store.Session, error){
			"Sessions":     func() ([]store.Session, error) { return s.Sessions(t.Context(), "", nil, 10) },
			"BusySessions": func() ([]store.Session, error) { return s.BusySessions(t.Context()) },
		} {
			rows, err := list()
			if err != nil || len(rows) != 1 || rows[0].ID != "kept" {
				t.Fatalf("%s: %s = %+v, %v; want only kept", when, name, rows, err)
			}
		}
	}
	check(s, "after the cut")
	s.Close()
	shutdown(srv)
	srv = startServer(t, dir)
	s = connect(t, srv.ClientURL(), msjs.Options{})
	check(s, "after a restart")

	if err := s.DeleteSession(t.Context(), "gone"); err != nil {
		t.Fatalf("DeleteSession again: %v", err)
	}
	if _, err := s.Session(t.Context(), "gone"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Session after the erasure finished = %v, want ErrNotFound", err)
	}
	if _, err := s.Command(t.Context(), "c-gone"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the erased session's command = %v, want ErrNotFound", err)
	}
	if got, err := s.Session(t.Context(), "kept"); err != nil || got.Erasing || !got.Busy {
		t.Fatalf("the other session = %+v, %v; want it untouched", got, err)
	}
}

// eraseWhileAFencedCommitLands erases session "x" of a new store while,
// at the log's purge, another writer of it (a leader whose lease lapsed,
// fenced only by the head) commits a live row over the tombstone. Then
// logPurge does the log's purge, or not, and answers for it; every other
// purge answers others. It returns the store and DeleteSession's error.
func eraseWhileAFencedCommitLands(t *testing.T, logPurge func(s *msjs.Store, filter string) error, others error) (*msjs.Store, error) {
	t.Helper()
	srv := startServer(t, t.TempDir())
	s := connect(t, srv.ClientURL(), msjs.Options{})
	at := time.Unix(1_700_000_000, 0).UTC()
	row := &store.Session{ID: "x", CreatedAt: at, UpdatedAt: at, State: []byte(`{"owner":"alice"}`)}
	mustCommit(t, s, store.Batch{SessionID: "x", Session: row,
		Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`1`)}}})
	msjs.FailPurges(s, func(filter string) error {
		if filter != msjs.LogFilter(s, "x") {
			return others
		}
		later := *row
		later.UpdatedAt = at.Add(time.Second)
		head := int64(1)
		if err := s.Commit(t.Context(), store.Batch{SessionID: "x", Session: &later, AtHead: &head}); err != nil {
			t.Errorf("the concurrent commit: %v", err)
		}
		return logPurge(s, filter)
	})
	return s, s.DeleteSession(t.Context(), "x")
}

// wantErasing fails unless session "x" reads back Erasing (or gone),
// never as a live session whose log has gone.
func wantErasing(t *testing.T, s *msjs.Store, after string) {
	t.Helper()
	got, err := s.Session(t.Context(), "x")
	head, herr := s.Head(t.Context(), "x")
	if err == nil && !got.Erasing {
		t.Errorf("after %s: Session = live (Erasing false), Head = %d, %v: a live session whose log has gone", after, head, herr)
	}
}

// A fenced commit (records, or AtHead, as the session layer writes) that
// lands between the tombstone and the log's purge overwrites the
// tombstone with a live row. If the erasure is then cut short, the row
// must still read back Erasing.
func TestCommitBeforeTheLogsPurgeDoesNotReviveTheRow(t *testing.T) {
	cut := errors.New("purge cut short")
	s, err := eraseWhileAFencedCommitLands(t, func(*msjs.Store, string) error { return nil }, cut) // the log goes; the ledger's or the row's purge is cut short
	if !errors.Is(err, cut) {
		t.Fatalf("DeleteSession = %v, want the purge's failure", err)
	}
	wantErasing(t, s, "an erasure cut short past the log's purge")
}

// As above, but the log's purge lands and its answer is lost: the erasure
// hears a failure, yet the log has gone, so the row must read Erasing.
func TestCommitBeforeALostLogPurgeDoesNotReviveTheRow(t *testing.T) {
	lost := errors.New("purge log: context deadline exceeded")
	s, err := eraseWhileAFencedCommitLands(t, func(s *msjs.Store, filter string) error {
		if err := msjs.PurgeNow(t.Context(), s, filter); err != nil {
			t.Fatalf("purging the log: %v", err)
		}
		return lost // landed, but its answer did not come
	}, nil)
	if !errors.Is(err, lost) {
		t.Fatalf("DeleteSession = %v, want the purge's failure", err)
	}
	wantErasing(t, s, "a log purge that landed unheard")
}
