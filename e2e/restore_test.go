package e2e

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/schema/msp"
)

// copyDataDir copies the files of data directory from into to: a backup
// of it, or its restore.
func copyDataDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		src, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.OpenFile(filepath.Join(to, e.Name()), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err == nil {
			_, err = io.Copy(dst, src)
			if cerr := dst.Close(); err == nil {
				err = cerr
			}
		}
		src.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

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
	ctx := testCtx(t)
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	live, backup := t.TempDir(), t.TempDir()

	d1 := startDaemon(t, daemon.Config{DataDir: live})
	c := dial(t, d1.URL(), client.Options{})
	sid := client.NewCommandID()
	if _, err := c.CallRaw(ctx, msp.MethodSessionStart, msp.SessionStartParams{CommandID: client.NewCommandID(), SessionID: sid}); err != nil {
		t.Fatal(err)
	}
	before, _ := answerTurn(t, c, sid, "one")
	kept := before[len(before)-1].Cursor()
	d1.Close(stopped)
	copyDataDir(t, live, backup) // the backup

	d2 := startDaemon(t, daemon.Config{DataDir: live})
	c = dial(t, d2.URL(), client.Options{})
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
	d2.Close(stopped) // and the live data directory is lost

	restored := t.TempDir()
	copyDataDir(t, backup, restored)
	d3 := startDaemon(t, daemon.Config{DataDir: restored})
	c = dial(t, d3.URL(), client.Options{})
	if _, err := c.Resume(ctx, sid, &kept); err != nil {
		t.Fatalf("session/resume after %s, from before the backup: %v", kept, err)
	}
	for _, text := range []string{"three", "four"} {
		events, _ := answerTurn(t, c, sid, text)
		for _, n := range events {
			if cur := n.Cursor(); cur != "" && lost[cur] {
				t.Errorf("%s on the restored server repeats cursor %s, handed out after the backup", n.Method, cur)
			}
		}
	}

	other := dial(t, d3.URL(), client.Options{})
	_, err := other.Resume(ctx, sid, &last)
	wantErr(t, "session/resume after "+last, err, msp.KindNotFound, msp.ReasonMissingAnchor)
	_, err = other.CallRaw(ctx, msp.MethodViewSubscribe, msp.ViewSubscribeParams{SessionID: sid, After: &last})
	wantErr(t, "view/subscribe after "+last, err, msp.KindNotFound, msp.ReasonMissingAnchor)
	_, err = other.CallRaw(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Cursor: &last, Limit: 10})
	wantErr(t, "view/page from "+last, err, msp.KindNotFound, msp.ReasonMissingAnchor)
	// The connection is fine, and the restored session pages whole.
	if events := pageAll(t, ctx, other, sid); len(events) < 3*5 {
		t.Errorf("the restored session pages %d events", len(events))
	}
}
