package e2e

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/schema/msp"
)

// copyDataDir copies the files under data directory from into to: a
// backup of it, or its restore.
func copyDataDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		target := filepath.Join(to, rel)
		switch {
		case e.IsDir():
			return os.MkdirAll(target, 0o700)
		case !e.Type().IsRegular():
			return nil // a socket, a lock's symlink: not data
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		dst, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(dst, src); err != nil {
			dst.Close()
			return err
		}
		return dst.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// serveDir runs an mspd over data directory dir and returns its address
// and how to stop it (gracefully, as before a backup is taken).
type serveDir func(t *testing.T, dir string) (url string, stop func())

// TestRestoredBackupRefusesLostCursorsOverTheWire: an mspd serving a data
// directory restored from a backup holds its sessions as they were at the
// backup. A cursor a client was handed after the backup (its session went
// on meanwhile) is refused notFound missingAnchor by session/resume,
// view/subscribe and view/page, though the restored session has grown as
// far since: it used to be taken as a position among the new events, and
// a resume silently skipped them. The cursors the new server hands out
// repeat none of the lost ones, and a cursor from before the backup
// resumes.
func TestRestoredBackupRefusesLostCursorsOverTheWire(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		restoredBackup(t, func(t *testing.T, dir string) (string, func()) {
			d := startDaemon(t, daemon.Config{DataDir: dir})
			return d.URL(), func() {
				stopped, cancel := context.WithCancel(context.Background())
				cancel()
				d.Close(stopped)
			}
		})
	})
	t.Run("jetstream", func(t *testing.T) {
		restoredBackup(t, func(t *testing.T, dir string) (string, func()) {
			p := startProcess(t, dir, "--store", "jetstream", "--nats-embedded", "--nats-listen", "127.0.0.1:0")
			return p.url, func() {
				p.cmd.Process.Signal(syscall.SIGTERM)
				p.cmd.Wait()
			}
		})
	})
}

func restoredBackup(t *testing.T, serve serveDir) {
	live, backup := t.TempDir(), t.TempDir()
	url, stop := serve(t, live)
	ctx := testCtx(t)
	c := dial(t, url, client.Options{})
	sid := client.NewCommandID()
	if _, err := c.CallRaw(ctx, msp.MethodSessionStart, msp.SessionStartParams{CommandID: client.NewCommandID(), SessionID: sid}); err != nil {
		t.Fatal(err)
	}
	before, _ := answerTurn(t, c, sid, "one")
	kept := before[len(before)-1].Cursor()
	stop()
	copyDataDir(t, live, backup) // the backup

	url, stop = serve(t, live)
	c = dial(t, url, client.Options{})
	if _, err := c.Resume(ctx, sid, &kept); err != nil {
		t.Fatal(err)
	}
	lostEvents, _ := answerTurn(t, c, sid, "two")
	lost := map[string]bool{}
	for _, n := range lostEvents {
		if cur := n.Cursor(); cur != "" {
			lost[cur] = true
		}
	}
	last := lostEvents[len(lostEvents)-1].Cursor()
	stop() // and the live data directory is lost

	restored := t.TempDir()
	copyDataDir(t, backup, restored)
	url, _ = serve(t, restored)
	c = dial(t, url, client.Options{})
	if _, err := c.Resume(ctx, sid, &kept); err != nil {
		t.Fatalf("session/resume after %s, from before the backup: %v", kept, err)
	}
	answerRepeatingNone(t, c, sid, lost, "handed out after the backup", "three", "four")
	refusedThenPagesWhole(t, ctx, url, sid, last, 3*5)
}
