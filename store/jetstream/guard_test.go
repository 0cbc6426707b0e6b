package jetstream_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"mspd/internal/testlane"
	"mspd/store"
	msjs "mspd/store/jetstream"
)

// The server's guard, not only Commit's head check, refuses a batch built
// on a stale head, and refuses all of it: the row and the ledger entry
// riding with the records do not land either.
func TestServerGuardRefusesStaleHead(t *testing.T) {
	s := connect(t, startServer(t, t.TempDir()).ClientURL(), msjs.Options{})
	rec := func(seq int64, text string) store.Record {
		return store.Record{Seq: seq, Method: "m", Params: fmt.Appendf(nil, `%q`, text)}
	}
	mustCommit(t, s, store.Batch{SessionID: "s", Records: []store.Record{rec(1, "one")}})
	seq, stream, err := msjs.HeadAt(t.Context(), s, "s")
	if err != nil || seq != 1 {
		t.Fatalf("HeadAt = %d, %v", seq, err)
	}
	// Another writer appends after our head read.
	mustCommit(t, s, store.Batch{SessionID: "s", Records: []store.Record{rec(2, "theirs")}})
	for _, b := range []store.Batch{
		{SessionID: "s", Records: []store.Record{rec(2, "ours")}},
		{SessionID: "s", Records: []store.Record{rec(2, "ours"), rec(3, "ours")},
			Session:  &store.Session{ID: "s", State: []byte(`{}`)},
			Commands: []store.Command{{ID: "c", Digest: "d"}}},
	} {
		if err := msjs.CommitAt(t.Context(), s, b, seq, stream); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("commit on a stale head (%d messages) = %v, want ErrConflict", len(b.Records)+len(b.Commands), err)
		}
	}
	rs, err := s.Records(t.Context(), "s", 0, store.Limit{Rows: 10, Bytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || string(rs[1].Params) != `"theirs"` {
		t.Fatalf("log after refused commits = %v", rs)
	}
	if _, err := s.Session(t.Context(), "s"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("row of a refused batch: %v", err)
	}
	if _, err := s.Command(t.Context(), "c"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ledger entry of a refused batch: %v", err)
	}
}

// When Commit resends a batch because the answer was lost, a batch that
// had landed is recognised by its message id: the resend succeeds and
// writes nothing twice, where a fresh batch would have conflicted.
func TestResendIsIdempotent(t *testing.T) {
	s := connect(t, startServer(t, t.TempDir()).ClientURL(), msjs.Options{})
	batches := []store.Batch{
		{SessionID: "s", Records: []store.Record{{Seq: 1, Method: "m"}, {Seq: 2, Method: "m"}},
			Session:  &store.Session{ID: "s", State: []byte(`{}`)},
			Commands: []store.Command{{ID: "c1", Digest: "d"}}},
		{Commands: []store.Command{{ID: "c2", Digest: "d"}}}, // one message: a plain publish
	}
	for _, b := range batches {
		first, second := msjs.CommitTwice(t.Context(), s, b)
		if first != nil || second != nil {
			t.Fatalf("sending %d messages twice = %v, %v; want both nil", len(b.Records)+len(b.Commands), first, second)
		}
	}
	if h, err := s.Head(t.Context(), "s"); err != nil || h != 2 {
		t.Fatalf("Head = %d, %v; want 2", h, err)
	}
}

// When the server stops answering after a batch was sent, Commit keeps
// asking until CommitTimeout and then says it cannot tell, rather than
// reporting a failure that might hide a write.
func TestLostServerIsOutcomeUnknown(t *testing.T) {
	srv := startServer(t, t.TempDir())
	s := connect(t, srv.ClientURL(), msjs.Options{Timeout: 5 * time.Second, CommitTimeout: 500 * time.Millisecond})
	mustCommit(t, s, store.Batch{Commands: []store.Command{{ID: "before", Digest: "d"}}})
	shutdown(srv)
	for _, b := range []store.Batch{
		{Commands: []store.Command{{ID: "lone", Digest: "d"}}},
		{Commands: []store.Command{{ID: "one", Digest: "d"}, {ID: "two", Digest: "d"}}},
	} {
		err := s.Commit(t.Context(), b)
		if !errors.Is(err, msjs.ErrOutcomeUnknown) || errors.Is(err, store.ErrConflict) {
			t.Fatalf("Commit of %d commands with the server gone = %v, want ErrOutcomeUnknown", len(b.Commands), err)
		}
	}
}

// The store is healthy while its NATS connection is up, and says why not
// once the server is gone (/readyz reports it).
func TestHealthFollowsTheConnection(t *testing.T) {
	srv := startServer(t, t.TempDir())
	s := connect(t, srv.ClientURL(), msjs.Options{Timeout: 5 * time.Second, CommitTimeout: 500 * time.Millisecond})
	var _ store.Health = s
	if err := s.Healthy(); err != nil {
		t.Fatalf("connected: %v", err)
	}
	shutdown(srv)
	eventually(t, 30*time.Second, func() error {
		if s.Healthy() == nil {
			return errors.New("still healthy with the server gone")
		}
		return nil
	})
}

// A stream that has lost its quorum leaves the survivor's connection up
// but answers no commit: once one has run out of time the store says so
// (/readyz takes the node out of rotation), naming no session. A commit
// that the stream answers, even with a conflict, says it writes.
func TestHealthFollowsTheStreamsQuorum(t *testing.T) {
	testlane.Slow(t, "starts a three-node cluster")
	servers := startClusterServers(t)
	opts := msjs.Options{Stream: "QUORUM", Subject: "quorum", Replicas: 3, Timeout: 5 * time.Second, CommitTimeout: time.Second}
	s := connect(t, servers[0].ClientURL(), opts)
	batch := func(seq int64) store.Batch {
		return store.Batch{SessionID: "secret-session", Records: []store.Record{{Seq: seq, Method: "m", Params: []byte(`{}`)}}}
	}
	mustCommit(t, s, batch(1))
	if err := s.Commit(t.Context(), batch(5)); !isConflict(err) {
		t.Fatalf("a stale sequence: %v, want a conflict", err)
	}
	if err := s.Healthy(); err != nil {
		t.Fatalf("with the cluster whole, after a conflict: %v", err)
	}
	shutdown(servers[1])
	shutdown(servers[2])
	if err := s.Commit(t.Context(), batch(2)); err == nil {
		t.Fatal("a commit with one server of three landed")
	}
	err := s.Healthy()
	if err == nil {
		t.Fatal("healthy after a commit ran out of time with the quorum gone")
	}
	if strings.Contains(err.Error(), "secret-session") || strings.Contains(err.Error(), "connection") {
		t.Errorf("Healthy() = %q: want the stream's silence, no session named", err)
	}
}
