package jetstream_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"mspd/internal/testlane"
	"mspd/store"
	msjs "mspd/store/jetstream"
)

// at is the n-th second of the tests' clock.
func at(n int) time.Time { return time.Unix(1_700_000_000+int64(n), 0).UTC() }

// A principal's list costs a few requests, however many sessions it
// lists: the leader names the index entries, and the entries and the
// page's rows are each read in batches of 256 from a replica that holds
// what the leader did (R3). Alice's 300 sessions take two batches of
// each: five requests, not the 601 of a get each. Bob's 10, in a page of
// 50, take two: the leader names them, and one batch reads their rows.
func TestListTakesAFewRequests(t *testing.T) {
	testlane.Slow(t, "a three-server cluster and 300 sessions")
	urls := startCluster(t)
	js := dialJetStream(t, urls[0])
	nc := js.Conn()
	stream, subject := nameFor(t.TempDir())
	s, err := msjs.Open(t.Context(), js, msjs.Options{Stream: stream, Subject: subject, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const alices = 300
	var want []string
	for i := range alices {
		id := fmt.Sprintf("a%03d", i)
		mustCommit(t, s, store.Batch{SessionID: id, Session: ownedRow(id, "alice", at(i), false)})
		want = append(want, id)
	}
	slices.Reverse(want) // newest first
	for i := range 10 {
		id := fmt.Sprintf("b%d", i)
		mustCommit(t, s, store.Batch{SessionID: id, Session: ownedRow(id, "bob", at(alices+i), false)})
	}
	// A replica behind the leader sends the list to the leader, a get a
	// session: the count holds once the replicas have caught up.
	eventually(t, 30*time.Second, func() error {
		caught, err := msjs.ReplicasCaught(t.Context(), s)
		if err != nil || !caught {
			return fmt.Errorf("replicas not caught up (%v)", err)
		}
		before := nc.Stats().OutMsgs
		got, err := s.Sessions(t.Context(), "alice", nil, alices)
		sent := nc.Stats().OutMsgs - before
		if err != nil {
			return err
		}
		if !slices.Equal(ids(got), want) {
			t.Fatalf("Sessions(alice) = %d sessions %v…, want %d newest first", len(got), ids(got)[:min(3, len(got))], alices)
		}
		if sent > 5 {
			return fmt.Errorf("a list of %d sessions sent %d requests, want at most 5", alices, sent)
		}
		// A page that holds all of bob's 10: their rows alone, after the
		// leader named them.
		before = nc.Stats().OutMsgs
		got, err = s.Sessions(t.Context(), "bob", nil, 50)
		sent = nc.Stats().OutMsgs - before
		if err != nil {
			return err
		}
		if len(got) != 10 || got[0].ID != "b9" || got[9].ID != "b0" {
			t.Fatalf("Sessions(bob) = %v, want b9…b0", ids(got))
		}
		if sent > 2 {
			return fmt.Errorf("a list of 10 sessions in a page of 50 sent %d requests, want 2", sent)
		}
		return nil
	})
}

// A list never shows what a replica behind the leader still holds: a
// session erased or updated since is read from the leader. The replicas
// here answer as they did before the changes; the list is the leader's.
func TestListReadsPastALaggingReplica(t *testing.T) {
	testlane.Slow(t, "a three-server cluster")
	urls := startCluster(t)
	stream, subject := nameFor(t.TempDir())
	s := connect(t, urls[0], msjs.Options{Stream: stream, Subject: subject, Replicas: 3})
	for i, id := range []string{"a1", "a2", "a3"} {
		mustCommit(t, s, store.Batch{SessionID: id, Session: ownedRow(id, "alice", at(i), true)})
	}
	msjs.FreezeReplicas(s)
	list := func() []string {
		t.Helper()
		got, err := s.Sessions(t.Context(), "alice", nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		return ids(got)
	}
	if got := list(); !slices.Equal(got, []string{"a3", "a2", "a1"}) {
		t.Fatalf("Sessions = %v, want [a3 a2 a1]", got)
	}
	if got := busyIDs(t, s); !slices.Equal(got, []string{"a1", "a2", "a3"}) {
		t.Fatalf("BusySessions = %v, want [a1 a2 a3]", got)
	}
	// a1 is touched (newest now, and idle), a2 erased.
	mustCommit(t, s, store.Batch{SessionID: "a1", Session: ownedRow("a1", "alice", at(10), false)})
	if err := s.DeleteSession(t.Context(), "a2"); err != nil {
		t.Fatal(err)
	}
	if got := list(); !slices.Equal(got, []string{"a1", "a3"}) {
		t.Fatalf("Sessions after the changes = %v, want [a1 a3] (a1 touched, a2 erased)", got)
	}
	if got := busyIDs(t, s); !slices.Equal(got, []string{"a3"}) {
		t.Fatalf("BusySessions after the changes = %v, want [a3]", got)
	}
	row, err := s.Session(t.Context(), "a1")
	if err != nil || row.Busy {
		t.Fatalf("Session(a1) = %+v, %v; want idle", row, err)
	}
	if _, err := s.Session(t.Context(), "a2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Session(a2) after its erasure: %v, want not found", err)
	}
}
