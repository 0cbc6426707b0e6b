package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
			Replicas: len(t.nodes.srvs), Streams: streams}, t.nodes.connOptions()...)
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
			Note: "all the servers (in their mspd processes)"})
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
				st, err := msjs.Connect(ctx, url, msjs.Options{Stream: benchStream, Subject: benchSubject, Replicas: len(t.nodes.srvs)},
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
		srvs = t.nodes.srvs
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
			Note: fmt.Sprintf("all %d NATS servers (in their mspd processes), over the rounds", len(t.nodes.srvs))})
		if len(tl.nodeCPU) > 1 {
			for i, cpu := range tl.nodeCPU {
				r.add(Row{Scenario: t.label, Figure: fmt.Sprintf("node n%d CPU per commit", i+1), Value: perItem(cpu, tl.commits), Unit: "µs",
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

// leaseTTL is cluster.Options.LeaseTTL's default: a lease is renewed every
// third of it.
const leaseTTL = 10 * time.Second

// leaseRenewals is how many times each lease is renewed when they are
// renewed all at once.
const leaseRenewals = 20

// leaseRows measures, on a JetStream target's servers, what a KV bucket
// takes of lease writes (TTL, one revision of history, file storage, the
// target's replicas), one key a session: the capacity the cluster
// package's claims draw on (a node's upkeep is one heartbeat, see
// cluster/leases.go; this was the per-session lease it replaced). Renewals at once: every session's lease
// renewed leaseRenewals times, all sessions in parallel. One at a time:
// every lease renewed once after another, as cluster.renew goes through a
// node's leases.
func (r *runner) leaseRows(ctx context.Context, t *storeTarget) error {
	if t.nodes == nil || t.name == "jetstream-r3x3" {
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
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "MSPBENCH_LEASES", TTL: leaseTTL, History: 1,
		Replicas: len(t.nodes.srvs), Storage: jetstream.FileStorage})
	if err != nil {
		return err
	}
	n := r.cfg.AppendSessions
	keys, revs := make([]string, n), make([]uint64, n)
	err = parallel(ctx, n, n, func(ctx context.Context, i int) error {
		keys[i] = uuid.NewString()
		rev, err := kv.Create(ctx, keys[i], []byte("n1"))
		revs[i] = rev
		return err
	})
	if err != nil {
		return err
	}
	start := time.Now()
	err = parallel(ctx, n, n, func(ctx context.Context, i int) error {
		for range leaseRenewals {
			rev, err := kv.Update(ctx, keys[i], []byte("n1"), revs[i])
			if err != nil {
				return err
			}
			revs[i] = rev
		}
		return nil
	})
	if err != nil {
		return err
	}
	parallelRate := float64(n*leaseRenewals) / time.Since(start).Seconds()
	var serial []time.Duration
	start = time.Now()
	for i := range keys {
		t0 := time.Now()
		rev, err := kv.Update(ctx, keys[i], []byte("n1"), revs[i])
		if err != nil {
			return err
		}
		serial = append(serial, time.Since(t0))
		revs[i] = rev
	}
	serialRate := float64(n) / time.Since(start).Seconds()
	label := strings.TrimSuffix(t.label, ", a writer a node")
	r.add(Row{Scenario: label, Figure: "lease renewals/s, all at once", Value: parallelRate, Unit: "/s",
		Note: fmt.Sprintf("%d leases × %d KV updates, in parallel", n, leaseRenewals)})
	r.add(Row{Scenario: label, Figure: "lease renewals/s, one at a time", Value: serialRate, Unit: "/s",
		Note: fmt.Sprintf("one after another, as per-session leases were renewed (at TTL %v such a node held at most ~%.0f); now the rate claims are written at", leaseTTL, serialRate*leaseTTL.Seconds())})
	r.latencyRows(label, "lease renewal", serial, "one KV update, one at a time")
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
	// listRepeats is how many times the list is timed at each count.
	listRepeats = 200
)

// idleEntriesExpire outlasts store/jetstream's idle busy entries (a
// per-message TTL of 1 s), which an adoption pass reads until they go.
const idleEntriesExpire = 2 * time.Second

// listedOwner is the principal whose list is timed.
const listedOwner = "mspbench-listed"

// scanRows stores StoreRows sessions, one count after another (each
// topping the last up), and at each times what must not grow with them:
// a principal's session/list (Sessions, first page, of its 50 sessions,
// p50 and p99 of 50) and an adoption pass (BusySessions, finding the 10
// busy, median of 3).
func (r *runner) scanRows(ctx context.Context, t *storeTarget) error {
	if t.name == "jetstream-r3x3" && slices.Contains(r.cfg.StoreBackends, "jetstream-r3") {
		return nil // the same stream as jetstream-r3
	}
	st := t.writers[0]
	label := strings.TrimSuffix(t.label, ", a writer a node")
	stored := 0
	for _, count := range r.cfg.StoreRows {
		if more := count - stored; more > 0 {
			from, t0 := stored, time.Now()
			err := parallel(ctx, more, r.cfg.AppendSessions, func(ctx context.Context, i int) error {
				i += from
				now := time.Now()
				row := store.Session{ID: uuid.NewString(), Owner: fmt.Sprint("owner-", i%storedOwners), CreatedAt: now, UpdatedAt: now,
					Busy: i < storedBusy, State: paddedJSON(rowStateSize)}
				if i >= storedBusy && i < storedBusy+listedSessions {
					row.Owner = listedOwner
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
			}
		}
		at := fmt.Sprintf("at %d stored sessions", stored)
		var list []time.Duration
		for range listRepeats {
			t0 := time.Now()
			got, err := st.Sessions(ctx, listedOwner, nil, listedSessions)
			if err != nil {
				return err
			}
			list = append(list, time.Since(t0))
			if len(got) != min(listedSessions, max(stored-storedBusy, 0)) {
				return fmt.Errorf("%s: the listed principal has %d sessions, want %d", label, len(got), listedSessions)
			}
		}
		pc := percentilesOf(list)
		r.add(Row{Scenario: label, Figure: "session/list p50, " + at, Value: millis(pc.p50), Unit: "ms",
			Note: fmt.Sprintf("Sessions of a principal with %d, first page; %d times", listedSessions, listRepeats)})
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
	}
	return nil
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// scanRepeats is how many times each row scan is timed.
const scanRepeats = 3
