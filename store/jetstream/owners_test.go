package jetstream_test

import (
	"slices"
	"testing"
	"time"

	"mspd/store"
	msjs "mspd/store/jetstream"
)

// Rows written before the owner index existed are indexed when a store
// opens the stream, their owner taken from their state: each principal
// lists them again, and a second open rewrites nothing.
func TestOpenIndexesLegacyRows(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, dir)
	s := connectAsBefore(t, srv.ClientURL(), msjs.Options{})
	at := time.Unix(1_700_000_000, 0).UTC()
	legacy := map[string]string{"a1": `{"owner":"alice"}`, "a2": `{"owner":"alice","turnCount":2}`, "b1": `{"owner":"bob"}`, "n1": `{}`}
	for i, id := range []string{"a1", "a2", "b1", "n1"} {
		row := &store.Session{ID: id, CreatedAt: at, UpdatedAt: at.Add(time.Duration(i) * time.Second), State: []byte(legacy[id])}
		if err := msjs.CommitLegacyRow(t.Context(), s, row); err != nil {
			t.Fatal(err)
		}
	}
	// Unindexed, a legacy row is still read with its owner.
	if got, err := s.Session(t.Context(), "a1"); err != nil || got.Owner != "alice" {
		t.Fatalf("legacy Session = %+v, %v; want alice's", got, err)
	}
	if got, err := s.Sessions(t.Context(), "alice", nil, 10); err != nil || len(got) != 0 {
		t.Fatalf("Sessions before the back-fill = %v, %v; want none (nothing indexed yet)", ids(got), err)
	}
	s.Close()

	s = connect(t, srv.ClientURL(), msjs.Options{})
	for owner, want := range map[string][]string{"alice": {"a2", "a1"}, "bob": {"b1"}, "": {"n1"}} {
		got, err := s.Sessions(t.Context(), owner, nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(got), want) {
			t.Fatalf("Sessions(%q) after the back-fill = %v, want %v", owner, ids(got), want)
		}
		for _, row := range got {
			if row.Owner != owner || string(row.State) != legacy[row.ID] {
				t.Fatalf("back-filled row %+v (state %s), want owner %q and state %s", row, row.State, owner, legacy[row.ID])
			}
		}
	}
	// A second open finds nothing left to index: the rows keep their
	// place in the stream.
	_, before, err := msjs.RowAt(t.Context(), s, "a1")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = connect(t, srv.ClientURL(), msjs.Options{})
	if _, after, err := msjs.RowAt(t.Context(), s, "a1"); err != nil || after != before {
		t.Fatalf("row a1 at %d after a second open (%v), was at %d", after, err, before)
	}
}

// connectAsBefore opens a store as mspd did before the layout marker
// (msjs.ConnectAsBefore), closed when the test ends.
func connectAsBefore(t testing.TB, url string, opts msjs.Options) *msjs.Store {
	t.Helper()
	s, err := msjs.ConnectAsBefore(t.Context(), url, opts)
	if err != nil {
		t.Fatalf("ConnectAsBefore: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func ids(rows []store.Session) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}
