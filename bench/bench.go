package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Scenarios lists every scenario, in the order they run.
var Scenarios = []string{"turns", "notice", "idle", "resume", "append", "store", "cluster", "memory", "gateway", "failover"}

// DefaultScenarios are the scenarios run when a Config names none: all but
// gateway, whose sweep takes minutes a rate (mspbench gateway runs it),
// and failover, which starts a cluster for each session count and waits
// out a lease TTL in each.
var DefaultScenarios = slices.DeleteFunc(slices.Clone(Scenarios), func(s string) bool { return s == "gateway" || s == "failover" })

// Config is one benchmark run.
type Config struct {
	// Bin is the mspd binary; empty builds ./cmd/mspd of ModuleDir.
	Bin string
	// ModuleDir is the mspd module to build when Bin is empty (default ".").
	ModuleDir string
	// WorkDir holds the binary and the servers' data directories (default
	// a temporary directory, removed afterwards).
	WorkDir string
	// ServerArgs are extra flags for every mspd started (e.g.
	// --queue-frames 256).
	ServerArgs []string
	// NATSServer, when set, is a nats-server binary: the JetStream
	// deployments run their NATS servers as processes of it, one a node,
	// apart from the mspd nodes (as production does), instead of inside
	// them (--nats-embedded).
	NATSServer string
	// NATSEnv are variables added to the nats-server processes'
	// environment (NAME=value), e.g. GOMAXPROCS=1 for servers that share
	// the machine's CPUs as a container's limit would share them.
	NATSEnv []string
	// ServerEnv are variables added to every mspd process's environment
	// (NAME=value): the tests run their own binary as mspd with one.
	ServerEnv []string
	// Scenarios to run (default all); raw baselines run with the
	// scenarios that compare against them.
	Scenarios []string

	// TurnSessions are the session counts of the turns scenario (default
	// 100 and 1000), each session on its own connection with one turn:
	// a 429 and then TurnDeltas deltas.
	TurnSessions []int
	TurnDeltas   int // default 1000
	// KeepUpSessions sessions run the turns scenario's other operating
	// point (default 100; negative: none): one turn each of
	// KeepUpDeltas deltas (default 200) that the scripted provider paces
	// KeepUpPaceMs apart (default 5), as a person reads a streaming answer,
	// so that the reader keeps up and gets one frame a delta.
	KeepUpSessions int
	KeepUpDeltas   int
	KeepUpPaceMs   int
	// Rounds is how many times the turns, resume, append, store and
	// cluster scenarios and their baselines run, alternately, on the same
	// connections; figures are medians (default 5).
	Rounds int

	// NoticeSessions sessions receive NoticeTurns turns at NoticeRate
	// turns a second (defaults 100, 500, 100/s); NoticeBurst sessions
	// then start one turn each at once (default 1000; 0 skips).
	NoticeSessions int
	NoticeTurns    int
	NoticeRate     float64
	NoticeBurst    int
	// NoticeDeltas is the length of each notice turn's answer (default 50).
	NoticeDeltas int

	// IdleConns are the connection counts of the idle scenario (default
	// 1000 and 10000).
	IdleConns []int
	// ResumeEvents is the size of the log resumed (default 10000).
	ResumeEvents int
	// AppendSessions run AppendTurns one-delta turns each (defaults 100
	// and 20).
	AppendSessions int
	AppendTurns    int
	// AppendStores are the deployments append runs mspd on (default all
	// of AppendStores).
	AppendStores []string

	// StoreBackends are the backends of the store scenario (default all of
	// StoreBackends): AppendSessions sessions × AppendTurns turns of two
	// commits each through store.Store, for Rounds rounds alternating with
	// plain SQLite. StoreRows are the counts of stored sessions at which
	// its listing and adoption pass are timed, each topping the last up
	// (default 10000).
	StoreBackends []string
	StoreRows     []int
	// StoreStreams, when set, are the stream counts at which the store
	// scenario's rounds run again on each JetStream deployment (e.g. 1,
	// 2, 4).
	StoreStreams []int
	// LeaseSessions are the counts of sessions one node claims, each
	// topping the last up, at which the store scenario measures its lease
	// upkeep on each JetStream deployment (default 1000, 10000, 100000).
	LeaseSessions []int
	// StoreListWrites, when above 0, is a rate of row updates (commits a
	// second) beside which the store scenario times lists again, for
	// StoreListWindow (default a minute: long enough for the NATS servers'
	// heaps to be collected several times, as in service) at each of
	// StoreRows, once the quiet lists are timed.
	StoreListWrites int
	StoreListWindow time.Duration
	// StoreListWritesHot, when above 0, has those writes update only the
	// rows of the last sessions stored, this many: people's turns go to
	// the chats they use now, whose rows the servers hold warm.
	StoreListWritesHot int

	// ClusterNodes mspd processes on JetStream with ClusterReplicas
	// replicas (defaults 3 and 3; 2 nodes take 1 replica) run the cluster
	// scenario: the turns scenario for each of ClusterSessions (default
	// 100) led by node 1, read there and on node 2, beside one SQLite node.
	ClusterNodes    int
	ClusterReplicas int
	ClusterSessions []int

	// MemoryTurns turns of MemoryInputBytes of input each make the history
	// the memory scenario reads (defaults 12 and 10 MB); MemoryStalled
	// connections that never read send it view/page after view/page, and
	// MemoryFramers connections send it maximum-size frames (defaults 3
	// and 20).
	MemoryTurns      int
	MemoryInputBytes int
	MemoryStalled    int
	MemoryFramers    int

	// GatewayRates are the offered rates of the gateway scenario's sweep,
	// in turns a second (default 100, 500, 1000, 2000); with GatewayKnee
	// the sweep goes on past the last, half as much again each step,
	// while mspd keeps up (99% of the offered rate achieved, every turn a
	// success), so that the last row is past the knee.
	GatewayRates []float64
	GatewayKnee  bool
	// GatewayDuration is how long each rate is offered (default 60 s);
	// its turns' sessions are all opened before, over GatewayConns
	// connections (default 1000).
	GatewayDuration time.Duration
	GatewayConns    int
	// GatewayFirstByte and GatewayTotal time the fake provider's answers:
	// its first byte after GatewayFirstByte (default 300 ms), its end
	// after GatewayTotal (default 1.5 s), GatewayChunks deltas after the
	// first between them (default 10).
	GatewayFirstByte time.Duration
	GatewayTotal     time.Duration
	GatewayChunks    int
	// GatewayPoisson makes the arrivals Poisson (exponential gaps, a fixed
	// seed) instead of evenly spaced.
	GatewayPoisson bool

	// FailoverSessions are the busy session counts of the failover
	// scenario (default 1, 100 and 1000), each on a fresh cluster of three
	// nodes whose --lease-ttl is FailoverLeaseTTL (default 10 s, the
	// server's).
	FailoverSessions []int
	FailoverLeaseTTL time.Duration

	// Profile, when set, starts the servers with --pprof and writes
	// profiles named after it: a CPU profile of each turns run
	// (Profile.turns<N>x<K>, taken while the turns run again after the
	// measured rounds), of resumes (Profile.resume, likewise), of the
	// append scenario on one node (Profile.append-<store>, likewise), of
	// the notice scenario's burst (Profile.notice-burst, while short
	// bursts run again on its sessions), and
	// of each gateway rate's mspd (Profile.gateway<rate>, up to 15 s of
	// the steady state, and its heap and goroutines as the last turn is
	// due: .heap, .heap.txt, .goroutine), the heap and goroutines with each idle count
	// open (Profile.idle<N>.heap, .goroutine, and .txt: the heap with the
	// runtime's memory statistics).
	Profile string

	// Log receives progress lines (default os.Stderr).
	Log io.Writer
}

func (c *Config) defaults() {
	if c.ModuleDir == "" {
		c.ModuleDir = "."
	}
	if len(c.Scenarios) == 0 {
		c.Scenarios = DefaultScenarios
	}
	if len(c.TurnSessions) == 0 {
		c.TurnSessions = []int{100, 1000}
	}
	if c.TurnDeltas <= 0 {
		c.TurnDeltas = 1000
	}
	if c.KeepUpSessions == 0 {
		c.KeepUpSessions = 100
	}
	if c.KeepUpDeltas <= 0 {
		c.KeepUpDeltas = 200
	}
	if c.KeepUpPaceMs <= 0 {
		c.KeepUpPaceMs = 5
	}
	if c.Rounds <= 0 {
		c.Rounds = 5
	}
	if c.NoticeSessions <= 0 {
		c.NoticeSessions = 100
	}
	if c.NoticeTurns <= 0 {
		c.NoticeTurns = 500
	}
	if c.NoticeRate <= 0 {
		c.NoticeRate = 100
	}
	if c.NoticeBurst < 0 {
		c.NoticeBurst = 0
	}
	if c.NoticeDeltas <= 0 {
		c.NoticeDeltas = 50
	}
	if len(c.IdleConns) == 0 {
		c.IdleConns = []int{1000, 10000}
	}
	if c.ResumeEvents <= 0 {
		c.ResumeEvents = 10000
	}
	if c.AppendSessions <= 0 {
		c.AppendSessions = 100
	}
	if c.AppendTurns <= 0 {
		c.AppendTurns = 20
	}
	if len(c.AppendStores) == 0 {
		c.AppendStores = AppendStores
	}
	if len(c.StoreBackends) == 0 {
		c.StoreBackends = StoreBackends
	}
	if len(c.StoreRows) == 0 {
		c.StoreRows = []int{10000}
	}
	slices.Sort(c.StoreRows)
	if c.StoreListWindow <= 0 {
		c.StoreListWindow = time.Minute
	}
	if len(c.LeaseSessions) == 0 {
		c.LeaseSessions = []int{1_000, 10_000, 100_000}
	}
	slices.Sort(c.LeaseSessions)
	if c.ClusterNodes <= 0 {
		c.ClusterNodes = 3
	}
	if c.ClusterReplicas <= 0 {
		c.ClusterReplicas = 3
		if c.ClusterNodes < 3 {
			c.ClusterReplicas = 1
		}
	}
	if len(c.ClusterSessions) == 0 {
		c.ClusterSessions = []int{100}
	}
	if c.MemoryTurns <= 0 {
		c.MemoryTurns = 12
	}
	if c.MemoryInputBytes <= 0 {
		c.MemoryInputBytes = 10_000_000
	}
	if c.MemoryStalled <= 0 {
		c.MemoryStalled = 3
	}
	if c.MemoryFramers <= 0 {
		c.MemoryFramers = 20
	}
	c.gatewayDefaults()
	if len(c.FailoverSessions) == 0 {
		c.FailoverSessions = []int{1, 100, 1000}
	}
	if c.FailoverLeaseTTL <= 0 {
		c.FailoverLeaseTTL = 10 * time.Second
	}
	if c.Log == nil {
		c.Log = os.Stderr
	}
}

func (c *Config) gatewayDefaults() {
	if len(c.GatewayRates) == 0 {
		c.GatewayRates = []float64{100, 500, 1000, 2000}
	}
	if c.GatewayDuration <= 0 {
		c.GatewayDuration = 60 * time.Second
	}
	if c.GatewayConns <= 0 {
		c.GatewayConns = 1000
	}
	if c.GatewayFirstByte <= 0 {
		c.GatewayFirstByte = 300 * time.Millisecond
	}
	if c.GatewayTotal <= 0 {
		c.GatewayTotal = 1500 * time.Millisecond
	}
	if c.GatewayChunks <= 0 {
		c.GatewayChunks = 10
	}
}

// Row is one figure of the report. Where a baseline applies, it was
// measured in the same run, on the same machine, at the same load.
type Row struct {
	Scenario string  `json:"scenario"`
	Figure   string  `json:"figure"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	// Baseline is the same figure for the raw baseline (coder/websocket
	// alone, or plain SQLite); 0 when none applies.
	Baseline float64 `json:"baseline,omitempty"`
	// Ratio is Value ÷ Baseline for rates (higher is better for mspd).
	Ratio float64 `json:"ratio,omitempty"`
	Note  string  `json:"note,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpuModel"`
	GoVersion string `json:"goVersion"`
	OS        string `json:"os"`
}

// Report is a whole run.
type Report struct {
	Started  time.Time `json:"started"`
	Machine  Machine   `json:"machine"`
	Server   string    `json:"server"`
	FDLimit  uint64    `json:"fdLimit"`
	Rows     []Row     `json:"rows"`
	Duration float64   `json:"durationSeconds"`
}

// runner carries one run's state.
type runner struct {
	cfg Config
	bin string
	raw *rawServer
	rep *Report
}

// Run runs the configured scenarios and returns the report; a scenario
// that fails ends the run with its error and the rows so far.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	limit, err := raiseFileLimit()
	if err != nil {
		return nil, fmt.Errorf("raising RLIMIT_NOFILE: %w", err)
	}
	if need := 2*slices.Max(cfg.IdleConns) + 256; slices.Contains(cfg.Scenarios, "idle") && limit < uint64(need) {
		fmt.Fprintf(cfg.Log, "mspbench: warning: RLIMIT_NOFILE is %d; %d idle connections need about %d\n", limit, slices.Max(cfg.IdleConns), need)
	}
	rep := &Report{Started: time.Now(), Machine: machine(), FDLimit: limit}
	if cfg.WorkDir == "" {
		dir, err := os.MkdirTemp("", "mspbench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		cfg.WorkDir = dir
	}
	r := &runner{cfg: cfg, bin: cfg.Bin, rep: rep}
	if r.bin == "" {
		r.logf("building ./cmd/mspd")
		if r.bin, err = buildServer(ctx, cfg.ModuleDir, cfg.WorkDir); err != nil {
			return nil, err
		}
	}
	rep.Server = r.bin
	defer func() { rep.Duration = time.Since(rep.Started).Seconds() }()
	if r.raw, err = startRaw(ctx); err != nil {
		return nil, fmt.Errorf("raw baseline: %w", err)
	}
	defer r.raw.stop()
	scenarios := map[string]func(context.Context) error{
		"turns":    r.turns,
		"notice":   r.notice,
		"idle":     r.idle,
		"resume":   r.resume,
		"append":   r.append,
		"store":    r.storeScenario,
		"cluster":  r.clusterScenario,
		"memory":   r.memory,
		"gateway":  r.gateway,
		"failover": r.failoverScenario,
	}
	for _, s := range Scenarios {
		if !slices.Contains(cfg.Scenarios, s) {
			continue
		}
		r.logf("scenario %s", s)
		if err := scenarios[s](ctx); err != nil {
			return rep, fmt.Errorf("scenario %s: %w", s, err)
		}
	}
	return rep, nil
}

// check refuses what names nothing or cannot run.
func (c *Config) check() error {
	for _, s := range c.Scenarios {
		if !slices.Contains(Scenarios, s) {
			return fmt.Errorf("unknown scenario %q (want %s)", s, strings.Join(Scenarios, ", "))
		}
	}
	for _, st := range c.AppendStores {
		if !slices.Contains(AppendStores, st) {
			return fmt.Errorf("unknown append store %q (want %s)", st, strings.Join(AppendStores, ", "))
		}
	}
	for _, b := range c.StoreBackends {
		if !slices.Contains(StoreBackends, b) {
			return fmt.Errorf("unknown store backend %q (want %s)", b, strings.Join(StoreBackends, ", "))
		}
	}
	if c.GatewayTotal < c.GatewayFirstByte {
		return fmt.Errorf("the fake's answer (%s) ends before its first byte (%s)", c.GatewayTotal, c.GatewayFirstByte)
	}
	for _, rate := range c.GatewayRates {
		if rate <= 0 {
			return fmt.Errorf("gateway rate %g: want a positive rate", rate)
		}
	}
	if c.ClusterNodes < 2 {
		return fmt.Errorf("a cluster of %d nodes: want 2 or more (a follower reads)", c.ClusterNodes)
	}
	if c.ClusterReplicas != 1 && c.ClusterReplicas != 3 && c.ClusterReplicas != 5 || c.ClusterReplicas > c.ClusterNodes {
		return fmt.Errorf("%d replicas on %d nodes: want 1, 3 or 5, at most one a node", c.ClusterReplicas, c.ClusterNodes)
	}
	return nil
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Log, "mspbench: "+format+"\n", args...)
}

// add records a row.
func (r *runner) add(row Row) {
	if row.Baseline != 0 && row.Ratio == 0 {
		row.Ratio = row.Value / row.Baseline
	}
	r.rep.Rows = append(r.rep.Rows, row)
	r.logf("  %s", formatRow(row))
}

// startServer starts an mspd for one scenario.
func (r *runner) startServer(ctx context.Context) (*server, error) {
	args := r.cfg.ServerArgs
	if r.cfg.Profile != "" {
		args = append(slices.Clip(args), "--pprof")
	}
	return startServer(ctx, r.bin, r.cfg.WorkDir, args, r.cfg.ServerEnv)
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return m
}

// WriteTable prints the report as one table.
func (rep *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "mspbench %s — %d CPUs (%s), %s, %s\n\n", rep.Started.Format(time.DateOnly),
		rep.Machine.CPUs, rep.Machine.CPUModel, rep.Machine.OS, rep.Machine.GoVersion)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tfigure\tvalue\tbaseline\tratio\tnote")
	for _, row := range rep.Rows {
		base, ratio := "", ""
		if row.Baseline != 0 {
			base = formatValue(row.Baseline, row.Unit)
			ratio = fmt.Sprintf("%.2f", row.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", row.Scenario, row.Figure, formatValue(row.Value, row.Unit), base, ratio, row.Note)
	}
	return tw.Flush()
}

// WriteJSON prints the report as JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func formatRow(row Row) string {
	s := fmt.Sprintf("%s: %s", row.Figure, formatValue(row.Value, row.Unit))
	if row.Baseline != 0 {
		s += fmt.Sprintf(" (baseline %s, ratio %.2f)", formatValue(row.Baseline, row.Unit), row.Ratio)
	}
	if row.Note != "" {
		s += " — " + row.Note
	}
	return s
}

func formatValue(v float64, unit string) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, unit)
	case v >= 10:
		return fmt.Sprintf("%.1f %s", v, unit)
	}
	return fmt.Sprintf("%.2f %s", v, unit)
}

// errIncomplete reports a scenario whose clients did not get what they
// were owed.
var errIncomplete = errors.New("incomplete")
