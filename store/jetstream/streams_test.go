package jetstream_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"mspd/store"
	msjs "mspd/store/jetstream"
	"mspd/store/storetest"
)

// The suite on three streams on one server per directory (a reopen
// restarts the server on the same directory): every session lives in one
// of them, and listings, search, the busy index, the ledger, pruning and
// erasure span them.
func TestStoreThreeStreams(t *testing.T) {
	storetest.Run(t, func(t *testing.T, dir string) store.Store {
		srv := startServer(t, dir)
		s, err := msjs.Connect(t.Context(), srv.ClientURL(), msjs.Options{Streams: 3})
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}
		return serverStore{Store: s, srv: srv}
	})
}

// rowsPerStream counts the session rows each of the n streams holds, as
// the server counts them.
func rowsPerStream(t *testing.T, url string, n int) []int {
	t.Helper()
	js := dialJetStream(t, url)
	counts := make([]int, n)
	for i := range n {
		name, subject := msjs.DefaultStream, msjs.DefaultSubject
		if i > 0 {
			name, subject = fmt.Sprintf("%s_%d", name, i), fmt.Sprintf("%s-%d", subject, i)
		}
		st, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info, err := st.Info(t.Context(), jetstream.WithSubjectFilter(subject+".row.*"))
		if err != nil {
			t.Fatal(err)
		}
		counts[i] = len(info.State.Subjects)
	}
	return counts
}

func ownedRow(id, owner string, updated time.Time, busy bool) *store.Session {
	return &store.Session{ID: id, Owner: owner, CreatedAt: updated, UpdatedAt: updated, Busy: busy, State: []byte(`{}`)}
}

// A hundred sessions on three streams land in all three, each whole in
// one, and list as one owner's hundred, newest first, in pages.
func TestSessionsSpreadOverStreams(t *testing.T) {
	srv := startServer(t, t.TempDir())
	s := connect(t, srv.ClientURL(), msjs.Options{Streams: 3})
	at := time.Unix(1_700_000_000, 0).UTC()
	var want []string
	for i := range 100 {
		id := fmt.Sprintf("s%03d", i)
		mustCommit(t, s, store.Batch{SessionID: id, Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`{}`)}},
			Session: ownedRow(id, "alice", at.Add(time.Duration(i)*time.Second), false)})
		want = append([]string{id}, want...)
	}
	counts := rowsPerStream(t, srv.ClientURL(), 3)
	for i, n := range counts {
		if n == 0 {
			t.Fatalf("rows per stream %v: stream %d got none", counts, i)
		}
	}
	if total := counts[0] + counts[1] + counts[2]; total != 100 {
		t.Fatalf("rows per stream %v: %d in all, want 100 (each session in one stream)", counts, total)
	}
	var got []string
	var after *store.SessionKey
	for {
		page, err := s.Sessions(t.Context(), "alice", after, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, ids(page)...)
		last := page[len(page)-1]
		after = &store.SessionKey{UpdatedAt: last.UpdatedAt, ID: last.ID}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Sessions in pages of 7 = %v, want %v", got, want)
	}
}

// A command id admitted in one stream refuses a batch of a session in
// another, writing nothing: the ledger admits an id once across streams.
func TestCommandIDIsOnceAcrossStreams(t *testing.T) {
	s := connect(t, startServer(t, t.TempDir()).ClientURL(), msjs.Options{Streams: 3})
	a, b := sessionsInTwoStreams(t, s)
	mustCommit(t, s, store.Batch{SessionID: a, Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`1`)}},
		Commands: []store.Command{{ID: "x", Digest: "first"}}})
	err := s.Commit(t.Context(), store.Batch{SessionID: b, Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`2`)}},
		Session: ownedRow(b, "alice", time.Now(), false), Commands: []store.Command{{ID: "x", Digest: "second"}}})
	if !isConflict(err) {
		t.Fatalf("Commit of %s with a's command id = %v, want ErrConflict", b, err)
	}
	if h, err := s.Head(t.Context(), b); err != nil || h != 0 {
		t.Fatalf("Head(%s) = %d, %v; want 0: the refused batch wrote nothing", b, h, err)
	}
	if c, err := s.Command(t.Context(), "x"); err != nil || c.Digest != "first" {
		t.Fatalf("Command(x) = %+v, %v; want the first admission", c, err)
	}
}

// sessionsInTwoStreams returns two session ids that s places in
// different streams.
func sessionsInTwoStreams(t *testing.T, s *msjs.Store) (string, string) {
	t.Helper()
	first, err := msjs.StreamOf(t.Context(), s, "a")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		id := fmt.Sprintf("b%d", i)
		if other, err := msjs.StreamOf(t.Context(), s, id); err != nil {
			t.Fatal(err)
		} else if other != first {
			return "a", id
		}
	}
	t.Fatal("no session in another stream than a's")
	return "", ""
}

// Growing from one stream to three moves nothing: the sessions written at
// one are still read, listed, appended to, busy-indexed, found by their
// commands and erased, in stream 0, while new sessions spread over all
// three.
func TestGrowingStreamsKeepsSessionsWhereTheyAre(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, dir)
	at := time.Unix(1_700_000_000, 0).UTC()
	one := connect(t, srv.ClientURL(), msjs.Options{})
	var old []string
	for i := range 30 {
		id := fmt.Sprintf("old%02d", i)
		old = append(old, id)
		mustCommit(t, one, store.Batch{SessionID: id, Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`1`)}},
			Session:  ownedRow(id, "alice", at.Add(time.Duration(i)*time.Second), i%10 == 0),
			Commands: []store.Command{{ID: "cmd-" + id, Digest: "d"}}})
	}
	// A log without a row is found too.
	mustCommit(t, one, store.Batch{SessionID: "rowless", Records: []store.Record{{Seq: 1, Method: "m", Params: []byte(`1`)}}})
	// One stream keeps layout 2: an older mspd still opens it.
	if v, err := msjs.LayoutVersion(t.Context(), one); err != nil || v != 2 {
		t.Fatalf("layout of a deployment of one stream = %d, %v; want 2", v, err)
	}
	if err := one.Close(); err != nil {
		t.Fatal(err)
	}

	three := connect(t, srv.ClientURL(), msjs.Options{Streams: 3})
	if got := msjs.StreamCounts(three); !slices.Equal(got, []int{1, 3}) {
		t.Fatalf("stream counts %v, want [1 3]", got)
	}
	for _, id := range append(slices.Clone(old), "rowless") {
		if st, err := msjs.StreamOf(t.Context(), three, id); err != nil || st != msjs.DefaultStream {
			t.Fatalf("session %s is in %q (%v), want %s, where it was written", id, st, err, msjs.DefaultStream)
		}
	}
	// Appended to where it is: the next seq is 2, in stream 0.
	mustCommit(t, three, store.Batch{SessionID: "old05", Records: []store.Record{{Seq: 2, Method: "m", Params: []byte(`2`)}},
		Session: ownedRow("old05", "alice", at.Add(time.Hour), true)})
	mustCommit(t, three, store.Batch{SessionID: "rowless", Records: []store.Record{{Seq: 2, Method: "m", Params: []byte(`2`)}}})
	for _, id := range []string{"old05", "rowless"} {
		if rs, err := three.Records(t.Context(), id, 0, store.Limit{Rows: 10, Bytes: 1 << 20}); err != nil || len(rs) != 2 {
			t.Fatalf("Records(%s) = %d records, %v; want 2", id, len(rs), err)
		}
	}
	if c, err := three.Command(t.Context(), "cmd-old07"); err != nil || c.Digest != "d" {
		t.Fatalf("Command(cmd-old07) = %+v, %v", c, err)
	}
	if err := three.Commit(t.Context(), store.Batch{SessionID: "new-x", Commands: []store.Command{{ID: "cmd-old07", Digest: "d"}}}); !isConflict(err) {
		t.Fatalf("a new session reusing an old command id: %v, want ErrConflict", err)
	}

	for i := range 30 {
		id := fmt.Sprintf("new%02d", i)
		mustCommit(t, three, store.Batch{SessionID: id, Session: ownedRow(id, "alice", at.Add(2*time.Hour+time.Duration(i)*time.Second), i%10 == 0)})
	}
	counts := rowsPerStream(t, srv.ClientURL(), 3)
	if counts[0] < 30 || counts[1] == 0 || counts[2] == 0 || counts[0]+counts[1]+counts[2] != 60 {
		t.Fatalf("rows per stream %v: want stream 0's 30 old ones and the 30 new spread over all three", counts)
	}

	listed, err := three.Sessions(t.Context(), "alice", nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 60 || listed[0].ID != "new29" || listed[30].ID != "old05" {
		t.Fatalf("Sessions = %v, want the 30 new, then old05 (updated since), then the rest", ids(listed))
	}
	wantBusy := []string{"new00", "new10", "new20", "old00", "old05", "old10", "old20"}
	if got := busyIDs(t, three); !slices.Equal(got, wantBusy) {
		t.Fatalf("BusySessions = %v, want %v", got, wantBusy)
	}

	if err := three.DeleteSession(t.Context(), "old10"); err != nil {
		t.Fatal(err)
	}
	if _, err := three.Session(t.Context(), "old10"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Session(old10) after its deletion: %v, want ErrNotFound", err)
	}
	if _, err := three.Command(t.Context(), "cmd-old10"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Command(cmd-old10) after its session's deletion: %v, want ErrNotFound", err)
	}
	if h, err := three.Head(t.Context(), "old10"); err != nil || h != 0 {
		t.Fatalf("Head(old10) after its deletion = %d, %v", h, err)
	}

	// Another node opening at three reads the same history.
	again := connect(t, srv.ClientURL(), msjs.Options{Streams: 3})
	if got := msjs.StreamCounts(again); !slices.Equal(got, []int{1, 3}) {
		t.Fatalf("stream counts on a second open %v, want [1 3]", got)
	}
	if row, err := again.Session(t.Context(), "old05"); err != nil || !row.Busy {
		t.Fatalf("Session(old05) on a second node = %+v, %v", row, err)
	}
}

// Fewer streams than a deployment has used are refused at Open, saying
// what to do, before any stream is touched.
func TestShrinkingStreamsIsRefused(t *testing.T) {
	srv := startServer(t, t.TempDir())
	s := connect(t, srv.ClientURL(), msjs.Options{Streams: 3})
	if got := msjs.StreamCounts(s); !slices.Equal(got, []int{3}) {
		t.Fatalf("stream counts of a new deployment %v, want [3]", got)
	}
	// Layout 3, which an mspd from before several streams refuses.
	if v, err := msjs.LayoutVersion(t.Context(), s); err != nil || v != 3 {
		t.Fatalf("layout of a deployment of three streams = %d, %v; want 3", v, err)
	}
	for _, n := range []int{1, 2} {
		_, err := msjs.Connect(t.Context(), srv.ClientURL(), msjs.Options{Streams: n})
		if !errors.Is(err, msjs.ErrFewerStreams) {
			t.Fatalf("Connect with %d streams = %v, want ErrFewerStreams", n, err)
		}
		want := fmt.Sprintf("its sessions are spread over 3 streams (counts used: 3) and %d would leave some out; streams can be added, never removed: open it with 3", n)
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("Connect with %d streams = %q, want it to say %q", n, err, want)
		}
	}
	for _, n := range []int{-1, 65} {
		if _, err := msjs.Connect(t.Context(), srv.ClientURL(), msjs.Options{Streams: n}); err == nil || !strings.Contains(err.Error(), "want 1 to 64") {
			t.Fatalf("Connect with %d streams = %v, want it refused", n, err)
		}
	}
}
