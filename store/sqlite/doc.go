// Package sqlite is mspd's embedded store.Store: one SQLite file, written
// through modernc.org/sqlite (pure Go, no cgo).
//
// # Durability
//
// The database runs in WAL mode with synchronous=FULL, so a transaction is
// on disk when its COMMIT returns — it survives SIGKILL, and power loss as
// far as the disk honours fsync — and Commit returns only after that. WAL
// also lets a pool of read-only connections read a consistent snapshot
// while the writer appends.
//
// # Group commit
//
// Durable means one fsync per transaction, so a transaction per event caps
// the store at the disk's sync rate (about 2–3k appends/s on the machine
// mspd was sized on) no matter how many sessions are active. So all writes
// go through one writer goroutine: Commit enqueues its batch and waits; the
// writer takes every batch that is pending (up to a bound) and writes them
// in ONE transaction with one fsync. Each batch gets its own SAVEPOINT, so
// a batch that conflicts (a stale sequence, or a command id already in the
// ledger) is rolled back alone and gets store.ErrConflict while the rest of
// the group commits. Under load the fsync is shared by every batch that
// queued during the previous one, so throughput grows with concurrency
// instead of being pinned to the sync rate; a lone caller still pays one
// fsync per Commit.
//
// A single writer also makes sequence checks cheap and race-free: the head
// of each session is looked up once per transaction and carried from batch
// to batch.
//
// # Schema
//
// events(session_id, seq) is a WITHOUT ROWID table clustered on its key, so
// a read after a cursor is one range scan; sessions is indexed for the
// newest-first listing and for the busy sessions; commands is the ledger.
// Times are stored as Unix nanoseconds, JSON as BLOBs returned byte for
// byte.
package sqlite
