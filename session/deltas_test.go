package session

import (
	"testing"

	"mspd/schema/msp"
)

// TestRebuildNeedsEveryEvent: a follower's open items are rebuilt from the
// ephemeral events it kept: an answer opened on one (whole), text
// appended to an item the log holds open after its last record (a tail,
// across later heads), nothing for items the log has closed or saved
// since or whose attempt ended; and not at all once an event after such
// a start may be missing, or a delta's item never started.
func TestRebuildNeedsEveryEvent(t *testing.T) {
	frame := func(method string, p any) []byte {
		raw, err := msp.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return msp.EncodeNotification(method, raw, 0)
	}
	delta := func(id, text string) []byte {
		return frame(msp.NotifyItemDelta, msp.ItemDeltaParams{ItemID: id, Delta: text})
	}
	started := func(id string) []byte {
		return frame(msp.NotifyItemStarted, &msp.ItemParams{Item: msp.Item{ItemID: id, Kind: msp.ItemAgentMessage, Revision: 1, Status: msp.ItemInProgress}})
	}
	saved := "saved "
	f := folded{
		items: []msp.Item{
			{ItemID: "b", Kind: msp.ItemAgentMessage, Revision: 2, Status: msp.ItemInProgress, Text: &saved},
			{ItemID: "done", Kind: msp.ItemAgentMessage, Revision: 3, Status: msp.ItemCompleted},
		},
		openAt: map[string]int64{"b": 4},
	}
	var l deltaLog
	l.add(cursor{seq: 3, sub: 1}, msp.NotifyItemDelta, delta("b", "in the saved text "))
	l.add(cursor{seq: 3, sub: 2}, msp.NotifyItemDelta, delta("done", "closed since"))
	l.add(cursor{seq: 4, sub: 1}, msp.NotifyItemDelta, delta("b", "after "))
	l.add(cursor{seq: 5, sub: 1}, msp.NotifyItemStarted, started("a")) // record 5: another command's
	l.add(cursor{seq: 5, sub: 2}, msp.NotifyItemDelta, delta("a", "x"))
	l.add(cursor{seq: 6, sub: 1}, msp.NotifyItemDelta, delta("b", "and more"))
	l.add(cursor{seq: 6, sub: 2}, msp.NotifyItemDelta, delta("a", "z"))
	open, tails, ok := l.snapshot().rebuild(f)
	if !ok || len(open) != 1 || deref(open["a"].Text) != "xz" || len(tails) != 1 || tails["b"] == nil || tails["b"].text.String() != "after and more" {
		t.Fatalf("rebuild = open %+v (a's text %q), tails %v, %v; want a opened with %q and %q after b's saved text",
			open, deref(open["a"].Text), tails, ok, "xz", "after and more")
	}
	l.lose(cursor{seq: 5, sub: 1}) // after b's last record: b's text may have a hole
	if _, _, ok := l.snapshot().rebuild(f); ok {
		t.Fatal("rebuilt although an event after b's last record was lost")
	}
	f.openAt = map[string]int64{}
	f.items[0].Status = msp.ItemCompleted // b closed: only a's start matters, and it is kept
	l.lost = cursor{seq: 4, sub: 9}
	if open, _, ok := l.snapshot().rebuild(f); !ok || deref(open["a"].Text) != "xz" {
		t.Fatalf("with nothing lost after a's start: open %+v, %v", open, ok)
	}
	l.lost = cursor{seq: 5, sub: 1}
	if _, _, ok := l.snapshot().rebuild(f); ok {
		t.Fatal("rebuilt although events up to a's start were lost")
	}
	l.lost = cursor{}
	f.attemptEnd = 7 // a retry notice after a's events: a stopped leader's attempt
	if open, _, ok := l.snapshot().rebuild(f); !ok || open != nil {
		t.Fatalf("an answer of an ended attempt: open %+v, %v; want none", open, ok)
	}
	f.attemptEnd = 0
	l.kept = l.kept[:3] // a's start let go, its deltas kept
	l.add(cursor{seq: 6, sub: 2}, msp.NotifyItemDelta, delta("a", "z"))
	if _, _, ok := l.snapshot().rebuild(f); ok {
		t.Fatal("rebuilt although a delta's item never started here")
	}
}
