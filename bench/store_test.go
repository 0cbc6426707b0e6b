package bench

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"mspd/internal/cli/clitest"
	"mspd/internal/testlane"
	"mspd/schema/msp"
)

// A turn's batches are the session layer's two commits: dense seqs from
// the head on, the row busy after the admission and idle after the
// terminal, one ledger entry, params of the sizes measured.
func TestTurnBatches(t *testing.T) {
	bs := turnBatches("s1", 12, time.Now())
	if len(bs) != 2 {
		t.Fatalf("%d batches, want 2", len(bs))
	}
	var methods []string
	seq := int64(12)
	for i, b := range bs {
		if b.SessionID != "s1" {
			t.Errorf("batch %d of session %q", i, b.SessionID)
		}
		for j, r := range b.Records {
			seq++
			if r.Seq != seq {
				t.Errorf("batch %d record %d: seq %d, want %d", i, j, r.Seq, seq)
			}
			if !json.Valid(r.Params) || len(r.Params) != turnCommits[i].records[j].size {
				t.Errorf("batch %d record %d: %d bytes of params, want %d valid JSON", i, j, len(r.Params), turnCommits[i].records[j].size)
			}
			methods = append(methods, r.Method)
		}
	}
	want := []string{msp.NotifyTurnStarted, msp.NotifyItemCompleted,
		msp.NotifyItemCompleted, msp.NotifySessionTokenUsage, msp.NotifyTurnCompleted}
	if !slices.Equal(methods, want) || recordsPerTurn() != len(want) {
		t.Errorf("methods %v (%d a turn), want %v", methods, recordsPerTurn(), want)
	}
	if r := bs[0].Session; r == nil || !r.Busy || len(bs[0].Commands) != 1 {
		t.Errorf("the admission: row %+v, %d commands; want a busy row and one command", r, len(bs[0].Commands))
	}
	if r := bs[1].Session; r == nil || r.Busy || len(bs[1].Commands) != 0 {
		t.Errorf("the terminal's row %+v, want an idle one", r)
	}
	if a, b := turnBatches("s1", 0, time.Now()), turnBatches("s1", 0, time.Now()); a[0].Commands[0].ID == b[0].Commands[0].ID {
		t.Error("two turns share a command id")
	}
}

// The store scenario on SQLite alone needs no mspd: it writes, scans and
// reports every figure.
func TestStoreScenarioOnSQLite(t *testing.T) {
	cfg := Config{Scenarios: []string{"store"}, StoreBackends: []string{"sqlite"}, AppendSessions: 4, AppendTurns: 2,
		Rounds: 2, StoreRows: []int{60, 40}, WorkDir: t.TempDir(), Log: io.Discard}
	cfg.defaults()
	r := &runner{cfg: cfg, rep: &Report{}}
	if err := r.storeScenario(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := map[string]Row{}
	for _, row := range r.rep.Rows {
		got[row.Scenario+" / "+row.Figure] = row
	}
	for _, key := range []string{"store plain SQLite / durable appends/s", "store sqlite / durable appends/s", "store sqlite / commits/s",
		"store sqlite / commit p99", "store sqlite / adoption pass (BusySessions), at 40 stored sessions",
		"store sqlite / session/list p99, at 40 stored sessions", "store sqlite / session/list p99, at 60 stored sessions"} {
		if row, ok := got[key]; !ok || row.Value <= 0 {
			t.Errorf("%s: %+v", key, row)
		}
	}
	if row := got["store sqlite / durable appends/s"]; row.Baseline <= 0 || row.Ratio <= 0 {
		t.Errorf("appends without their baseline: %+v", row)
	}
	// The counts ascend whatever order they were given in; each tops up
	// the last (scanRows checks what it finds: 10 busy, 50 listed).
	var order []string
	for _, row := range r.rep.Rows {
		if strings.HasPrefix(row.Figure, "adoption pass") {
			order = append(order, row.Figure)
		}
	}
	if strings.Join(order, "|") != "adoption pass (BusySessions), at 40 stored sessions|adoption pass (BusySessions), at 60 stored sessions" {
		t.Errorf("adoption passes timed: %q", order)
	}
}

// The store scenario on a JetStream node mspd started for it reaches the
// node's NATS server, which takes no client without a token: mspbench
// gives its nodes a secret of its own (over one in its environment) and
// presents it.
func TestStoreScenarioOnJetStream(t *testing.T) {
	testlane.Slow(t, "runs mspd and a NATS server")
	t.Setenv("MSPD_NATS_SECRET", "inherited-not-the-nodes")
	ctx := context.Background()
	cfg := Config{Scenarios: []string{"store"}, StoreBackends: []string{"jetstream-r1"}, AppendSessions: 2, AppendTurns: 1,
		Rounds: 1, StoreRows: []int{30}, StoreStreams: []int{1, 3}, LeaseSessions: []int{10, 20}, WorkDir: t.TempDir(), Log: io.Discard,
		ServerEnv: []string{clitest.Env}}
	cfg.defaults()
	r := &runner{cfg: cfg, bin: clitest.Self(), rep: &Report{}}
	if err := r.storeScenario(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, row := range r.rep.Rows {
		got[row.Scenario+" / "+row.Figure] = row.Value > 0
	}
	for _, key := range []string{"store jetstream R1 / durable appends/s", "store jetstream R1 / lease upkeep KV writes/s, at 20 claimed sessions",
		"store jetstream R1 / lease upkeep CPU, at 10 claimed sessions",
		"store jetstream R1 / adoption pass (BusySessions), at 30 stored sessions", "store jetstream R1 / session/list p99, at 30 stored sessions",
		"store jetstream R1, 1 streams / commits/s", "store jetstream R1, 3 streams / commits/s", "store jetstream R1, 3 streams / NATS CPU per commit"} {
		if !got[key] {
			t.Errorf("no %s among %v", key, got)
		}
	}
}

// With --nats-server the deployment's NATS servers are processes of their
// own, routed into one cluster (R3 here), each taking the secret mspbench
// made up; the nodes reach them through MSPD_NATS and the store figures
// count those processes' CPU as the NATS servers'.
func TestStoreScenarioOnNATSServers(t *testing.T) {
	testlane.Slow(t, "runs three nats-server and three mspd processes")
	t.Setenv(runAsNATS, "1") // this test binary is the nats-server
	ctx := context.Background()
	cfg := Config{Scenarios: []string{"store"}, StoreBackends: []string{"jetstream-r3"}, AppendSessions: 2, AppendTurns: 1,
		Rounds: 1, StoreRows: []int{30}, LeaseSessions: []int{10}, WorkDir: t.TempDir(), Log: io.Discard, ServerEnv: []string{clitest.Env},
		NATSServer: clitest.Self(), StoreListWrites: 50, StoreListWindow: time.Second}
	cfg.defaults()
	r := &runner{cfg: cfg, bin: clitest.Self(), rep: &Report{}}
	if err := r.storeScenario(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]Row{}
	for _, row := range r.rep.Rows {
		got[row.Scenario+" / "+row.Figure] = row
	}
	for _, key := range []string{"store jetstream R3 / session/list p99, at 30 stored sessions",
		"store jetstream R3 / adoption pass (BusySessions), at 30 stored sessions", "store jetstream R3 / nats-server 1 CPU per commit",
		"store jetstream R3 / NATS garbage collection, at 30 stored sessions", "store jetstream R3 / session/list p99 under writes, at 30 stored sessions"} {
		if got[key].Value <= 0 {
			t.Errorf("no %s among %v", key, slices.Collect(maps.Keys(got)))
		}
	}
	if row := got["store jetstream R3 / session/list p50 under writes, at 30 stored sessions"]; !strings.Contains(row.Note, "row updates/s") ||
		strings.Contains(row.Note, "beside 0 row updates/s") {
		t.Errorf("lists under writes: %+v, want them beside some writes", row)
	}
	if row := got["store jetstream R3 / server CPU per commit"]; row.Value <= 0 || !strings.Contains(row.Note, "3 NATS servers (nats-server processes)") {
		t.Errorf("server CPU per commit: %+v, want the three nats-server processes'", row)
	}
}

// Each node routes to the others and to itself never; a lone node runs no
// cluster.
func TestNodeArgs(t *testing.T) {
	args := strings.Join(nodeArgs(1, []int{1, 2, 3}, []int{11, 12, 13}, 3), " ")
	for _, want := range []string{"--nats-listen 127.0.0.1:2", "--nats-cluster-listen 127.0.0.1:12",
		"--nats-routes nats://127.0.0.1:11,nats://127.0.0.1:13", "--jetstream-replicas 3", "--node-id n2", "--store jetstream"} {
		if !strings.Contains(args, want) {
			t.Errorf("node 2's flags %q lack %q", args, want)
		}
	}
	if args := strings.Join(nodeArgs(0, []int{1}, []int{11}, 1), " "); strings.Contains(args, "route") || strings.Contains(args, "cluster") {
		t.Errorf("a lone node's flags %q", args)
	}
	ports, err := freePorts(4)
	if err != nil || len(ports) != 4 || len(slices.Compact(slices.Sorted(slices.Values(ports)))) != 4 {
		t.Errorf("freePorts = %v, %v", ports, err)
	}
}

// What cannot run is refused before anything starts.
func TestConfigCheck(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"two nodes take one replica", Config{ClusterNodes: 2}, true},
		{"unknown backend", Config{StoreBackends: []string{"redis"}}, false},
		{"one node has no follower", Config{ClusterNodes: 1}, false},
		{"two replicas", Config{ClusterNodes: 3, ClusterReplicas: 2}, false},
		{"more replicas than nodes", Config{ClusterNodes: 2, ClusterReplicas: 3}, false},
		{"unknown scenario", Config{Scenarios: []string{"nope"}}, false},
	} {
		c.cfg.defaults()
		if err := c.cfg.check(); (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
