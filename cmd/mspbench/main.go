// Command mspbench is mspd's load benchmark: it starts an mspd, drives it
// with real WebSocket clients and prints each figure beside a baseline
// measured in the same run (see package bench and BENCHMARKS.md).
//
//	mspbench [--bin PATH] [--scenarios turns,notice,idle,resume,append,store,cluster,memory,gateway,failover] [--json]
//	mspbench gateway [--rates 100,500,1000,2000] [--duration 60s] [--conns 1000] [--json]
//
// The second form runs the gateway scenario alone, where its flags may
// drop their gateway- prefix.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"mspd/bench"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) == 1 && args[0] == bench.RawServerArg {
		if err := bench.ServeRaw(ctx, stdout); err != nil {
			fmt.Fprintln(stderr, "mspbench raw-server:", err)
			return 1
		}
		return 0
	}
	gatewayOnly := len(args) > 0 && args[0] == "gateway"
	if gatewayOnly {
		args = args[1:]
	}
	fs := flag.NewFlagSet("mspbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg bench.Config
	var scenarios, serverArgs string
	var gatewayRates floatList
	var turnSessions, idleConns, clusterSessions, failoverSessions intList
	var storeBackends, appendStores string
	var asJSON bool
	fs.StringVar(&cfg.Bin, "bin", "", "mspd binary to benchmark (default: build ./cmd/mspd)")
	fs.StringVar(&cfg.ModuleDir, "module", ".", "mspd module to build when --bin is not given")
	fs.StringVar(&cfg.WorkDir, "work", "", "directory for the binary and data directories (default: a temporary one)")
	fs.StringVar(&scenarios, "scenarios", strings.Join(bench.DefaultScenarios, ","),
		"scenarios to run: "+strings.Join(bench.Scenarios, ", ")+" (gateway and failover only when named)")
	fs.StringVar(&serverArgs, "server-args", "", "extra flags for every mspd started, space-separated (e.g. \"--queue-frames 256\")")
	fs.Var(&turnSessions, "turn-sessions", "turns: session counts (default 100,1000)")
	fs.IntVar(&cfg.TurnDeltas, "turn-deltas", 1000, "turns: deltas of each turn's answer")
	fs.IntVar(&cfg.KeepUpSessions, "keepup-sessions", 100, "turns: sessions of the keeps-up operating point (-1: none)")
	fs.IntVar(&cfg.KeepUpDeltas, "keepup-deltas", 200, "turns: deltas of each keeps-up turn's answer")
	fs.IntVar(&cfg.KeepUpPaceMs, "keepup-pace-ms", 5, "turns: milliseconds between a keeps-up answer's deltas")
	fs.IntVar(&cfg.Rounds, "rounds", 5, "turns, resume, append, store, cluster: rounds of mspd and the baseline, alternating (figures are medians)")
	fs.IntVar(&cfg.NoticeSessions, "notice-sessions", 100, "notice: sessions of the steady run")
	fs.IntVar(&cfg.NoticeTurns, "notice-turns", 500, "notice: turns of the steady run")
	fs.Float64Var(&cfg.NoticeRate, "notice-rate", 100, "notice: turns a second of the steady run")
	fs.IntVar(&cfg.NoticeBurst, "notice-burst", 1000, "notice: turns started at once in the burst run (0: none)")
	fs.IntVar(&cfg.NoticeDeltas, "notice-deltas", 50, "notice: deltas of each turn's answer")
	fs.Var(&idleConns, "idle-conns", "idle: connection counts (default 1000,10000)")
	fs.IntVar(&cfg.ResumeEvents, "resume-events", 10000, "resume: durable events in the log resumed")
	fs.IntVar(&cfg.AppendSessions, "append-sessions", 100, "append: sessions")
	fs.IntVar(&cfg.AppendTurns, "append-turns", 20, "append: one-delta turns per session; store: turns (two commits each) per session")
	fs.StringVar(&appendStores, "append-stores", strings.Join(bench.AppendStores, ","),
		"append: deployments mspd runs on, of "+strings.Join(bench.AppendStores, ", ")+" (jetstream-r3: three nodes, a third of the sessions each)")
	fs.StringVar(&storeBackends, "store-backends", strings.Join(bench.StoreBackends, ","),
		"store: backends, of "+strings.Join(bench.StoreBackends, ", ")+" (jetstream-r3x3: three writers, one a node)")
	var storeRows, storeStreams, leaseSessions intList
	fs.Var(&leaseSessions, "lease-sessions", "store: counts of sessions one node claims, each topping the last up, at which its lease upkeep is measured on each JetStream deployment (default 1000,10000,100000)")
	fs.Var(&storeStreams, "store-streams", "store: on each JetStream deployment, run the rounds again on a store spreading sessions over each of these stream counts (e.g. 1,2,4; default none)")
	fs.IntVar(&cfg.StoreListWrites, "store-list-writes", 0, "store: row updates a second beside which lists are timed again, for --store-list-window at each of --store-rows (0: none)")
	fs.IntVar(&cfg.StoreListWritesHot, "store-list-writes-hot", 0, "store: the --store-list-writes update only the rows of this many sessions, the last stored (0: any stored)")
	fs.DurationVar(&cfg.StoreListWindow, "store-list-window", time.Minute, "store: how long lists are timed beside --store-list-writes")
	fs.Var(&storeRows, "store-rows", "store: counts of stored sessions at which session/list and an adoption pass are timed, each topping the last up (default 10000)")
	fs.StringVar(&cfg.NATSServer, "nats-server", "", "a nats-server binary: JetStream deployments run their NATS servers as its processes, one a node, instead of inside the mspd nodes (build one with: go build -o nats-server github.com/nats-io/nats-server/v2)")
	fs.Func("nats-env", "with --nats-server: a variable added to the nats-server processes' environment, NAME=value (repeatable; e.g. GOMAXPROCS=1)", func(v string) error {
		if !strings.Contains(v, "=") {
			return fmt.Errorf("want NAME=value, got %q", v)
		}
		cfg.NATSEnv = append(cfg.NATSEnv, v)
		return nil
	})
	fs.IntVar(&cfg.ClusterNodes, "cluster-nodes", 3, "cluster: mspd nodes on JetStream (2 or more)")
	fs.IntVar(&cfg.ClusterReplicas, "cluster-replicas", 0, "cluster: JetStream replicas (default 3, or 1 on 2 nodes)")
	fs.Var(&clusterSessions, "cluster-sessions", "cluster: session counts (default 100)")
	fs.IntVar(&cfg.MemoryTurns, "memory-turns", 12, "memory: turns of the history read")
	fs.IntVar(&cfg.MemoryInputBytes, "memory-input-bytes", 10_000_000, "memory: input bytes of each turn of the history, and the size of the maximum-size frames")
	fs.IntVar(&cfg.MemoryStalled, "memory-stalled", 3, "memory: connections that never read, each sending view/page after view/page")
	fs.IntVar(&cfg.MemoryFramers, "memory-framers", 20, "memory: connections each sending maximum-size frames")
	fs.Var(&failoverSessions, "failover-sessions", "failover: busy session counts, each on a fresh three-node cluster whose n1 is killed (default 1,100,1000)")
	fs.DurationVar(&cfg.FailoverLeaseTTL, "failover-lease-ttl", 10*time.Second, "failover: the nodes' --lease-ttl")
	gatewayFlags(fs, &cfg, &gatewayRates, gatewayOnly)
	fs.StringVar(&cfg.Profile, "profile", "", "write server profiles to `PREFIX`.turns<N>x<K>, PREFIX.resume, PREFIX.append-<store> and PREFIX.notice-burst (CPU), PREFIX.idle<N>.heap, .goroutine, .heap.txt, PREFIX.gateway<rate> (CPU) and .heap, .heap.txt, .goroutine, PREFIX.store-list<stored>.nats<i> (CPU, with --nats-server) (starts mspd with --pprof)")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON instead of a table")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg.Scenarios = strings.Split(scenarios, ",")
	if gatewayOnly {
		cfg.Scenarios = []string{"gateway"}
	}
	cfg.GatewayRates = gatewayRates
	cfg.ServerArgs = strings.Fields(serverArgs)
	cfg.TurnSessions, cfg.IdleConns, cfg.ClusterSessions, cfg.FailoverSessions = turnSessions, idleConns, clusterSessions, failoverSessions
	cfg.StoreRows, cfg.StoreStreams, cfg.LeaseSessions = storeRows, storeStreams, leaseSessions
	cfg.StoreBackends = strings.Split(storeBackends, ",")
	cfg.AppendStores = strings.Split(appendStores, ",")
	cfg.Log = stderr
	rep, err := bench.Run(ctx, cfg)
	if rep != nil {
		if asJSON {
			rep.WriteJSON(stdout)
		} else {
			rep.WriteTable(stdout)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "mspbench:", err)
		return 1
	}
	return 0
}

// gatewayFlags adds the gateway scenario's flags, named gateway-…, and
// also without the prefix for mspbench gateway.
func gatewayFlags(fs *flag.FlagSet, cfg *bench.Config, rates *floatList, short bool) {
	names := func(name string) []string {
		if short {
			return []string{"gateway-" + name, name}
		}
		return []string{"gateway-" + name}
	}
	for _, n := range names("rates") {
		fs.Var(rates, n, "gateway: offered rates in turns/s, each a row (default 100,500,1000,2000)")
	}
	cfg.GatewayKnee = true
	for _, n := range names("knee") {
		fs.BoolVar(&cfg.GatewayKnee, n, true, "gateway: past the last rate, go on 1.5× a step while mspd keeps up (99% achieved, 100% success)")
	}
	for _, n := range names("duration") {
		fs.DurationVar(&cfg.GatewayDuration, n, 60*time.Second, "gateway: how long each rate is offered (10s for a quick run)")
	}
	for _, n := range names("conns") {
		fs.IntVar(&cfg.GatewayConns, n, 1000, "gateway: client connections the sessions are spread over")
	}
	for _, n := range names("first-byte") {
		fs.DurationVar(&cfg.GatewayFirstByte, n, 300*time.Millisecond, "gateway: the fake provider's wait before its first byte")
	}
	for _, n := range names("total") {
		fs.DurationVar(&cfg.GatewayTotal, n, 1500*time.Millisecond, "gateway: the fake provider's whole answer time")
	}
	for _, n := range names("chunks") {
		fs.IntVar(&cfg.GatewayChunks, n, 10, "gateway: deltas of each answer after the first")
	}
	for _, n := range names("poisson") {
		fs.BoolVar(&cfg.GatewayPoisson, n, false, "gateway: Poisson arrivals instead of evenly spaced ones")
	}
}

// floatList is a comma-separated list of positive numbers.
type floatList []float64

func (l *floatList) String() string { return fmt.Sprint([]float64(*l)) }

func (l *floatList) Set(v string) error {
	*l = nil
	for part := range strings.SplitSeq(v, ",") {
		n, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("%q is not a positive rate", part)
		}
		*l = append(*l, n)
	}
	return nil
}

// intList is a comma-separated list of counts.
type intList []int

func (l *intList) String() string { return fmt.Sprint([]int(*l)) }

func (l *intList) Set(v string) error {
	*l = nil
	for part := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n <= 0 {
			return fmt.Errorf("%q is not a positive count", part)
		}
		*l = append(*l, n)
	}
	return nil
}
