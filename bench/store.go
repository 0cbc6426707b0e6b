package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"mspd/cluster"
	"mspd/schema/msp"
	"mspd/store"
	msjs "mspd/store/jetstream"
	"mspd/store/sqlite"
)

// StoreBackends lists the backends of the store scenario, in the order
// each round runs them.
var StoreBackends = []string{"sqlite", "jetstream-r1", "jetstream-r3", "jetstream-r3x3"}

// recordShape is one record of a turn's commits: its method and the size
// of its params.
type recordShape struct {
	method string
	size   int
}

// commitShape is one of a turn's commits.
type commitShape struct {
	records []recordShape
	row     bool // the session row rides with it
	busy    bool // the row says a turn runs
	command bool // the turn/start's ledger entry rides with it
}

// turnCommits are the commits session.Manager makes for a one-attempt
// turn on an idle session (session/commits_test.go,
// TestTwoCommitsPerTurn): the admission with turn/started, the user's
// item, the row and the ledger entry; the answer's item/completed, the
// usage and turn/completed with the row (its item/started is ephemeral). Params sizes
// are those of a second turn with a short answer in mspd's own log (the
// demo model answering a one-line question).
var turnCommits = []commitShape{
	{records: []recordShape{{msp.NotifyTurnStarted, 428}, {msp.NotifyItemCompleted, 627}}, row: true, busy: true, command: true},
	{records: []recordShape{{msp.NotifyItemCompleted, 846}, {msp.NotifySessionTokenUsage, 625}, {msp.NotifyTurnCompleted, 586}}, row: true},
}

// Sizes of the rest of a turn's commits, from the same log: the session
// state in its row, and a ledger entry's digest and recorded response.
const (
	rowStateSize      = 250
	ledgerDigestSize  = 64
	ledgerResponseLen = 166
)

// recordsPerTurn is how many records turnCommits append.
func recordsPerTurn() int {
	n := 0
	for _, c := range turnCommits {
		n += len(c.records)
	}
	return n
}

// turnBatches are one turn's commits for session id whose log ends at
// head, as turnCommits shapes them.
func turnBatches(id string, head int64, created time.Time) []store.Batch {
	out := make([]store.Batch, 0, len(turnCommits))
	for _, c := range turnCommits {
		b := store.Batch{SessionID: id}
		for _, r := range c.records {
			head++
			b.Records = append(b.Records, store.Record{Seq: head, Method: r.method, Params: paddedJSON(r.size)})
		}
		if c.row {
			b.Session = &store.Session{ID: id, CreatedAt: created, UpdatedAt: time.Now(), Busy: c.busy, State: paddedJSON(rowStateSize)}
		}
		if c.command {
			b.Commands = []store.Command{{ID: newCommandID(), Digest: strings.Repeat("d", ledgerDigestSize), Response: paddedJSON(ledgerResponseLen)}}
		}
		out = append(out, b)
	}
	return out
}

// paddedJSON is a JSON object of exactly size bytes (at least 8).
func paddedJSON(size int) []byte {
	return []byte(`{"p":"` + strings.Repeat("x", max(size-8, 0)) + `"}`)
}

// storeTarget is one backend of the store scenario: the stores sessions
// are spread over (one per mspd node writing), and its figures so far.
type storeTarget struct {
	name    string
	label   string
	writers []store.Store
	nodes   *nodes // the JetStream servers' mspd nodes; nil for SQLite
	tally   storeTally
}

// storeTally adds up a target's rounds.
type storeTally struct {
	rates    []float64 // records/s, a round each
	ratios   []float64 // ÷ plain SQLite in the same round
	commits  int
	elapsed  time.Duration
	commitLt []time.Duration
	// serverCPU is the JetStream nodes' CPU over the rounds, clientCPU
	// this process's (for SQLite: the store and its callers).
	serverCPU, clientCPU time.Duration
	nodeCPU              []time.Duration // serverCPU by node
	alone                []time.Duration // commits of one session with the store to itself
}

// store: durable appends/s through the store interface, AppendSessions
// sessions at once, each running AppendTurns turns one after another, each
// turn the two commits the session layer makes (turnCommits), on every
// backend in StoreBackends, the rounds alternating between them and plain
// SQLite (the append scenario's baseline, committing the same records in
// the same batches). JetStream runs in mspd nodes started for it (their
// embedded NATS servers, fsyncing every write as mspd configures them);
// the stores are opened in this process on a stream of their own. Then,
// on each JetStream deployment, the lease renewals the cluster package
// makes, and on every backend the row scans a clustered node repeats.
func (r *runner) storeScenario(ctx context.Context) error {
	targets, closeAll, err := r.openStoreTargets(ctx)
	defer closeAll()
	if err != nil {
		return err
	}
	plain, err := openPlainSQLite(ctx, r.cfg.WorkDir)
	if err != nil {
		return fmt.Errorf("plain SQLite baseline: %w", err)
	}
	defer plain.close()
	n, turns := r.cfg.AppendSessions, r.cfg.AppendTurns
	var base []float64
	for round := range r.cfg.Rounds {
		r.logf("  round %d of %d", round+1, r.cfg.Rounds)
		rate, err := plainTurns(ctx, plain, n, turns)
		if err != nil {
			return fmt.Errorf("plain SQLite baseline: %w", err)
		}
		base = append(base, rate)
		for _, t := range targets {
			if err := t.round(ctx, n, turns); err != nil {
				return fmt.Errorf("%s: %w", t.label, err)
			}
			t.tally.ratios = append(t.tally.ratios, t.tally.rates[len(t.tally.rates)-1]/rate)
		}
	}
	note := fmt.Sprintf("%d sessions × %d turns × %d commits (%d records), median of %d rounds",
		n, turns, len(turnCommits), recordsPerTurn(), r.cfg.Rounds)
	r.add(Row{Scenario: "store plain SQLite", Figure: "durable appends/s", Value: median(base), Unit: "/s",
		Note: note + "; the records alone, same batches, one group-committing writer"})
	for _, t := range targets {
		if err := t.measureAlone(ctx, turns); err != nil {
			return fmt.Errorf("%s: %w", t.label, err)
		}
		t.addRows(r, median(base), note)
	}
	for _, t := range targets {
		if err := r.leaseRows(ctx, t); err != nil {
			return fmt.Errorf("%s leases: %w", t.label, err)
		}
	}
	for _, t := range targets {
		if err := r.scanRows(ctx, t); err != nil {
			return fmt.Errorf("%s row scan: %w", t.label, err)
		}
	}
	for _, t := range targets {
		if err := r.streamRows(ctx, t); err != nil {
			return fmt.Errorf("%s streams: %w", t.label, err)
		}
	}
	return nil
}

// streamsStream is the stream (and, with more, the first of the streams)
// streamRows writes.
const (
	streamsStream  = "MSPBENCH_STREAMS"
	streamsSubject = "mspbench-streams"
)

// streamRows measures, on a JetStream deployment, the same rounds of
// fresh sessions on a store spreading them over each of StoreStreams
// streams in turn (growing, as a deployment would: each count's new
// sessions spread over all its streams): commits/s, and the NATS servers'
// CPU a commit, which is what carries to servers of their own.
func (r *runner) streamRows(ctx context.Context, t *storeTarget) error {
	if t.nodes == nil || t.name == "jetstream-r3x3" || len(r.cfg.StoreStreams) == 0 {
		return nil // SQLite has one file; r3x3 is r3's servers
	}
	n, turns := r.cfg.AppendSessions, r.cfg.AppendTurns
	for _, streams := range r.cfg.StoreStreams {
		st, err := msjs.Connect(ctx, t.nodes.nats[0], msjs.Options{Stream: streamsStream, Subject: streamsSubject,
			Replicas: len(t.nodes.natsHosts()), Streams: streams}, t.nodes.connOptions()...)
		if err != nil {
			return err
		}
		one := &storeTarget{name: t.name, label: t.label, writers: []store.Store{st}, nodes: t.nodes}
		for range r.cfg.Rounds {
			if err := one.round(ctx, n, turns); err != nil {
				st.Close()
				return err
			}
		}
		st.Close()
		tl := one.tally
		label := fmt.Sprintf("%s, %d streams", t.label, streams)
		r.add(Row{Scenario: label, Figure: "commits/s", Value: float64(tl.commits) / tl.elapsed.Seconds(), Unit: "/s",
			Note: fmt.Sprintf("%d fresh sessions × %d turns × %d commits, %d rounds", n, turns, len(turnCommits), r.cfg.Rounds)})
		r.add(Row{Scenario: label, Figure: "NATS CPU per commit", Value: perItem(tl.serverCPU, tl.commits), Unit: "µs",
			Note: "all the servers (" + t.nodes.natsWhere() + ")"})
	}
	return nil
}

// openStoreTargets opens the configured backends; the returned close
// (never nil) closes whatever was opened.
func (r *runner) openStoreTargets(ctx context.Context) ([]*storeTarget, func(), error) {
	var targets []*storeTarget
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	var r3 *nodes // shared by jetstream-r3 and jetstream-r3x3
	for _, b := range StoreBackends {
		if !slices.Contains(r.cfg.StoreBackends, b) {
			continue
		}
		t := &storeTarget{name: b}
		switch b {
		case "sqlite":
			t.label = "store sqlite"
			dir, err := os.MkdirTemp(r.cfg.WorkDir, "store-sqlite-")
			if err != nil {
				return nil, closeAll, err
			}
			closers = append(closers, func() { os.RemoveAll(dir) })
			st, err := sqlite.Open(filepath.Join(dir, "mspd.db"))
			if err != nil {
				return nil, closeAll, err
			}
			closers = append(closers, func() { st.Close() })
			t.writers = []store.Store{st}
		case "jetstream-r1":
			t.label = "store jetstream R1"
			r.logf("  starting one mspd node on JetStream")
			ns, err := r.startNodes(ctx, 1, 1)
			if err != nil {
				return nil, closeAll, err
			}
			closers = append(closers, ns.stop)
			t.nodes = ns
		case "jetstream-r3", "jetstream-r3x3":
			t.label = "store jetstream R3"
			if b == "jetstream-r3x3" {
				t.label += ", a writer a node"
			}
			if r3 == nil {
				r.logf("  starting three mspd nodes on JetStream, three replicas")
				ns, err := r.startNodes(ctx, 3, 3)
				if err != nil {
					return nil, closeAll, err
				}
				closers = append(closers, ns.stop)
				r3 = ns
			}
			t.nodes = r3
		}
		if t.nodes != nil {
			urls := t.nodes.nats[:1]
			if b == "jetstream-r3x3" {
				urls = t.nodes.nats
			}
			for _, url := range urls {
				st, err := msjs.Connect(ctx, url, msjs.Options{Stream: benchStream, Subject: benchSubject, Replicas: len(t.nodes.natsHosts())},
					t.nodes.connOptions()...)
				if err != nil {
					return nil, closeAll, fmt.Errorf("%s: %w", t.label, err)
				}
				closers = append(closers, func() { st.Close() })
				t.writers = append(t.writers, st)
			}
		}
		targets = append(targets, t)
	}
	return targets, closeAll, nil
}

// The stream the store scenario writes: its own, beside the nodes' MSPD.
const (
	benchStream  = "MSPBENCH"
	benchSubject = "mspbench"
)

// round runs n fresh sessions × turns turns on the target, session i on
// writer i mod len(writers).
func (t *storeTarget) round(ctx context.Context, n, turns int) error {
	var mu sync.Mutex
	var lat []time.Duration
	var srvs []*server
	if t.nodes != nil {
		srvs = t.nodes.natsHosts()
	}
	cpu0, me0 := cpuOf(srvs), selfCPU()
	start := time.Now()
	err := parallel(ctx, n, n, func(ctx context.Context, i int) error {
		mine, err := sessionTurns(ctx, t.writers[i%len(t.writers)], turns)
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
		return err
	})
	elapsed := time.Since(start)
	if err != nil {
		return err
	}
	t.tally.serverCPU += addCPU(&t.tally.nodeCPU, cpu0, cpuOf(srvs))
	t.tally.clientCPU += selfCPU() - me0
	records := n * turns * recordsPerTurn()
	t.tally.rates = append(t.tally.rates, float64(records)/elapsed.Seconds())
	t.tally.commits += len(lat)
	t.tally.elapsed += elapsed
	t.tally.commitLt = append(t.tally.commitLt, lat...)
	return nil
}

// sessionTurns runs turns turns of a fresh session on st, one commit after
// another, and returns each commit's latency.
func sessionTurns(ctx context.Context, st store.Store, turns int) ([]time.Duration, error) {
	id, created := uuid.NewString(), time.Now()
	var head int64
	lat := make([]time.Duration, 0, turns*len(turnCommits))
	for range turns {
		for _, b := range turnBatches(id, head, created) {
			t0 := time.Now()
			if err := st.Commit(ctx, b); err != nil {
				return lat, err
			}
			lat = append(lat, time.Since(t0))
			head += int64(len(b.Records))
		}
	}
	return lat, nil
}

// measureAlone times the commits of one session's turns with the store to
// itself: the latency a turn adds on an idle node.
func (t *storeTarget) measureAlone(ctx context.Context, turns int) error {
	lat, err := sessionTurns(ctx, t.writers[0], turns)
	t.tally.alone = lat
	return err
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	cpu, _ := procCPU(os.Getpid())
	return cpu
}

// addRows reports a target's appends against plain SQLite's.
func (t *storeTarget) addRows(r *runner, base float64, note string) {
	tl := &t.tally
	r.add(Row{Scenario: t.label, Figure: "durable appends/s", Value: median(tl.rates), Unit: "/s", Baseline: base,
		Ratio: median(tl.ratios), Note: note + "; ratio: median of the rounds' ratios to plain SQLite"})
	commits := float64(tl.commits) / tl.elapsed.Seconds()
	r.add(Row{Scenario: t.label, Figure: "commits/s", Value: commits, Unit: "/s",
		Note: fmt.Sprintf("all rounds; %.0f turns/s at %d commits a turn", commits/float64(len(turnCommits)), len(turnCommits))})
	r.latencyRows(t.label, "commit", tl.commitLt, "one store.Commit, under the load above")
	if t.nodes != nil {
		r.add(Row{Scenario: t.label, Figure: "server CPU per commit", Value: perItem(tl.serverCPU, tl.commits), Unit: "µs",
			Note: fmt.Sprintf("all %d NATS servers (%s), over the rounds", len(t.nodes.natsHosts()), t.nodes.natsWhere())})
		if len(tl.nodeCPU) > 1 {
			for i, cpu := range tl.nodeCPU {
				host := "node n"
				if len(t.nodes.natsProcs) > 0 {
					host = "nats-server "
				}
				r.add(Row{Scenario: t.label, Figure: fmt.Sprintf("%s%d CPU per commit", host, i+1), Value: perItem(cpu, tl.commits), Unit: "µs",
					Note: "the stream's leader does the most"})
			}
		}
	}
	note = "this process: the store's client side and its callers"
	if t.nodes == nil {
		note = "this process: the store (SQLite included) and its callers"
	}
	r.add(Row{Scenario: t.label, Figure: "client CPU per commit", Value: perItem(tl.clientCPU, tl.commits), Unit: "µs", Note: note})
	p := percentilesOf(tl.alone)
	r.add(Row{Scenario: t.label, Figure: "commit p50, one session alone", Value: float64(p.p50.Microseconds()) / 1e3, Unit: "ms",
		Note: fmt.Sprintf("%d commits one after another, nothing else writing; p99 %.2f ms", p.n, float64(p.p99.Microseconds())/1e3)})
}

// plainTurns commits the records of n sessions × turns turns to the plain
// baseline in turnCommits' batches; it returns records/s.
func plainTurns(ctx context.Context, w *groupWriter, n, turns int) (float64, error) {
	start := time.Now()
	err := parallel(ctx, n, n, func(ctx context.Context, i int) error {
		id := uuid.NewString()
		var head int64
		for range turns {
			for _, b := range turnBatches(id, head, time.Now()) {
				rows := make([]row, len(b.Records))
				for j, rec := range b.Records {
					rows[j] = row{id, rec.Seq, rec.Params}
				}
				if err := w.commit(rows...); err != nil {
					return err
				}
				head += int64(len(rows))
			}
		}
		return nil
	})
	return float64(n*turns*recordsPerTurn()) / time.Since(start).Seconds(), err
}

// upkeepTTL is the lease TTL the upkeep is measured at: a node renews
// its heartbeat every third of it (at the default 10 s, a fifth of the
// writes measured).
const upkeepTTL = 2 * time.Second

// upkeepBucket prefixes the buckets of the measured node's leases,
// beside the mspd nodes' MSPD ones.
const upkeepBucket = "MSPBENCH"

// leaseRows measures, on a JetStream target's servers, what keeping its
// leases costs a node (the cluster package, in this process) that has
// claimed each of LeaseSessions sessions, topping the last up: KV writes
// a second (both lease buckets' streams), this process's CPU a second
// and the NATS servers', over one TTL (three heartbeats) once the claims
// are made. Flat in the sessions is the point: a node renews one
// heartbeat, not a lease a session.
func (r *runner) leaseRows(ctx context.Context, t *storeTarget) error {
	if t.nodes == nil || t.name == "jetstream-r3x3" || len(r.cfg.LeaseSessions) == 0 {
		return nil // no leases on SQLite; R3 is measured once
	}
	nc, err := nats.Connect(t.nodes.nats[0], t.nodes.connOptions()...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	c, err := cluster.New(ctx, nc, js, cluster.Options{Node: "mspbench", LeaseTTL: upkeepTTL, Bucket: upkeepBucket,
		Subject: "mspbench-node", Replicas: len(t.nodes.natsHosts()), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer c.Close()
	nodesKV, err := js.KeyValue(ctx, upkeepBucket+"_NODES")
	if err != nil {
		return err
	}
	beats, err := nodesKV.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return err
	}
	defer beats.Stop()
	writes := func() (uint64, error) {
		var sum uint64
		for _, bucket := range []string{upkeepBucket + "_NODES", upkeepBucket + "_CLAIMS"} {
			st, err := js.Stream(ctx, "KV_"+bucket)
			if err != nil {
				return 0, err
			}
			info, err := st.Info(ctx)
			if err != nil {
				return 0, err
			}
			sum += info.State.LastSeq
		}
		return sum, nil
	}
	label := strings.TrimSuffix(t.label, ", a writer a node")
	claimed := 0
	for _, n := range r.cfg.LeaseSessions {
		from, t0 := claimed, time.Now()
		err := parallel(ctx, n-claimed, 64, func(ctx context.Context, i int) error {
			id := fmt.Sprint("leased-", from+i)
			leader, err := c.Claim(ctx, id)
			if err == nil && leader != "mspbench" {
				err = fmt.Errorf("%s led by %q", id, leader)
			}
			return err
		})
		if err != nil {
			return err
		}
		claimed = max(claimed, n)
		r.logf("  %s: claimed %d sessions in %v", label, claimed, time.Since(t0).Round(time.Millisecond))
		// The window runs from a heartbeat to the third after it (one
		// TTL), the beats written while claiming left behind.
		beat := func(what string) error {
			select {
			case <-beats.Updates():
				return nil
			case <-time.After(2 * upkeepTTL):
				return fmt.Errorf("%s: %s not written within %v", label, what, 2*upkeepTTL)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		for drained := false; !drained; {
			select {
			case <-beats.Updates():
			default:
				drained = true
			}
		}
		if err := beat("a heartbeat"); err != nil {
			return err
		}
		w0, err := writes()
		if err != nil {
			return err
		}
		me0, nats0, start := selfCPU(), serversCPU(t.nodes.natsHosts()), time.Now()
		for i := range 3 {
			if err := beat(fmt.Sprintf("heartbeat %d of 3", i+1)); err != nil {
				return err
			}
		}
		elapsed := time.Since(start).Seconds()
		w1, err := writes()
		if err != nil {
			return err
		}
		at := fmt.Sprintf("at %d claimed sessions", claimed)
		r.add(Row{Scenario: label, Figure: "lease upkeep KV writes/s, " + at, Value: float64(w1-w0) / elapsed, Unit: "/s",
			Note: fmt.Sprintf("one node's heartbeats and claims, TTL %v, over one TTL", upkeepTTL)})
		r.add(Row{Scenario: label, Figure: "lease upkeep CPU, " + at, Value: (selfCPU() - me0).Seconds() * 1000 / elapsed, Unit: "ms/s",
			Note: "the node's lease code (this process)"})
		r.add(Row{Scenario: label, Figure: "NATS CPU while idle, " + at, Value: (serversCPU(t.nodes.natsHosts()) - nats0).Seconds() * 1000 / elapsed, Unit: "ms/s",
			Note: "all the servers (" + t.nodes.natsWhere() + "), the idle nodes' own upkeep too"})
	}
	return nil
}

// Stored sessions: what a cluster keeps doing whatever it stores.
const (
	// storedBusy sessions are busy (a running or queued turn) beside any
	// number stored: what an adoption pass has to find.
	storedBusy = 10
	// listedSessions belong to the principal whose session/list is timed.
	listedSessions = 50
	// storedOwners spread the other stored sessions over owners.
	storedOwners = 997
	// listRepeats is how many times the list is timed at each count, one
	// every listEvery, as lists come from people rather than back to back:
	// the p99 is then the 10th slowest of lists spread over 10 s, not the
	// 2nd slowest of a burst that one pause of a server can fill.
	listRepeats = 1000
	listEvery   = 10 * time.Millisecond
)

// idleEntriesExpire outlasts store/jetstream's idle busy entries (a
// per-message TTL of 1 s), which an adoption pass reads until they go.
const idleEntriesExpire = 2 * time.Second

// listedOwner is the principal whose list is timed.
const listedOwner = "mspbench-listed"

// scanRows stores StoreRows sessions, one count after another (each
// topping the last up), and at each times what must not grow with them:
// a principal's session/list (Sessions, first page, of its 50 sessions,
// p50 and p99 of listRepeats) and an adoption pass (BusySessions, finding the 10
// busy, median of 3).
func (r *runner) scanRows(ctx context.Context, t *storeTarget) error {
	if t.name == "jetstream-r3x3" && slices.Contains(r.cfg.StoreBackends, "jetstream-r3") {
		return nil // the same stream as jetstream-r3
	}
	st := t.writers[0]
	label := strings.TrimSuffix(t.label, ", a writer a node")
	stored := 0
	var ids []string // by i, for the writes beside the lists
	if r.cfg.StoreListWrites > 0 {
		ids = make([]string, slices.Max(r.cfg.StoreRows))
	}
	for _, count := range r.cfg.StoreRows {
		if more := count - stored; more > 0 {
			from, t0 := stored, time.Now()
			err := parallel(ctx, more, r.cfg.AppendSessions, func(ctx context.Context, i int) error {
				i += from
				row := storedRow(i, uuid.NewString(), time.Now())
				if ids != nil {
					ids[i] = row.ID
				}
				return st.Commit(ctx, store.Batch{SessionID: row.ID, Session: &row})
			})
			if err != nil {
				return err
			}
			r.logf("  %s: stored %d sessions in %v", label, count, time.Since(t0).Round(time.Millisecond))
			stored = count
			if t.nodes != nil {
				// The idle busy entries just written expire (1 s): the
				// store then holds what it holds between turns.
				time.Sleep(idleEntriesExpire)
				// The reads are timed on servers at rest, as between
				// turns, not while they still work off the load of
				// seeding (replicas catching up, blocks compacted, and
				// the garbage of a million writes, whose collection, a
				// mark of the whole heap, would land in the timed lists
				// at whatever moment they tipped the heap over its goal).
				gc, heaps, err := collectGarbage(ctx, t.nodes.natsProcs)
				if err != nil {
					return err
				}
				if gc != nil {
					r.logf("  %s: the NATS servers collected their garbage: %v", label, gc)
					r.add(Row{Scenario: label, Figure: "NATS garbage collection, " + fmt.Sprintf("at %d stored sessions", count),
						Value: millis(slices.Max(gc)), Unit: "ms", Note: "the slowest server's runtime.GC(), forced before the reads are timed; heap marked whole"})
					r.add(Row{Scenario: label, Figure: "NATS server live heap, " + fmt.Sprintf("at %d stored sessions", count),
						Value: float64(slices.Max(heaps) >> 20), Unit: "MiB", Note: "the largest server's, after its collection (HeapAlloc): what its GOMEMLIMIT must leave room above"})
				}
				waited, err := settle(ctx, t.nodes.natsHosts())
				if err != nil {
					return err
				}
				r.logf("  %s: the NATS servers at rest after %v more", label, waited.Round(time.Millisecond))
			}
		}
		at := fmt.Sprintf("at %d stored sessions", stored)
		var list []time.Duration
		pace := time.NewTicker(listEvery)
		for range listRepeats {
			<-pace.C
			took, err := timedList(ctx, st, stored)
			if err != nil {
				pace.Stop()
				return fmt.Errorf("%s: %w", label, err)
			}
			list = append(list, took)
		}
		pace.Stop()
		if r.cfg.Profile != "" && t.nodes != nil && len(t.nodes.natsProcs) > 0 {
			// Apart from the timed lists: a profile costs the servers.
			var files []string
			for i := range t.nodes.natsProcs {
				files = append(files, fmt.Sprintf("%s.store-list%d.nats%d", r.cfg.Profile, stored, i+1))
			}
			err := r.profileAll(ctx, t.nodes.natsProcs, files, func(ctx context.Context) error {
				_, err := st.Sessions(ctx, listedOwner, nil, listedSessions)
				return err
			})
			if err != nil {
				return err
			}
		}
		pc := percentilesOf(list)
		r.add(Row{Scenario: label, Figure: "session/list p50, " + at, Value: millis(pc.p50), Unit: "ms",
			Note: fmt.Sprintf("Sessions of a principal with %d, first page; %d times, one every %v", listedSessions, listRepeats, listEvery)})
		r.add(Row{Scenario: label, Figure: "session/list p99, " + at, Value: millis(pc.p99), Unit: "ms",
			Note: fmt.Sprintf("the others' spread over %d owners", storedOwners)})
		var pass []float64
		for range scanRepeats {
			t0 := time.Now()
			busy, err := st.BusySessions(ctx)
			if err != nil {
				return err
			}
			pass = append(pass, millis(time.Since(t0)))
			if len(busy) != min(storedBusy, stored) {
				return fmt.Errorf("%s: BusySessions found %d, want %d", label, len(busy), storedBusy)
			}
		}
		r.add(Row{Scenario: label, Figure: "adoption pass (BusySessions), " + at, Value: median(pass), Unit: "ms",
			Note: fmt.Sprintf("finds the %d busy; median of %d", storedBusy, scanRepeats)})
		if r.cfg.StoreListWrites > 0 {
			var profiles []*server // the NATS servers, profiled beside the writes
			if r.cfg.Profile != "" && t.nodes != nil {
				profiles = t.nodes.natsProcs
			}
			if err := r.listUnderWrites(ctx, st, label, at, ids[:stored], profiles); err != nil {
				return err
			}
		}
	}
	return nil
}

// timedList reads the listed principal's first page once, with stored
// sessions stored, and says how long it took; a page that is not the
// principal's whole list is an error.
func timedList(ctx context.Context, st store.Store, stored int) (time.Duration, error) {
	t0 := time.Now()
	got, err := st.Sessions(ctx, listedOwner, nil, listedSessions)
	took := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if want := min(listedSessions, max(stored-storedBusy, 0)); len(got) != want {
		return 0, fmt.Errorf("the listed principal has %d sessions, want %d", len(got), want)
	}
	return took, nil
}

// storedRow is the i-th session row the store scenario stores, updated
// at now: the first storedBusy busy, the next listedSessions the listed
// principal's, the others spread over storedOwners.
func storedRow(i int, id string, now time.Time) store.Session {
	row := store.Session{ID: id, Owner: fmt.Sprint("owner-", i%storedOwners), CreatedAt: now, UpdatedAt: now,
		Busy: i < storedBusy, State: paddedJSON(rowStateSize)}
	if i >= storedBusy && i < storedBusy+listedSessions {
		row.Owner = listedOwner
	}
	return row
}

// listUnderWrites times lists, one every listEvery, for StoreListWindow
// while StoreListWrites commits a second update the rows of stored
// sessions (ids, chosen at random, among the StoreListWritesHot last
// stored when set; the busy left alone), as people's
// turns do: the servers' garbage then comes and is collected as in
// service, and the lists that meet a collection count.
//
// With profiles, their CPU and allocation profiles are taken a third of
// the way in, to PREFIX.store-writes<stored>.nats<i>.
func (r *runner) listUnderWrites(ctx context.Context, st store.Store, label, at string, ids []string, profiles []*server) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	profiled := make(chan error, 1)
	if len(profiles) > 0 {
		go func() {
			select {
			case <-ctx.Done():
				profiled <- ctx.Err()
				return
			case <-time.After(r.cfg.StoreListWindow / 3):
			}
			var files []string
			for i := range profiles {
				files = append(files, fmt.Sprintf("%s.store-writes%d.nats%d", r.cfg.Profile, len(ids), i+1))
			}
			// The lists and writes below are the load.
			profiled <- r.profileAll(ctx, profiles, files, func(ctx context.Context) error {
				select {
				case <-ctx.Done():
				case <-time.After(listEvery):
				}
				return nil
			})
		}()
	} else {
		profiled <- nil
	}
	var written, failed atomic.Int64
	var writers sync.WaitGroup
	writers.Go(func() {
		slots := make(chan struct{}, 64) // commits in flight at most
		pace := time.NewTicker(time.Second / time.Duration(r.cfg.StoreListWrites))
		defer pace.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-pace.C:
			}
			select {
			case slots <- struct{}{}:
			default:
				failed.Add(1) // the store keeps no pace: a write skipped
				continue
			}
			i := storedBusy + rand.IntN(len(ids)-storedBusy)
			if hot := r.cfg.StoreListWritesHot; hot > 0 && hot < len(ids)-storedBusy {
				i = len(ids) - 1 - rand.IntN(hot) // among the last stored
			}
			writers.Go(func() {
				defer func() { <-slots }()
				row := storedRow(i, ids[i], time.Now())
				if err := st.Commit(ctx, store.Batch{SessionID: row.ID, Session: &row}); err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
					}
					return
				}
				written.Add(1)
			})
		}
	})
	var list []time.Duration
	pace := time.NewTicker(listEvery)
	t0 := time.Now()
	var err error
	for time.Since(t0) < r.cfg.StoreListWindow {
		<-pace.C
		var took time.Duration
		if took, err = timedList(ctx, st, len(ids)); err != nil {
			err = fmt.Errorf("%s: under writes: %w", label, err)
			break
		}
		list = append(list, took)
	}
	pace.Stop()
	elapsed := time.Since(t0)
	perr := <-profiled
	cancel()
	writers.Wait()
	if err != nil {
		return err
	}
	if perr != nil {
		return perr
	}
	rate := float64(written.Load()) / elapsed.Seconds()
	r.logf("  %s: %d writes beside the lists (%.0f/s), %d skipped or failed", label, written.Load(), rate, failed.Load())
	pc := percentilesOf(list)
	note := fmt.Sprintf("%d lists, one every %v, beside %.0f row updates/s", len(list), listEvery, rate)
	if hot := r.cfg.StoreListWritesHot; hot > 0 {
		note += fmt.Sprintf(" among the %d last stored", hot)
	}
	r.add(Row{Scenario: label, Figure: "session/list p50 under writes, " + at, Value: millis(pc.p50), Unit: "ms", Note: note})
	r.add(Row{Scenario: label, Figure: "session/list p99 under writes, " + at, Value: millis(pc.p99), Unit: "ms",
		Note: fmt.Sprintf("%d writes skipped or failed (the store kept no pace)", failed.Load())})
	return nil
}

// collectGarbage has each of procs, nats-server processes serving
// net/http/pprof, run a whole garbage collection (runtime.GC, through
// /debug/pprof/heap?gc=1), all at once, and returns how long each took
// and each one's live heap after it (liveHeap); nil for none (NATS
// servers embedded in the nodes are left alone).
func collectGarbage(ctx context.Context, procs []*server) (took []time.Duration, heaps []int64, err error) {
	var g errgroup.Group
	var mu sync.Mutex
	for _, p := range procs {
		if p.base == "" {
			continue
		}
		g.Go(func() error {
			t0 := time.Now()
			if err := fetchTo(ctx, p.base+"/debug/pprof/heap?gc=1", io.Discard); err != nil {
				return fmt.Errorf("collecting garbage: %w", err)
			}
			spent := time.Since(t0)
			heap, err := liveHeap(ctx, p)
			if err != nil {
				return err
			}
			mu.Lock()
			took, heaps = append(took, spent), append(heaps, heap)
			mu.Unlock()
			return nil
		})
	}
	err = g.Wait()
	return took, heaps, err
}

// liveHeap is the bytes of p's heap in live objects (runtime.MemStats
// HeapAlloc, from its heap profile's text form): right after a
// collection, the heap that a collection marks and that its memory
// limit must leave room above. Resident memory is no measure of it: the
// runtime keeps what it freed for a while.
func liveHeap(ctx context.Context, p *server) (int64, error) {
	var text strings.Builder
	if err := fetchTo(ctx, p.base+"/debug/pprof/heap?debug=1", &text); err != nil {
		return 0, fmt.Errorf("reading the heap's size: %w", err)
	}
	for line := range strings.Lines(text.String()) {
		if v, ok := strings.CutPrefix(line, "# HeapAlloc = "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no HeapAlloc in %s's heap profile", p.base)
}

// Servers are at rest when, together, they use less than restCPU of a
// core over restWindows windows of restWindow in a row; settle waits at
// most restLimit for that.
const (
	restCPU     = 0.10
	restWindow  = 500 * time.Millisecond
	restWindows = 6
	restLimit   = 2 * time.Minute
)

// settle waits until the processes are at rest, and says how long that
// took; processes still busy after restLimit are measured as they are.
func settle(ctx context.Context, procs []*server) (time.Duration, error) {
	start := time.Now()
	tick := time.NewTicker(restWindow)
	defer tick.Stop()
	last, at, quiet := serversCPU(procs), time.Now(), 0
	for time.Since(start) < restLimit {
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-tick.C:
		}
		cpu, now := serversCPU(procs), time.Now()
		if float64(cpu-last) < restCPU*float64(now.Sub(at)) {
			quiet++
		} else {
			quiet = 0
		}
		if quiet == restWindows {
			return time.Since(start), nil
		}
		last, at = cpu, now
	}
	return time.Since(start), nil
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// scanRepeats is how many times each row scan is timed.
const scanRepeats = 21
