package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"mspd/client"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// freePorts reserves n loopback ports and lets them go for the nodes.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// startCluster runs three mspd processes, each with an embedded NATS
// server, routed into one cluster with three JetStream replicas.
func startCluster(t *testing.T) []*process {
	t.Helper()
	ports := freePorts(t, 6)
	var nodes []*process
	for i := range 3 {
		var routes []string
		for j := range 3 {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+j]))
			}
		}
		nodes = append(nodes, launchProcess(t, t.TempDir(), "--store", "jetstream", "--nats-embedded",
			"--nats-listen", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--nats-cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[3+i]),
			"--nats-routes", strings.Join(routes, ","), "--jetstream-replicas", "3",
			"--node-id", fmt.Sprintf("n%d", i+1), "--lease-ttl", "2s"))
	}
	for _, n := range nodes {
		n.waitListening(t, 2*time.Minute)
	}
	return nodes
}

// TestClusterSurvivesANodeKill: three nodes form a cluster with no other
// software. A session started on node 1 is watched from node 2; a turn
// sent to node 3 runs on node 1 (its leader) and is acked as it acks,
// exactly once. Node 1 is killed (SIGKILL) mid-answer: node 2 or 3 takes
// the session over once its lease lapses and resumes the turn as a new
// attempt, saying which node stopped; the watcher on node 2 sees every
// event in order, no cursor twice, and the log holds what it saw.
func TestClusterSurvivesANodeKill(t *testing.T) {
	nodes := startCluster(t)
	ctx := testCtx(t)
	c1 := dial(t, nodes[0].url, client.Options{})
	start, err := c1.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID
	first, err := c1.StartTurn(ctx, sid, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c1.WaitTurn(ctx, first.TurnID); err != nil {
		t.Fatal(err)
	}

	w := &watcher{t: t, sid: sid, c: dial(t, nodes[1].url, client.Options{})}
	if _, err := w.c.Resume(ctx, sid, nil); err != nil {
		t.Fatal(err)
	}
	c3 := dial(t, nodes[2].url, client.Options{})
	turn := slowTurn(sid, 0, streaming, scripted.Step{Text: "after the takeover"})
	ack, err := c3.CallRaw(ctx, msp.MethodTurnStart, turn)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c3.CallRaw(ctx, msp.MethodTurnStart, turn)
	if err != nil || string(again) != string(ack) {
		t.Fatalf("replayed on the node that forwarded it: %s, %v; want %s", again, err, ack)
	}
	for deltas := 0; deltas < 5; {
		if w.next(ctx).Method == msp.NotifyItemDelta {
			deltas++
		}
	}
	nodes[0].kill()

	done := w.terminal(ctx, turn.CommandID)
	if done.Terminal != msp.TerminalCompleted || done.Attempts == nil || done.Attempts.Count != 2 {
		t.Fatalf("the turn after node 1 died: %s", jsonText(done))
	}
	notices := only(w.seen, msp.NotifyTurnRetryScheduled)
	if len(notices) != 1 || decode[msp.TurnRetryScheduledParams](t, notices[0]).Reason != "node n1 stopped during attempt 1" {
		t.Fatalf("notices %s", jsonText(notices))
	}
	w.checkLog(ctx)
	// The session goes on, from any node.
	next, err := c3.StartTurn(ctx, sid, "still there?")
	if err != nil {
		t.Fatal(err)
	}
	if d := w.terminal(ctx, next.TurnID); d.Terminal != msp.TerminalCompleted {
		t.Fatalf("a turn after the takeover: %s", jsonText(d))
	}
}
