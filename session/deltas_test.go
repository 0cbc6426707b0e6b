package session

import (
	"testing"

	"mspd/schema/msp"
)

// TestStreamedAfterNeedsEveryEvent: the open items' text after a head is
// rebuilt from the ephemeral events kept at it (an answer opened on one,
// text appended to items the log holds), and not at all once any of them
// was let go or missed: the text would have a hole.
func TestStreamedAfterNeedsEveryEvent(t *testing.T) {
	frame := func(method string, p any) []byte {
		raw, err := msp.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return msp.EncodeNotification(method, raw, 0)
	}
	var l deltaLog
	l.add(cursor{seq: 4, sub: 1}, msp.NotifyItemDelta, frame(msp.NotifyItemDelta, msp.ItemDeltaParams{ItemID: "old", Delta: "before the head"}))
	l.add(cursor{seq: 5, sub: 1}, msp.NotifyItemStarted, frame(msp.NotifyItemStarted, &msp.ItemParams{Item: msp.Item{ItemID: "a", Kind: msp.ItemAgentMessage, Revision: 1, Status: msp.ItemInProgress}}))
	l.add(cursor{seq: 5, sub: 2}, msp.NotifyItemDelta, frame(msp.NotifyItemDelta, msp.ItemDeltaParams{ItemID: "a", Delta: "x"}))
	l.add(cursor{seq: 5, sub: 3}, msp.NotifyItemDelta, frame(msp.NotifyItemDelta, msp.ItemDeltaParams{ItemID: "b", Delta: "y"}))
	l.add(cursor{seq: 5, sub: 4}, msp.NotifyItemDelta, frame(msp.NotifyItemDelta, msp.ItemDeltaParams{ItemID: "a", Delta: "z"}))
	streamedAfter := func(head int64) (streamed, bool) {
		kept, ok := l.after(head)
		if !ok {
			return streamed{}, false
		}
		return streamedIn(kept)
	}
	s, ok := streamedAfter(5)
	if !ok || len(s.open) != 1 || deref(s.open["a"].Text) != "xz" || s.open["a"].Status != msp.ItemInProgress ||
		len(s.tails) != 1 || s.tails["b"] != "y" {
		t.Fatalf("streamedAfter(5) = %+v (a's text %q), %v; want a opened with %q and %q appended to b", s, deref(s.open["a"].Text), ok, "xz", "y")
	}
	l.lose(cursor{seq: 5, sub: 2}) // a follower missed a delta
	if _, ok := streamedAfter(5); ok {
		t.Fatal("streamedAfter(5) rebuilt the text although a delta after the head was lost")
	}
	if s, ok := streamedAfter(6); !ok || s.open != nil || s.tails != nil {
		t.Fatalf("streamedAfter(6) = %+v, %v; want nothing streamed after a later head", s, ok)
	}
}
