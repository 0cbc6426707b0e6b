package sqlite_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mspd/internal/datadir"
	"mspd/store/sqlite"
)

// A second store on a directory is refused at once, naming the directory
// and the holder; once the first closes, the directory is free again.
func TestSecondOpenIsLocked(t *testing.T) {
	dir := t.TempDir()
	first := openAt(t, dir)
	defer first.Close()

	for _, name := range []string{"mspd.db", "other.db"} { // the directory is locked, not just the file
		s, err := sqlite.Open(filepath.Join(dir, name))
		if err == nil {
			s.Close()
			t.Fatalf("second Open of %s succeeded while the first store is open", name)
		}
		if !errors.Is(err, datadir.ErrLocked) {
			t.Fatalf("second Open of %s = %v, want ErrLocked", name, err)
		}
		var le *datadir.LockedError
		if !errors.As(err, &le) || le.Dir != dir || le.PID != os.Getpid() {
			t.Fatalf("second Open of %s = %#v, want a *LockedError for %s held by pid %d", name, err, dir, os.Getpid())
		}
		if msg := err.Error(); !strings.Contains(msg, dir) || !strings.Contains(msg, "pid ") {
			t.Fatalf("error %q does not name the directory and the pid", msg)
		}
	}

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again := openAt(t, dir)
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}

// An Open that fails after taking the lock releases it.
func TestFailedOpenReleasesLock(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mspd.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for range 2 {
		s, err := sqlite.Open(path)
		if err == nil {
			s.Close()
			t.Fatal("Open of a file from a newer schema succeeded")
		}
		if errors.Is(err, datadir.ErrLocked) || !strings.Contains(err.Error(), "newer") {
			t.Fatalf("Open = %v, want the newer-schema error", err)
		}
	}
}
