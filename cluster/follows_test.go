package cluster

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"mspd/session"
)

// TestDeltasOnlyWhereFollowed: a leader publishes a session's durable
// events always, and its ephemeral ones only while another node follows
// the session; a follower gets both.
func TestDeltasOnlyWhereFollowed(t *testing.T) {
	nc, js := startNATS(t)
	a, b := joinNode(t, nc, js, "a"), joinNode(t, nc, js, "b")
	// What goes on the bus, seen from outside.
	var onBus atomic.Int64
	sub, err := nc.Subscribe(a.eventSubject("s"), func(*nats.Msg) { onBus.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	publish := func(durable bool) {
		a.Publish("s", session.Notification{Method: "item/delta", Frame: []byte("{}"), Durable: durable}, session.Position{Seq: 1, Sub: 1})
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	bus := func(want int64, what string) {
		t.Helper()
		eventually(t, what, func() bool { return onBus.Load() >= want })
		// A round trip through the server after the last publish: had
		// another message been published, it would be here by now.
		if err := a.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := onBus.Load(); got != want {
			t.Fatalf("%s: %d messages on the bus, want %d", what, got, want)
		}
	}
	publish(false)
	publish(true)
	bus(1, "nobody follows: the durable event alone")

	var got atomic.Int64
	stop := b.Follow("s", func(session.Notification, session.Position) { got.Add(1) })
	eventually(t, "a to hear that b follows", func() bool { return a.follows.isFollowed("s") })
	publish(false)
	publish(true)
	bus(3, "b follows: both")
	eventually(t, "b to get both", func() bool { return got.Load() == 2 })

	stop()
	eventually(t, "a to hear that b stopped", func() bool { return !a.follows.isFollowed("s") })
	publish(false)
	bus(3, "b stopped: no delta")
}

// TestFollowRecordsOfAnEarlierProcessGo: a node that died following a
// session left its record; started again, it deletes it, and the leader
// stops publishing deltas for it.
func TestFollowRecordsOfAnEarlierProcessGo(t *testing.T) {
	nc, js, a, b := bFollowsALeader(t)
	b.die()
	b.follows.close() // the process is gone; its record stays
	if !a.follows.isFollowed("s") {
		t.Fatal("the record went with the process")
	}
	joinNode(t, nc, js, "b")
	eventually(t, "a to hear the record go", func() bool { return !a.follows.isFollowed("s") })
}

// bFollowsALeader joins nodes a and b, b follows session s, and a has
// heard so.
func bFollowsALeader(t *testing.T) (*nats.Conn, jetstream.JetStream, *Cluster, *Cluster) {
	t.Helper()
	nc, js := startNATS(t)
	a := joinNode(t, nc, js, "a")
	b := joinNode(t, nc, js, "b")
	b.Follow("s", func(session.Notification, session.Position) {})
	eventually(t, "a to hear that b follows", func() bool { return a.follows.isFollowed("s") })
	return nc, js, a, b
}

// followRecord tells whether the bucket holds node's follow record of
// session.
func followRecord(t *testing.T, js jetstream.JetStream, session, node string) bool {
	t.Helper()
	kv, err := js.KeyValue(t.Context(), "MSPD"+followsSuffix)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kv.Get(t.Context(), followKey(session, node))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// TestFollowRecordsOfADeadNodeGo: a node that died following a session
// and never comes back costs the leader nothing once its heartbeat has
// lapsed, and the live node first by name deletes its record a lease TTL
// later.
func TestFollowRecordsOfADeadNodeGo(t *testing.T) {
	_, js, a, b := bFollowsALeader(t)
	b.die()
	b.follows.close() // the process is gone; its record stays
	eventually(t, "b's heartbeat to lapse and a to stop publishing for it", func() bool { return !a.follows.isFollowed("s") })
	eventually(t, "a to delete b's record", func() bool { return !followRecord(t, js, "s", "b") })
}

// TestFollowRecordsWrittenAgainAfterALapse: a node whose heartbeat lapsed
// while it went on following (paused, cut off) has its records deleted
// by another node; joining again, it writes them again, and the leader
// publishes for it again.
func TestFollowRecordsWrittenAgainAfterALapse(t *testing.T) {
	_, js, a, b := bFollowsALeader(t)
	// b pauses, as a stopped process does: its renewal waits on the lock,
	// and its heartbeat lapses.
	b.leases.mu.Lock()
	before := b.leases.incarnation
	eventually(t, "b's heartbeat to lapse", func() bool { return !a.follows.isFollowed("s") })
	a.follows.sweep() // what a does a lease TTL after b's heartbeat went
	eventually(t, "a to delete b's record", func() bool { return !followRecord(t, js, "s", "b") })
	// b wakes up, finds its heartbeat gone, joins again and goes on.
	b.leases.mu.Unlock()
	eventually(t, "b to join again", func() bool { return b.incarnation() != before })
	eventually(t, "b to write its record again", func() bool { return followRecord(t, js, "s", "b") })
	eventually(t, "a to hear that b follows again", func() bool { return a.follows.isFollowed("s") })
	a.follows.sweep() // a later sweep leaves a record written since
	if !followRecord(t, js, "s", "b") || !a.follows.isFollowed("s") {
		t.Fatal("b's record, written again after its lapse, was deleted")
	}
}
