package tail

import (
	"encoding/json"
	"strings"
	"testing"

	"mspd/schema/msp"
)

func itemEvent(t *testing.T, it msp.Item) json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(msp.ItemParams{Item: it})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestDiscardedAttemptKeepsItsText: an attempt discarded by a restart
// shows its text, struck through and marked, when its deltas were not on
// screen (a tail started after it, or replaying the log); an attempt cut
// before any text was saved says so rather than showing nothing.
func TestDiscardedAttemptKeepsItsText(t *testing.T) {
	text, empty := "half an answer", ""
	for _, tt := range []struct {
		name  string
		it    msp.Item
		color bool
		want  string
	}{
		{"text kept", msp.Item{ItemID: "a", Kind: msp.ItemAgentMessage, Status: msp.ItemFailed, Text: &text, Truncated: true}, false,
			"agent: half an answer ✗ discarded attempt\n"},
		{"struck through in color", msp.Item{ItemID: "b", Kind: msp.ItemAgentMessage, Status: msp.ItemFailed, Text: &text}, true,
			"\x1b[9mhalf an answer\x1b[0m"},
		{"nothing saved", msp.Item{ItemID: "c", Kind: msp.ItemAgentMessage, Status: msp.ItemFailed, Text: &empty, Truncated: true}, false,
			"✗ a discarded attempt, cut off before any text was saved\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			r := newRenderer(&out, Pretty, tt.color)
			r.event(msp.NotifyItemCompleted, itemEvent(t, tt.it))
			if !strings.Contains(out.String(), tt.want) {
				t.Fatalf("printed %q, want it to contain %q", out.String(), tt.want)
			}
		})
	}
	// Streamed live, the text is on screen already: only the mark follows.
	var out strings.Builder
	r := newRenderer(&out, Pretty, false)
	delta, _ := json.Marshal(msp.ItemDeltaParams{ItemID: "d", Delta: "half an answer"})
	r.event(msp.NotifyItemDelta, delta)
	r.event(msp.NotifyItemCompleted, itemEvent(t, msp.Item{ItemID: "d", Kind: msp.ItemAgentMessage, Status: msp.ItemFailed, Text: &text}))
	if got := out.String(); strings.Count(got, "half an answer") != 1 || !strings.Contains(got, "discarded") {
		t.Fatalf("printed %q", got)
	}
}

// TestSavedTextKeepsTheAnswerOnOneLine: a streaming answer's text is saved
// about once a second as item/updated. The renderer ended the streamed
// line at each one, so a long answer came out cut into several "agent:"
// lines, each continuing the one before.
func TestSavedTextKeepsTheAnswerOnOneLine(t *testing.T) {
	var out strings.Builder
	r := newRenderer(&out, Pretty, false)
	saved, text := "Hello ", "Hello world"
	r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "a", Delta: "Hello "}))
	r.event(msp.NotifyItemUpdated, itemEvent(t, msp.Item{ItemID: "a", Kind: msp.ItemAgentMessage, Status: msp.ItemInProgress, Text: &saved}))
	r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "a", Delta: "world"}))
	r.event(msp.NotifyItemCompleted, itemEvent(t, msp.Item{ItemID: "a", Kind: msp.ItemAgentMessage, Status: msp.ItemCompleted, Text: &text}))
	if want := "agent: Hello world\n"; out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
}
