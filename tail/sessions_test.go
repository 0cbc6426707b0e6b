package tail

// Tests of `mspd sessions` (issue 10): the session list as a table or
// JSON lines, newest first, paged.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/server"
	"mspd/session"
	"mspd/store/sqlite"
)

// settableClock is a manager's clock the test sets.
type settableClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *settableClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *settableClock) set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// serveAt runs a manager on clock and an MSP server for it.
func serveAt(t *testing.T, clock *settableClock) (*session.Manager, *httptest.Server) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mspd.db"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := session.New(context.Background(), session.Config{Store: st, Runner: instantRunner{}, LogPath: "x.db",
		Logger: slog.New(slog.DiscardHandler), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(m, server.Config{PingInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); m.Close(); st.Close() })
	return m, hs
}

// TestListSessions: a table, most recently active first, with each
// session's name (or "-"), status, turns and last activity relative to
// now; as JSON, the server's session objects, one a line, in that order;
// --limit pages through session/list and stops there.
func TestListSessions(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := &settableClock{now: t0}
	m, hs := serveAt(t, clock)
	trip := newSession(t, m)
	clock.set(t0.Add(time.Minute))
	idle := newSession(t, m)
	clock.set(t0.Add(2 * time.Minute))
	monads := newSession(t, m)
	runTurn(t, m, monads, "explain monads")
	if err := m.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock.set(t0.Add(3 * time.Hour))
	runTurn(t, m, trip, "plan a Paris trip\nin May")
	if err := m.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}

	now := func() time.Time { return t0.Add(3*time.Hour + 3*time.Minute) }
	var out strings.Builder
	if err := List(context.Background(), ListOptions{URL: wsURL(hs), Format: Table, Now: now}, &out); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"ID                                    NAME               STATUS  TURNS  LAST ACTIVITY",
		trip + "  plan a Paris trip  idle    1      3m ago",
		monads + "  explain monads     idle    1      3h ago",
		idle + "  -                  idle    0      3h ago",
	}, "\n") + "\n"
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}

	for limit, ids := range map[int][]string{0: {trip, monads, idle}, 2: {trip, monads}, 1: {trip}} {
		out.Reset()
		if err := List(context.Background(), ListOptions{URL: wsURL(hs), Format: JSON, Limit: limit}, &out); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
			var s msp.Session
			if err := json.Unmarshal([]byte(line), &s); err != nil || s.UpdatedAt == "" {
				t.Fatalf("--limit %d: line %q is not a session object: %v", limit, line, err)
			}
			got = append(got, s.SessionID)
		}
		if strings.Join(got, " ") != strings.Join(ids, " ") {
			t.Errorf("--limit %d: sessions %v, want %v", limit, got, ids)
		}
	}
}

// TestListPagesThroughTheList: more sessions than one session/list page
// holds are all listed, each once.
func TestListPagesThroughTheList(t *testing.T) {
	m, hs := serve(t)
	for range listPage + 3 {
		newSession(t, m)
	}
	var out strings.Builder
	if err := List(context.Background(), ListOptions{URL: wsURL(hs), Format: JSON}, &out); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var s msp.Session
		json.Unmarshal([]byte(line), &s)
		seen[s.SessionID] = true
	}
	if len(seen) != listPage+3 {
		t.Errorf("%d distinct sessions listed, want %d", len(seen), listPage+3)
	}
}

// TestListRefusedToken: a refused token is ErrUnauthorized (exit status 4).
func TestListRefusedToken(t *testing.T) {
	_, hs := serveWith(t, instantRunner{}, server.Config{AuthToken: "right"}, nil)
	err := List(context.Background(), ListOptions{URL: wsURL(hs), Token: "wrong"}, io.Discard)
	if !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("List = %v, want ErrUnauthorized", err)
	}
}

// TestAgo: last activity in words.
func TestAgo(t *testing.T) {
	now := time.Date(2026, 3, 31, 12, 0, 0, 0, time.UTC)
	for stamp, want := range map[string]string{
		"2026-03-31T11:59:30.000Z": "just now",
		"2026-03-31T12:00:05.000Z": "just now", // a clock ahead of ours
		"2026-03-31T11:57:00.000Z": "3m ago",
		"2026-03-31T07:00:00.000Z": "5h ago",
		"2026-03-29T12:00:00.000Z": "2d ago",
		"2026-01-02T12:00:00.000Z": time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC).Local().Format("2006-01-02"),
		"yesterday\x1b[2J":         "yesterday\uFFFD[2J",
	} {
		if got := ago(stamp, now); got != want {
			t.Errorf("ago(%q) = %q, want %q", stamp, got, want)
		}
	}
}
