package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	path := filepath.Join(t.TempDir(), "mspd.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rows, err := rawConn(t, path).QueryContext(context.Background(),
		`EXPLAIN QUERY PLAN SELECT rowid FROM commands WHERE created_at < ? ORDER BY created_at LIMIT ?`, 1, 1)
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
	if !strings.Contains(plan.String(), "commands_by_created") || strings.Contains(plan.String(), "TEMP B-TREE") {
		t.Fatalf("prune plan does not walk commands_by_created:\n%s", plan.String())
	}
}
