// Package store defines mspd's storage interface: per-session append-only
// logs of records, session rows, and the commandId ledger. It knows nothing
// of MSP beyond "a record with a method and params".
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// ErrNotFound is returned when a session or command does not exist.
var ErrNotFound = errors.New("store: not found")

// ErrConflict is returned by Commit when a record's sequence is not the
// session's head + 1 (the first record) or its predecessor's + 1 (the
// others), or a command id is already in the ledger or repeated within the
// batch. Nothing of the conflicting batch is written. A malformed batch (see
// Batch) gets a different error, so callers can tell "someone else wrote
// first" from a bug.
var ErrConflict = errors.New("store: conflict")

// Record is one durable entry of a session's log.
type Record struct {
	// Seq is the record's 1-based position in its session's log; dense.
	Seq int64
	// Method is the MSP notification method the record is served as.
	Method string
	// Params are the notification params exactly as first fanned out;
	// reads return them byte-identical.
	Params json.RawMessage
}

// Session is a session's row: the bookkeeping a store needs to list and
// recover sessions, plus an opaque state blob owned by the caller.
//
// Times are kept to the nanosecond and must be representable as int64 Unix
// nanoseconds (years 1678 to 2262); reads return instants equal under
// time.Time.Equal, not necessarily in the same Location.
type Session struct {
	ID string
	// Owner is the principal the session belongs to ("" on a server
	// without per-user authentication). Sessions lists one owner's rows.
	// A session keeps its owner for life.
	Owner     string
	CreatedAt time.Time
	UpdatedAt time.Time
	// Busy is true while the session has a running or queued turn; the
	// sessions that are busy when a process starts are the ones it died in.
	Busy bool
	// State is the caller's serialized session state.
	State json.RawMessage
	// Erasing marks a session whose erasure began and did not finish:
	// DeleteSession failed part way, and its log may be partly gone.
	// Nothing may be written to it or read from its log; DeleteSession
	// finishes it. Sessions and BusySessions leave it out. A store whose
	// erasure is one transaction never returns it.
	Erasing bool
}

// LegacyOwner is the owner of a row written before Session.Owner existed:
// the session layer kept it as the "owner" member of the state, and a
// store upgrading such rows takes it from there ("" when the state has
// none or is not a JSON object).
func LegacyOwner(state json.RawMessage) string {
	var st struct {
		Owner string `json:"owner"`
	}
	if json.Unmarshal(state, &st) != nil {
		return ""
	}
	return st.Owner
}

// Command is one entry of the commandId ledger: the first admission of a
// state-changing request and the exact response it got.
type Command struct {
	ID string
	// Digest identifies the request payload (method and canonical params).
	Digest string
	// Response is the JSON of the result or error object first returned.
	Response json.RawMessage
	// IsError tells whether Response is an error object.
	IsError bool
	// SessionID is the session the command acted on (default: the
	// batch's); DeleteSession erases it with the session. Empty for a
	// command that outlives any session, such as the deletion itself.
	SessionID string
	// CreatedAt is when the entry was first admitted; PruneCommands goes
	// by it. Commit stamps the time of the write when it is zero. Like
	// Session's times it must be representable as int64 Unix nanoseconds.
	CreatedAt time.Time
}

// Batch is what one Commit writes atomically.
//
// Every part is optional: a batch of only Commands, or only a Session row,
// is valid, and an empty batch writes nothing and succeeds. Records may be
// appended to a session that has no row (yet): the log and the row are
// independent, and only rows are listed by Sessions and BusySessions.
type Batch struct {
	// SessionID names the session the records belong to. It must be set
	// when Records is non-empty; when it and Session are both set,
	// Session.ID must equal it.
	SessionID string
	// Records are appended in order; the first must have Seq = head + 1.
	Records []Record
	// Session, when non-nil, is inserted or replaces the session's row.
	Session *Session
	// Commands are added to the ledger.
	Commands []Command
	// AtHead, when set on a batch of a session's row without records, is
	// the session's head as its writer knows it (0 for an empty log): the
	// commit fails with ErrConflict, writing nothing, if the log is not
	// there, as a batch of records does when another writer appended
	// first. So a writer that lost the session to another cannot
	// overwrite the row after it. A batch with records is checked by
	// their first Seq instead.
	AtHead *int64
	// Text, when non-nil, is added to the session's search index in the
	// same write (see Search); DeleteSession erases it with the session.
	Text *Text
	// Urgent asks a store that queues writes to write this batch ahead of
	// those already waiting: a retry notice a user is watching a spinner
	// for, behind a burst of new turns. Stores without such a queue ignore
	// it. Callers keep one commit in flight per session, so batches of one
	// session are never reordered.
	Urgent bool
}

// Limit bounds one read of a session's log: at most Rows records, holding
// at most Bytes bytes of Params in all. A store stops reading once the next
// record would take the read past either bound, so a read holds about
// Bytes of the log however large its records are. The first record is
// returned whatever its size: a read always makes progress, and a record
// larger than Bytes comes alone. Rows <= 0 reads nothing; Bytes <= 0 reads
// one record.
type Limit struct {
	Rows  int
	Bytes int
}

// Admits reports whether a read that has taken count records, holding
// used bytes of Params, may take one more holding size bytes.
func (l Limit) Admits(count, used, size int) bool {
	return count < l.Rows && (count == 0 || used+size <= l.Bytes)
}

// SessionKey is a position in the newest-first session listing.
type SessionKey struct {
	UpdatedAt time.Time
	ID        string
}

// Store is a durable backend. Commit must be durable when it returns:
// callers fan records out only after that. All methods are safe for
// concurrent use.
//
// Methods taking a limit return nothing for limit <= 0 (a Limit's Rows).
// Results belong to the caller, and a store keeps no reference to a
// committed Batch's slices.
type Store interface {
	// Commit writes b atomically, or returns an error and writes nothing.
	// A ctx that is done before the write begins makes Commit return its
	// error; once the write has begun, Commit waits for its outcome, so an
	// error never hides a write.
	Commit(ctx context.Context, b Batch) error
	// Records returns the records of a session with Seq > after,
	// ascending, as many as lim admits from the first on. An unknown
	// session has no records.
	Records(ctx context.Context, sessionID string, after int64, lim Limit) ([]Record, error)
	// RecordsBefore returns the records with Seq < before, ascending, as
	// many as lim admits counting back from the last: the page that ends
	// just below before.
	RecordsBefore(ctx context.Context, sessionID string, before int64, lim Limit) ([]Record, error)
	// Head returns the Seq of a session's last record, 0 when it has none.
	Head(ctx context.Context, sessionID string) (int64, error)
	// Session returns a session's row, or ErrNotFound.
	Session(ctx context.Context, id string) (Session, error)
	// Sessions lists up to limit sessions of owner ordered by UpdatedAt
	// descending (then ID descending), strictly after the key when it is
	// non-nil. The key need not name an existing session. It reads that
	// owner's rows only, through an index: its cost does not grow with
	// other owners' sessions.
	Sessions(ctx context.Context, owner string, after *SessionKey, limit int) ([]Session, error)
	// Search lists up to limit of q.Owner's sessions matching q, in the
	// order of Sessions, strictly after the key when it is non-nil. It
	// reads that owner's sessions and index only (see Text).
	Search(ctx context.Context, q Query, after *SessionKey, limit int) ([]Hit, error)
	// BusySessions returns every session whose row is marked Busy, in no
	// particular order.
	BusySessions(ctx context.Context) ([]Session, error)
	// Command returns a ledger entry, or ErrNotFound.
	Command(ctx context.Context, id string) (Command, error)
	// PruneCommands deletes up to limit ledger entries created strictly
	// before before, oldest first, and returns how many it deleted. Each
	// call is a short write of its own, so callers prune a large backlog in
	// chunks, calling again until fewer than limit come back (see Pruner).
	// A pruned id is unknown again: a later Commit may add it anew.
	PruneCommands(ctx context.Context, before time.Time, limit int) (int, error)
	// DeleteSession erases a session for good: its log, its row and the
	// ledger entries of its commands, leaving no copy behind. Erasing a
	// session that does not exist succeeds. If it fails having erased
	// anything, Session reads the session back with Erasing set until a
	// later DeleteSession finishes: a half-erased session never reads
	// back as a live one.
	DeleteSession(ctx context.Context, id string) error
	// Close releases the store after the commits already under way
	// finish; a Commit after Close returns an error.
	Close() error
}

// Health is implemented by stores that can tell whether they can take
// writes now. A node reports it on /readyz: one whose store cannot write
// (a full disk, a lost connection to its cluster) should be sent no new
// clients, though those it has keep their reads.
type Health interface {
	// Healthy returns why the store cannot take writes now, or nil.
	Healthy() error
}
