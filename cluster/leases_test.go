package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ttl is the tests' LeaseTTL: short, so that a lapse is quick.
const ttl = 600 * time.Millisecond

// joinNode starts a node named name on the test's NATS server.
func joinNode(t *testing.T, nc *nats.Conn, js jetstream.JetStream, name string) *Cluster {
	t.Helper()
	c, err := New(t.Context(), nc, js, Options{Node: name, LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// lastSeq is the last stream sequence of a KV bucket's stream.
func lastSeq(t *testing.T, js jetstream.JetStream, bucket string) uint64 {
	t.Helper()
	st, err := js.Stream(t.Context(), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// eventually polls cond, which another goroutine makes true, until it
// holds, failing after a bound meant only for a cluster that never gets
// there.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	bound := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-bound:
			t.Fatalf("waiting for %s", what)
		}
	}
}

// heartbeats watches the heartbeat bucket from now on.
func heartbeats(t testing.TB, js jetstream.JetStream) jetstream.KeyWatcher {
	t.Helper()
	kv, err := js.KeyValue(t.Context(), "MSPD_NODES")
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(t.Context(), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	return w
}

// awaitBeat waits for the next heartbeat written that ok accepts.
func awaitBeat(t testing.TB, w jetstream.KeyWatcher, what string, ok func(jetstream.KeyValueEntry) bool) {
	t.Helper()
	bound := time.After(20 * time.Second)
	for {
		select {
		case e := <-w.Updates():
			if e != nil && e.Operation() == jetstream.KeyValuePut && ok(e) {
				return
			}
		case <-bound:
			t.Fatalf("waiting for %s", what)
		}
	}
}

// awaitBeats waits for n heartbeats written, by any node.
func awaitBeats(t testing.TB, w jetstream.KeyWatcher, n int) {
	t.Helper()
	for i := range n {
		awaitBeat(t, w, fmt.Sprintf("heartbeat %d of %d", i+1, n), func(jetstream.KeyValueEntry) bool { return true })
	}
}

func mustLeader(t *testing.T, c *Cluster, session string) string {
	t.Helper()
	leader, err := c.Leader(t.Context(), session)
	if err != nil {
		t.Fatal(err)
	}
	return leader
}

func mustClaim(t *testing.T, c *Cluster, session string) string {
	t.Helper()
	leader, err := c.Claim(t.Context(), session)
	if err != nil {
		t.Fatal(err)
	}
	return leader
}

// TestLeasesDoNotGrowWithSessions: a node holding 500 sessions keeps them
// through many lease TTLs with one heartbeat write a renewal; the claims
// are written once and never again, and every other node sees it lead
// them.
func TestLeasesDoNotGrowWithSessions(t *testing.T) {
	nc, js := startNATS(t)
	a, b := joinNode(t, nc, js, "a"), joinNode(t, nc, js, "b")
	const n = 500
	for i := range n {
		if got := mustClaim(t, a, fmt.Sprint("s", i)); got != "a" {
			t.Fatalf("a's claim of s%d: leader %q", i, got)
		}
	}
	claims := lastSeq(t, js, "MSPD_CLAIMS")
	// Three TTLs pass: each node renews its heartbeat about nine times.
	a.leases.mu.Lock()
	from := a.leases.beat
	a.leases.mu.Unlock()
	awaitBeats(t, heartbeats(t, js), 18)
	if got := lastSeq(t, js, "MSPD_CLAIMS"); got != claims {
		t.Fatalf("the claims were written %d times more while only heartbeats were due", got-claims)
	}
	a.leases.mu.Lock()
	to := a.leases.beat
	a.leases.mu.Unlock()
	if to <= from {
		t.Fatalf("a's heartbeat was not renewed (revision %d → %d)", from, to)
	}
	for i := range n {
		s := fmt.Sprint("s", i)
		if got := mustLeader(t, b, s); got != "a" {
			t.Fatalf("b sees %q lead %s, want a", got, s)
		}
		if got := mustClaim(t, b, s); got != "a" {
			t.Fatalf("b's claim of %s: leader %q, want a", s, got)
		}
	}
}

// TestClaimsOfADeadNodeAreTakenOver: a node killed without a word keeps
// its sessions until its heartbeat lapses; then one node takes each over,
// even when two try at once.
func TestClaimsOfADeadNodeAreTakenOver(t *testing.T) {
	nc, js := startNATS(t)
	a, b, c := joinNode(t, nc, js, "a"), joinNode(t, nc, js, "b"), joinNode(t, nc, js, "c")
	const n = 20
	for i := range n {
		mustClaim(t, a, fmt.Sprint("s", i))
	}
	a.die()
	if got := mustClaim(t, b, "s0"); got != "a" {
		t.Fatalf("right after a died, b's claim found leader %q, want a (its heartbeat still lives)", got)
	}
	select { // a's heartbeat lapses
	case <-b.Departed():
	case <-time.After(20 * time.Second):
		t.Fatal("b was not told of a's heartbeat lapsing")
	}
	if got := mustLeader(t, b, "s0"); got != "" {
		t.Fatalf("a's heartbeat lapsed, yet s0 is led by %q", got)
	}
	var wg sync.WaitGroup
	got := make([][2]string, n)
	for i := range n {
		wg.Go(func() {
			s := fmt.Sprint("s", i)
			lb, errB := b.Claim(context.Background(), s)
			lc, errC := c.Claim(context.Background(), s)
			if errB != nil || errC != nil {
				t.Errorf("claims of %s: %v, %v", s, errB, errC)
			}
			got[i] = [2]string{lb, lc}
		})
	}
	wg.Wait()
	won := map[string]int{}
	for i, g := range got {
		if g[0] != g[1] || g[0] != "b" && g[0] != "c" {
			t.Fatalf("s%d: b was told leader %q, c %q; want one of them, the same", i, g[0], g[1])
		}
		if l := mustLeader(t, a, fmt.Sprint("s", i)); l != g[0] {
			t.Fatalf("s%d: the claim says %q, the claimants %q", i, l, g[0])
		}
		won[g[0]]++
	}
	t.Logf("taken over: %v", won)
}

// TestNodeBackAsAnotherIncarnation: a node that restarts at once (before
// its heartbeat lapsed) frees the claims of the process that died: other
// nodes take them without waiting out the TTL, and so may it.
func TestNodeBackAsAnotherIncarnation(t *testing.T) {
	nc, js := startNATS(t)
	a, b := joinNode(t, nc, js, "a"), joinNode(t, nc, js, "b")
	mustClaim(t, a, "s1")
	mustClaim(t, a, "s2")
	a.die()
	a2 := joinNode(t, nc, js, "a")
	if got := mustLeader(t, b, "s1"); got != "" {
		t.Fatalf("the old incarnation's claim still counts: leader %q", got)
	}
	if got := mustClaim(t, b, "s1"); got != "b" {
		t.Fatalf("b's claim of s1: leader %q, want b", got)
	}
	if got := mustClaim(t, a2, "s2"); got != "a" {
		t.Fatalf("the new a's claim of s2: leader %q, want a", got)
	}
	if got := mustLeader(t, b, "s2"); got != "a" {
		t.Fatalf("b sees %q lead s2, want a", got)
	}
}

// TestCloseFreesClaims: a node shutting down frees what it did not
// release; releasing frees one session at once.
func TestCloseFreesClaims(t *testing.T) {
	nc, js := startNATS(t)
	a, b := joinNode(t, nc, js, "a"), joinNode(t, nc, js, "b")
	mustClaim(t, a, "kept")
	mustClaim(t, a, "released")
	a.Release("released")
	if got := mustClaim(t, b, "released"); got != "b" {
		t.Fatalf("a released session: leader %q, want b", got)
	}
	if got := mustClaim(t, b, "kept"); got != "a" {
		t.Fatalf("a session a holds: leader %q, want a", got)
	}
	a.Close()
	if got := mustClaim(t, b, "kept"); got != "b" {
		t.Fatalf("after a closed: leader %q, want b", got)
	}
}

// TestLapsedHeartbeatJoinsAgain: a node whose heartbeat lapsed (gone
// from the bucket, as after a pause past the TTL) joins again as a new
// incarnation; its old claims then count no more, and it claims afresh.
func TestLapsedHeartbeatJoinsAgain(t *testing.T) {
	nc, js := startNATS(t)
	a, b := joinNode(t, nc, js, "a"), joinNode(t, nc, js, "b")
	mustClaim(t, a, "s1")
	mustClaim(t, a, "s2")
	old := a.incarnation()
	beats := heartbeats(t, js)
	// a pauses past its TTL (its renewal waits on the lock); meanwhile
	// b takes s2 over.
	a.leases.mu.Lock()
	if err := a.leases.nodes.Delete(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if got := mustClaim(t, b, "s2"); got != "b" {
		t.Fatalf("b's claim of s2 while a's heartbeat is gone: leader %q", got)
	}
	select {
	case <-a.Lapsed():
		t.Fatal("a told of a lapse before it joined again")
	default:
	}
	a.leases.mu.Unlock()
	awaitBeat(t, beats, "a to join again", func(e jetstream.KeyValueEntry) bool {
		return e.Key() == "a" && string(e.Value()) != old
	})
	if a.incarnation() == old { // join holds the lock through its write
		t.Fatal("a wrote a new heartbeat but keeps its old incarnation")
	}
	select {
	case <-a.Lapsed(): // so its manager claims again what it leads
	case <-time.After(20 * time.Second):
		t.Fatal("a joined again but Lapsed never told")
	}
	if got := mustClaim(t, a, "s2"); got != "b" {
		t.Fatalf("a claims s2 again after its lapse: leader %q, want b, which took it", got)
	}
	if got := mustLeader(t, b, "s1"); got != "" {
		t.Fatalf("a claim of the lapsed incarnation counts: leader %q", got)
	}
	if got := mustClaim(t, a, "s1"); got != "a" {
		t.Fatalf("a's claim after joining again: leader %q, want a", got)
	}
	if got := mustLeader(t, b, "s1"); got != "a" {
		t.Fatalf("b sees %q lead s1, want a", got)
	}
}

// TestLegacyLeasesRefused: nodes of an earlier mspd, which kept a lease a
// session in MSPD_LEASES, are still running: a node of this one refuses
// to join, saying what to do; once their leases are gone it joins, and
// removes the empty bucket.
func TestLegacyLeasesRefused(t *testing.T) {
	nc, js := startNATS(t)
	ctx := t.Context()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "MSPD_LEASES", TTL: time.Minute, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "some-session", []byte("old-node")); err != nil {
		t.Fatal(err)
	}
	_, err = New(ctx, nc, js, Options{Node: "a", LeaseTTL: ttl})
	if err == nil || !strings.Contains(err.Error(), "nodes of an earlier mspd hold 1 session leases in the KV bucket MSPD_LEASES") ||
		!strings.Contains(err.Error(), "stop every node of the earlier version") {
		t.Fatalf("joining beside old nodes: %v", err)
	}
	if err := kv.Delete(ctx, "some-session"); err != nil {
		t.Fatal(err)
	}
	a := joinNode(t, nc, js, "a")
	if got := mustClaim(t, a, "s"); got != "a" {
		t.Fatalf("claim: %q", got)
	}
	if _, err := js.KeyValue(ctx, "MSPD_LEASES"); err == nil {
		t.Fatal("the empty legacy bucket is still there")
	}
}

// TestDeparturesAreSeen: another node's heartbeat aging out (a killed
// node), a node closing, and a node back as a new process each reach
// Departed, so that its busy sessions are adopted at once; a node's own
// renewals do not.
func TestDeparturesAreSeen(t *testing.T) {
	nc, js := startNATS(t)
	a, b, c := joinNode(t, nc, js, "a"), joinNode(t, nc, js, "b"), joinNode(t, nc, js, "c")
	departed := func(what string) {
		t.Helper()
		select {
		case <-b.Departed():
		case <-time.After(20 * time.Second):
			t.Fatalf("b was not told of %s", what)
		}
	}
	a.die()
	departed("a's heartbeat aging out")
	c.Close()
	departed("c closing")
	a2 := joinNode(t, nc, js, "a")
	a2.die()
	joinNode(t, nc, js, "a")
	departed("a back as another process")
	// Drain whatever is pending, then renewals alone for three TTLs.
	select {
	case <-b.Departed():
	default:
	}
	awaitBeats(t, heartbeats(t, js), 18)
	select {
	case <-b.Departed():
		t.Fatal("renewals alone were told as a departure")
	default:
	}
}
