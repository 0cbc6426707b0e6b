package daemon

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"mspd/session"
)

// TestStoreFilesPrivate: the SQLite files, which hold every conversation,
// are readable by mspd's user alone, even in a data directory that
// existed with wider permissions (--data ., a container's volume).
func TestStoreFilesPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := New(context.Background(), Config{DataDir: dir, Provider: "scripted", Listen: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.Background())
	ctx := session.WithPrincipal(context.Background(), "")
	if _, _, err := d.mgr.StartSession(ctx, nil, json.RawMessage(`{"commandId":"019ad0a0-0000-7000-8000-000000000003"}`)); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "mspd.db*"))
	if len(files) < 2 {
		t.Fatalf("store files %v: want the database and its write-ahead log", files)
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %v: readable by others than mspd's user", filepath.Base(f), st.Mode().Perm())
		}
	}
}
