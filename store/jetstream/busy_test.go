package jetstream_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"mspd/store"
	msjs "mspd/store/jetstream"
)

// busyRow is a row of alice's, busy or not.
func busyRow(id string, busy bool) *store.Session {
	at := time.Unix(1_700_000_000, 0).UTC()
	return &store.Session{ID: id, Owner: "alice", CreatedAt: at, UpdatedAt: at, Busy: busy, State: []byte(`{"owner":"alice"}`)}
}

func busyIDs(t *testing.T, s *msjs.Store) []string {
	t.Helper()
	rows, err := s.BusySessions(t.Context())
	if err != nil {
		t.Fatalf("BusySessions: %v", err)
	}
	return ids(rows)
}

// A session made busy then idle leaves BusySessions at once, and its busy
// entry leaves the stream once the idle entry's TTL has passed: the index
// holds busy sessions only, not every session ever busy.
func TestBusyEntryExpiresWhenIdle(t *testing.T) {
	srv := startServer(t, t.TempDir())
	s := connect(t, srv.ClientURL(), msjs.WithIdleTTL(msjs.Options{}, time.Second))
	for _, id := range []string{"a", "b"} {
		mustCommit(t, s, store.Batch{SessionID: id, Session: busyRow(id, true)})
	}
	if got := busyIDs(t, s); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("BusySessions = %v, want [a b]", got)
	}
	mustCommit(t, s, store.Batch{SessionID: "a", Session: busyRow("a", false)})
	if got := busyIDs(t, s); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("BusySessions after a went idle = %v, want [b]", got)
	}
	eventually(t, 30*time.Second, func() error {
		entries, err := msjs.BusyEntries(t.Context(), s)
		if err != nil {
			return err
		}
		if len(entries) != 1 || entries["mspd.busy.b"] != 1 {
			return fmt.Errorf("busy entries %v, want only mspd.busy.b's one", entries)
		}
		return nil
	})
	if got := busyIDs(t, s); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("BusySessions after the idle entry expired = %v, want [b]", got)
	}
	// Busy again after the entry expired: indexed again.
	mustCommit(t, s, store.Batch{SessionID: "a", Session: busyRow("a", true)})
	if got := busyIDs(t, s); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("BusySessions after a is busy again = %v, want [a b]", got)
	}
}

// The row, not its entry, is the truth: a busy entry whose row says
// otherwise (erasing) is left out.
func TestBusySessionsReadsTheRow(t *testing.T) {
	srv := startServer(t, t.TempDir())
	s := connect(t, srv.ClientURL(), msjs.Options{})
	mustCommit(t, s, store.Batch{SessionID: "a", Session: busyRow("a", true)})
	erasing := busyRow("a", true)
	erasing.Erasing = true // a row no Commit writes, but a busy entry beside it
	mustCommit(t, s, store.Batch{SessionID: "a", Session: erasing})
	if got := busyIDs(t, s); len(got) != 0 {
		t.Fatalf("BusySessions = %v, want none (the row is erasing)", got)
	}
}

// Erasing a busy session removes its busy entry with its row, and an
// erasure cut short leaves it out of BusySessions.
func TestDeleteSessionRemovesTheBusyEntry(t *testing.T) {
	srv := startServer(t, t.TempDir())
	s := connect(t, srv.ClientURL(), msjs.Options{})
	for _, id := range []string{"gone", "kept"} {
		mustCommit(t, s, store.Batch{SessionID: id, Session: busyRow(id, true),
			Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`1`)}}})
	}
	if err := s.DeleteSession(t.Context(), "gone"); err != nil {
		t.Fatal(err)
	}
	entries, err := msjs.BusyEntries(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries["mspd.busy.kept"] != 1 {
		t.Fatalf("busy entries after the erasure = %v, want only mspd.busy.kept's", entries)
	}
	if got := busyIDs(t, s); !slices.Equal(got, []string{"kept"}) {
		t.Fatalf("BusySessions = %v, want [kept]", got)
	}
}

// A stream written before the busy index (its stream without message
// TTLs, busy rows without busy entries, an ownerless row, no layout
// marker) is upgraded by Open: TTLs turned on, every busy row indexed, the
// marker written; a second Open reads the marker and rewrites nothing.
func TestOpenIndexesBusyRowsWrittenBefore(t *testing.T) {
	srv := startServer(t, t.TempDir())
	old := connectAsBefore(t, srv.ClientURL(), msjs.Options{})
	if ttl, err := msjs.StreamAllowsTTL(t.Context(), old); err != nil || ttl {
		t.Fatalf("the old stream allows TTLs: %v, %v", ttl, err)
	}
	for _, r := range []*store.Session{busyRow("b1", true), busyRow("b2", true), busyRow("i1", false)} {
		if err := msjs.CommitAsBefore(t.Context(), old, store.Batch{SessionID: r.ID, Session: r}); err != nil {
			t.Fatal(err)
		}
	}
	ownerless := busyRow("b3", true)
	if err := msjs.CommitLegacyRow(t.Context(), old, ownerless); err != nil {
		t.Fatal(err)
	}
	if got := busyIDs(t, old); len(got) != 0 {
		t.Fatalf("BusySessions before the upgrade = %v, want none (nothing indexed)", got)
	}
	if v, err := msjs.LayoutVersion(t.Context(), old); err != nil || v != 0 {
		t.Fatalf("layout before the upgrade = %d, %v; want none", v, err)
	}
	_, b1Seq, err := msjs.RowAt(t.Context(), old, "b1")
	if err != nil {
		t.Fatal(err)
	}
	// old stays open: a node of the older version still running while
	// the first upgraded one starts, as in a rolling upgrade.

	s := connect(t, srv.ClientURL(), msjs.Options{})
	if ttl, err := msjs.StreamAllowsTTL(t.Context(), s); err != nil || !ttl {
		t.Fatalf("the upgraded stream allows TTLs: %v, %v", ttl, err)
	}
	if v, err := msjs.LayoutVersion(t.Context(), s); err != nil || v != 2 {
		t.Fatalf("layout after the upgrade = %d, %v; want 2", v, err)
	}
	if got := busyIDs(t, s); !slices.Equal(got, []string{"b1", "b2", "b3"}) {
		t.Fatalf("BusySessions after the upgrade = %v, want [b1 b2 b3]", got)
	}
	if got, err := s.Sessions(t.Context(), "alice", nil, 10); err != nil || len(got) != 4 {
		t.Fatalf("alice's sessions after the upgrade = %v, %v; want all four", ids(got), err)
	}
	// A busy row with its owner is indexed without being written again.
	if _, seq, err := msjs.RowAt(t.Context(), s, "b1"); err != nil || seq != b1Seq {
		t.Fatalf("row b1 at %d (%v), was at %d", seq, err, b1Seq)
	}
	// The index now follows commits: an idle entry (a TTL'd message)
	// lands on the upgraded stream.
	mustCommit(t, s, store.Batch{SessionID: "b2", Session: busyRow("b2", false)})
	if got := busyIDs(t, s); !slices.Equal(got, []string{"b1", "b3"}) {
		t.Fatalf("BusySessions after b2 went idle = %v, want [b1 b3]", got)
	}
	s.Close()

	// At layout 2 Open reads no row: a busy row the older node writes now
	// stays unindexed, which shows the scan was skipped...
	if err := msjs.CommitAsBefore(t.Context(), old, store.Batch{SessionID: "b4", Session: busyRow("b4", true)}); err != nil {
		t.Fatal(err)
	}
	old.Close()
	s = connect(t, srv.ClientURL(), msjs.Options{})
	if got := busyIDs(t, s); !slices.Equal(got, []string{"b1", "b3"}) {
		t.Fatalf("BusySessions after a second open = %v, want [b1 b3] (no back-fill at layout 2)", got)
	}
	// ...until the marker is purged, as the package doc says to do once
	// the last older node has stopped: the next Open indexes it.
	if err := msjs.PurgeNow(t.Context(), s, "mspd.meta.layout"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = connect(t, srv.ClientURL(), msjs.Options{})
	if got := busyIDs(t, s); !slices.Equal(got, []string{"b1", "b3", "b4"}) {
		t.Fatalf("BusySessions after the marker's purge and an open = %v, want [b1 b3 b4]", got)
	}
}

// A stream whose layout marker is newer than this code's is refused by
// Open, saying what to do, and its configuration is left alone.
func TestOpenRefusesANewerLayout(t *testing.T) {
	srv := startServer(t, t.TempDir())
	s := connectAsBefore(t, srv.ClientURL(), msjs.Options{}) // a stream without TTLs
	if err := msjs.MarkLayout(t.Context(), s, 4); err != nil {
		t.Fatal(err)
	}
	_, err := msjs.Connect(t.Context(), srv.ClientURL(), msjs.Options{})
	if ttl, terr := msjs.StreamAllowsTTL(t.Context(), s); terr != nil || ttl {
		t.Errorf("the refused Open changed the stream's configuration (TTLs allowed: %v, %v)", ttl, terr)
	}
	if !errors.Is(err, msjs.ErrNewerLayout) {
		t.Fatalf("Connect = %v, want ErrNewerLayout", err)
	}
	const want = "the stream was written by a newer mspd (layout 4); this one reads layout 3: upgrade it"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("Connect = %q, want it to say %q", err, want)
	}
}
