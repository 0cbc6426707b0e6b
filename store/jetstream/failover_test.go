package jetstream_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"mspd/internal/testlane"
	"mspd/store"
	msjs "mspd/store/jetstream"
)

// With three replicas, stopping the server that leads the stream loses
// nothing acknowledged: a store on a surviving server goes on appending
// once the others elect a new leader, and reads the whole log, rows and
// ledger back.
func TestReplicasSurviveAStoppedServer(t *testing.T) {
	testlane.Slow(t, "starts a three-node cluster")
	servers := startClusterServers(t)
	opts := msjs.Options{Stream: "FAILOVER", Subject: "failover", Replicas: 3}
	first := connect(t, servers[0].ClientURL(), opts)
	batch := func(from int64) store.Batch {
		b := store.Batch{SessionID: "s", Session: &store.Session{ID: "s", CreatedAt: time.Unix(1, 0), UpdatedAt: time.Unix(from, 0), State: []byte(fmt.Sprintf(`{"upTo":%d}`, from+9))}}
		for seq := from; seq < from+10; seq++ {
			b.Records = append(b.Records, store.Record{Seq: seq, Method: "item/completed", Params: []byte(fmt.Sprintf(`{"n":%d}`, seq))})
		}
		b.Commands = []store.Command{{ID: fmt.Sprintf("cmd-%d", from), Digest: "d", Response: []byte(`{}`)}}
		return b
	}
	mustCommit(t, first, batch(1))

	// The stream's leader is the server to stop; the store that goes on
	// talks to another.
	leader := -1
	eventually(t, 30*time.Second, func() error {
		for i, srv := range servers {
			if srv.JetStreamIsStreamLeader("$G", opts.Stream) {
				leader = i
				return nil
			}
		}
		return errors.New("no stream leader yet")
	})
	survivor := servers[(leader+1)%len(servers)]
	s := connect(t, survivor.ClientURL(), opts)
	shutdown(servers[leader])

	// Until a new leader is elected a commit may fail, or fail after it
	// landed (then its retry conflicts and the head shows it).
	eventually(t, 60*time.Second, func() error {
		err := s.Commit(t.Context(), batch(11))
		if errors.Is(err, store.ErrConflict) {
			if h, herr := s.Head(t.Context(), "s"); herr == nil && h == 20 {
				return nil
			}
		}
		return err
	})
	mustCommit(t, s, batch(21))

	recs, err := s.Records(t.Context(), "s", 0, store.Limit{Rows: 100, Bytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 30 {
		t.Fatalf("%d records after the failover, want 30", len(recs))
	}
	for i, r := range recs {
		if want := fmt.Sprintf(`{"n":%d}`, i+1); r.Seq != int64(i+1) || string(r.Params) != want {
			t.Fatalf("record %d = seq %d %s, want seq %d %s", i, r.Seq, r.Params, i+1, want)
		}
	}
	row, err := s.Session(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	if string(row.State) != `{"upTo":30}` {
		t.Errorf("session row state %s, want the last commit's", row.State)
	}
	for _, id := range []string{"cmd-1", "cmd-11", "cmd-21"} {
		if _, err := s.Command(t.Context(), id); err != nil {
			t.Errorf("ledger entry %s: %v", id, err)
		}
	}
}
