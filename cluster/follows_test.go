package cluster

import (
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

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
	nc, js := startNATS(t)
	a := joinNode(t, nc, js, "a")
	b := joinNode(t, nc, js, "b")
	b.Follow("s", func(session.Notification, session.Position) {})
	eventually(t, "a to hear that b follows", func() bool { return a.follows.isFollowed("s") })
	b.die()
	b.follows.close() // the process is gone; its record stays
	if !a.follows.isFollowed("s") {
		t.Fatal("the record went with the process")
	}
	joinNode(t, nc, js, "b")
	eventually(t, "a to hear the record go", func() bool { return !a.follows.isFollowed("s") })
}
