package session

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/store"
)

// backup is a session as a store backup holds it: its row and its log.
type backup struct {
	row  store.Session
	recs []store.Record
}

// backUp copies session sid out of st, as a backup taken now would hold it.
func backUp(t *testing.T, st store.Store, sid string) backup {
	t.Helper()
	row, err := st.Session(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	return backup{row: row, recs: records(t, st, sid)}
}

// restore writes b into a fresh store: the store restored from the backup.
func (b backup) restore(t *testing.T) store.Store {
	t.Helper()
	st := openStore(t)
	if err := st.Commit(context.Background(), store.Batch{SessionID: b.row.ID, Session: &b.row, Records: b.recs}); err != nil {
		t.Fatal(err)
	}
	return st
}

// spansIn reads session sid's cursor epoch spans from st.
func spansIn(t *testing.T, st store.Store, sid string) []epochSpan {
	t.Helper()
	row, err := st.Session(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	var s state
	if err := json.Unmarshal(row.State, &s); err != nil {
		t.Fatal(err)
	}
	return s.spans()
}

// viewCursors is the cursors of ns that have one (a view event's).
func viewCursors(ns []Notification) []string {
	var cs []string
	for _, c := range cursorsOf(ns) {
		if c != "" {
			cs = append(cs, c)
		}
	}
	return cs
}

// checkRefused checks that every read naming cursor c refuses it
// missingAnchor.
func checkRefused(t *testing.T, m *Manager, sid, c string) {
	t.Helper()
	ctx := context.Background()
	refused := func(what string, err error) {
		t.Helper()
		var me *msp.Error
		if err == nil {
			t.Errorf("%s accepted %s, a cursor the restored store never handed out", what, c)
		} else if !errors.As(err, &me) || me.Data.Kind != msp.KindNotFound || me.Data.Reason != msp.ReasonMissingAnchor {
			t.Errorf("%s with %s: %v, want notFound missingAnchor", what, c, err)
		}
	}
	_, _, err := m.ResumeSession(ctx, newRecSub(), mustJSON(msp.SessionResumeParams{CommandID: cmdID(), SessionID: sid, Cursor: &c}))
	refused("session/resume", err)
	_, _, err = m.Subscribe(ctx, newRecSub(), sid, &c)
	refused("view/subscribe", err)
	refused("attach (the auto-subscribe)", m.attach(ctx, newRecSub(), sid, c))
	_, err = m.Page(ctx, msp.ViewPageParams{SessionID: sid, Cursor: &c, Limit: 10})
	refused("view/page", err)
	_, err = m.Page(ctx, msp.ViewPageParams{SessionID: sid, Cursor: &c, Limit: 10, Direction: msp.Backward})
	refused("view/page backward", err)
}

// TestARestoredBackupRefusesTheCursorsItLost: a store restored from a
// backup takes its sessions back to the backup's head. The positions
// handed out after it are lost with the store that held them: the
// process serving the restored store writes its new events under a
// cursor epoch of its own, so a client's cursor from after the backup is
// refused missingAnchor rather than taken as a position among the new
// events, none of the new cursors repeats a lost one, and the cursors
// from before the backup are still served.
func TestARestoredBackupRefusesTheCursorsItLost(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	m1 := newManager(t, st, model, mgrOpts{textCheckpoint: -1})
	sub := newRecSub()
	sid := startSession(t, m1, sub)
	runTurn(t, m1, sub, textTurn(sid, "one"))
	b := backUp(t, st, sid)
	backupHead := b.recs[len(b.recs)-1].Seq
	kept := viewCursors(sub.all())
	runTurn(t, m1, sub, textTurn(sid, "two"))
	lost := viewCursors(sub.all())[len(kept):]
	if len(lost) == 0 {
		t.Fatal("the second turn handed out no cursors")
	}
	m1.Close()

	restored := b.restore(t)
	m2 := newManager(t, restored, model, mgrOpts{textCheckpoint: -1})
	// Before the new process writes, the lost positions are past the head.
	checkRefused(t, m2, sid, lost[len(lost)-1])
	sub2 := newRecSub()
	subscribe(t, m2, sub2, sid)
	runTurn(t, m2, sub2, textTurn(sid, "three"))
	runTurn(t, m2, sub2, textTurn(sid, "four"))
	if h := records(t, restored, sid); h[len(h)-1].Seq <= mustParse(t, lost[len(lost)-1]).seq {
		t.Fatalf("the restored session's head %d is not past the lost cursors: the test proves nothing", h[len(h)-1].Seq)
	}

	wasLost := map[string]bool{}
	for _, c := range lost {
		wasLost[c] = true
		if mustParse(t, c).seq > backupHead {
			checkRefused(t, m2, sid, c)
		}
	}
	for _, c := range viewCursors(sub2.all()) {
		if wasLost[c] {
			t.Errorf("the restored store hands out %s again, a cursor of the run it lost", c)
		}
	}
	for _, r := range records(t, restored, sid) {
		if h := recordParams[msp.ViewHeader](t, r); r.Seq > backupHead && wasLost[h.ViewCursor] {
			t.Errorf("record %d of the restored store is stored at lost cursor %s", r.Seq, h.ViewCursor)
		}
	}
	// What the backup holds is the same view: its cursors are served.
	ctx := context.Background()
	for _, c := range kept {
		if _, _, err := m2.Subscribe(ctx, newRecSub(), sid, &c); err != nil {
			t.Errorf("view/subscribe after %s, from before the backup: %v", c, err)
		}
	}
	if spans := spansIn(t, restored, sid); len(spans) != 2 || spans[1].From != backupHead+1 {
		t.Errorf("restored session's spans %+v, want a second from %d", spans, backupHead+1)
	}
}

// TestARestartOpensASpanAndKeepsTheOldCursors: a new process (manager) on
// the same store writes a session under a span of its own, from its first
// record; every cursor handed out before, durable or a delta's, stays
// valid and replays exactly the records that followed it, at the cursors
// they were first sent at.
func TestARestartOpensASpanAndKeepsTheOldCursors(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	m1 := newManager(t, st, model, mgrOpts{textCheckpoint: -1})
	sub := newRecSub()
	sid := startSession(t, m1, sub)
	runTurn(t, m1, sub, textTurn(sid, "one"))
	head1 := int64(len(records(t, st, sid)))
	before := sub.all()
	m1.Close()

	m2 := newManager(t, st, model, mgrOpts{textCheckpoint: -1})
	sub2 := newRecSub()
	last := before[len(before)-1].Cursor
	if err := m2.attach(context.Background(), sub2, sid, last); err != nil {
		t.Fatal(err)
	}
	runTurn(t, m2, sub2, textTurn(sid, "two"))
	all := append(before, sub2.all()...)

	spans := spansIn(t, st, sid)
	if len(spans) != 2 || spans[1].From != head1+1 || spans[0].Epoch == spans[1].Epoch {
		t.Fatalf("spans after a restart and a turn: %+v, want a second from %d", spans, head1+1)
	}
	for _, n := range all {
		if !n.Durable {
			continue
		}
		c := mustParse(t, n.Cursor)
		if want := spans[spanAt(spans, c.seq)].Epoch; c.epoch != want {
			t.Errorf("%s at %d has epoch %s, want its span's %s", n.Method, c.seq, c.epoch, want)
		}
	}
	var deltas int
	for _, n := range all {
		if n.Method == msp.NotifyItemDelta {
			deltas++
		}
	}
	if deltas == 0 {
		t.Fatal("no delta was streamed: the test checks no sub-position")
	}
	ctx := context.Background()
	for i, n := range all {
		if n.Cursor == "" {
			continue
		}
		var want []string
		for _, later := range all[i+1:] {
			if later.Durable {
				want = append(want, later.Cursor)
			}
		}
		r := newRecSub()
		if err := m2.attach(ctx, r, sid, n.Cursor); err != nil {
			t.Errorf("attach after %s: %v", n.Cursor, err)
			continue
		}
		var got []string
		for _, x := range r.all() {
			if x.Durable {
				got = append(got, x.Cursor)
			}
		}
		if !equalStrings(got, want) {
			t.Errorf("replay after %s: %v, want %v", n.Cursor, got, want)
		}
		if err := m2.Unsubscribe(ctx, r, sid); err != nil {
			t.Fatal(err)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestUnloadingDoesNotOpenASpan: a session unloaded when idle and loaded
// again by the same process goes on under the span that process opened:
// only a new process adds one.
func TestUnloadingDoesNotOpenASpan(t *testing.T) {
	st := openStore(t)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	model := newHistModel()
	m := newManager(t, st, model, mgrOpts{now: clock})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	for _, text := range []string{"one", "two"} {
		subscribe(t, m, sub, sid)
		runTurn(t, m, sub, textTurn(sid, text))
		if err := m.Unsubscribe(context.Background(), sub, sid); err != nil {
			t.Fatal(err)
		}
		if err := m.WaitIdle(context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		now = now.Add(m.cfg.IdleUnload + time.Second)
		mu.Unlock()
		if n := m.sweep(); n != 1 {
			t.Fatalf("unloaded %d sessions, want the idle one", n)
		}
	}
	if spans := spansIn(t, st, sid); len(spans) != 1 {
		t.Fatalf("spans after reloads by one process: %+v, want only the first", spans)
	}
	epoch := mustParse(t, cursorIn(t, st, sid, 0)).epoch
	for _, c := range viewCursors(sub.all()) {
		if mustParse(t, c).epoch != epoch {
			t.Errorf("cursor %s after a reload is not of the session's epoch %s", c, epoch)
		}
	}
}

// TestAnEpochOfAnOlderBuildIsTheFirstSpan: a state an older build wrote
// holds its incarnation's epoch alone (cursorEpoch): it reads as one span
// from 0, whose cursors are still served once a new process has written
// under a span of its own.
func TestAnEpochOfAnOlderBuildIsTheFirstSpan(t *testing.T) {
	st := openStore(t)
	model := newHistModel()
	sid, sub := oneTurnByAClosedRun(t, st, model)
	// The row as an older build wrote it.
	row, err := st.Session(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(row.State, &fields); err != nil {
		t.Fatal(err)
	}
	epoch := mustParse(t, cursorIn(t, st, sid, 0)).epoch
	delete(fields, "cursorSpans")
	fields["cursorEpoch"] = epoch
	row.State = mustJSON(fields)
	head := int64(len(records(t, st, sid)))
	if err := st.Commit(context.Background(), store.Batch{SessionID: sid, Session: &row, AtHead: &head}); err != nil {
		t.Fatal(err)
	}
	old := viewCursors(sub.all())

	m2 := newManager(t, st, model, mgrOpts{})
	sub2 := newRecSub()
	last := old[len(old)-1]
	if err := m2.attach(context.Background(), sub2, sid, last); err != nil {
		t.Fatalf("attach after %s, of the older build's epoch: %v", last, err)
	}
	runTurn(t, m2, sub2, textTurn(sid, "two"))
	spans := spansIn(t, st, sid)
	if len(spans) != 2 || spans[0] != (epochSpan{Epoch: epoch}) || spans[1].From != head+1 {
		t.Fatalf("spans %+v, want the older build's epoch from 0 and a new one from %d", spans, head+1)
	}
	for _, c := range viewCursors(sub2.all()) {
		if mustParse(t, c).epoch != spans[1].Epoch {
			t.Errorf("cursor %s of the new process is not of its span %s", c, spans[1].Epoch)
		}
	}
	for _, c := range old {
		if _, err := m2.Page(context.Background(), msp.ViewPageParams{SessionID: sid, Cursor: &c, Limit: 100}); err != nil {
			t.Errorf("view/page after %s: %v", c, err)
		}
	}
	for _, r := range records(t, st, sid) {
		if h := recordParams[msp.ViewHeader](t, r); h.ViewCursor != cursorIn(t, st, sid, r.Seq) {
			t.Errorf("record %d stored at %s, its span mints %s", r.Seq, h.ViewCursor, cursorIn(t, st, sid, r.Seq))
		}
	}
}

// TestAFollowerMintsTheNewLeadersCursors: a node that takes a session
// over writes it under a span of its own; a node following the session
// learns of that span from the row written with its first record, so it
// serves the new leader's cursors and mints, for each record, the cursor
// the record was sent and stored at.
func TestAFollowerMintsTheNewLeadersCursors(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	h, a, b := twoNodes(t, st, newHistModel())
	onA := newRecSub()
	sid := startSession(t, a, onA)
	runTurn(t, a, onA, textTurn(sid, "one")) // a leads
	onB := newRecSub()
	subscribe(t, b, onB, sid) // b follows
	a.Close()                 // and lets go

	c := h.startNode(t, "c", st, newHistModel())
	t.Cleanup(c.Close)
	onC := newRecSub()
	subscribe(t, c, onC, sid)
	ack := startTurn(t, c, textTurn(sid, "two")) // c leads now
	onC.waitTerminal(t, ack.TurnID)
	onB.waitTerminal(t, ack.TurnID)
	if spans := spansIn(t, st, sid); len(spans) != 2 {
		t.Fatalf("spans after the takeover: %+v, want c's own second", spans)
	}

	stored := []string{}
	for _, r := range records(t, st, sid) {
		stored = append(stored, recordParams[msp.ViewHeader](t, r).ViewCursor)
	}
	var durable []string
	for _, n := range onB.all() {
		if n.Durable {
			durable = append(durable, n.Cursor)
		}
	}
	if !slices.Equal(durable, stored) {
		t.Errorf("b's reader got records at\n %v\nstored at\n %v", durable, stored)
	}
	if head, err := b.Head(ctx, sid); err != nil || head != stored[len(stored)-1] {
		t.Errorf("head on b: %s, %v; want %s", head, err, stored[len(stored)-1])
	}
	newer := stored[len(stored)-3]
	r := newRecSub()
	if err := b.attach(ctx, r, sid, newer); err != nil {
		t.Fatalf("attach on b after %s, a cursor of c's span: %v", newer, err)
	}
	if got := viewCursors(r.all()); !slices.Equal(got, stored[len(stored)-2:]) {
		t.Errorf("replay on b after %s: %v, want %v", newer, got, stored[len(stored)-2:])
	}
	page, err := b.Page(ctx, msp.ViewPageParams{SessionID: sid, Limit: 2, Direction: msp.Backward})
	if err != nil || page.NextCursor == nil || *page.NextCursor != stored[len(stored)-2] {
		t.Errorf("view/page backward on b: %+v, %v; want next %s", page, err, stored[len(stored)-2])
	}
}

// oneTurnByAClosedRun makes a session on st with one completed turn, by a
// manager (a process run) that has closed since: the next manager on st
// is another run. sub heard the session's events.
func oneTurnByAClosedRun(t *testing.T, st store.Store, model *histModel) (sid string, sub *recSub) {
	t.Helper()
	m1 := newManager(t, st, model, mgrOpts{})
	sub = newRecSub()
	sid = startSession(t, m1, sub)
	runTurn(t, m1, sub, textTurn(sid, "one"))
	m1.Close()
	return sid, sub
}
