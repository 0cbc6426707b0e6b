package e2e

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"mspd/client"
	"mspd/internal/testlane"
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
	testlane.Slow(t, "runs three mspd processes on embedded NATS")
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
	w := &watcher{t: t, sid: sid, c: dial(t, nodes[1].url, client.Options{})}
	if _, err := w.c.Resume(ctx, sid, nil); err != nil {
		t.Fatal(err)
	}
	// A turn with a model retry, watched live on the leader and on a node
	// following it: the same events, cursors and params bytes, in order.
	first, err := c1.StartTurnWith(ctx, slowTurn(sid, 0, scripted.Step{Status: 429, RetryAfterMs: new(20)},
		scripted.Step{Text: "hello from the leader", Chunks: 4}))
	if err != nil {
		t.Fatal(err)
	}
	onLeader, err := c1.WaitTurn(ctx, first.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	w.until(ctx, terminalOf(first.TurnID))
	frames := func(ns []client.Notification) []string {
		var out []string
		for _, n := range ns {
			if n.Cursor() != "" {
				out = append(out, n.Method+" "+string(n.Params))
			}
		}
		return out
	}
	if got, want := frames(w.seen), frames(onLeader); !slices.Equal(got, want) {
		t.Fatalf("the follower's client saw\n %s\nthe leader's\n %s", strings.Join(got, "\n "), strings.Join(want, "\n "))
	}
	if len(only(w.seen, msp.NotifyTurnModelRetryScheduled)) != 1 || len(only(w.seen, msp.NotifyItemDelta)) == 0 {
		t.Fatalf("the follower's client saw %s", compact(methods(w.seen)))
	}
	c3 := dial(t, nodes[2].url, client.Options{})
	turn := slowTurn(sid, 0, streaming, scripted.Step{Text: "after the takeover"})
	ack, err := c3.CallRaw(ctx, msp.MethodTurnStart, turn)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		again, err := dial(t, n.url, client.Options{}).CallRaw(ctx, msp.MethodTurnStart, turn)
		if err != nil || string(again) != string(ack) {
			t.Fatalf("replayed on node %d: %s, %v; want %s", i+1, again, err, ack)
		}
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

// clusterNode is one node of startCluster: its process and how to start
// it again on its data directory and ports.
type clusterNode struct {
	proc *process
	dir  string
	args []string
}

// startClusterNodes is startCluster keeping what a restart needs.
func startClusterNodes(t *testing.T, extra ...string) []*clusterNode {
	t.Helper()
	testlane.Slow(t, "runs three mspd processes on embedded NATS")
	ports := freePorts(t, 6)
	var nodes []*clusterNode
	for i := range 3 {
		var routes []string
		for j := range 3 {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+j]))
			}
		}
		n := &clusterNode{dir: t.TempDir(), args: append([]string{"--store", "jetstream", "--nats-embedded",
			"--nats-listen", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--nats-cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[3+i]),
			"--nats-routes", strings.Join(routes, ","), "--jetstream-replicas", "3",
			"--node-id", fmt.Sprintf("n%d", i+1), "--lease-ttl", "2s"}, extra...)}
		n.proc = launchProcess(t, n.dir, n.args...)
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		n.proc.waitListening(t, 2*time.Minute)
	}
	return nodes
}

// followAcross follows a session until every turn named has its
// terminal, reconnecting to whichever node is up (resuming after the last
// cursor seen) whenever its connection drops; it returns the terminals.
func followAcross(t *testing.T, ctx context.Context, sid string, turns []string, urls func() ([]string, <-chan struct{}), done chan<- map[string]msp.TurnCompletedParams) {
	w := &watcher{t: t, sid: sid}
	got := map[string]msp.TurnCompletedParams{}
	for len(got) < len(turns) && ctx.Err() == nil {
		var c *client.Client
		up, changed := urls()
		for _, u := range up {
			cl, err := client.Dial(ctx, u, client.Options{})
			if err != nil {
				continue
			}
			var cur *string
			if w.cursor != "" {
				cur = &w.cursor
			}
			if _, err := cl.Resume(ctx, sid, cur); err != nil {
				cl.Close()
				continue
			}
			c = cl
			break
		}
		if c == nil {
			// No node answered: wait for the next one to come up.
			select {
			case <-ctx.Done():
			case <-changed:
			}
			continue
		}
		for {
			n, err := c.Next(ctx)
			if err != nil {
				break // the node stopped: go to another
			}
			if cur := n.Cursor(); cur != "" {
				w.cursor = cur
			}
			if n.Method == msp.NotifyTurnCompleted {
				p := decode[msp.TurnCompletedParams](t, n)
				got[p.TurnID] = p
			}
			if len(got) == len(turns) {
				break
			}
		}
		c.Close()
	}
	done <- got
}

// TestClusterRollingRestart: three nodes run concurrent turns while each
// node in turn is stopped (SIGTERM, with little grace) and started again
// on its data directory. A stopping node hands its sessions over; every
// turn completes.
func TestClusterRollingRestart(t *testing.T) {
	nodes := startClusterNodes(t, "--shutdown-timeout", "200ms")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var mu sync.Mutex
	changed := make(chan struct{}) // closed, and replaced, when a node comes up
	urls := func() ([]string, <-chan struct{}) {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, n := range nodes {
			if n.proc != nil {
				out = append(out, n.proc.url)
			}
		}
		return out, changed
	}
	long := scripted.Step{Text: strings.Repeat("steady ", 60), Chunks: 60, ChunkDelayMs: 50}
	done := make(chan map[string]msp.TurnCompletedParams)
	const sessions = 6
	var all []string
	for i := range sessions {
		c := dial(t, nodes[i%3].proc.url, client.Options{})
		sid := newSession(t, c)
		var turns []string
		for range 2 { // one runs, one waits in the queue
			p := slowTurn(sid, 16, long, long, long, long, long, long, long, long)
			if _, err := c.StartTurnWith(ctx, p); err != nil {
				t.Fatal(err)
			}
			turns = append(turns, p.CommandID)
		}
		all = append(all, turns...)
		go followAcross(t, ctx, sid, turns, urls, done)
	}
	for i, n := range nodes {
		if err := n.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		n.proc.cmd.Wait()
		mu.Lock()
		n.proc = nil
		mu.Unlock()
		p := launchProcess(t, n.dir, n.args...)
		p.waitListening(t, 2*time.Minute)
		mu.Lock()
		n.proc = p
		close(changed)
		changed = make(chan struct{})
		mu.Unlock()
		t.Logf("node n%d restarted", i+1)
	}
	terminals := map[string]msp.TurnCompletedParams{}
	for range sessions {
		select {
		case got := <-done:
			maps.Copy(terminals, got)
		case <-ctx.Done():
			t.Fatalf("%d of %d turns ended before the deadline", len(terminals), len(all))
		}
	}
	for _, id := range all {
		if c, ok := terminals[id]; !ok || c.Terminal != msp.TerminalCompleted {
			t.Errorf("turn %s: %s", id, jsonText(c))
		}
	}
}
