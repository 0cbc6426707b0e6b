package sqlite

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mspd/store"
)

// fullDisk opens a store with one record of session, then lets its
// database grow no more, as a full disk would, and fails a write.
func fullDisk(t *testing.T, session string) *Store {
	t.Helper()
	ctx := t.Context()
	s, err := Open(filepath.Join(t.TempDir(), "mspd.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Commit(ctx, store.Batch{SessionID: session, Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`{}`)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.wc.ExecContext(ctx, `PRAGMA max_page_count = 1`); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, store.Batch{SessionID: session, Records: []store.Record{{Seq: 2, Method: "m",
		Params: []byte(`{"p":"` + strings.Repeat("x", 100_000) + `"}`)}}}); err == nil {
		t.Fatal("landed")
	}
	if s.Healthy() == nil {
		t.Fatal("healthy after a failed write")
	}
	return s
}

// /readyz, which anyone may ask, shows Healthy's reason: it names no
// session (an error of a statement did, when SQLite left the transaction
// open; a row written behind the writer's back stands for any such).
func TestHealthNamesNoSession(t *testing.T) {
	ctx := t.Context()
	s, err := Open(filepath.Join(t.TempDir(), "mspd.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := func(seq int64) error {
		return s.Commit(ctx, store.Batch{SessionID: "019ad0a0-secret-session", Records: []store.Record{{Seq: seq, Method: "m", Params: []byte(`{}`)}}})
	}
	if err := rec(1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.wc.ExecContext(ctx, `INSERT INTO events (session_id, seq, method) VALUES ('019ad0a0-secret-session', 2, 'm')`); err != nil {
		t.Fatal(err)
	}
	if err := rec(2); err == nil {
		t.Fatal("landed")
	}
	if err := s.Healthy(); err == nil || strings.Contains(err.Error(), "secret-session") {
		t.Errorf("Healthy() = %v; want unhealthy, naming no session", err)
	}
}

// The store's own writes (a session erased to make room, a prune) tell it
// writes again, as a client's batch does: a node /readyz keeps out of
// rotation may get none of those.
func TestHealthRecoversWithoutAClientBatch(t *testing.T) {
	s := fullDisk(t, "s")
	ctx := t.Context()
	if _, err := s.wc.ExecContext(ctx, `PRAGMA max_page_count = 1073741823`); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PruneCommands(ctx, time.Now(), 100); err != nil {
		t.Fatal(err)
	}
	if err := s.Healthy(); err != nil {
		t.Errorf("a DeleteSession and a PruneCommands landed, still unhealthy: %v", err)
	}
}

// A full disk is reported as such (SQLite rolls back by itself, and the
// rollback that followed failed: its error was the reason given). How
// long a failure counts is store.WriteHealth's (TestWriteHealth).
func TestHealthSaysWhy(t *testing.T) {
	s := fullDisk(t, "s")
	if err := s.Healthy(); err == nil || !strings.Contains(err.Error(), "SQLITE_FULL") {
		t.Errorf("Healthy() = %v, want the full disk named", err)
	}
}
