package session

import (
	"context"
	"slices"
	"sync"
	"testing"

	"mspd/schema/msp"
)

// filterNode drops what it publishes while drop says so.
type filterNode struct {
	memNode
	mu   *sync.Mutex
	drop *func(Notification, Position) bool
}

// newFilterNode is node on h, dropping nothing until set.
func newFilterNode(h *memHub, node string) filterNode {
	f := func(Notification, Position) bool { return false }
	return filterNode{memNode{h, node}, &sync.Mutex{}, &f}
}

// set makes f decide what is dropped from now on.
func (c filterNode) set(f func(Notification, Position) bool) {
	c.mu.Lock()
	*c.drop = f
	c.mu.Unlock()
}

func (c filterNode) Publish(id string, n Notification, at Position) {
	c.mu.Lock()
	d := (*c.drop)(n, at)
	c.mu.Unlock()
	if d {
		return
	}
	c.memNode.Publish(id, n, at)
}

// readSnap is session/read with items, on m.
func readSnap(t *testing.T, m *Manager, sid string) msp.SessionSnapshot {
	t.Helper()
	no := false
	raw, err := m.ReadSession(context.Background(), mustJSON(msp.SessionReadParams{SessionID: sid, ExcludeItems: &no}))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// checkClientView subscribes on m from snap's cursor and, once one more
// delta arrived (more sends it), checks the client's view: every delta's
// item is in the snapshot (or a view/gap came first), and the answer's
// text equals the leader's (or a view/gap came).
func checkClientView(t *testing.T, m *Manager, sid string, snap msp.SessionSnapshot, more func(), leaderText func() string) {
	t.Helper()
	r := newRecSub()
	if err := m.attach(context.Background(), r, sid, snap.ViewCursor); err != nil {
		t.Fatal(err)
	}
	more()
	r.waitCount(t, msp.NotifyItemDelta, 1)
	texts := map[string]string{}
	for _, it := range snap.History.Items {
		texts[it.ItemID] = deref(it.Text)
	}
	gap := false
	var answer string
	for _, n := range r.all() {
		switch n.Method {
		case msp.NotifyViewGap:
			gap = true
		case msp.NotifyItemStarted:
			p := params[msp.ItemParams](t, n.Frame)
			texts[p.Item.ItemID] = deref(p.Item.Text)
		case msp.NotifyItemDelta:
			d := params[msp.ItemDeltaParams](t, n.Frame)
			if _, ok := texts[d.ItemID]; !ok && !gap {
				t.Errorf("snapshot at %s (items %q): a delta of item %s the client never saw, no view/gap before it", snap.ViewCursor, lastItem(snap), d.ItemID)
			}
			texts[d.ItemID] += d.Delta
			answer = d.ItemID
		}
	}
	if want := leaderText(); texts[answer] != want && !gap {
		t.Errorf("client's answer %q after resuming at %s, leader's %q, no view/gap", texts[answer], snap.ViewCursor, want)
	}
}

// checkResumeOnB takes b's snapshot, then checks the view of a client
// resuming from it as more streams.
func (fa *followedAnswer) checkResumeOnB(t *testing.T, more string) {
	t.Helper()
	checkClientView(t, fa.b, fa.sid, fa.read(t, fa.b), func() { fa.feed <- more }, leaderAnswer(t, fa.a, fa.sid))
}

// leaderAnswer reads the text of a's last item.
func leaderAnswer(t *testing.T, a *Manager, sid string) func() string {
	return func() string {
		s := readSnap(t, a, sid)
		return deref(s.History.Items[len(s.History.Items)-1].Text)
	}
}

// TestFollowerHoleBeforeARecordUnsavedAnswer: a follower lost the last
// deltas before another command's record (it learns so from the record's
// Prev). Its snapshot then stands where the log does before the hole, and
// a client resuming from it gets the answer's start, or a view/gap, before
// any delta of it (review of 321c45f).
func TestFollowerHoleBeforeARecordUnsavedAnswer(t *testing.T) {
	fa := newFollowedAnswer(t)
	defer close(fa.feed)
	fa.stream(t, "one ", 1)
	fa.lose(t, "two ", 2)
	fa.rename(t, "x", 2)
	fa.checkResumeOnB(t, "three")
}

// TestFollowerHoleBeforeARecordSavedAnswer: the same for an answer whose
// text was saved before the hole: the client ends with the leader's text
// or is told of the hole (review of 321c45f).
func TestFollowerHoleBeforeARecordSavedAnswer(t *testing.T) {
	fa := newFollowedAnswer(t)
	defer close(fa.feed)
	fa.stream(t, "one ", 1)
	fa.clock.Add(2)
	fa.stream(t, "two ", 2) // saved: "one two "
	fa.onB.waitCount(t, msp.NotifyItemUpdated, 1)
	fa.lose(t, "three ", 3)
	fa.rename(t, "x", 2)
	fa.checkResumeOnB(t, "four")
}

// TestFollowerMissedTheAnswersStart: the answer's ephemeral item/started
// never reached the follower: its snapshot is not passed off as whole
// without the answer (review of 2118022).
func TestFollowerMissedTheAnswersStart(t *testing.T) {
	fa := newFollowedAnswer(t)
	defer close(fa.feed)
	fa.filter.set(func(n Notification, _ Position) bool { return n.Method == msp.NotifyItemStarted })
	fa.stream(t, "one ", 1)
	fa.stream(t, "two ", 2)
	fa.checkResumeOnB(t, "three")
}

// TestFollowerCatchUpMarksDeltasLost: the follower lost deltas and the
// record after them (which carried Prev); when it catches up from the
// next record, the deltas are counted lost, so its snapshot does not
// pass the partial text off as the leader's (review of 321c45f).
func TestFollowerCatchUpMarksDeltasLost(t *testing.T) {
	fa := newFollowedAnswer(t)
	fa.stream(t, "one ", 1)
	fa.filter.set(func(Notification, Position) bool { return true }) // a burst is dropped
	fa.feed <- "two "
	fa.onA.waitCount(t, msp.NotifyItemDelta, 2)
	if _, err := fa.a.RenameSession(context.Background(), mustJSON(msp.SessionRenameParams{CommandID: cmdID(), SessionID: fa.sid, Name: "x"})); err != nil {
		t.Fatal(err)
	}
	fa.filter.set(func(Notification, Position) bool { return false })
	fa.rename(t, "y", 3)
	sa, sb := fa.read(t, fa.a), fa.read(t, fa.b)
	fa.end(t)
	if lastItem(sb) != lastItem(sa) && sb.ViewCursor == sa.ViewCursor {
		t.Errorf("follower passes %q off as whole at %s; leader has %q", lastItem(sb), sb.ViewCursor, lastItem(sa))
	}
}

// TestFollowerDropsAStoppedLeadersAnswer: after a takeover, the dead
// leader's answer (opened on an ephemeral event, never saved) is not
// shown open on a follower once the new leader's retry notice ended its
// attempt (review of 2118022).
func TestFollowerDropsAStoppedLeadersAnswer(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	h := newMemHub()
	feedA, feedB := make(chan string), make(chan string)
	deadA := &crashStore{Store: st}
	a := startQuietNode(t, memNode{h, "a"}, deadA, pacedModel{feed: feedA})
	sid := startSession(t, a, newRecSub())
	c := startQuietNode(t, memNode{h, "c"}, st, pacedModel{feed: feedA})
	onC := newRecSub()
	if err := attachAtHead(ctx, c, onC, sid); err != nil {
		t.Fatal(err)
	}
	ack := startTurn(t, a, textTurn(sid, "go"))
	feedA <- "one "
	onC.waitCount(t, msp.NotifyItemDelta, 1)
	deadA.dead.Store(true)
	h.kill("a")
	b := h.startNode(t, "b", st, pacedModel{feed: feedB})
	t.Cleanup(b.Close)
	feedB <- "x "
	onC.waitCount(t, msp.NotifyItemDelta, 2)
	sb, sc := readSnap(t, b, sid), readSnap(t, c, sid)
	close(feedB)
	onC.waitTerminal(t, ack.TurnID)
	close(feedA)
	desc := func(s msp.SessionSnapshot) []string {
		var out []string
		for _, it := range s.History.Items {
			out = append(out, string(it.Kind)+"/"+string(it.Status)+":"+deref(it.Text))
		}
		return out
	}
	t.Logf("leader b %v at %s\nfollower c %v at %s\nc's reader %v", desc(sb), sb.ViewCursor, desc(sc), sc.ViewCursor, methodsOf(onC.all()))
	if len(sc.History.Items) != len(sb.History.Items) {
		t.Errorf("follower's items %v, leader's %v", desc(sc), desc(sb))
	}
}

// loadedMidStream has node a stream an answer's first delta, node b load
// the session only then (the answer's start is before b's load) with
// reader onB, and a rename land after it; feed goes on streaming.
func loadedMidStream(t *testing.T) (a, b *Manager, sid string, onB *recSub, feed chan string) {
	t.Helper()
	ctx := context.Background()
	st := openStore(t)
	h := newMemHub()
	feed = make(chan string)
	a = startQuietNode(t, memNode{h, "a"}, st, pacedModel{feed: feed})
	onA := newRecSub()
	sid = startSession(t, a, onA)
	startTurn(t, a, textTurn(sid, "go"))
	feed <- "one "
	onA.waitCount(t, msp.NotifyItemDelta, 1)
	b = startQuietNode(t, memNode{h, "b"}, st, pacedModel{feed: feed})
	onB = newRecSub()
	if err := attachAtHead(ctx, b, onB, sid); err != nil {
		t.Fatal(err)
	}
	if _, err := a.RenameSession(ctx, mustJSON(msp.SessionRenameParams{CommandID: cmdID(), SessionID: sid, Name: "x"})); err != nil {
		t.Fatal(err)
	}
	return a, b, sid, onB, feed
}

// TestFollowerDueGapBecomesMidItem: a reader on a follower loaded
// mid-stream holds a due gap that is not mid-item; when the rename's Prev
// says deltas were missed, that gap must be reported, so the next delta,
// of an item the reader never saw, comes after a view/gap (review of
// 321c45f).
func TestFollowerDueGapBecomesMidItem(t *testing.T) {
	_, _, _, onB, feed := loadedMidStream(t)
	defer close(feed)
	feed <- "two"
	onB.waitCount(t, msp.NotifyItemDelta, 1)
	ms := methodsOf(onB.all())
	for _, m := range ms {
		if m == msp.NotifyViewGap {
			return
		}
		if m == msp.NotifyItemDelta {
			t.Fatalf("a delta of an answer b's reader never saw start, without a view/gap: %v", ms)
		}
	}
}

// TestFollowerHoleAfterARecordPastTheStart: a hole after a record that
// came after the answer's ephemeral start: the snapshot's cursor is past
// the start, so the client's items lack the answer, and the replay from
// there must report the hole (review of 9d3fd67).
func TestFollowerHoleAfterARecordPastTheStart(t *testing.T) {
	fa := newFollowedAnswer(t)
	defer close(fa.feed)
	fa.stream(t, "one ", 1)
	fa.rename(t, "x", 2)
	fa.lose(t, "two ", 2)
	fa.rename(t, "y", 3)
	fa.checkResumeOnB(t, "three")
}

// TestFollowerLoadedMidStreamThenARecord: b loads while the answer
// streams (its start is before b's load), then a record, then deltas: a
// client resuming from b's snapshot must be told of the hole before any
// delta of the item it never saw (review of 9d3fd67).
func TestFollowerLoadedMidStreamThenARecord(t *testing.T) {
	a, b, sid, onB, feed := loadedMidStream(t)
	defer close(feed)
	feed <- "two "
	onB.waitCount(t, msp.NotifyItemDelta, 1)
	checkClientView(t, b, sid, readSnap(t, b, sid), func() { feed <- "three" }, leaderAnswer(t, a, sid))
}

// TestFollowerHoleAfterAnItemRecord: a reader on a follower that loaded
// mid-stream resumes from before the turn's user item; the replay passes
// that item's record, yet the attempt still runs, so the hole after it
// (the answer's start, lost to the follower) is reported before the
// answer's next delta (review of 2870196).
func TestFollowerHoleAfterAnItemRecord(t *testing.T) {
	_, b, sid, _, feed := loadedMidStream(t)
	defer close(feed)
	r := newRecSub()
	from := cursorIn(t, b.store, sid, 1) // turn/started; the user's item is record 2
	if err := b.attach(context.Background(), r, sid, from); err != nil {
		t.Fatal(err)
	}
	feed <- "two "
	r.waitCount(t, msp.NotifyItemDelta, 1)
	got := r.all()
	delta := slices.IndexFunc(got, func(n Notification) bool { return n.Method == msp.NotifyItemDelta })
	item := slices.IndexFunc(got, func(n Notification) bool { return n.Method == msp.NotifyItemCompleted })
	gap := slices.IndexFunc(got[item+1:], func(n Notification) bool { return n.Method == msp.NotifyViewGap })
	if item < 0 || gap < 0 || item+1+gap > delta {
		t.Fatalf("resumed on b from %s: %v; want a view/gap after the user's item and before the answer's delta", from, methodsOf(got))
	}
}
