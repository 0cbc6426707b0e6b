package tail

import (
	"bytes"
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

// TestStreamedItemCompletesItsText: the renderer prints an agent message's
// text from its deltas and, when it saw any delta of the item, prints
// nothing of its item/completed. Deltas are ephemeral: the ones lost in a
// view/gap hole or while reconnecting are never replayed, and the item's
// authoritative text arrives only in item/completed (§4.3). So an answer
// that streamed partly before a reconnect is shown — in pretty and in raw
// output, which scripts pipe — with its middle missing, silently.
func TestStreamedItemCompletesItsText(t *testing.T) {
	for _, format := range []string{Pretty, Raw} {
		var out bytes.Buffer
		r := newRenderer(&out, format, false)
		r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{SessionID: "s", ViewCursor: "v:s:2.1", ItemID: "a", Delta: "Hello "}))
		// connection lost; deltas "big " and "world" went by; resumed after v:s:2.1
		text := "Hello big world"
		r.event(msp.NotifyItemCompleted, mustJSON(msp.ItemParams{
			Item: msp.Item{ItemID: "a", Kind: msp.ItemAgentMessage, Revision: 2, Status: msp.ItemCompleted, Text: &text}}))
		if !strings.Contains(out.String(), "world") {
			t.Errorf("%s output %q: the answer %q lost the text whose deltas it missed", format, out.String(), text)
		}
	}
}

// TestRawOutputHoldsOnlyTheAnswer: `-o raw` is documented as "the agent's
// streamed text only" and is what scripts pipe. A turn-layer retry (stream
// cut after output began, truncation, schema rejection) streams a first
// attempt that is then discarded (item/completed status failed) and a new
// item with the real answer. raw() writes every delta as it comes and, for
// the failed item, not even a newline: the output is the discarded text
// glued to the answer ("partialHello there").
func TestRawOutputHoldsOnlyTheAnswer(t *testing.T) {
	var out bytes.Buffer
	r := newRenderer(&out, Raw, false)
	failed, answer := "partial", "Hello there"
	r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "a", Delta: "partial"}))
	r.event(msp.NotifyItemCompleted, mustJSON(msp.ItemParams{Item: msp.Item{ItemID: "a", Kind: msp.ItemAgentMessage, Revision: 2, Status: msp.ItemFailed, Text: &failed}}))
	r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "b", Delta: "Hello there"}))
	r.event(msp.NotifyItemCompleted, mustJSON(msp.ItemParams{Item: msp.Item{ItemID: "b", Kind: msp.ItemAgentMessage, Revision: 2, Status: msp.ItemCompleted, Text: &answer}}))
	if out.String() != "Hello there\n" {
		t.Fatalf("raw output %q, want only the kept answer %q", out.String(), answer+"\n")
	}
}

// TestPrettyOutputNeutralisesControlCharacters: model output is untrusted
// (the web page only ever uses textContent). Pretty output is for a
// terminal, and renders deltas, item texts, retry reasons and error
// messages verbatim, so a model (or a prompt-injected document it quotes)
// can emit escape sequences that the operator's terminal executes: set the
// title, rewrite or hide earlier lines, or write the clipboard (OSC 52).
func TestPrettyOutputNeutralisesControlCharacters(t *testing.T) {
	var out bytes.Buffer
	r := newRenderer(&out, Pretty, false)
	evil := "fine\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2K\rall good"
	r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "a", Delta: evil}))
	r.event(msp.NotifyItemCompleted, mustJSON(msp.ItemParams{Item: msp.Item{ItemID: "b", Kind: msp.ItemAgentMessage, Revision: 2, Status: msp.ItemCompleted, Text: &evil}}))
	if strings.ContainsAny(out.String(), "\x1b\x07\r") {
		t.Fatalf("pretty output passes terminal control characters from model text through: %q", out.String())
	}
}

// TestRegeneratedAnswerIsAVersion: a regeneration's message (it repeats
// the prompt shown already) prints as the answer's version, counting up
// along a chain, never as the prompt again.
func TestRegeneratedAnswerIsAVersion(t *testing.T) {
	var out strings.Builder
	r := newRenderer(&out, Pretty, false)
	prompt, answer := "tell me a joke", "a joke"
	turns := []string{"t1", "t2", "t3"}
	for i, turnID := range turns {
		it := msp.Item{ItemID: "u" + turnID, Kind: msp.ItemUserMessage, Status: msp.ItemCompleted, Text: &prompt, TurnID: &turns[i]}
		if i > 0 {
			it.Regenerates = turns[i-1]
		}
		r.event(msp.NotifyItemCompleted, itemEvent(t, it))
		r.event(msp.NotifyItemCompleted, itemEvent(t, msp.Item{ItemID: "a" + turnID, Kind: msp.ItemAgentMessage, Status: msp.ItemCompleted, Text: &answer, TurnID: &turns[i]}))
	}
	got := out.String()
	if strings.Count(got, prompt) != 1 || !strings.Contains(got, "↻ version 2\nagent: a joke\n↻ version 3\n") {
		t.Fatalf("printed %q", got)
	}
}
