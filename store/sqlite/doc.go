// Package sqlite is mspd's embedded store.Store: one SQLite file, written
// through modernc.org/sqlite (pure Go, no cgo).
//
// # Durability
//
// The database runs in WAL mode with synchronous=FULL, so a transaction is
// on disk when its COMMIT returns — it survives SIGKILL, and power loss as
// far as the disk honours fsync — and Commit returns only after that. WAL
// also lets a pool of read-only connections read a consistent snapshot
// while the writer appends. The log is copied back into the database file
// (checkpointed) by a connection of its own, asked every 4,000 pages the
// writer commits (WithCheckpointPages), never inside a commit: SQLite's
// automatic checkpoint would run in the COMMIT that crosses the mark and
// hold up everyone queued behind it. Once one has run, the writer copies
// the few pages written meanwhile, between two groups, so that SQLite can
// start the log over instead of growing it.
//
// # Group commit
//
// Durable means one fsync per transaction, so a transaction per event caps
// the store at the disk's sync rate (about 2–3k appends/s on the machine
// mspd was sized on) no matter how many sessions are active. So all writes
// go through one writer goroutine: Commit enqueues its batch and waits; the
// writer takes every batch that is pending (up to a bound) and writes them
// in ONE transaction with one fsync. A batch that conflicts gets
// store.ErrConflict and leaves nothing behind while the rest of the group
// commits: a stale sequence is caught before the batch writes anything,
// and a command id already in the ledger abandons the transaction, which
// is written again without that batch. Conflicts are rare (the session
// layer answers a known command id before it commits), so this is cheaper
// than a SAVEPOINT around every batch, for which SQLite copies every page
// the batch touches. Under load the fsync is shared by every batch that
// queued during the previous one, so throughput grows with concurrency
// instead of being pinned to the sync rate; a lone caller still pays one
// fsync per Commit. Batches marked Urgent (retry notices) wait in a queue
// of their own that the writer empties first. One that arrives while a
// group is being written joins that group at the next batch, in place of
// the batches not yet written, which go first in the next group (a batch
// is displaced at most once, so admissions land while notices keep
// coming): a burst of new turns delays a notice by one batch and a
// commit, not by the rest of a group of up to 256 and then a group of its
// own. For 100 ms after
// an urgent batch, a group takes at most 32 other batches besides the
// urgent ones, so that while notices keep coming (many turns backing off
// at once) that group is a small one.
//
// Within a group the cost is per page and per statement: a batch's
// records are one multi-row INSERT, as are a message's search tokens
// (multirow.go), and the writer's page cache (16 MiB) holds the pages a
// burst over 1,000 sessions keeps touching, which SQLite's default 2 MiB
// re-read and spilled mid-transaction (BenchmarkGroupCommit256).
//
// A single writer also makes sequence checks cheap and race-free: the
// store is the file's only writer (see below), so the writer remembers
// the head of each session it committed and looks a head up only the
// first time it meets a session (or after forgetting them all, past
// 65,536). PruneCommands goes through the writer too, as a transaction of
// its own between two groups, so a prune never holds the write lock for
// longer than one bounded DELETE.
//
// # One process per directory
//
// Two processes on one store would each believe the other's running turns
// were left by a crash and settle them, then fight over every sequence
// number. So Open first takes an exclusive OS lock (flock(2), through
// mspd/internal/datadir) on datadir.LockFile in the database's directory,
// without waiting, and writes its PID into it; a second Open gets a
// *datadir.LockedError naming the directory and that PID. Close releases
// the lock, and the OS does when the process dies, so a restart after
// kill -9 just works.
//
// SQLite's own PRAGMA locking_mode=EXCLUSIVE would not do: it is held per
// connection, so the writer would lock out this store's own read pool (and
// the sqlite3 CLI an operator inspects the file with); a refused process
// waits out the busy timeout and then learns only "database is locked",
// not who holds it. A lock file can name its holder.
//
// # Schema
//
// events(session_id, seq) is a WITHOUT ROWID table clustered on its key, so
// a read after a cursor is one range scan; sessions is indexed by (owner,
// updated_at, id) for each owner's newest-first listing, which reads no
// other owner's rows, and for the busy sessions; commands is the ledger,
// indexed by created_at so PruneCommands deletes the oldest entries without
// a scan. Times are stored as Unix nanoseconds, JSON as BLOBs returned byte
// for byte. PRAGMA user_version holds the schema version; Open migrates an
// older file forward in one transaction (version 2 added commands.created_at,
// set to the migration time for the entries already there; version 4 added
// sessions.owner, taken from each row's state as store.LegacyOwner does;
// version 5 the search index, search_tokens and search_text (search.go),
// and search_backfill listing the sessions already there, which Open
// indexes from their logs when given WithIndexer).
package sqlite
