package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"mspd/store"
)

// rawConn opens path without the store, for building and inspecting files.
func rawConn(t *testing.T, path string) *sql.Conn {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func schemaOf(t *testing.T, path string) string {
	t.Helper()
	rows, err := rawConn(t, path).QueryContext(context.Background(),
		`SELECT type, name, sql FROM sqlite_master ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var typ, name string
		var q sql.NullString
		if err := rows.Scan(&typ, &name, &q); err != nil {
			t.Fatal(err)
		}
		b.WriteString(typ + " " + name + ": " + strings.Join(strings.Fields(q.String), " ") + "\n")
	}
	return b.String()
}

// A version 1 ledger gains created_at, stamped with the migration time,
// and ends up with the same schema as a new file.
func TestMigrateFromVersion1(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	old := filepath.Join(dir, "old", "mspd.db")
	if err := os.Mkdir(filepath.Dir(old), 0o700); err != nil {
		t.Fatal(err)
	}
	c := rawConn(t, old+"?_pragma=journal_mode(WAL)")
	if err := migrate(ctx, c, 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExecContext(ctx, `INSERT INTO commands (id, digest, response, is_error) VALUES ('c', 'd', '{}', 0)`); err != nil {
		t.Fatal(err)
	}
	c.Close()

	before := time.Now().Round(0)
	s, err := Open(old)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().Round(0)
	got, err := s.Command(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if got.CreatedAt.Before(before) || got.CreatedAt.After(after) {
		t.Fatalf("migrated CreatedAt = %v, want the migration time, within [%v, %v]", got.CreatedAt, before, after)
	}
	if n, err := s.PruneCommands(ctx, after.Add(time.Nanosecond), 10); err != nil || n != 1 {
		t.Fatalf("PruneCommands of the migrated entry = %d, %v", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	fresh := filepath.Join(dir, "fresh", "mspd.db")
	s, err = Open(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if a, b := schemaOf(t, old), schemaOf(t, fresh); a != b {
		t.Fatalf("migrated schema:\n%s\nnew schema:\n%s", a, b)
	}
	var v int
	if err := rawConn(t, old).QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("user_version = %d, %v; want %d", v, err, schemaVersion)
	}
}

// Pruning walks the created_at index rather than scanning the ledger.
func TestPruneUsesIndex(t *testing.T) {
	path := freshFile(t)
	plan := queryPlan(t, path, `SELECT rowid FROM commands WHERE created_at < ? ORDER BY created_at LIMIT ?`, 1, 1)
	if !strings.Contains(plan, "commands_by_created") || strings.Contains(plan, "TEMP B-TREE") {
		t.Fatalf("prune plan does not walk commands_by_created:\n%s", plan)
	}
}

// A version 3 file's rows gain their owner from their state, so that each
// principal's listing still finds its sessions; rows whose state names
// none (or is no JSON object) belong to the empty owner.
func TestMigrateOwnersFromVersion3(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mspd.db")
	c := rawConn(t, path+"?_pragma=journal_mode(WAL)")
	if err := migrate(ctx, c, 3, time.Time{}); err != nil {
		t.Fatal(err)
	}
	states := map[string]string{
		"a1": `{"createdAt":"x","owner":"alice","turnCount":1}`,
		"a2": `{"owner":"alice"}`,
		"b1": `{"owner":"bob"}`,
		"n1": `{"turnCount":0}`,
		"n2": `{"owner":5}`,
		"n3": `not json`,
	}
	updated := map[string]int64{"a1": 1, "a2": 2, "b1": 3, "n1": 4, "n2": 5, "n3": 6}
	for id, st := range states {
		if _, err := c.ExecContext(ctx, `INSERT INTO sessions (id, created_at, updated_at, busy, state) VALUES (?, 0, ?, 0, ?)`,
			id, updated[id], []byte(st)); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()

	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for owner, want := range map[string][]string{"alice": {"a2", "a1"}, "bob": {"b1"}, "": {"n3", "n2", "n1"}} {
		got, err := s.Sessions(ctx, owner, nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, row := range got {
			if row.Owner != owner {
				t.Fatalf("Sessions(%q) listed %s of %q", owner, row.ID, row.Owner)
			}
			if want := store.LegacyOwner(row.State); want != row.Owner {
				t.Fatalf("row %s migrated to owner %q, store.LegacyOwner reads %q", row.ID, row.Owner, want)
			}
			ids = append(ids, row.ID)
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("Sessions(%q) after migration = %v, want %v", owner, ids, want)
		}
	}
}

// An owner's listing walks sessions_by_owner, in its order: it reads none
// of the other owners' rows, and sorts nothing.
func TestSessionsUseOwnerIndex(t *testing.T) {
	path := freshFile(t)
	for _, q := range []struct {
		query string
		args  []any
	}{
		{`SELECT id FROM sessions WHERE owner = ? ORDER BY updated_at DESC, id DESC LIMIT ?`, []any{"bob", 1}},
		{`SELECT id FROM sessions WHERE owner = ? AND (updated_at, id) < (?, ?) ORDER BY updated_at DESC, id DESC LIMIT ?`, []any{"bob", 1, "x", 1}},
	} {
		plan := queryPlan(t, path, q.query, q.args...)
		if !strings.Contains(plan, "sessions_by_owner") || strings.Contains(plan, "TEMP B-TREE") {
			t.Fatalf("listing plan does not walk sessions_by_owner:\n%s", plan)
		}
	}
}

// queryPlan is EXPLAIN QUERY PLAN of query on the file at path.
func queryPlan(t *testing.T, path, query string, args ...any) string {
	t.Helper()
	rows, err := rawConn(t, path).QueryContext(context.Background(), `EXPLAIN QUERY PLAN `+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(detail + "\n")
	}
	return plan.String()
}

// freshFile is the path of a database Open made and closed again: the
// current schema, empty.
func freshFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mspd.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// A version 4 file (before the search index) is indexed from its logs
// when opened with an indexer: its sessions are found by name and by
// what was said in them; without one they wait, listed, for an Open that
// has one.
func TestMigrateSearchFromVersion4(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mspd.db")
	c := rawConn(t, path+"?_pragma=journal_mode(WAL)")
	if err := migrate(ctx, c, 4, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a1", "a2"} {
		if _, err := c.ExecContext(ctx, `INSERT INTO sessions (id, owner, created_at, updated_at, busy, state) VALUES (?, 'alice', 0, 1, 0, '{}')`, id); err != nil {
			t.Fatal(err)
		}
	}
	for i, ev := range [][3]string{{"a1", "name", "Trip planning"}, {"a1", "msg", "a week in Kraków"}, {"a2", "msg", "bread recipe"}} {
		if _, err := c.ExecContext(ctx, `INSERT INTO events (session_id, seq, method, params) VALUES (?, ?, ?, ?)`,
			ev[0], i+1, ev[1], []byte(ev[2])); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	// A test indexer: method "name" names the session, "msg" is a message.
	indexer := func(r store.Record) (*string, string) {
		if r.Method == "name" {
			name := string(r.Params)
			return &name, ""
		}
		return nil, string(r.Params)
	}
	find := func(s *Store, q store.Query) []string {
		hits, err := s.Search(ctx, q, nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, h := range hits {
			ids = append(ids, h.ID)
		}
		return ids
	}
	content := store.Query{Owner: "alice", Content: store.Terms{AnyOf: []string{"kraków", "bread"}}}

	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := find(s, content); len(got) != 0 {
		t.Fatalf("without an indexer, found %v", got)
	}
	s.Close()
	s, err = Open(path, WithIndexer(indexer))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := find(s, content); !slices.Equal(got, []string{"a2", "a1"}) {
		t.Fatalf("content search after the backfill = %v, want [a2 a1]", got)
	}
	if got := find(s, store.Query{Owner: "alice", Name: store.Terms{AllOf: []string{"trip"}}}); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("name search after the backfill = %v, want [a1]", got)
	}
}
