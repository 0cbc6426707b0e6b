// Package storetest is the behavioural suite every store.Store backend must
// pass. A backend's own test calls Run with a function that opens the
// backend on a directory:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, dir string) store.Store {
//			s, err := mybackend.Open(dir)
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// The suite pins down the parts of the contract that store.go states in
// words: dense sequences, conflicts that write nothing, byte-identical
// params, listing order and paging, the ledger and its pruning, persistence
// across a reopen, and exactly-once commits under concurrency.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"mspd/store"
)

// Run runs the suite against the backend that open opens. open opens, or
// re-opens, a store whose durable state lives in dir and reports failures
// through t; Run closes every store it opens. Each subtest gets its own
// directory, so subtests within a group run in parallel.
func Run(t *testing.T, open func(t *testing.T, dir string) store.Store) {
	h := harness{open: open}
	groups := []struct {
		name  string
		tests []subtest
	}{
		{"Commit", []subtest{
			{"DenseFromOne", h.commitDenseFromOne},
			{"RecordsWithoutSessionRow", h.commitRecordsWithoutRow},
			{"OnlyCommands", h.commitOnlyCommands},
			{"OnlySessionRow", h.commitOnlySessionRow},
			{"Empty", h.commitEmpty},
			{"SessionsAreIsolated", h.commitSessionsIsolated},
			{"CanceledContext", h.commitCanceledContext},
			{"InvalidBatch", h.commitInvalidBatch},
			{"AfterClose", h.commitAfterClose},
			{"NoAliasing", h.commitNoAliasing},
		}},
		{"Conflict", []subtest{
			{"FirstSeqNotHeadPlusOne", h.conflictFirstSeq},
			{"GapInsideBatch", h.conflictGapInsideBatch},
			{"DuplicateCommand", h.conflictDuplicateCommand},
			{"DuplicateCommandInBatch", h.conflictDuplicateCommandInBatch},
			{"RowAtAnOldHead", h.conflictRowAtOldHead},
		}},
		{"Read", []subtest{
			{"RecordsAfter", h.readRecordsAfter},
			{"RecordsBefore", h.readRecordsBefore},
			{"RecordsWithinBytes", h.readRecordsWithinBytes},
			{"RecordsBeforeWithinBytes", h.readRecordsBeforeWithinBytes},
			{"PagingByBytes", h.readPagingByBytes},
			{"Head", h.readHead},
			{"ParamsByteIdentical", h.readParamsByteIdentical},
		}},
		{"Session", []subtest{
			{"UpsertAndNotFound", h.sessionUpsert},
			{"ListNewestFirst", h.sessionList},
			{"ListPaging", h.sessionListPaging},
			{"ListByOwner", h.sessionListByOwner},
			{"Busy", h.sessionBusy},
		}},
		{"Search", h.searchTests()},
		{"Command", []subtest{
			{"RoundTripAndNotFound", h.commandRoundTrip},
			{"CreatedAt", h.commandCreatedAt},
			{"PruneOlderOnly", h.commandPruneOlderOnly},
			{"PruneLimitOldestFirst", h.commandPruneLimit},
			{"PrunedIDIsNewAgain", h.commandPrunedIsNew},
			{"PruneCanceledOrClosed", h.commandPruneCanceledOrClosed},
			{"PruneDuringCommits", h.commandPruneDuringCommits},
		}},
		{"Delete", []subtest{
			{"ErasesLogRowAndCommands", h.deleteErases},
			{"UnknownSession", h.deleteUnknown},
			{"SurvivesReopen", h.deleteSurvivesReopen},
		}},
		{"Durability", []subtest{
			{"SurvivesReopen", h.durabilityReopen},
		}},
		{"Concurrency", []subtest{
			{"CommitsLandExactlyOnce", h.concurrentCommits},
			{"ReadsDuringWrites", h.concurrentReads},
		}},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, st := range g.tests {
				t.Run(st.name, func(t *testing.T) {
					t.Parallel()
					st.fn(t)
				})
			}
		})
	}
}

type subtest struct {
	name string
	fn   func(t *testing.T)
}

type harness struct {
	open func(t *testing.T, dir string) store.Store
}

// onceCloser makes Close idempotent so a subtest can close a store early
// (to reopen it) while the cleanup still closes whatever remains open.
type onceCloser struct {
	store.Store
	once sync.Once
	err  error
}

func (c *onceCloser) Close() error {
	c.once.Do(func() { c.err = c.Store.Close() })
	return c.err
}

// openAt opens the backend on dir and closes it when the test ends.
func (h harness) openAt(t *testing.T, dir string) *onceCloser {
	t.Helper()
	s := h.open(t, dir)
	if s == nil {
		t.Fatal("open returned a nil store")
	}
	c := &onceCloser{Store: s}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// fresh opens the backend on a new directory.
func (h harness) fresh(t *testing.T) *onceCloser {
	t.Helper()
	return h.openAt(t, t.TempDir())
}

// at returns a fixed instant plus d. The instant has a nanosecond part, so
// backends that drop precision are caught.
func at(d time.Duration) time.Time {
	return time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC).Add(d)
}

func rec(seq int64) store.Record {
	return store.Record{
		Seq:    seq,
		Method: "test/event",
		Params: raw(fmt.Sprintf(`{"n":%d}`, seq)),
	}
}

func recs(from, to int64) []store.Record {
	var out []store.Record
	for s := from; s <= to; s++ {
		out = append(out, rec(s))
	}
	return out
}

// raw is shorthand for literal JSON in tests.
func raw(s string) []byte { return []byte(s) }

func sess(id string, updated time.Time) *store.Session {
	return &store.Session{
		ID:        id,
		CreatedAt: at(0),
		UpdatedAt: updated,
		State:     raw(`{"id":"` + id + `"}`),
	}
}

func mustCommit(t *testing.T, s store.Store, b store.Batch) {
	t.Helper()
	if err := s.Commit(t.Context(), b); err != nil {
		t.Fatalf("Commit(%s): %v", describe(b), err)
	}
}

func mustConflict(t *testing.T, s store.Store, b store.Batch) {
	t.Helper()
	err := s.Commit(t.Context(), b)
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Commit(%s) = %v, want ErrConflict", describe(b), err)
	}
}

func describe(b store.Batch) string {
	seqs := make([]string, len(b.Records))
	for i, r := range b.Records {
		seqs[i] = fmt.Sprint(r.Seq)
	}
	return fmt.Sprintf("session %q seqs [%s] row=%v commands=%d",
		b.SessionID, strings.Join(seqs, " "), b.Session != nil, len(b.Commands))
}

// rows is a Limit of rows alone: no byte bound a test reaches.
func rows(n int) store.Limit { return store.Limit{Rows: n, Bytes: math.MaxInt} }

func records(t *testing.T, s store.Store, id string, after int64, limit int) []store.Record {
	t.Helper()
	rs, err := s.Records(t.Context(), id, after, rows(limit))
	if err != nil {
		t.Fatalf("Records(%q, %d, %d): %v", id, after, limit, err)
	}
	return rs
}

func head(t *testing.T, s store.Store, id string) int64 {
	t.Helper()
	h, err := s.Head(t.Context(), id)
	if err != nil {
		t.Fatalf("Head(%q): %v", id, err)
	}
	return h
}

func wantHead(t *testing.T, s store.Store, id string, want int64) {
	t.Helper()
	if got := head(t, s, id); got != want {
		t.Fatalf("Head(%q) = %d, want %d", id, got, want)
	}
}

func wantRecords(t *testing.T, what string, got, want []store.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d records %s, want %d %s", what, len(got), seqsOf(got), len(want), seqsOf(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || g.Method != w.Method || !bytes.Equal(g.Params, w.Params) {
			t.Fatalf("%s: record %d = {%d %q %q}, want {%d %q %q}",
				what, i, g.Seq, g.Method, g.Params, w.Seq, w.Method, w.Params)
		}
	}
}

func seqsOf(rs []store.Record) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprint(r.Seq)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func wantSession(t *testing.T, got, want store.Session) {
	t.Helper()
	if got.ID != want.ID || got.Owner != want.Owner || !got.CreatedAt.Equal(want.CreatedAt) || !got.UpdatedAt.Equal(want.UpdatedAt) ||
		got.Busy != want.Busy || !bytes.Equal(got.State, want.State) {
		t.Fatalf("session = %+v (state %q), want %+v (state %q)", got, got.State, want, want.State)
	}
}

func wantNoSession(t *testing.T, s store.Store, id string) {
	t.Helper()
	if _, err := s.Session(t.Context(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Session(%q) error = %v, want ErrNotFound", id, err)
	}
}

func wantNoCommand(t *testing.T, s store.Store, id string) {
	t.Helper()
	if _, err := s.Command(t.Context(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Command(%q) error = %v, want ErrNotFound", id, err)
	}
}

func wantCommand(t *testing.T, s store.Store, want store.Command) {
	t.Helper()
	got, err := s.Command(t.Context(), want.ID)
	if err != nil {
		t.Fatalf("Command(%q): %v", want.ID, err)
	}
	if got.ID != want.ID || got.Digest != want.Digest || got.IsError != want.IsError ||
		!bytes.Equal(got.Response, want.Response) ||
		(!want.CreatedAt.IsZero() && !got.CreatedAt.Equal(want.CreatedAt)) {
		t.Fatalf("Command(%q) = %+v (response %q), want %+v (response %q)",
			want.ID, got, got.Response, want, want.Response)
	}
}

func ids(ss []store.Session) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

// --- Commit ---------------------------------------------------------------

func (h harness) commitDenseFromOne(t *testing.T) {
	s := h.fresh(t)
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(1, 3)})
	wantHead(t, s, "s", 3)
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(4, 4)})
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(5, 9)})
	wantHead(t, s, "s", 9)
	wantRecords(t, "Records(0, 100)", records(t, s, "s", 0, 100), recs(1, 9))
}

// A log may exist before, or without, its session row: the session manager
// may append the first records and write the row in a later batch, and the
// store must not couple the two.
func (h harness) commitRecordsWithoutRow(t *testing.T) {
	s := h.fresh(t)
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(1, 2)})
	wantHead(t, s, "s", 2)
	wantNoSession(t, s, "s")
	list, err := s.Sessions(t.Context(), "", nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("Sessions listed %v for a session with no row", ids(list))
	}
	row := sess("s", at(0))
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(3, 3), Session: row})
	got, err := s.Session(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	wantSession(t, got, *row)
	wantRecords(t, "Records", records(t, s, "s", 0, 10), recs(1, 3))
}

func (h harness) commitOnlyCommands(t *testing.T) {
	s := h.fresh(t)
	c1 := store.Command{ID: "c1", Digest: "d1", Response: raw(`{"ok":true}`)}
	c2 := store.Command{ID: "c2", Digest: "d2", Response: raw(`{"code":-32000}`), IsError: true}
	mustCommit(t, s, store.Batch{Commands: []store.Command{c1, c2}})
	wantCommand(t, s, c1)
	wantCommand(t, s, c2)
	// The same with a session id but nothing else for it.
	c3 := store.Command{ID: "c3", Digest: "d3", Response: raw(`{}`)}
	mustCommit(t, s, store.Batch{SessionID: "s", Commands: []store.Command{c3}})
	wantCommand(t, s, c3)
	wantHead(t, s, "s", 0)
	wantNoSession(t, s, "s")
}

func (h harness) commitOnlySessionRow(t *testing.T) {
	s := h.fresh(t)
	a := sess("a", at(0))
	mustCommit(t, s, store.Batch{Session: a}) // SessionID may be left empty.
	b := sess("b", at(0))
	mustCommit(t, s, store.Batch{SessionID: "b", Session: b})
	for _, want := range []*store.Session{a, b} {
		got, err := s.Session(t.Context(), want.ID)
		if err != nil {
			t.Fatalf("Session(%q): %v", want.ID, err)
		}
		wantSession(t, got, *want)
		wantHead(t, s, want.ID, 0)
	}
}

func (h harness) commitEmpty(t *testing.T) {
	s := h.fresh(t)
	mustCommit(t, s, store.Batch{})
	mustCommit(t, s, store.Batch{SessionID: "s"})
	wantHead(t, s, "s", 0)
	wantNoSession(t, s, "s")
}

func (h harness) commitSessionsIsolated(t *testing.T) {
	s := h.fresh(t)
	mustCommit(t, s, store.Batch{SessionID: "a", Records: recs(1, 3)})
	mustCommit(t, s, store.Batch{SessionID: "b", Records: recs(1, 1)})
	// Ids that are prefixes of one another must not bleed into each other.
	mustCommit(t, s, store.Batch{SessionID: "ab", Records: recs(1, 2)})
	wantHead(t, s, "a", 3)
	wantHead(t, s, "b", 1)
	wantHead(t, s, "ab", 2)
	wantRecords(t, "Records(a)", records(t, s, "a", 0, 10), recs(1, 3))
	wantRecords(t, "Records(b)", records(t, s, "b", 0, 10), recs(1, 1))
	wantRecords(t, "Records(ab)", records(t, s, "ab", 0, 10), recs(1, 2))
}

func (h harness) commitCanceledContext(t *testing.T) {
	s := h.fresh(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := s.Commit(ctx, store.Batch{
		SessionID: "s",
		Records:   recs(1, 1),
		Session:   sess("s", at(0)),
		Commands:  []store.Command{{ID: "c", Digest: "d"}},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit with a canceled context = %v, want context.Canceled", err)
	}
	wantHead(t, s, "s", 0)
	wantNoSession(t, s, "s")
	wantNoCommand(t, s, "c")

	dctx, dcancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer dcancel()
	err = s.Commit(dctx, store.Batch{SessionID: "s", Records: recs(1, 1)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Commit with an expired deadline = %v, want context.DeadlineExceeded", err)
	}
	wantHead(t, s, "s", 0)
}

// Malformed batches are caller bugs: they fail, write nothing, and must not
// look like ErrConflict, which callers answer by re-reading and retrying.
func (h harness) commitInvalidBatch(t *testing.T) {
	s := h.fresh(t)
	cases := []struct {
		name string
		b    store.Batch
	}{
		{"RecordsWithoutSessionID", store.Batch{
			Records:  recs(1, 1),
			Commands: []store.Command{{ID: "c", Digest: "d"}},
		}},
		{"SessionRowIDMismatch", store.Batch{
			SessionID: "s",
			Records:   recs(1, 1),
			Session:   sess("other", at(0)),
			Commands:  []store.Command{{ID: "c", Digest: "d"}},
		}},
		{"SessionRowWithoutID", store.Batch{
			SessionID: "s",
			Records:   recs(1, 1),
			Session:   &store.Session{State: raw(`{}`)},
		}},
		{"SessionUpdatedAtUnstorable", store.Batch{
			SessionID: "s",
			Records:   recs(1, 1),
			Session:   sess("s", time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC)),
		}},
		{"CommandWithoutID", store.Batch{
			SessionID: "s",
			Records:   recs(1, 1),
			Commands:  []store.Command{{Digest: "d"}, {ID: "c", Digest: "d"}},
		}},
		{"AtHeadBesideRecords", store.Batch{
			SessionID: "s",
			Records:   recs(1, 1),
			Session:   sess("s", at(0)),
			AtHead:    new(int64(1)),
		}},
		{"AtHeadWithoutRow", store.Batch{
			SessionID: "s",
			Commands:  []store.Command{{ID: "c", Digest: "d"}},
			AtHead:    new(int64(1)),
		}},
		{"CommandCreatedAtUnstorable", store.Batch{
			SessionID: "s",
			Records:   recs(1, 1),
			Commands:  []store.Command{{ID: "c", Digest: "d", CreatedAt: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}},
		}},
	}
	for _, c := range cases {
		err := s.Commit(t.Context(), c.b)
		if err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("%s: Commit = %v, want a non-conflict error", c.name, err)
		}
	}
	wantHead(t, s, "", 0)
	wantHead(t, s, "s", 0)
	wantNoSession(t, s, "s")
	wantNoSession(t, s, "other")
	wantNoCommand(t, s, "c")
}

func (h harness) commitAfterClose(t *testing.T) {
	s := h.fresh(t)
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(1, 1)})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Store.Commit(t.Context(), store.Batch{SessionID: "s", Records: recs(2, 2)}); err == nil {
		t.Fatal("Commit after Close succeeded")
	}
}

// Callers reuse buffers: a store must copy what it is given and hand out
// slices it no longer touches.
func (h harness) commitNoAliasing(t *testing.T) {
	s := h.fresh(t)
	params := raw(`{"text":"original"}`)
	state := raw(`{"state":"original"}`)
	resp := raw(`{"result":"original"}`)
	row := sess("s", at(0))
	row.State = state
	mustCommit(t, s, store.Batch{
		SessionID: "s",
		Records:   []store.Record{{Seq: 1, Method: "m", Params: params}},
		Session:   row,
		Commands:  []store.Command{{ID: "c", Digest: "d", Response: resp}},
	})
	for _, b := range [][]byte{params, state, resp} {
		copy(b, bytes.Repeat([]byte("X"), len(b)))
	}
	rs := records(t, s, "s", 0, 1)
	wantRecords(t, "after caller scribbled", rs, []store.Record{{Seq: 1, Method: "m", Params: raw(`{"text":"original"}`)}})
	copy(rs[0].Params, bytes.Repeat([]byte("Y"), len(rs[0].Params)))
	wantRecords(t, "after reader scribbled", records(t, s, "s", 0, 1),
		[]store.Record{{Seq: 1, Method: "m", Params: raw(`{"text":"original"}`)}})
	got, err := s.Session(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	if string(got.State) != `{"state":"original"}` {
		t.Fatalf("State = %q after caller scribbled", got.State)
	}
	wantCommand(t, s, store.Command{ID: "c", Digest: "d", Response: raw(`{"result":"original"}`)})
}

// --- Conflict -------------------------------------------------------------

// conflictWritesNothing commits b, which must conflict, and checks that none
// of its parts landed: the log is unchanged and the row and commands it
// carried (all new) do not exist.
func conflictWritesNothing(t *testing.T, s store.Store, b store.Batch, wantLog []store.Record) {
	t.Helper()
	mustConflict(t, s, b)
	wantHead(t, s, b.SessionID, int64(len(wantLog)))
	wantRecords(t, "log after conflict", records(t, s, b.SessionID, 0, 1000), wantLog)
	if b.Session != nil {
		wantNoSession(t, s, b.Session.ID)
	}
	for _, c := range b.Commands {
		wantNoCommand(t, s, c.ID)
	}
}

func (h harness) conflictFirstSeq(t *testing.T) {
	s := h.fresh(t)
	extra := func(n int, rs []store.Record) store.Batch {
		return store.Batch{
			SessionID: "s",
			Records:   rs,
			Session:   sess("s", at(0)),
			Commands:  []store.Command{{ID: fmt.Sprintf("c%d", n), Digest: "d"}},
		}
	}
	// Empty log: head is 0, so only seq 1 fits.
	conflictWritesNothing(t, s, extra(1, recs(2, 3)), nil)
	conflictWritesNothing(t, s, extra(2, []store.Record{rec(0)}), nil)
	conflictWritesNothing(t, s, extra(3, []store.Record{rec(-1), rec(0)}), nil)

	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(1, 3)})
	log := recs(1, 3)
	conflictWritesNothing(t, s, extra(4, recs(3, 4)), log) // overlaps head
	conflictWritesNothing(t, s, extra(5, recs(1, 1)), log) // rewrites history
	conflictWritesNothing(t, s, extra(6, recs(5, 6)), log) // leaves a gap
	mustCommit(t, s, extra(7, recs(4, 4)))
	wantHead(t, s, "s", 4)
}

// conflictRowAtOldHead: a row fenced by AtHead lands only while the log
// is where its writer saw it, an empty log included; otherwise it writes
// nothing, its commands included.
func (h harness) conflictRowAtOldHead(t *testing.T) {
	s := h.fresh(t)
	// An empty log is a head too: 0.
	mustCommit(t, s, store.Batch{SessionID: "s", Session: sess("s", at(0)), AtHead: new(int64(0))})
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(1, 3)})
	log := recs(1, 3)
	atZero := store.Batch{SessionID: "s", Session: sess("s", at(time.Hour)), AtHead: new(int64(0))}
	mustConflict(t, s, atZero)
	stale := store.Batch{SessionID: "s", Session: sess("s", at(2*time.Hour)), Commands: []store.Command{{ID: "c1", Digest: "d"}}, AtHead: new(int64(2))}
	mustConflict(t, s, stale)
	wantNoCommand(t, s, "c1")
	ahead := store.Batch{SessionID: "s", Session: sess("s", at(3*time.Hour)), AtHead: new(int64(4))}
	mustConflict(t, s, ahead)
	if got, err := s.Session(t.Context(), "s"); err != nil || !got.UpdatedAt.Equal(at(0)) {
		t.Fatalf("after refused rows the row is %+v, %v; want the first one (updated %v)", got, err, at(0))
	}
	wantRecords(t, "log after the refused rows", records(t, s, "s", 0, 1000), log)
	current := store.Batch{SessionID: "s", Session: sess("s", at(time.Second)), Commands: []store.Command{{ID: "c2", Digest: "d"}}, AtHead: new(int64(3))}
	mustCommit(t, s, current)
	got, err := s.Session(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	wantSession(t, got, *current.Session)
	wantHead(t, s, "s", 3)
}

func (h harness) conflictGapInsideBatch(t *testing.T) {
	s := h.fresh(t)
	batch := func(n int, seqs ...int64) store.Batch {
		b := store.Batch{
			SessionID: "s",
			Session:   sess("s", at(0)),
			Commands:  []store.Command{{ID: fmt.Sprintf("c%d", n), Digest: "d"}},
		}
		for _, q := range seqs {
			b.Records = append(b.Records, rec(q))
		}
		return b
	}
	conflictWritesNothing(t, s, batch(1, 1, 2, 4), nil)
	conflictWritesNothing(t, s, batch(2, 1, 1), nil)
	conflictWritesNothing(t, s, batch(3, 1, 3, 2), nil)
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(1, 2)})
	conflictWritesNothing(t, s, batch(4, 3, 4, 4), recs(1, 2))
	conflictWritesNothing(t, s, batch(5, 3, 5), recs(1, 2))
}

func (h harness) conflictDuplicateCommand(t *testing.T) {
	s := h.fresh(t)
	first := store.Command{ID: "cmd", Digest: "first", Response: raw(`{"first":true}`)}
	mustCommit(t, s, store.Batch{Commands: []store.Command{first}})
	dup := store.Batch{
		SessionID: "s",
		Records:   recs(1, 2),
		Session:   sess("s", at(0)),
		Commands: []store.Command{
			{ID: "new", Digest: "d"},
			{ID: "cmd", Digest: "second", Response: raw(`{"second":true}`), IsError: true},
		},
	}
	mustConflict(t, s, dup)
	wantHead(t, s, "s", 0)
	wantNoSession(t, s, "s")
	wantNoCommand(t, s, "new")
	wantCommand(t, s, first) // The ledger keeps the first admission.

	// The session's log is still free: the next writer gets seq 1.
	dup.Commands = dup.Commands[:1]
	mustCommit(t, s, dup)
	wantHead(t, s, "s", 2)
}

func (h harness) conflictDuplicateCommandInBatch(t *testing.T) {
	s := h.fresh(t)
	b := store.Batch{
		SessionID: "s",
		Records:   recs(1, 1),
		Session:   sess("s", at(0)),
		Commands: []store.Command{
			{ID: "cmd", Digest: "a"},
			{ID: "cmd", Digest: "b"},
		},
	}
	conflictWritesNothing(t, s, b, nil)
}

// --- Read -----------------------------------------------------------------

func (h harness) readRecordsAfter(t *testing.T) {
	s := h.fresh(t)
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(1, 10)})
	cases := []struct {
		after int64
		limit int
		want  []store.Record
	}{
		{0, 3, recs(1, 3)},
		{3, 3, recs(4, 6)},
		{8, 5, recs(9, 10)},
		{0, 10, recs(1, 10)},
		{0, 1000, recs(1, 10)},
		{-5, 2, recs(1, 2)},
		{10, 5, nil},
		{42, 5, nil},
		{0, 0, nil},
		{0, -1, nil},
	}
	for _, c := range cases {
		wantRecords(t, fmt.Sprintf("Records(after %d, limit %d)", c.after, c.limit),
			records(t, s, "s", c.after, c.limit), c.want)
	}
	wantRecords(t, "Records of an unknown session", records(t, s, "nope", 0, 10), nil)
}

func (h harness) readRecordsBefore(t *testing.T) {
	s := h.fresh(t)
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(1, 10)})
	cases := []struct {
		before int64
		limit  int
		want   []store.Record
	}{
		{11, 3, recs(8, 10)},
		{100, 2, recs(9, 10)},
		{8, 3, recs(5, 7)},
		{5, 10, recs(1, 4)},
		{4, 3, recs(1, 3)},
		{2, 3, recs(1, 1)},
		{1, 3, nil},
		{0, 3, nil},
		{11, 0, nil},
		{11, -1, nil},
	}
	for _, c := range cases {
		got, err := s.RecordsBefore(t.Context(), "s", c.before, rows(c.limit))
		if err != nil {
			t.Fatalf("RecordsBefore(%d, %d): %v", c.before, c.limit, err)
		}
		wantRecords(t, fmt.Sprintf("RecordsBefore(before %d, limit %d)", c.before, c.limit), got, c.want)
	}
	got, err := s.RecordsBefore(t.Context(), "nope", 10, rows(10))
	if err != nil {
		t.Fatal(err)
	}
	wantRecords(t, "RecordsBefore of an unknown session", got, nil)
}

// sized is record seq with params of exactly n bytes (n >= 16).
func sized(seq int64, n int) store.Record {
	head := fmt.Sprintf(`{"n":%d,"p":"`, seq)
	return store.Record{Seq: seq, Method: "test/sized", Params: raw(head + strings.Repeat("x", n-len(head)-2) + `"}`)}
}

// boundedLog writes a log whose records' params take, in bytes: 100, 100,
// 100, 5000, 100, 100, 200000, 100 (seqs 1 to 8). The 200000-byte record
// is past what a store might read along with its row (SQLite's
// inlineParams).
func boundedLog(t *testing.T, s store.Store) []store.Record {
	t.Helper()
	var log []store.Record
	for i, n := range []int{100, 100, 100, 5000, 100, 100, 200000, 100} {
		log = append(log, sized(int64(i+1), n))
	}
	mustCommit(t, s, store.Batch{SessionID: "s", Records: log})
	return log
}

// A read bounded by bytes takes records while their params fit the bound,
// stops before the first that would go past it, and always takes the
// first, however large.
func (h harness) readRecordsWithinBytes(t *testing.T) {
	s := h.fresh(t)
	log := boundedLog(t, s)
	cases := []struct {
		after       int64
		rows, bytes int
		want        []store.Record // log[i:j] as seqs i+1..j
	}{
		{0, 100, 300, log[0:3]},   // exactly the bound
		{0, 100, 299, log[0:2]},   // one byte short of the third
		{3, 100, 300, log[3:4]},   // larger than the bound: alone
		{4, 100, 300, log[4:6]},   // stops before a large record it has no room for
		{6, 100, 300, log[6:7]},   // which comes alone when first
		{0, 100, 5300, log[0:4]},  // the large one fits after three
		{0, 2, 1 << 30, log[0:2]}, // rows still bound
		{0, 100, 0, log[0:1]},     // no bytes: one record
		{1, 100, -1, log[1:2]},    // likewise
		{0, 100, 1 << 30, log[:]}, // everything fits
		{7, 100, 300, log[7:8]},   // the end
		{8, 100, 300, nil},        // past the end
		{0, 0, 1 << 30, nil},      // no rows
	}
	for _, c := range cases {
		got, err := s.Records(t.Context(), "s", c.after, store.Limit{Rows: c.rows, Bytes: c.bytes})
		if err != nil {
			t.Fatal(err)
		}
		wantRecords(t, fmt.Sprintf("Records(after %d, %d rows, %d bytes)", c.after, c.rows, c.bytes), got, c.want)
	}
}

// Backward, the bound counts from the record nearest before.
func (h harness) readRecordsBeforeWithinBytes(t *testing.T) {
	s := h.fresh(t)
	log := boundedLog(t, s)
	cases := []struct {
		before      int64
		rows, bytes int
		want        []store.Record
	}{
		{9, 100, 300, log[7:8]},     // the 200000-byte record before it does not fit
		{8, 100, 300, log[6:7]},     // larger than the bound: alone
		{7, 100, 300, log[4:6]},     // stops before the 5000-byte record
		{4, 100, 300, log[0:3]},     // exactly the bound
		{4, 100, 250, log[1:3]},     // the nearest two
		{5, 100, 0, log[3:4]},       // no bytes: one record
		{9, 3, 1 << 30, log[5:8]},   // rows still bound
		{100, 100, 1 << 30, log[:]}, // everything fits, from past the end
		{8, 100, 205300, log[2:7]},  // the large one and four below it
		{1, 100, 300, nil},          // nothing before the first
	}
	for _, c := range cases {
		got, err := s.RecordsBefore(t.Context(), "s", c.before, store.Limit{Rows: c.rows, Bytes: c.bytes})
		if err != nil {
			t.Fatal(err)
		}
		wantRecords(t, fmt.Sprintf("RecordsBefore(before %d, %d rows, %d bytes)", c.before, c.rows, c.bytes), got, c.want)
	}
}

// Pages bounded by bytes, in either direction, hold as many records as
// fit, and together every record exactly once, in a log long enough for
// a store's reads in several round trips.
func (h harness) readPagingByBytes(t *testing.T) {
	s := h.fresh(t)
	var log []store.Record
	for i := range int64(600) {
		n := 100
		if i%97 == 50 {
			n = 3000 // now and then one larger than a page
		}
		log = append(log, sized(i+1, n))
	}
	mustCommit(t, s, store.Batch{SessionID: "s", Records: log})
	const bound = 2500 // 25 small records
	lim := store.Limit{Rows: 1000, Bytes: bound}
	// fits is how many records from the start of rs a page may hold.
	fits := func(rs []store.Record) int {
		n, used := 0, 0
		for n < len(rs) && lim.Admits(n, used, len(rs[n].Params)) {
			used += len(rs[n].Params)
			n++
		}
		return n
	}
	var forward []store.Record
	for after := int64(0); ; {
		page, err := s.Records(t.Context(), "s", after, lim)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		wantRecords(t, fmt.Sprintf("forward page after %d", after), page, log[after:after+int64(fits(log[after:]))])
		forward = append(forward, page...)
		after = page[len(page)-1].Seq
	}
	wantRecords(t, "every forward page", forward, log)
	var backward []store.Record
	for before := int64(len(log) + 1); before > 1; {
		page, err := s.RecordsBefore(t.Context(), "s", before, lim)
		if err != nil {
			t.Fatal(err)
		}
		rev := slices.Clone(log[:before-1])
		slices.Reverse(rev)
		want := slices.Clone(rev[:fits(rev)])
		slices.Reverse(want)
		wantRecords(t, fmt.Sprintf("backward page before %d", before), page, want)
		backward = append(slices.Clone(page), backward...)
		before = page[0].Seq
	}
	wantRecords(t, "every backward page", backward, log)
}

func (h harness) readHead(t *testing.T) {
	s := h.fresh(t)
	wantHead(t, s, "unknown", 0)
	wantHead(t, s, "", 0)
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(1, 1)})
	wantHead(t, s, "s", 1)
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(2, 7)})
	wantHead(t, s, "s", 7)
	wantHead(t, s, "unknown", 0)
}

// Params are served again on resume and must match the first fan-out byte
// for byte, so a store may not re-encode them.
func (h harness) readParamsByteIdentical(t *testing.T) {
	s := h.fresh(t)
	odd := []string{
		`{ "b" : 1,"a":2 }`,
		`{"z":1,"a":{"y":[3, 2 ,1],"b":null}}`,
		"{\n\t\"indented\": true\n}\n",
		`{"text":"héllo wörld — ✓ 😀 日本語"}`,
		`{"escaped":"\u00e9\ud83d\ude00\n\"quoted\"\\"}`,
		`{"nul":"\u0000","raw":"a` + "\u2028" + `b"}`,
		`{"num":1.0e+10,"neg":-0,"big":123456789012345678901234567890}`,
		`{"dup":1,"dup":2}`,
		`[1,  2,3]`,
		`"just a string"`,
		`null`,
		`{"long":"` + strings.Repeat("x", 70000) + `"}`,
		`{}`,
	}
	var want []store.Record
	for i, p := range odd {
		want = append(want, store.Record{Seq: int64(i + 1), Method: fmt.Sprintf("m/%d·ü", i), Params: raw(p)})
	}
	row := sess("s", at(0))
	row.State = raw(`{ "state" : "ünïcode ✓", "k":[ ] }`)
	resp := raw(` {"result" :{"b":2,"a":1}} `)
	mustCommit(t, s, store.Batch{
		SessionID: "s",
		Records:   want,
		Session:   row,
		Commands:  []store.Command{{ID: "c", Digest: "sha256:ab", Response: resp}},
	})
	wantRecords(t, "Records", records(t, s, "s", 0, 100), want)
	before, err := s.RecordsBefore(t.Context(), "s", 100, rows(100))
	if err != nil {
		t.Fatal(err)
	}
	wantRecords(t, "RecordsBefore", before, want)
	got, err := s.Session(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	wantSession(t, got, *row)
	wantCommand(t, s, store.Command{ID: "c", Digest: "sha256:ab", Response: resp})
}

// --- Session --------------------------------------------------------------

func (h harness) sessionUpsert(t *testing.T) {
	s := h.fresh(t)
	wantNoSession(t, s, "s")
	row := &store.Session{
		ID:        "s",
		CreatedAt: at(0),
		UpdatedAt: at(time.Second),
		Busy:      true,
		State:     raw(`{"v":1}`),
	}
	mustCommit(t, s, store.Batch{SessionID: "s", Session: row})
	got, err := s.Session(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	wantSession(t, got, *row)

	// A later row replaces every field.
	row2 := &store.Session{
		ID:        "s",
		CreatedAt: at(-time.Hour),
		UpdatedAt: at(time.Minute + 7),
		Busy:      false,
		State:     raw(`{"v":2,"more":[1,2,3]}`),
	}
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(1, 1), Session: row2})
	got, err = s.Session(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	wantSession(t, got, *row2)

	// Times in other locations are the same instants.
	loc := time.FixedZone("UTC+5:30", 5*3600+1800)
	row3 := &store.Session{ID: "s", CreatedAt: at(0).In(loc), UpdatedAt: at(time.Hour).In(loc), State: raw(`{}`)}
	mustCommit(t, s, store.Batch{Session: row3})
	got, err = s.Session(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	wantSession(t, got, *row3)
	wantNoSession(t, s, "other")
}

// sessionFixture commits rows with deliberate ties on UpdatedAt and returns
// them in the expected listing order.
func sessionFixture(t *testing.T, s store.Store) []string {
	t.Helper()
	type row struct {
		id string
		at time.Duration
	}
	rows := []row{
		{"a", 3 * time.Second}, {"b", 3 * time.Second}, {"c", 3 * time.Second}, // tie
		{"d", time.Second},
		{"e", 5 * time.Second},
		{"f", 2 * time.Second}, {"g", 2 * time.Second}, // tie
		{"h", 1}, // one nanosecond after at(0)
		{"i", 0},
		{"j", 4 * time.Second}, {"k", 4 * time.Second}, {"l", 4 * time.Second}, {"m", 4 * time.Second}, // tie
	}
	for _, r := range rows {
		mustCommit(t, s, store.Batch{SessionID: r.id, Session: sess(r.id, at(r.at))})
	}
	slices.SortFunc(rows, func(x, y row) int {
		if x.at != y.at {
			return -int(x.at - y.at)
		}
		return -strings.Compare(x.id, y.id)
	})
	want := make([]string, len(rows))
	for i, r := range rows {
		want[i] = r.id
	}
	return want
}

func (h harness) sessionList(t *testing.T) {
	s := h.fresh(t)
	want := sessionFixture(t, s)
	got, err := s.Sessions(t.Context(), "", nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(got), want) {
		t.Fatalf("Sessions = %v, want %v", ids(got), want)
	}
	for _, g := range got {
		wantSession(t, g, *sess(g.ID, g.UpdatedAt))
	}
	for _, limit := range []int{0, -1} {
		got, err := s.Sessions(t.Context(), "", nil, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 0 {
			t.Fatalf("Sessions(limit %d) = %v, want none", limit, ids(got))
		}
	}
	// Updating a row moves it to the front.
	mustCommit(t, s, store.Batch{Session: sess("i", at(time.Hour))})
	got, err = s.Sessions(t.Context(), "", nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if w := []string{"i", want[0]}; !slices.Equal(ids(got), w) {
		t.Fatalf("Sessions after update = %v, want %v", ids(got), w)
	}
}

func (h harness) sessionListPaging(t *testing.T) {
	s := h.fresh(t)
	want := sessionFixture(t, s)
	for limit := 1; limit <= len(want)+1; limit++ {
		var all []string
		var after *store.SessionKey
		for pages := 0; ; pages++ {
			if pages > len(want) {
				t.Fatalf("limit %d: paging does not end; so far %v", limit, all)
			}
			page, err := s.Sessions(t.Context(), "", after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(page))
			}
			if len(page) == 0 {
				break
			}
			all = append(all, ids(page)...)
			last := page[len(page)-1]
			after = &store.SessionKey{UpdatedAt: last.UpdatedAt, ID: last.ID}
		}
		if !slices.Equal(all, want) {
			t.Fatalf("limit %d: pages joined = %v, want %v", limit, all, want)
		}
	}

	// Keys that name no session: between ties, and between instants.
	cases := []struct {
		key  store.SessionKey
		want []string
	}{
		{store.SessionKey{UpdatedAt: at(3 * time.Second), ID: "bb"}, []string{"b", "a", "g"}},
		{store.SessionKey{UpdatedAt: at(3 * time.Second), ID: "zzz"}, []string{"c", "b", "a"}},
		{store.SessionKey{UpdatedAt: at(3 * time.Second), ID: ""}, []string{"g", "f", "d"}},
		{store.SessionKey{UpdatedAt: at(2500 * time.Millisecond), ID: "a"}, []string{"g", "f", "d"}},
		{store.SessionKey{UpdatedAt: at(time.Hour), ID: ""}, want[:3]},
		{store.SessionKey{UpdatedAt: at(0), ID: "i"}, nil},
		{store.SessionKey{UpdatedAt: at(-time.Hour), ID: "z"}, nil},
	}
	for _, c := range cases {
		page, err := s.Sessions(t.Context(), "", &c.key, 3)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(page), c.want) {
			t.Fatalf("Sessions(after %v/%q) = %v, want %v", c.key.UpdatedAt, c.key.ID, ids(page), c.want)
		}
		// A page that could hold every session (a store may read such a
		// list another way): the same ones first, then the rest of want.
		page, err = s.Sessions(t.Context(), "", &c.key, len(want)+1)
		if err != nil {
			t.Fatal(err)
		}
		got := ids(page)
		if !slices.Equal(got[:min(3, len(got))], c.want) || !slices.Equal(got, want[len(want)-len(got):]) {
			t.Fatalf("Sessions(after %v/%q, limit %d) = %v, want %v… ending as %v", c.key.UpdatedAt, c.key.ID, len(want)+1, got, c.want, want)
		}
	}
}

// Each owner lists its own rows only, newest first and paged, whatever
// the others hold: interleaved in time with its rows, under ids that sort
// among its own, and owners whose names are no plain token.
func (h harness) sessionListByOwner(t *testing.T) {
	s := h.fresh(t)
	owners := []string{"", "alice", "bob", "carol.x y*>", "alice\x00"}
	want := map[string][]string{}
	for i := range 60 {
		owner := owners[i%len(owners)]
		if i >= 40 {
			owner = "alice" // more than the others: a store may read a large index otherwise
		}
		id := fmt.Sprintf("s%02d", i)
		row := sess(id, at(time.Duration(i%7)*time.Second))
		row.Owner = owner
		mustCommit(t, s, store.Batch{SessionID: id, Session: row})
		got, err := s.Session(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		wantSession(t, got, *row)
		want[owner] = append(want[owner], id)
	}
	order := func(owner string) []string {
		rows := map[string]time.Duration{}
		for _, id := range want[owner] {
			var n int
			fmt.Sscanf(id, "s%d", &n)
			rows[id] = time.Duration(n%7) * time.Second
		}
		ids := slices.Clone(want[owner])
		slices.SortFunc(ids, func(x, y string) int {
			if rows[x] != rows[y] {
				return -int(rows[x] - rows[y])
			}
			return -strings.Compare(x, y)
		})
		return ids
	}
	for _, owner := range append(owners, "nobody") {
		w := order(owner)
		for _, limit := range []int{1, 3, 100} {
			var all []string
			var after *store.SessionKey
			for pages := 0; ; pages++ {
				if pages > len(w)+1 {
					t.Fatalf("owner %q limit %d: paging does not end; so far %v", owner, limit, all)
				}
				page, err := s.Sessions(t.Context(), owner, after, limit)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				for _, row := range page {
					if row.Owner != owner {
						t.Fatalf("Sessions(%q) listed %s of %q", owner, row.ID, row.Owner)
					}
				}
				all = append(all, ids(page)...)
				last := page[len(page)-1]
				after = &store.SessionKey{UpdatedAt: last.UpdatedAt, ID: last.ID}
			}
			if !slices.Equal(all, w) {
				t.Fatalf("Sessions(%q) limit %d = %v, want %v", owner, limit, all, w)
			}
		}
	}
	// A row updated moves to the front of its owner's listing only; a
	// deleted one leaves it.
	first := want["bob"][0]
	row := sess(first, at(time.Hour))
	row.Owner = "bob"
	mustCommit(t, s, store.Batch{Session: row})
	if err := s.DeleteSession(t.Context(), want["alice"][0]); err != nil {
		t.Fatal(err)
	}
	gone := want["alice"][0]
	for owner, w := range map[string][]string{
		"bob":   append([]string{first}, slices.DeleteFunc(order("bob"), func(id string) bool { return id == first })...),
		"alice": slices.DeleteFunc(order("alice"), func(id string) bool { return id == gone }),
		"":      order(""),
	} {
		got, err := s.Sessions(t.Context(), owner, nil, 100)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(got), w) {
			t.Fatalf("Sessions(%q) after an update and a deletion = %v, want %v", owner, ids(got), w)
		}
	}
}

func (h harness) sessionBusy(t *testing.T) {
	s := h.fresh(t)
	busy := func() []string {
		t.Helper()
		ss, err := s.BusySessions(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		got := ids(ss)
		slices.Sort(got)
		return got
	}
	if got := busy(); len(got) != 0 {
		t.Fatalf("BusySessions on an empty store = %v", got)
	}
	for i, id := range []string{"a", "b", "c", "d"} {
		row := sess(id, at(time.Duration(i)*time.Second))
		row.Busy = id != "c"
		mustCommit(t, s, store.Batch{SessionID: id, Session: row})
	}
	// A log with no row is never busy.
	mustCommit(t, s, store.Batch{SessionID: "e", Records: recs(1, 1)})
	if got, want := busy(), []string{"a", "b", "d"}; !slices.Equal(got, want) {
		t.Fatalf("BusySessions = %v, want %v", got, want)
	}
	row := sess("b", at(time.Minute))
	mustCommit(t, s, store.Batch{Session: row})
	ss, err := s.BusySessions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := busy(), []string{"a", "d"}; !slices.Equal(got, want) {
		t.Fatalf("BusySessions after clearing b = %v, want %v", got, want)
	}
	for _, g := range ss {
		want := sess(g.ID, g.UpdatedAt)
		want.Busy = true
		wantSession(t, g, *want)
	}
}

// --- Command --------------------------------------------------------------

func (h harness) commandRoundTrip(t *testing.T) {
	s := h.fresh(t)
	wantNoCommand(t, s, "nope")
	ok := store.Command{ID: "ok", Digest: "sha256:0011", Response: raw(`{"turnId":"t1", "cursor":"v:s:3"}`)}
	bad := store.Command{ID: "bad", Digest: "sha256:2233", Response: raw(`{"code":-32602,"message":"nope","data":{"kind":"invalid"}}`), IsError: true}
	empty := store.Command{ID: "empty", Digest: ""}
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(1, 1), Commands: []store.Command{ok, bad}})
	mustCommit(t, s, store.Batch{Commands: []store.Command{empty}})
	wantCommand(t, s, ok)
	wantCommand(t, s, bad)
	got, err := s.Command(t.Context(), "empty")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "empty" || got.Digest != "" || got.IsError || len(got.Response) != 0 {
		t.Fatalf("Command(empty) = %+v", got)
	}
	wantNoCommand(t, s, "nope")
}

// A CreatedAt given is kept to the nanosecond; a zero one becomes the time
// of the Commit.
func (h harness) commandCreatedAt(t *testing.T) {
	s := h.fresh(t)
	given := store.Command{ID: "given", Digest: "d", CreatedAt: at(time.Hour)}
	mustCommit(t, s, store.Batch{Commands: []store.Command{given}})
	wantCommand(t, s, given)

	before := time.Now()
	mustCommit(t, s, store.Batch{Commands: []store.Command{{ID: "stamped", Digest: "d"}}})
	after := time.Now()
	got, err := s.Command(t.Context(), "stamped")
	if err != nil {
		t.Fatal(err)
	}
	// Stored instants carry no monotonic reading; compare wall clocks.
	if got.CreatedAt.Before(before.Round(0)) || got.CreatedAt.After(after.Round(0)) {
		t.Fatalf("stamped CreatedAt = %v, want within [%v, %v]", got.CreatedAt, before, after)
	}
}

// ledger commits one command per offset, created at at(offset), and
// returns their ids, oldest first.
func ledger(t *testing.T, s store.Store, offsets ...time.Duration) []string {
	t.Helper()
	var cs []store.Command
	var ids []string
	for _, d := range offsets {
		id := fmt.Sprintf("c%+d", d/time.Second)
		cs = append(cs, store.Command{ID: id, Digest: "d" + id, Response: raw(`{}`), CreatedAt: at(d)})
		ids = append(ids, id)
	}
	mustCommit(t, s, store.Batch{Commands: cs})
	return ids
}

func mustPrune(t *testing.T, s store.Store, before time.Time, limit, want int) {
	t.Helper()
	n, err := s.PruneCommands(t.Context(), before, limit)
	if err != nil || n != want {
		t.Fatalf("PruneCommands(%v, %d) = %d, %v; want %d", before, limit, n, err, want)
	}
}

func wantCommands(t *testing.T, s store.Store, gone, kept []string) {
	t.Helper()
	for _, id := range gone {
		wantNoCommand(t, s, id)
	}
	for _, id := range kept {
		if _, err := s.Command(t.Context(), id); err != nil {
			t.Fatalf("Command(%q) after prune: %v", id, err)
		}
	}
}

func (h harness) commandPruneOlderOnly(t *testing.T) {
	s := h.fresh(t)
	ids := ledger(t, s, -2*time.Second, -time.Second, 0, time.Second)
	mustPrune(t, s, at(0), 100, 2) // strictly before: the entry at at(0) stays
	wantCommands(t, s, ids[:2], ids[2:])
	mustPrune(t, s, at(0), 100, 0)
	mustPrune(t, s, at(-time.Hour), 100, 0)
	wantCommands(t, s, ids[:2], ids[2:])
}

func (h harness) commandPruneLimit(t *testing.T) {
	s := h.fresh(t)
	// Committed out of order, so "oldest first" is not insertion order.
	ids := ledger(t, s, 3*time.Second, time.Second, 4*time.Second, 2*time.Second, 5*time.Second)
	mustPrune(t, s, at(time.Hour), 0, 0)
	mustPrune(t, s, at(time.Hour), -1, 0)
	wantCommands(t, s, nil, ids)
	mustPrune(t, s, at(time.Hour), 2, 2)
	wantCommands(t, s, []string{ids[1], ids[3]}, []string{ids[0], ids[2], ids[4]})
	mustPrune(t, s, at(time.Hour), 2, 2)
	wantCommands(t, s, []string{ids[0], ids[2]}, []string{ids[4]})
	mustPrune(t, s, at(time.Hour), 2, 1)
	mustPrune(t, s, at(time.Hour), 2, 0)
	wantCommands(t, s, ids, nil)
}

func (h harness) commandPrunedIsNew(t *testing.T) {
	s := h.fresh(t)
	old := store.Command{ID: "c", Digest: "old", Response: raw(`{"old":true}`), CreatedAt: at(0)}
	mustCommit(t, s, store.Batch{Commands: []store.Command{old}})
	mustConflict(t, s, store.Batch{Commands: []store.Command{{ID: "c", Digest: "new"}}})
	mustPrune(t, s, at(time.Second), 10, 1)
	again := store.Command{ID: "c", Digest: "new", Response: raw(`{"new":true}`), IsError: true, CreatedAt: at(time.Hour)}
	mustCommit(t, s, store.Batch{Commands: []store.Command{again}})
	wantCommand(t, s, again)
	mustPrune(t, s, at(time.Second), 10, 0) // the new entry is young
	wantCommand(t, s, again)
}

func (h harness) commandPruneCanceledOrClosed(t *testing.T) {
	s := h.fresh(t)
	ids := ledger(t, s, 0)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if n, err := s.PruneCommands(ctx, at(time.Hour), 10); !errors.Is(err, context.Canceled) || n != 0 {
		t.Fatalf("PruneCommands with a canceled context = %d, %v; want 0, context.Canceled", n, err)
	}
	wantCommands(t, s, nil, ids)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneCommands(t.Context(), at(time.Hour), 10); err == nil || n != 0 {
		t.Fatalf("PruneCommands after Close = %d, %v; want an error", n, err)
	}
}

// Pruning old entries while writers add new ones loses none of the new.
func (h harness) commandPruneDuringCommits(t *testing.T) {
	s := h.fresh(t)
	const old, writers, perWriter = 300, 4, 25
	var oldIDs []string
	var cs []store.Command
	for i := range old {
		oldIDs = append(oldIDs, fmt.Sprintf("old%d", i))
		cs = append(cs, store.Command{ID: oldIDs[i], Digest: "d", CreatedAt: at(time.Duration(i))})
	}
	mustCommit(t, s, store.Batch{Commands: cs})
	var wg sync.WaitGroup
	errc := make(chan error, writers+1)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				c := store.Command{ID: fmt.Sprintf("new%d-%d", w, i), Digest: "d", CreatedAt: at(time.Hour)}
				if err := s.Commit(t.Context(), store.Batch{Commands: []store.Command{c}}); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		total := 0
		for {
			n, err := s.PruneCommands(t.Context(), at(time.Minute), 7)
			if err != nil {
				errc <- err
				return
			}
			if total += n; n < 7 {
				break
			}
		}
		if total != old {
			errc <- fmt.Errorf("pruned %d entries, want %d", total, old)
		}
	})
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	wantCommands(t, s, oldIDs, nil)
	for w := range writers {
		for i := range perWriter {
			wantCommands(t, s, nil, []string{fmt.Sprintf("new%d-%d", w, i)})
		}
	}
}

// --- Durability -----------------------------------------------------------

func (h harness) durabilityReopen(t *testing.T) {
	dir := t.TempDir()
	s := h.openAt(t, dir)
	row := &store.Session{ID: "s", CreatedAt: at(0), UpdatedAt: at(time.Second), Busy: true, State: raw(`{ "x" : "ÿ" }`)}
	idle := sess("idle", at(0))
	cmd := store.Command{ID: "c", Digest: "d", Response: raw(`{"r":1}`), IsError: true}
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(1, 5), Session: row, Commands: []store.Command{cmd}})
	mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(6, 7)})
	mustCommit(t, s, store.Batch{SessionID: "idle", Session: idle})
	mustCommit(t, s, store.Batch{SessionID: "norow", Records: recs(1, 2)})
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	check := func(s store.Store, wantHeadS int64) {
		t.Helper()
		wantHead(t, s, "s", wantHeadS)
		wantHead(t, s, "norow", 2)
		wantRecords(t, "Records after reopen", records(t, s, "s", 0, 100), recs(1, wantHeadS))
		got, err := s.Session(t.Context(), "s")
		if err != nil {
			t.Fatal(err)
		}
		wantSession(t, got, *row)
		list, err := s.Sessions(t.Context(), "", nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		if w := []string{"s", "idle"}; !slices.Equal(ids(list), w) {
			t.Fatalf("Sessions after reopen = %v, want %v", ids(list), w)
		}
		busy, err := s.BusySessions(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if w := []string{"s"}; !slices.Equal(ids(busy), w) {
			t.Fatalf("BusySessions after reopen = %v, want %v", ids(busy), w)
		}
		wantCommand(t, s, cmd)
	}

	s2 := h.openAt(t, dir)
	check(s2, 7)
	// The reopened store continues the log and still enforces it.
	mustConflict(t, s2, store.Batch{SessionID: "s", Records: recs(7, 7)})
	mustConflict(t, s2, store.Batch{Commands: []store.Command{{ID: "c", Digest: "again"}}})
	mustCommit(t, s2, store.Batch{SessionID: "s", Records: recs(8, 8)})
	if err := s2.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s3 := h.openAt(t, dir)
	check(s3, 8)
}

// --- Concurrency ----------------------------------------------------------

// Writers race for the same sessions the way session managers on several
// nodes would: read the head, try head+1, and on ErrConflict re-read and
// retry. Every write must land exactly once, in a dense log.
func (h harness) concurrentCommits(t *testing.T) {
	s := h.fresh(t)
	const (
		sessions  = 8
		writers   = 24 // three per session
		perWriter = 15
	)
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			id := fmt.Sprintf("s%d", w%sessions)
			for i := range perWriter {
				marker := fmt.Sprintf(`{"writer":%d,"i":%d}`, w, i)
				cmd := fmt.Sprintf("cmd-%d-%d", w, i)
				for attempt := 0; ; attempt++ {
					if attempt > 10000 {
						errc <- fmt.Errorf("writer %d: no progress", w)
						return
					}
					h, err := s.Head(t.Context(), id)
					if err != nil {
						errc <- err
						return
					}
					err = s.Commit(t.Context(), store.Batch{
						SessionID: id,
						Records:   []store.Record{{Seq: h + 1, Method: "m", Params: raw(marker)}},
						Session:   sess(id, at(time.Duration(h+1))),
						Commands:  []store.Command{{ID: cmd, Digest: marker}},
					})
					if err == nil {
						break
					}
					if !errors.Is(err, store.ErrConflict) {
						errc <- fmt.Errorf("writer %d: %w", w, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	perSession := writers / sessions * perWriter
	for n := range sessions {
		id := fmt.Sprintf("s%d", n)
		wantHead(t, s, id, int64(perSession))
		rs := records(t, s, id, 0, perSession+10)
		if len(rs) != perSession {
			t.Fatalf("%s: %d records, want %d", id, len(rs), perSession)
		}
		seen := map[string]bool{}
		for i, r := range rs {
			if r.Seq != int64(i+1) {
				t.Fatalf("%s: record %d has seq %d", id, i, r.Seq)
			}
			if seen[string(r.Params)] {
				t.Fatalf("%s: %s landed twice", id, r.Params)
			}
			seen[string(r.Params)] = true
		}
		row, err := s.Session(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !row.UpdatedAt.Equal(at(time.Duration(perSession))) {
			t.Fatalf("%s: row is from seq %d, want the last commit's", id, int64(row.UpdatedAt.Sub(at(0))))
		}
	}
	for w := range writers {
		for i := range perWriter {
			id := fmt.Sprintf("cmd-%d-%d", w, i)
			if _, err := s.Command(t.Context(), id); err != nil {
				t.Fatalf("Command(%q): %v", id, err)
			}
		}
	}
}

// Readers run beside writers and must only ever see whole, dense prefixes
// of a log: a batch is atomic for readers too.
func (h harness) concurrentReads(t *testing.T) {
	s := h.fresh(t)
	const batches, size = 30, 4
	done := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				rs, err := s.Records(t.Context(), "s", 0, rows(batches*size))
				if err != nil {
					errc <- err
					return
				}
				if len(rs)%size != 0 {
					errc <- fmt.Errorf("read %d records: a batch of %d was split", len(rs), size)
					return
				}
				for i, r := range rs {
					if r.Seq != int64(i+1) {
						errc <- fmt.Errorf("read seq %d at index %d", r.Seq, i)
						return
					}
				}
			}
		})
	}
	for n := range int64(batches) {
		mustCommit(t, s, store.Batch{SessionID: "s", Records: recs(n*size+1, n*size+size)})
	}
	close(done)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	wantHead(t, s, "s", batches*size)
}

// seedTwo writes two sessions with records and commands, and a command of
// no session.
func seedTwo(t *testing.T, s store.Store) {
	t.Helper()
	for _, id := range []string{"gone", "kept"} {
		mustCommit(t, s, store.Batch{SessionID: id, Records: recs(1, 3), Session: sess(id, at(0)),
			Commands: []store.Command{{ID: id + "-batch", Digest: "d", Response: raw(`{}`)}}})
		mustCommit(t, s, store.Batch{Commands: []store.Command{{ID: id + "-named", Digest: "d", Response: raw(`{}`), SessionID: id}}})
	}
	mustCommit(t, s, store.Batch{Commands: []store.Command{{ID: "no-session", Digest: "d", Response: raw(`{}`)}}})
}

func wantErased(t *testing.T, s store.Store) {
	t.Helper()
	if _, err := s.Session(t.Context(), "gone"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Session(gone) after DeleteSession: %v, want ErrNotFound", err)
	}
	if got, err := s.Records(t.Context(), "gone", 0, rows(10)); err != nil || len(got) != 0 {
		t.Fatalf("Records(gone) after DeleteSession = %d records, %v", len(got), err)
	}
	if h, err := s.Head(t.Context(), "gone"); err != nil || h != 0 {
		t.Fatalf("Head(gone) after DeleteSession = %d, %v", h, err)
	}
	wantCommands(t, s, []string{"gone-batch", "gone-named"}, []string{"kept-batch", "kept-named", "no-session"})
	if got, err := s.Records(t.Context(), "kept", 0, rows(10)); err != nil || len(got) != 3 {
		t.Fatalf("Records(kept) = %d records, %v; the other session must stay whole", len(got), err)
	}
	if _, err := s.Session(t.Context(), "kept"); err != nil {
		t.Fatal(err)
	}
}

// DeleteSession erases a session's log, row and the commands that named
// it (explicitly or through their batch), and nothing else.
func (h harness) deleteErases(t *testing.T) {
	s := h.fresh(t)
	seedTwo(t, s)
	if err := s.DeleteSession(t.Context(), "gone"); err != nil {
		t.Fatal(err)
	}
	wantErased(t, s)
	// The id can be used again from scratch.
	mustCommit(t, s, store.Batch{SessionID: "gone", Records: recs(1, 1), Session: sess("gone", at(0))})
}

func (h harness) deleteUnknown(t *testing.T) {
	s := h.fresh(t)
	if err := s.DeleteSession(t.Context(), "never"); err != nil {
		t.Fatalf("DeleteSession of an unknown session: %v", err)
	}
}

func (h harness) deleteSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s := h.openAt(t, dir)
	seedTwo(t, s)
	if err := s.DeleteSession(t.Context(), "gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantErased(t, h.openAt(t, dir))
}

// BenchSessionsBesideOthers measures one owner's first page of one
// session (bob's session/list, limit 1) beside another owner's others
// rows, for each count in others: with an owner index its cost does not
// grow with them. open opens an empty store, which the benchmark fills.
func BenchSessionsBesideOthers(b *testing.B, open func(b *testing.B) store.Store, others ...int) {
	for _, n := range others {
		b.Run(fmt.Sprintf("others=%d", n), func(b *testing.B) {
			s := open(b)
			row := func(id, owner string, i int) *store.Session {
				return &store.Session{ID: id, Owner: owner, CreatedAt: at(0), UpdatedAt: at(time.Duration(i) * time.Millisecond),
					State: raw(`{"owner":"` + owner + `","name":"a session of a busy owner"}`)}
			}
			mustCommitB(b, s, store.Batch{Session: row("bob-1", "bob", 0)})
			// Written 16 at a time: a store that groups commits groups them.
			var wg sync.WaitGroup
			sem := make(chan struct{}, 16)
			for i := range n {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					mustCommitB(b, s, store.Batch{Session: row(fmt.Sprintf("alice-%05d", i), "alice", i+1)})
				})
			}
			wg.Wait()
			for b.Loop() {
				got, err := s.Sessions(b.Context(), "bob", nil, 1)
				if err != nil || len(got) != 1 {
					b.Fatalf("Sessions(bob) = %v, %v", ids(got), err)
				}
			}
		})
	}
}

func mustCommitB(b *testing.B, s store.Store, batch store.Batch) {
	if err := s.Commit(b.Context(), batch); err != nil {
		b.Error(err)
	}
}
