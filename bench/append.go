package bench

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	msqlite "modernc.org/sqlite" // the driver mspd's store uses

	"mspd/provider/scripted"
	"mspd/schema/msp"
	"mspd/store/sqlite"
)

// maxGroup is how many pending commits the baseline's writer puts in one
// transaction: store/sqlite's default group size.
const maxGroup = 256

// AppendStores lists the deployments the append scenario can run mspd on:
// one node on SQLite, one node on JetStream (an embedded server), three
// nodes on JetStream with three replicas.
var AppendStores = []string{"sqlite", "jetstream-r1", "jetstream-r3"}

// append: durable events/s across AppendSessions sessions running
// one-delta turns, each session's turns one after another, on each of
// AppendStores (on three nodes, a third of the sessions started and run
// on each), each against plain SQLite inserts of rows of the same mean
// size into the same table, one row a commit per session,
// group-committed as store/sqlite does (one writer, up to 256 pending
// commits a transaction, WAL, synchronous=FULL), right after it; Rounds
// rounds of both, alternating.
func (r *runner) append(ctx context.Context) error {
	for _, st := range AppendStores {
		if slices.Contains(r.cfg.AppendStores, st) {
			if err := r.appendOn(ctx, st); err != nil {
				return fmt.Errorf("%s: %w", st, err)
			}
		}
	}
	return nil
}

func (r *runner) appendOn(ctx context.Context, store string) error {
	n, m := r.cfg.AppendSessions, r.cfg.AppendTurns
	// srvs take the sessions; procs are the whole deployment, whose CPU
	// is counted: the nats-server processes too (--nats-server).
	var srvs, procs []*server
	var scen string
	stop := func() { stopAll(srvs) }
	switch store {
	case "sqlite":
		srv, err := r.startServer(ctx)
		if err != nil {
			return err
		}
		srvs, scen = []*server{srv}, fmt.Sprintf("append %d sessions", n)
		procs = srvs
	default:
		size := map[string]int{"jetstream-r1": 1, "jetstream-r3": 3}[store]
		ns, err := r.startNodes(ctx, size, size)
		if err != nil {
			return err
		}
		srvs, scen = ns.srvs, fmt.Sprintf("append %d sessions: %s, JetStream R%d", n, map[int]string{1: "one node", 3: "3 nodes"}[size], size)
		procs, stop = ns.processes(), ns.stop
	}
	defer stop()
	var ss []session
	defer func() { closeSessions(ss) }()
	for i, s := range srvs {
		// Node i starts (and so leads) its share of the sessions.
		share, err := setupSessions(ctx, s.url, (n+len(srvs)-1-i)/len(srvs))
		if err != nil {
			return err
		}
		ss = append(ss, share...)
	}
	// Rounds of mspd and the baseline alternate, so that both see the
	// same machine; the sessions carry on from round to round.
	var rates, bases, ratios, cpus, baseCPUs []float64
	var busy, baseBusy, perGroup, basePerGroup, pages, basePages []float64
	var clientCPUs, machine, baseMachine []float64
	var total, size int
	for round := range r.cfg.Rounds {
		r.logf("  round %d of %d", round+1, r.cfg.Rounds)
		cpu0, client0 := serversCPU(procs), selfCPU()
		m0, _ := readMachineTicks()
		var w0 writerStats
		if store == "sqlite" {
			var err error
			if w0, err = mspdWriter(ctx, srvs[0]); err != nil {
				return err
			}
		}
		events, paramBytes, elapsed, err := appendRound(ctx, ss, m)
		if err != nil {
			return err
		}
		cpu, client := serversCPU(procs)-cpu0, selfCPU()-client0
		m1, _ := readMachineTicks()
		total, size = events, paramBytes/max(events, 1)
		if store == "sqlite" {
			w1, err := mspdWriter(ctx, srvs[0])
			if err != nil {
				return err
			}
			w := w1.minus(w0)
			busy, perGroup = append(busy, 100*w.busy.Seconds()/elapsed.Seconds()), append(perGroup, float64(w.batches)/float64(max(w.groups, 1)))
			pages = append(pages, float64(w.pages)/float64(max(total, 1)))
		}
		self0 := selfCPU()
		base, bw, baseTook, err := plainSQLite(ctx, r.cfg.WorkDir, n, total/n, size)
		if err != nil {
			return fmt.Errorf("plain SQLite baseline: %w", err)
		}
		baseCPU := selfCPU() - self0
		m2, _ := readMachineTicks()
		machine, baseMachine = append(machine, busyPercent(m0, m1)), append(baseMachine, busyPercent(m1, m2))
		baseBusy, basePerGroup = append(baseBusy, 100*bw.busy.Seconds()/baseTook.Seconds()), append(basePerGroup, float64(bw.batches)/float64(max(bw.groups, 1)))
		basePages = append(basePages, float64(bw.pages)/float64(max(bw.batches, 1)))
		rate := float64(total) / elapsed.Seconds()
		rates, bases, ratios = append(rates, rate), append(bases, base), append(ratios, rate/base)
		cpus, baseCPUs = append(cpus, perItem(cpu, total)), append(baseCPUs, perItem(baseCPU, total))
		clientCPUs = append(clientCPUs, perItem(client, total))
	}
	if r.cfg.Profile != "" && len(srvs) == 1 {
		file := r.cfg.Profile + ".append-" + store
		err := r.profile(ctx, srvs[0], file, func(ctx context.Context) error {
			_, _, _, err := appendRound(ctx, ss, m)
			return err
		})
		if err != nil {
			return err
		}
	}
	r.add(Row{Scenario: scen, Figure: "durable events/s", Value: median(rates), Unit: "/s", Baseline: median(bases), Ratio: median(ratios),
		Note: fmt.Sprintf("%d events of %d-byte params a round (the log grows from round to round; mspd stays up through the baseline, idle but for a checkpoint it may still be copying); medians of %d rounds, the ratio the median of theirs",
			total, size, r.cfg.Rounds)})
	r.add(Row{Scenario: scen, Figure: "server CPU per durable event", Value: median(cpus), Unit: "µs", Baseline: median(baseCPUs),
		Note: "all of mspd's CPU (connections, turns, scripted provider, store) ÷ durable events; baseline: the benchmark process's CPU while plain SQLite commits as many rows; medians"})
	r.add(Row{Scenario: scen, Figure: "client CPU per durable event", Value: median(clientCPUs), Unit: "µs",
		Note: "all of the clients' CPU (this process) ÷ durable events; they share the machine with mspd; medians"})
	r.add(Row{Scenario: scen, Figure: "machine CPU busy", Value: median(machine), Unit: "%", Baseline: median(baseMachine),
		Note: "share of all cores' time not idle nor waiting for I/O (/proc/stat), kernel threads' work (writeback, the file system's journal) included; near 100% the round is CPU-bound; medians"})
	if store == "sqlite" {
		r.add(Row{Scenario: scen, Figure: "SQLite writer busy", Value: median(busy), Unit: "%", Baseline: median(baseBusy),
			Note: "share of the round the one writer spent in group commits, fsync included (mspd's from /metrics); near 100% it is what the round waits for; medians"})
		r.add(Row{Scenario: scen, Figure: "batches a group commit", Value: median(perGroup), Baseline: median(basePerGroup),
			Note: "commits carried by one transaction and one fsync; the baseline's 100 writers do nothing else, so theirs are all queued each time; medians"})
		r.add(Row{Scenario: scen, Figure: "WAL pages a durable event", Value: median(pages), Baseline: median(basePages),
			Note: "pages written to the write-ahead log ÷ durable events (baseline: ÷ rows); each is written, synced and later checkpointed; medians"})
	}
	return nil
}

// writerStats sums a SQLite writer's group commits over a stretch of time:
// what says whether the writer, one goroutine by SQLite's rule, is what a
// round waits for.
type writerStats struct {
	groups, batches, pages int
	busy                   time.Duration // in group commits, fsync included
}

func (a writerStats) minus(b writerStats) writerStats {
	return writerStats{groups: a.groups - b.groups, batches: a.batches - b.batches, pages: a.pages - b.pages, busy: a.busy - b.busy}
}

// mspdWriter reads an mspd's writer totals from its /metrics.
func mspdWriter(ctx context.Context, s *server) (writerStats, error) {
	var v [4]float64
	for i, name := range []string{"mspd_store_commit_seconds_count", "mspd_store_commit_batches_sum", "mspd_store_wal_pages_total", "mspd_store_commit_seconds_sum"} {
		var err error
		if v[i], err = s.metric(ctx, name); err != nil {
			return writerStats{}, err
		}
	}
	return writerStats{groups: int(v[0]), batches: int(v[1]), pages: int(v[2]), busy: time.Duration(v[3] * float64(time.Second))}, nil
}

// appendRound runs turns one-delta turns on every session at once, each
// session's one after another, and returns the durable events delivered,
// the bytes of their params and how long it took.
func appendRound(ctx context.Context, ss []session, turns int) (events, paramBytes int, elapsed time.Duration, err error) {
	script := scripted.Script(scripted.Step{Text: "ok"})
	var nEvents, nBytes atomic.Int64
	start := time.Now()
	err = parallel(ctx, len(ss), len(ss), func(ctx context.Context, i int) error {
		c := ss[i].c
		ctx, stop := c.bound(ctx) // one watch a session for the round, not one a frame
		defer stop()
		for range turns {
			if err := c.sendTurn(ctx, ss[i].id, script); err != nil {
				return err
			}
			for done := false; !done; {
				f, err := c.read(ctx)
				if err != nil {
					return err
				}
				method := string(methodOf(f))
				if method == "" || !durableCursor(stringMember(f, "viewCursor")) {
					continue // a response, a delta, an answer's ephemeral item/started
				}
				nEvents.Add(1)
				nBytes.Add(int64(len(paramsOf(f))))
				done = method == msp.NotifyTurnCompleted
			}
		}
		return nil
	})
	return int(nEvents.Load()), int(nBytes.Load()), time.Since(start), err
}

// paramsOf returns a notification's params as mspd encodes it.
func paramsOf(frame []byte) []byte {
	i := bytes.Index(frame, []byte(`"params":`))
	j := bytes.LastIndex(frame, []byte(`,"emittedAtMs":`))
	if i < 0 || j < i {
		return nil
	}
	return frame[i+len(`"params":`) : j]
}

// plainSQLite commits perSession rows of size bytes for each of sessions
// sessions, each session's one after another, through one group-committing
// writer; it returns rows/s and the writer's totals.
func plainSQLite(ctx context.Context, workDir string, sessions, perSession, size int) (float64, writerStats, time.Duration, error) {
	w, err := openPlainSQLite(ctx, workDir)
	if err != nil {
		return 0, writerStats{}, 0, err
	}
	defer w.close()
	params := bytes.Repeat([]byte("x"), size)
	start := time.Now()
	err = parallel(ctx, sessions, sessions, func(ctx context.Context, i int) error {
		sid := fmt.Sprintf("%036d", i)
		for seq := 1; seq <= perSession; seq++ {
			if err := w.commit(row{sid, int64(seq), params}); err != nil {
				return err
			}
		}
		return nil
	})
	took := time.Since(start)
	return float64(sessions*perSession) / took.Seconds(), w.stats, took, err
}

// openPlainSQLite creates the baseline's database in a directory of its
// own under workDir (removed by close): one table of events like
// store/sqlite's, WAL, synchronous=FULL, a checkpoint as often as
// store/sqlite asks for one (SQLite runs it in the commit that crosses the
// mark), and its group-committing writer.
func openPlainSQLite(ctx context.Context, workDir string) (*groupWriter, error) {
	dir, err := os.MkdirTemp(workDir, "sqlite-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*groupWriter, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "plain.db")+fmt.Sprintf(
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=wal_autocheckpoint(%d)", sqlite.DefaultCheckpointPages))
	if err != nil {
		return fail(err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE events (
		session_id TEXT NOT NULL, seq INTEGER NOT NULL, method TEXT NOT NULL, params BLOB,
		PRIMARY KEY (session_id, seq)) WITHOUT ROWID`); err != nil {
		db.Close()
		return fail(err)
	}
	w, err := newGroupWriter(ctx, db)
	if err != nil {
		db.Close()
		return fail(err)
	}
	w.cleanup = func() {
		db.Close()
		os.RemoveAll(dir)
	}
	return w, nil
}

// row is one event row of the baseline.
type row struct {
	session string
	seq     int64
	params  []byte
}

// pending is one caller's commit: its rows in one batch.
type pending struct {
	rows []row
	done chan error
}

// groupWriter commits rows as store/sqlite commits batches: one writer
// goroutine takes whatever is queued, up to maxGroup, and commits it in
// one transaction.
type groupWriter struct {
	conn   *sql.Conn
	insert *sql.Stmt
	reqs   chan pending
	done   chan struct{}
	// cleanup, when set, runs after close (the database and its files).
	cleanup func()
	stats   writerStats // the writer goroutine's; read after the commits return
}

func newGroupWriter(ctx context.Context, db *sql.DB) (*groupWriter, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	insert, err := conn.PrepareContext(ctx, `INSERT INTO events (session_id, seq, method, params) VALUES (?, ?, 'item/completed', ?)`)
	if err != nil {
		conn.Close()
		return nil, err
	}
	w := &groupWriter{conn: conn, insert: insert, reqs: make(chan pending), done: make(chan struct{})}
	w.pagesWritten() // the table's creation is no group commit's
	go w.run()
	return w, nil
}

// commit writes rows as one batch of the next group commit.
func (w *groupWriter) commit(rows ...row) error {
	p := pending{rows, make(chan error, 1)}
	w.reqs <- p
	return <-p.done
}

func (w *groupWriter) run() {
	defer close(w.done)
	ctx := context.Background()
	group := make([]pending, 0, maxGroup)
	for first := range w.reqs {
		group = append(group[:0], first)
	drain:
		for len(group) < maxGroup {
			select {
			case p := <-w.reqs:
				group = append(group, p)
			default:
				break drain
			}
		}
		began := time.Now()
		err := w.write(ctx, group)
		w.stats.groups++
		w.stats.batches += len(group)
		w.stats.busy += time.Since(began)
		w.stats.pages += w.pagesWritten()
		for _, p := range group {
			p.done <- err
		}
		runtime.Gosched() // as store/sqlite's writer does: the callers answered run first
	}
}

func (w *groupWriter) write(ctx context.Context, group []pending) error {
	if _, err := w.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	for _, p := range group {
		for _, r := range p.rows {
			if _, err := w.insert.ExecContext(ctx, r.session, r.seq, r.params); err != nil {
				w.conn.ExecContext(ctx, "ROLLBACK")
				return err
			}
		}
	}
	_, err := w.conn.ExecContext(ctx, "COMMIT")
	return err
}

// pagesWritten returns the pages the connection has written to the log
// since the last call, as store/sqlite counts them.
func (w *groupWriter) pagesWritten() int {
	var n int
	_ = w.conn.Raw(func(dc any) error {
		var err error
		n, _, err = dc.(msqlite.DBStatus).Status(msqlite.DBStatusCacheWrite, true)
		return err
	})
	return n
}

func (w *groupWriter) close() {
	close(w.reqs)
	<-w.done
	w.insert.Close()
	w.conn.Close()
	if w.cleanup != nil {
		w.cleanup()
	}
}

// durableCursor tells whether a view cursor names a durable record rather
// than a sub-position after one (v:<session>:<seq>.<n>).
func durableCursor(c []byte) bool {
	i := bytes.LastIndexByte(c, ':')
	return i >= 0 && bytes.IndexByte(c[i:], '.') < 0
}
