package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"mspd/internal/datadir"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"mspd/store"
)

// ErrClosed is returned by Commit after Close.
var ErrClosed = errors.New("sqlite: store closed")

// schemaVersion is stored in PRAGMA user_version; Open refuses files from a
// newer mspd rather than misreading them.
var schemaVersion = len(migrations(0))

// migrations returns, at index v-1, the statements that bring a database
// from version v-1 to v; now is the migration's time in Unix nanoseconds. A
// new file runs them all, so new and migrated files share one schema.
func migrations(now int64) [][]string {
	return [][]string{
		schemaV1(),
		{
			// The ledger's age, for pruning: entries from before version 2
			// are taken to be as old as the migration.
			`ALTER TABLE commands ADD COLUMN created_at INTEGER NOT NULL DEFAULT 0`,
			fmt.Sprintf(`UPDATE commands SET created_at = %d`, now),
			`CREATE INDEX commands_by_created ON commands (created_at)`,
		},
		{
			// The session a command acted on, so that erasing the session
			// erases its commands too; NULL for commands of no session.
			`ALTER TABLE commands ADD COLUMN session_id TEXT`,
			`CREATE INDEX commands_by_session ON commands (session_id) WHERE session_id IS NOT NULL`,
		},
		{
			// The owner of a session, so that a principal's listing reads
			// its own rows through sessions_by_owner and no one else's.
			// Rows from before version 4 kept it in their state only
			// (store.LegacyOwner reads it alike).
			`ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT ''`,
			`UPDATE sessions SET owner = json_extract(CAST(state AS TEXT), '$.owner')
				WHERE json_valid(CAST(state AS TEXT)) AND json_type(CAST(state AS TEXT), '$.owner') = 'text'`,
			`CREATE INDEX sessions_by_owner ON sessions (owner, updated_at DESC, id DESC)`,
			// Nothing lists across owners any more.
			`DROP INDEX sessions_by_updated`,
		},
		{
			// The search index (search.go): each session's tokens by
			// field (0 its name, 1 its messages), probed per session
			// while its owner's sessions are walked newest first, and its
			// texts (n 0 the name, 1… the messages in order) for
			// multi-token terms and the match a row shows. Sessions
			// written before version 5 wait in search_backfill until
			// Open indexes them from their logs (WithIndexer).
			`CREATE TABLE search_tokens (
			session_id TEXT    NOT NULL,
			field      INTEGER NOT NULL,
			token      BLOB    NOT NULL,
			PRIMARY KEY (session_id, field, token)
		) WITHOUT ROWID`,
			`CREATE TABLE search_text (
			session_id TEXT    NOT NULL,
			n          INTEGER NOT NULL,
			text       TEXT    NOT NULL,
			UNIQUE (session_id, n)
		)`,
			`CREATE TABLE search_backfill (session_id TEXT PRIMARY KEY) WITHOUT ROWID`,
			`INSERT INTO search_backfill (session_id) SELECT id FROM sessions`,
		},
	}
}

// schemaV1 creates version 1.
func schemaV1() []string {
	return []string{
		// Clustered on (session_id, seq): reads after a cursor and the head
		// lookup are range scans of one b-tree, and an append is one insert.
		`CREATE TABLE IF NOT EXISTS events (
		session_id TEXT    NOT NULL,
		seq        INTEGER NOT NULL,
		method     TEXT    NOT NULL,
		params     BLOB,
		PRIMARY KEY (session_id, seq)
	) WITHOUT ROWID`,
		// State blobs can be large, so sessions keeps a rowid (WITHOUT ROWID
		// tables suit small rows).
		`CREATE TABLE IF NOT EXISTS sessions (
		id         TEXT    PRIMARY KEY,
		created_at INTEGER NOT NULL,
		updated_at INTEGER NOT NULL,
		busy       INTEGER NOT NULL,
		state      BLOB
	)`,
		`CREATE INDEX IF NOT EXISTS sessions_by_updated ON sessions (updated_at DESC, id DESC)`,
		// Partial: only the few busy rows are indexed.
		`CREATE INDEX IF NOT EXISTS sessions_busy ON sessions (id) WHERE busy`,
		`CREATE TABLE IF NOT EXISTS commands (
		id       TEXT    PRIMARY KEY,
		digest   TEXT    NOT NULL,
		response BLOB,
		is_error INTEGER NOT NULL
	)`,
	}
}

// Option configures Open.
type Option func(*config)

type config struct {
	busyTimeout  time.Duration
	maxGroup     int
	ckptPages    int
	readConns    int
	readCacheKiB int
	onCommit     func(GroupCommit)
	onCheckpoint func(Checkpoint)
	indexer      store.Indexer
}

// WithIndexer gives Open what it needs to index the sessions of a file
// written before the search index (schema version 5): Open reads their
// logs through it before it returns. Without it they stay unindexed (and
// listed in search_backfill) until an Open that has it.
func WithIndexer(fn store.Indexer) Option {
	return func(c *config) { c.indexer = fn }
}

// WithBusyTimeout sets how long a connection waits for a lock held by
// another connection (another process, or a checkpoint) before failing.
// The default is 5s.
func WithBusyTimeout(d time.Duration) Option {
	return func(c *config) { c.busyTimeout = d }
}

// WithMaxGroup bounds how many batches the writer puts in one transaction.
// Larger groups amortize the fsync over more commits but make every commit
// in the group wait for the whole group. The default is 256.
func WithMaxGroup(n int) Option {
	return func(c *config) { c.maxGroup = n }
}

// WithCheckpointPages sets how many pages the write-ahead log gains
// before a checkpoint copies it into the database file; the log holds
// about that many pages, and more while readers keep old ones. The
// default is DefaultCheckpointPages.
func WithCheckpointPages(n int) Option {
	return func(c *config) { c.ckptPages = n }
}

// GroupCommit is one group commit of the writer, as WithCommitObserver
// reports it.
type GroupCommit struct {
	// Batches counts the callers' commits written together.
	Batches int
	// Took is how long its transaction took, fsync included.
	Took time.Duration
	// Pages counts the pages it wrote to the write-ahead log: what its
	// fsync and the next checkpoint cost grow with.
	Pages int
}

// WithCommitObserver makes the writer report each group commit
// (metrics). fn runs on the writer goroutine, between commits: it must be
// quick.
func WithCommitObserver(fn func(GroupCommit)) Option {
	return func(c *config) { c.onCommit = fn }
}

// WithCheckpointObserver makes the store report each checkpoint of its
// write-ahead log. fn runs on the goroutine that ran the checkpoint, the
// writer's among them: it must be quick.
func WithCheckpointObserver(fn func(Checkpoint)) Option {
	return func(c *config) { c.onCheckpoint = fn }
}

// WithReadConns sets the size of the read-only connection pool. The
// default is 4.
func WithReadConns(n int) Option {
	return func(c *config) { c.readConns = n }
}

// WithReadCache sets each read connection's page cache, in KiB (SQLite's
// cache_size): the memory reads may keep is the read connections times
// this. The default is DefaultReadCacheKiB.
func WithReadCache(kib int) Option {
	return func(c *config) { c.readCacheKiB = kib }
}

// DefaultReadCacheKiB is a read connection's page cache by default: 8 MiB,
// a log of 10,000 events of 650 bytes, so 32 MiB with the default four
// read connections (SQLite's own default is 2 MB).
const DefaultReadCacheKiB = 8 << 10

// Store is a store.Store on one SQLite file. Create it with Open.
type Store struct {
	lock *datadir.Held // held from before the file is opened until after it is closed

	wdb *sql.DB   // holds the single writer connection
	wc  *sql.Conn // pinned, so the writer's prepared statements stay valid
	rdb *sql.DB   // read-only pool
	cdb *sql.DB   // holds the checkpoint connection
	cc  *sql.Conn // checkpoints run here (checkpoint.go)
	w   writeStmts
	r   readStmts
	// The writer's multi-row inserts: a batch's records, a text's tokens.
	eventRows, tokenRows multiRow

	maxGroup    int
	urgentUntil time.Time         // groups stay small until then: urgent batches came lately; the writer's
	onCommit    func(GroupCommit) // nil: none
	beforeBatch func(i int)       // tests: runs on the writer before a group's batch i; nil: none
	// heads are the committed heads of sessions written lately; the
	// writer's alone, so unguarded.
	heads map[string]int64

	onCheckpoint    func(Checkpoint)  // nil: none
	ckptMu          sync.Mutex        // one checkpoint at a time
	ckptDue         chan struct{}     // cap 1: a checkpoint is asked for
	ckptDone        chan struct{}     // closed when the checkpoint goroutine ends
	checkpointPages int               // pages written between two asks (WithCheckpointPages)
	walPages        int               // written to the log since the last ask; the writer's
	groupPages      int               // written to the log by the group commit under way; the writer's
	ckptRan         atomic.Bool       // a checkpoint beside the writer has run: the writer copies the tail
	health          store.WriteHealth // why the last writes failed (Healthy)

	// mu orders Close against Commit's enqueue: Commit sends under RLock,
	// Close closes reqs and urgent under Lock, so nothing sends on a
	// closed channel.
	mu         sync.RWMutex
	closed     bool
	reqs       chan *commitReq
	urgent     chan *commitReq // batches marked Urgent, taken first
	writerDone chan struct{}
	tasks      chan *task // unbuffered: a sent task is already the writer's
}

var _ store.Store = (*Store)(nil)

type readStmts struct {
	records, recordsBefore, params, head *sql.Stmt
	session, sessions, sessionsAfter,
	busy, command *sql.Stmt
}

type writeStmts struct {
	begin, commit, rollback,
	head, upsertSession, insertCommand,
	pruneCommands, deleteEvents, deleteSession, deleteCommands,
	deleteNameTokens, upsertText, appendText,
	deleteTokens, deleteTexts, deleteBackfill *sql.Stmt
}

// Open opens the database file at path, creating it and its parent
// directory when missing, and starts the writer.
//
// Before touching the file it locks the directory (see the package doc):
// while a store is open on a directory, Open on the same directory fails at
// once with a *datadir.LockedError (errors.Is datadir.ErrLocked). Close
// releases the lock.
func Open(path string, opts ...Option) (*Store, error) {
	cfg := config{busyTimeout: 5 * time.Second, maxGroup: 256, ckptPages: DefaultCheckpointPages, readConns: 4, readCacheKiB: DefaultReadCacheKiB}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxGroup < 1 || cfg.readConns < 1 || cfg.readCacheKiB < 1 || cfg.busyTimeout < 0 || cfg.ckptPages < 1 {
		return nil, fmt.Errorf("sqlite: invalid options %+v", cfg)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	// The driver splits its DSN at the first '?'.
	if strings.ContainsRune(abs, '?') {
		return nil, fmt.Errorf("sqlite: path %q contains '?'", abs)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	lock, err := datadir.Lock(filepath.Dir(abs))
	if err != nil {
		return nil, err
	}
	if err := createPrivate(abs); err != nil {
		_ = lock.Unlock()
		return nil, err
	}
	s := &Store{lock: lock, maxGroup: cfg.maxGroup, checkpointPages: cfg.ckptPages, onCommit: cfg.onCommit, heads: make(map[string]int64), onCheckpoint: cfg.onCheckpoint}
	if err := s.open(abs, cfg); err != nil {
		s.closeCheckpoints()
		s.closeDBs()
		_ = lock.Unlock()
		return nil, err
	}
	s.reqs = make(chan *commitReq, cfg.maxGroup)
	s.urgent = make(chan *commitReq, cfg.maxGroup)
	s.tasks = make(chan *task)
	s.writerDone = make(chan struct{})
	go s.writer()
	return s, nil
}

// createPrivate creates the database file, when missing, readable by this
// user alone: it holds every conversation, and SQLite would create it (and
// its -wal and -shm files, which take its mode) as the umask allows, which
// is usually world-readable, in a directory that already existed with
// wider permissions than the 0700 Open gives one it creates. An existing
// file keeps the mode it has.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return f.Close()
}

func (s *Store) open(path string, cfg config) error {
	ctx := context.Background()
	busy := fmt.Sprintf("_pragma=busy_timeout(%d)", cfg.busyTimeout.Milliseconds())

	var err error
	// secure_delete overwrites what a delete frees, so an erased session
	// leaves no trace in the file. Checkpoints run elsewhere (checkpoint.go).
	// cache_size: 16 MiB (SQLite's default is 2 MiB) for the writer alone,
	// which touches a few pages of every active session per group (its
	// log's last leaf, its row, index leaves): at 2 MiB a burst of 1,000
	// turns re-read them and spilled dirty pages mid-transaction, 15% of
	// the writer's CPU (BenchmarkGroupCommit256). The cache fills only as
	// far as pages are used.
	s.wdb, err = sql.Open("sqlite", path+"?"+busy+"&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=secure_delete(1)&_pragma=wal_autocheckpoint(0)&_pragma=cache_size(-16384)")
	if err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wc, err = s.wdb.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// journal_mode silently stays put where WAL is unsupported; durability
	// and concurrent reads both rest on it, so check.
	var mode string
	if err := s.wc.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("sqlite: %s: journal_mode is %q, want wal", path, mode)
	}
	// Commit's durability promise is synchronous=FULL (2): fsync on every
	// commit. NORMAL would lose acknowledged writes on power loss.
	var syncMode int
	if err := s.wc.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&syncMode); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	if syncMode != 2 {
		return fmt.Errorf("sqlite: %s: synchronous is %d, want 2 (FULL)", path, syncMode)
	}
	if err := migrate(ctx, s.wc, schemaVersion, time.Now()); err != nil {
		return err
	}
	if err := s.prepareWrites(ctx); err != nil {
		return err
	}
	if cfg.indexer != nil {
		if err := s.backfill(ctx, cfg.indexer); err != nil {
			return err
		}
	}
	s.walPages = s.takePagesWritten() // in the log, but no group commit's
	if err := s.openCheckpoints(ctx, path); err != nil {
		return err
	}

	// A read connection's page cache holds a replayed log of 10,000 events
	// (about 8 MiB of pages) rather than SQLite's default 2 MB, a quarter
	// of it: a resume read its pages again and again otherwise. SQLite
	// empties it when another connection has written since (WAL), so
	// under writes it serves one read; it is allocated as pages are read.
	s.rdb, err = sql.Open("sqlite", path+"?"+busy+fmt.Sprintf("&_pragma=query_only(1)&_pragma=cache_size(-%d)", cfg.readCacheKiB))
	if err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.rdb.SetMaxOpenConns(cfg.readConns)
	s.rdb.SetMaxIdleConns(cfg.readConns) // opening a connection costs more than keeping it
	return s.prepareReads(ctx)
}

// migrate brings the database on conn to version target in one
// transaction, stamping rows that need a time with now.
func migrate(ctx context.Context, conn *sql.Conn, target int, now time.Time) error {
	var v int
	if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	if v > schemaVersion {
		return fmt.Errorf("sqlite: schema version %d is newer than this build's %d", v, schemaVersion)
	}
	if v >= target {
		return nil
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	steps := migrations(store.ClampUnixNanos(now))[v:target]
	qs := append(slices.Concat(steps...), fmt.Sprintf("PRAGMA user_version = %d", target), "COMMIT")
	for _, q := range qs {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
			return fmt.Errorf("sqlite: migrate to version %d: %w", target, err)
		}
	}
	return nil
}

type prep struct {
	dst   **sql.Stmt
	query string
}

func prepareAll(ctx context.Context, p interface {
	PrepareContext(context.Context, string) (*sql.Stmt, error)
}, stmts []prep) error {
	for _, st := range stmts {
		var err error
		if *st.dst, err = p.PrepareContext(ctx, st.query); err != nil {
			return fmt.Errorf("sqlite: prepare %q: %w", st.query, err)
		}
	}
	return nil
}

const sessionCols = `id, owner, created_at, updated_at, busy, state`

func (s *Store) prepareWrites(ctx context.Context) error {
	w := &s.w
	s.eventRows = multiRow{prefix: `INSERT INTO events (session_id, seq, method, params) VALUES `, row: `(?, ?, ?, ?)`}
	s.tokenRows = multiRow{prefix: `INSERT INTO search_tokens (session_id, field, token) VALUES `, row: `(?, ?, ?)`,
		suffix: ` ON CONFLICT DO NOTHING`}
	// The writer is the only writer, so BEGIN IMMEDIATE only waits for
	// another process; it avoids a deferred transaction's lock upgrade.
	return prepareAll(ctx, s.wc, []prep{
		{&w.begin, `BEGIN IMMEDIATE`},
		{&w.commit, `COMMIT`},
		{&w.rollback, `ROLLBACK`},
		{&w.head, `SELECT seq FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1`},
		{&w.upsertSession, `INSERT INTO sessions (` + sessionCols + `) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, created_at = excluded.created_at,
				updated_at = excluded.updated_at, busy = excluded.busy, state = excluded.state`},
		// DO NOTHING turns a duplicate id into zero rows affected, which the
		// writer reports as ErrConflict without parsing driver errors.
		{&w.insertCommand, `INSERT INTO commands (id, digest, response, is_error, created_at, session_id) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`},
		// Oldest first, through commands_by_created.
		{&w.pruneCommands, `DELETE FROM commands WHERE rowid IN (
			SELECT rowid FROM commands WHERE created_at < ? ORDER BY created_at LIMIT ?)`},
		{&w.deleteEvents, `DELETE FROM events WHERE session_id = ?`},
		{&w.deleteSession, `DELETE FROM sessions WHERE id = ?`},
		{&w.deleteCommands, `DELETE FROM commands WHERE session_id = ?`},
		// The search index (search.go).
		{&w.deleteNameTokens, `DELETE FROM search_tokens WHERE session_id = ? AND field = 0`},
		{&w.upsertText, `INSERT INTO search_text (session_id, n, text) VALUES (?, ?, ?)
			ON CONFLICT (session_id, n) DO UPDATE SET text = excluded.text`},
		// A message's text after the session's others, numbered in the
		// same statement: one seek of the index instead of a query and
		// an insert.
		{&w.appendText, `INSERT INTO search_text (session_id, n, text)
			SELECT ?1, coalesce(max(n), 0) + 1, ?2 FROM search_text WHERE session_id = ?1`},
		{&w.deleteTokens, `DELETE FROM search_tokens WHERE session_id = ?`},
		{&w.deleteTexts, `DELETE FROM search_text WHERE session_id = ?`},
		{&w.deleteBackfill, `DELETE FROM search_backfill WHERE session_id = ?`},
	})
}

func (s *Store) prepareReads(ctx context.Context) error {
	r := &s.r
	return prepareAll(ctx, s.rdb, []prep{
		// octet_length reads a value's size from its record header,
		// without loading it: a read learns a record's size before it
		// takes its params (see inlineParams).
		{&r.records, `SELECT seq, method, octet_length(params),
			CASE WHEN octet_length(params) <= ? THEN CAST(params AS BLOB) END FROM events
			WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?`},
		{&r.recordsBefore, `SELECT seq, method, octet_length(params),
			CASE WHEN octet_length(params) <= ? THEN CAST(params AS BLOB) END FROM events
			WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?`},
		{&r.params, `SELECT CAST(params AS BLOB) FROM events WHERE session_id = ? AND seq = ?`},
		{&r.head, `SELECT seq FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1`},
		{&r.session, `SELECT ` + sessionCols + ` FROM sessions WHERE id = ?`},
		// Both walk sessions_by_owner: one owner's rows, newest first.
		{&r.sessions, `SELECT ` + sessionCols + ` FROM sessions
			WHERE owner = ? ORDER BY updated_at DESC, id DESC LIMIT ?`},
		{&r.sessionsAfter, `SELECT ` + sessionCols + ` FROM sessions
			WHERE owner = ? AND (updated_at, id) < (?, ?) ORDER BY updated_at DESC, id DESC LIMIT ?`},
		{&r.busy, `SELECT ` + sessionCols + ` FROM sessions WHERE busy ORDER BY id`},
		{&r.command, `SELECT id, digest, response, is_error, created_at FROM commands WHERE id = ?`},
	})
}

// inlineParams is the largest params a records query returns with its
// row. Larger ones come back as their size alone, and are read one by one
// once the read knows they fit its bound: a read stops before a large
// record it has no room for without loading it, and loads at most
// inlineParams past its bound.
const inlineParams = 64 << 10

// Records implements store.Store.
func (s *Store) Records(ctx context.Context, sessionID string, after int64, lim store.Limit) ([]store.Record, error) {
	if lim.Rows <= 0 {
		return nil, nil
	}
	rows, err := s.r.records.QueryContext(ctx, inlineParams, sessionID, after, lim.Rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: records: %w", err)
	}
	return s.readRecords(ctx, sessionID, rows, lim)
}

// RecordsBefore implements store.Store.
func (s *Store) RecordsBefore(ctx context.Context, sessionID string, before int64, lim store.Limit) ([]store.Record, error) {
	if lim.Rows <= 0 {
		return nil, nil
	}
	// Descending with a limit finds the page's start without counting,
	// and meets the records nearest before first, as the bound counts
	// them; the page is then put back in log order.
	rows, err := s.r.recordsBefore.QueryContext(ctx, inlineParams, sessionID, before, lim.Rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: records before: %w", err)
	}
	rs, err := s.readRecords(ctx, sessionID, rows, lim)
	slices.Reverse(rs)
	return rs, err
}

// readRecords takes the rows of a records query while lim admits them,
// and then the params of those too large to come with their row.
func (s *Store) readRecords(ctx context.Context, sessionID string, rows *sql.Rows, lim store.Limit) ([]store.Record, error) {
	rs, large, err := scanRecords(rows, lim)
	if err != nil {
		return nil, err
	}
	for _, i := range large {
		params, found, err := s.recordParams(ctx, sessionID, rs[i].Seq)
		if err != nil {
			return nil, err
		}
		if !found {
			return rs[:i], nil // erased since: the read ends where the log did
		}
		rs[i].Params = params
	}
	return rs, nil
}

// recordParams reads one record's params; found is false when the record
// is gone.
func (s *Store) recordParams(ctx context.Context, sessionID string, seq int64) (params json.RawMessage, found bool, err error) {
	rows, err := s.r.params.QueryContext(ctx, sessionID, seq)
	if err != nil {
		return nil, false, fmt.Errorf("sqlite: record params: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		return nil, false, rows.Err()
	}
	// RawBytes, as in scanRecords: the driver's copy of the blob, taken
	// as is (Row.Scan refuses RawBytes).
	var raw sql.RawBytes
	if err := rows.Scan(&raw); err != nil {
		return nil, false, fmt.Errorf("sqlite: record params: %w", err)
	}
	return json.RawMessage(raw), true, rows.Close()
}

// scanRecords takes rows while lim admits them, and returns the indexes
// of the records whose params are still to be read (larger than
// inlineParams). It stops stepping at the first row lim refuses.
func scanRecords(rows *sql.Rows, lim store.Limit) (rs []store.Record, large []int, err error) {
	defer rows.Close()
	rs = make([]store.Record, 0, min(lim.Rows, 256))
	// Scan's targets escape: declared once, not once a row.
	var (
		seq    int64
		method string
		size   sql.NullInt64
		params sql.RawBytes
	)
	used := 0
	for rows.Next() {
		// The driver copies each blob out of SQLite into a slice of its
		// own (modernc.org/sqlite's columnBlob makes one per row), and
		// RawBytes takes that slice as is, where *[]byte would copy it
		// again: a replay reads thousands of rows. The slice is never
		// reused for another row, so the caller owns it; storetest reads
		// many rows in one call and compares each, which a driver that
		// reused its buffer would fail. A TEXT value would instead land
		// in a buffer database/sql reuses, hence the CAST in the query
		// (rows written by other tools may hold TEXT).
		if err := rows.Scan(&seq, &method, &size, &params); err != nil {
			return nil, nil, fmt.Errorf("sqlite: scan record: %w", err)
		}
		n := int(size.Int64) // NULL params: none
		if !lim.Admits(len(rs), used, n) {
			break
		}
		if n > inlineParams {
			large = append(large, len(rs))
		}
		used += n
		rs = append(rs, store.Record{Seq: seq, Method: method, Params: json.RawMessage(params)})
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("sqlite: records: %w", err)
	}
	return rs, large, nil
}

// Head implements store.Store.
func (s *Store) Head(ctx context.Context, sessionID string) (int64, error) {
	return head(ctx, s.r.head, sessionID)
}

func head(ctx context.Context, st *sql.Stmt, sessionID string) (int64, error) {
	var seq int64
	err := st.QueryRowContext(ctx, sessionID).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite: head of %q: %w", sessionID, err)
	}
	return seq, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanSession(sc scanner) (store.Session, error) {
	var (
		ss               store.Session
		created, updated int64
		state            []byte
	)
	if err := sc.Scan(&ss.ID, &ss.Owner, &created, &updated, &ss.Busy, &state); err != nil {
		return store.Session{}, err
	}
	ss.CreatedAt = time.Unix(0, created).UTC()
	ss.UpdatedAt = time.Unix(0, updated).UTC()
	ss.State = state
	return ss, nil
}

// Session implements store.Store.
func (s *Store) Session(ctx context.Context, id string) (store.Session, error) {
	ss, err := scanSession(s.r.session.QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Session{}, fmt.Errorf("sqlite: session %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Session{}, fmt.Errorf("sqlite: session %q: %w", id, err)
	}
	return ss, nil
}

// Sessions implements store.Store.
func (s *Store) Sessions(ctx context.Context, owner string, after *store.SessionKey, limit int) ([]store.Session, error) {
	if limit <= 0 {
		return nil, nil
	}
	var (
		rows *sql.Rows
		err  error
	)
	if after == nil {
		rows, err = s.r.sessions.QueryContext(ctx, owner, limit)
	} else {
		// A key outside the representable range sorts before or after
		// everything stored; clamping keeps that meaning.
		rows, err = s.r.sessionsAfter.QueryContext(ctx, owner, store.ClampUnixNanos(after.UpdatedAt), after.ID, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: sessions: %w", err)
	}
	return scanSessions(rows)
}

// BusySessions implements store.Store.
func (s *Store) BusySessions(ctx context.Context) ([]store.Session, error) {
	rows, err := s.r.busy.QueryContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: busy sessions: %w", err)
	}
	return scanSessions(rows)
}

func scanSessions(rows *sql.Rows) ([]store.Session, error) {
	defer rows.Close()
	var out []store.Session
	for rows.Next() {
		ss, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: scan session: %w", err)
		}
		out = append(out, ss)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: sessions: %w", err)
	}
	return out, nil
}

// Command implements store.Store.
func (s *Store) Command(ctx context.Context, id string) (store.Command, error) {
	var (
		c       store.Command
		resp    []byte
		created int64
	)
	err := s.r.command.QueryRowContext(ctx, id).Scan(&c.ID, &c.Digest, &resp, &c.IsError, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Command{}, fmt.Errorf("sqlite: command %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Command{}, fmt.Errorf("sqlite: command %q: %w", id, err)
	}
	c.Response = resp
	c.CreatedAt = time.Unix(0, created).UTC()
	return c, nil
}

// Close waits for the commits already enqueued, stops the writer, closes
// the database and then releases the directory lock. Later Commits return
// ErrClosed; Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.reqs)
	close(s.urgent)
	s.mu.Unlock()
	<-s.writerDone
	s.closeCheckpoints()
	return errors.Join(s.closeDBs(), s.lock.Unlock())
}

// closeDBs closes whatever open managed to set up.
func (s *Store) closeDBs() error {
	var errs []error
	for _, st := range []*sql.Stmt{
		s.r.records, s.r.recordsBefore, s.r.head, s.r.session, s.r.sessions,
		s.r.sessionsAfter, s.r.busy, s.r.command,
		s.w.begin, s.w.commit, s.w.rollback,
		s.w.head, s.w.upsertSession, s.w.insertCommand,
		s.w.pruneCommands, s.w.deleteEvents, s.w.deleteSession, s.w.deleteCommands,
	} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	errs = append(errs, s.eventRows.close()...)
	errs = append(errs, s.tokenRows.close()...)
	for _, c := range []*sql.Conn{s.wc, s.cc} {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	for _, db := range []*sql.DB{s.rdb, s.cdb, s.wdb} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sqlite: close: %w", err)
	}
	return nil
}
