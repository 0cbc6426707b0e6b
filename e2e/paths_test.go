package e2e

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"

	"mspd/auth"
	"mspd/client"
	"mspd/daemon"
	"mspd/schema/msp"
)

// frameLog records every frame a connection receives.
type frameLog struct {
	mu     sync.Mutex
	frames [][]byte
}

func (l *frameLog) record(frame []byte) {
	l.mu.Lock()
	l.frames = append(l.frames, bytes.Clone(frame))
	l.mu.Unlock()
}

// containing returns the frames that contain s.
func (l *frameLog) containing(s string) [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][]byte
	for _, f := range l.frames {
		if bytes.Contains(f, []byte(s)) {
			out = append(out, f)
		}
	}
	return out
}

// exerciseSessions runs on c every method that answers with a Session
// object (start, list, read, resume, fork) and a turn, and returns the
// Session objects the answers carried.
func exerciseSessions(t *testing.T, ctx context.Context, c *checkedClient) []msp.Session {
	t.Helper()
	start, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID
	answerTurn(t, c, sid, "hello")
	var list msp.SessionListResult
	if err := c.Call(ctx, msp.MethodSessionList, msp.SessionListParams{}, &list); err != nil {
		t.Fatal(err)
	}
	var read msp.SessionSnapshot
	if err := c.Call(ctx, msp.MethodSessionRead, msp.SessionReadParams{SessionID: sid}, &read); err != nil {
		t.Fatal(err)
	}
	resumed, err := c.Resume(ctx, sid, nil)
	if err != nil {
		t.Fatal(err)
	}
	var fork msp.SessionStartResult
	if err := c.Call(ctx, msp.MethodSessionFork, msp.SessionForkParams{CommandID: client.NewCommandID(), SessionID: sid}, &fork); err != nil {
		t.Fatal(err)
	}
	return append([]msp.Session{start.Session, read.Session, resumed.Session, fork.Session}, list.Sessions...)
}

// TestMultiUserServerHidesPaths: on a server of several principals (a
// tokens file or JWT), initialize's museHome and every Session's path are
// empty, and no frame a principal receives names the data directory —
// not the answers, the turn's events nor the session/started broadcasts.
// A single-user local server still reports them.
func TestMultiUserServerHidesPaths(t *testing.T) {
	// A name no id, cursor or hex digest can contain by chance (t.TempDir's
	// own base is a counter such as "001", which a UUID often holds).
	dir := filepath.Join(t.TempDir(), "mspd-data-that-must-not-leak")
	d := startDaemon(t, daemon.Config{DataDir: dir, Auth: auth.Config{TokensFile: tokensFile(t, "alice "+aliceToken, "bob "+bobToken)}})
	ctx := testCtx(t)
	var seen frameLog
	alice := dial(t, d.URL(), client.Options{Token: aliceToken, OnFrame: seen.record})
	listener := dialListening(t, d.URL(), client.Options{Token: aliceToken, OnFrame: seen.record})
	if alice.Init.MuseHome != "" {
		t.Errorf("museHome %q on a multi-user server", alice.Init.MuseHome)
	}
	for _, s := range exerciseSessions(t, ctx, alice) {
		if s.Path != "" {
			t.Errorf("session %s has path %q on a multi-user server", s.SessionID, s.Path)
		}
	}
	if got := nextSessionStarted(t, ctx, listener); got == "" {
		t.Fatal("no session/started")
	}
	if leaks := seen.containing(filepath.Base(dir)); len(leaks) > 0 {
		t.Errorf("%d frames name the data directory, e.g. %s", len(leaks), leaks[0])
	}

	local := startDaemon(t, daemon.Config{})
	c := dial(t, local.URL(), client.Options{})
	if !filepath.IsAbs(c.Init.MuseHome) {
		t.Errorf("a local single-user server reports museHome %q", c.Init.MuseHome)
	}
	for _, s := range exerciseSessions(t, ctx, c) {
		if s.Path == "" {
			t.Errorf("a local single-user server reports no path for session %s", s.SessionID)
		}
	}
}
