package tail

import (
	"encoding/json"
	"strings"
	"testing"

	"mspd/schema/msp"
)

// The recorded frames of context-*.jsonl are what `mspd tail -o json`
// printed of a daemon (e2e TestTailReasoningAndCompaction -update) whose
// OpenAI-compatible provider reasons in reasoning_content and whose
// model has a 2000-token window: a turn that reasons, one that leaves the
// context nearly full, one that compacts first (auto) and reasons, then a
// session/compact (manual). The session's log read back (--from-start
// --no-follow: no deltas, which the log does not keep), and the same
// turns followed live, the last turn's reasoning and answer as deltas.
var contextFiles = []string{"context-log.jsonl", "context-live.jsonl"}

// TestContextPretty: reasoning prints on lines of its own, "thinking: …",
// never on the answer's; a compaction is one line with its sizes and
// trigger; the pressure prints when it changes (nearly full, then back to
// normal after the compaction), not at each request — the same from the
// log as live.
func TestContextPretty(t *testing.T) {
	want := `── turn 72d01f77 ──
you: What is the capital of France?
thinking: The user asks for France's capital: Paris.
agent: Paris.
✓ completed · 0s · 1 attempt · 100 output tokens
── turn e81aab9e ──
you: And its second city?
agent: Lyon.
◔ context nearly full · 1.7k / 2.0k tokens · compacts before the next request
✓ completed · 0s · 1 attempt · 200 output tokens
── turn 66480b96 ──
you: And the third?
⇣ context compacted 1.7k → 79 tokens (auto)
○ context back to normal · 79 / 2.0k tokens
thinking: After Paris and Lyon comes Marseille.
agent: Marseille.
✓ completed · 0s · 2 attempts · 60 output tokens
── turn 443d569d ──
⇣ context compacted 320 → 52 tokens (manual)
✓ completed · 0s · 1 attempt · 20 output tokens
`
	for _, name := range contextFiles {
		if got := replay(t, name, Pretty, false); got != want {
			t.Errorf("%s: printed\n%s\nwant\n%s", name, got, want)
		}
	}
	live := readRecorded(t, contextFiles[1])
	deltas := 0
	for _, e := range live {
		if e.Method == msp.NotifyItemDelta && strings.Contains(string(e.Params), `"field":"summary.0"`) {
			deltas++
		}
	}
	if deltas < 2 {
		t.Fatalf("the live recording streams %d reasoning deltas; re-record it (go test ./e2e -run TestTailReasoningAndCompaction -update)", deltas)
	}
}

// TestContextColour: reasoning is dim, streamed delta by delta; a
// compaction cyan; nearly full yellow, back to normal dim.
func TestContextColour(t *testing.T) {
	colored := replay(t, contextFiles[1], Pretty, true)
	for _, want := range []string{
		"\x1b[2mthinking: The user asks for France's capital: Paris.\x1b[0m\n",
		"\x1b[2mthinking: \x1b[0m\x1b[2mAfter Paris and Lyon\x1b[0m\x1b[2m comes Marseille.\x1b[0m\n\x1b[1magent: \x1b[0mMarseille.\n",
		"\x1b[36m⇣ context compacted 1.7k → 79 tokens (auto)\x1b[0m\n",
		"\x1b[33m◔ context nearly full · 1.7k / 2.0k tokens · compacts before the next request\x1b[0m\n",
		"\x1b[2m○ context back to normal · 79 / 2.0k tokens\x1b[0m\n",
	} {
		if !strings.Contains(colored, want) {
			t.Errorf("in colour: %q lacks %q", colored, want)
		}
	}
}

// TestContextJSONAndRaw: JSON lines pass the reasoning, compaction and
// context usage through whole, with their cursors; raw output holds the
// answers only — no reasoning, no summary.
func TestContextJSONAndRaw(t *testing.T) {
	for _, name := range contextFiles {
		seen := map[string]int{}
		for _, got := range jsonLines(t, name) {
			switch p := string(got.Params); {
			case got.Method == msp.NotifySessionContextUsage:
				seen["contextUsage"]++
			case got.Method == msp.NotifyItemCompleted && strings.Contains(p, `"kind":"reasoning"`):
				seen["reasoning"]++
			case got.Method == msp.NotifyItemCompleted && strings.Contains(p, `"kind":"compaction"`):
				seen["compaction"]++
			}
		}
		if seen["reasoning"] != 2 || seen["compaction"] != 2 || seen["contextUsage"] < 4 {
			t.Errorf("%s: %v, want two reasoning items, two compactions and the context usages", name, seen)
		}
		if got := replay(t, name, Raw, false); got != "Paris.\nLyon.\nMarseille.\n" {
			t.Errorf("%s: raw output %q", name, got)
		}
	}
}

func summaryDelta(id string, n int, text string) json.RawMessage {
	return mustJSON(msp.ItemDeltaParams{ItemID: id, Field: msp.SummaryField(n), Delta: text})
}

// TestThinkingStaysOffTheAnswer: each reasoning part streams on a line
// of its own and the answer on its own; a tool's output deltas print
// nothing (its result line shows it); the end adds what the deltas
// missed, or the whole part when its line was cut; a reasoning shown
// nothing of says so.
func TestThinkingStaysOffTheAnswer(t *testing.T) {
	var out strings.Builder
	r := newRenderer(&out, Pretty, false)
	r.event(msp.NotifyItemStarted, itemEvent(t, msp.Item{ItemID: "r", Kind: msp.ItemReasoning, Status: msp.ItemInProgress}))
	r.event(msp.NotifyItemDelta, summaryDelta("r", 0, "Weighing"))
	r.event(msp.NotifyItemDelta, summaryDelta("r", 0, " it."))
	r.event(msp.NotifyItemDelta, summaryDelta("r", 1, "Checking"))
	r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "t", Field: "output", Delta: "tool output"}))
	r.event(msp.NotifyItemCompleted, itemEvent(t, msp.Item{ItemID: "r", Kind: msp.ItemReasoning, Status: msp.ItemCompleted,
		Summary: []string{"Weighing it.", "Checking twice."}}))
	text := "Done."
	r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "a", Delta: "Done."}))
	r.event(msp.NotifyItemCompleted, itemEvent(t, msp.Item{ItemID: "a", Kind: msp.ItemAgentMessage, Status: msp.ItemCompleted, Text: &text}))
	r.event(msp.NotifyItemCompleted, itemEvent(t, msp.Item{ItemID: "h", Kind: msp.ItemReasoning, Status: msp.ItemCompleted}))
	want := "thinking: Weighing it.\nthinking: Checking twice.\nagent: Done.\nthinking: (hidden by the provider)\n"
	if out.String() != want {
		t.Errorf("printed\n%q\nwant\n%q", out.String(), want)
	}

	// A part whose line another part cut short prints whole at the end,
	// its deltas' text already shown or not.
	out.Reset()
	r = newRenderer(&out, Pretty, false)
	r.event(msp.NotifyItemDelta, summaryDelta("r", 0, "First"))
	r.event(msp.NotifyItemDelta, summaryDelta("r", 1, "Second."))
	r.event(msp.NotifyItemCompleted, itemEvent(t, msp.Item{ItemID: "r", Kind: msp.ItemReasoning, Status: msp.ItemCompleted,
		Summary: []string{"First, then more.", "Second."}}))
	if want := "thinking: First\nthinking: Second.\nthinking: First, then more.\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}

	// On a labelled screen (mspd tail --all) nothing streams: each part
	// prints whole, labelled; answers stay apart.
	out.Reset()
	r = newScreen(&out, false, nil).renderer(Pretty, false, "chat")
	r.event(msp.NotifyItemDelta, summaryDelta("r", 0, "ignored"))
	r.event(msp.NotifyItemCompleted, itemEvent(t, msp.Item{ItemID: "r", Kind: msp.ItemReasoning, Status: msp.ItemCompleted,
		Summary: []string{"One\ntwo.", "  "}}))
	r.event(msp.NotifyItemCompleted, itemEvent(t, msp.Item{ItemID: "a", Kind: msp.ItemAgentMessage, Status: msp.ItemCompleted, Text: &text}))
	if want := "[chat] thinking: One\n[chat] two.\n[chat] agent: Done.\n"; out.String() != want {
		t.Errorf("labelled: printed %q, want %q", out.String(), want)
	}
}

// TestThinkingLineResumes: a status line that cuts a streaming reasoning
// part short (stderr on the same terminal) makes its next delta start a
// new line with all the part streamed so far, as an answer's does.
func TestThinkingLineResumes(t *testing.T) {
	var out strings.Builder
	s := newScreen(&out, false, nil)
	r := s.renderer(Pretty, false, "")
	r.event(msp.NotifyItemDelta, summaryDelta("r", 0, "Let me "))
	s.mu.Lock()
	s.interrupt()
	s.write("reconnecting…\n")
	s.mu.Unlock()
	r.event(msp.NotifyItemDelta, summaryDelta("r", 0, "think."))
	r.event(msp.NotifyItemCompleted, itemEvent(t, msp.Item{ItemID: "r", Kind: msp.ItemReasoning, Status: msp.ItemCompleted,
		Summary: []string{"Let me think."}}))
	if want := "thinking: Let me \nreconnecting…\nthinking: Let me think.\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}

// TestPressureLine: the context's pressure prints when it changes — not
// the first normal, not a repeat — with its size ("1.2k tokens" when the
// window is unknown).
func TestPressureLine(t *testing.T) {
	var out strings.Builder
	r := newRenderer(&out, Pretty, false)
	window := int64(128000)
	for _, u := range []msp.ContextUsage{
		{Pressure: msp.PressureNormal, UsedTokens: 12000, WindowTokens: &window},
		{Pressure: msp.PressureNormal, UsedTokens: 40000, WindowTokens: &window},
		{Pressure: msp.PressureWarning, UsedTokens: 104000, WindowTokens: &window},
		{Pressure: msp.PressureWarning, UsedTokens: 110000, WindowTokens: &window},
		{Pressure: msp.PressureBlocked, UsedTokens: 123456, WindowTokens: &window},
		{Pressure: msp.PressureNormal, UsedTokens: 2100, WindowTokens: &window},
		{Pressure: "strained\x1b[2J", UsedTokens: 1234},
	} {
		r.event(msp.NotifySessionContextUsage, mustJSON(msp.SessionContextUsageParams{ContextUsage: u}))
	}
	want := "◔ context nearly full · 104k / 128k tokens · compacts before the next request\n" +
		"● context full · 123k / 128k tokens · compacts before the next request\n" +
		"○ context back to normal · 2.1k / 128k tokens\n" +
		"○ context strained\uFFFD[2J · 1.2k tokens\n"
	if out.String() != want {
		t.Errorf("printed\n%q\nwant\n%q", out.String(), want)
	}
	for n, w := range map[int64]string{0: "0", 999: "999", 1000: "1.0k", 2150: "2.1k", 9999: "10.0k", 10000: "10k", 130400: "130k", 999999: "1000k", 1048576: "1.0M"} {
		if got := tokenWords(n); got != w {
			t.Errorf("tokenWords(%d) = %q, want %q", n, got, w)
		}
	}
}

// TestCompactionWords: how a compaction that did not compact reads.
func TestCompactionWords(t *testing.T) {
	before, after := int64(130400), int64(2100)
	for _, c := range []struct {
		it   msp.Item
		want string
	}{
		{msp.Item{Status: msp.ItemCompleted, Outcome: msp.CompactionCompacted, Trigger: msp.CompactionAuto, TokensBefore: &before, TokensAfter: &after},
			"⇣ context compacted 130k → 2.1k tokens (auto)"},
		{msp.Item{Status: msp.ItemCompleted, Outcome: msp.CompactionNoop, Trigger: msp.CompactionManual}, "⇣ nothing to compact (manual)"},
		{msp.Item{Status: msp.ItemFailed, Outcome: msp.CompactionFailed, Trigger: msp.CompactionAuto, FailureReason: "server error (HTTP 500)\x1b[K"},
			"⇣ context compaction failed: server error (HTTP 500)\uFFFD[K (auto)"},
		{msp.Item{Status: msp.ItemCancelled, Outcome: msp.CompactionCancelled, Trigger: msp.CompactionManual}, "⇣ context compaction cancelled (manual)"},
		{msp.Item{Status: msp.ItemFailed}, "⇣ context compaction failed"},
	} {
		var out strings.Builder
		r := newRenderer(&out, Pretty, false)
		c.it.ItemID, c.it.Kind = "c", msp.ItemCompaction
		r.event(msp.NotifyItemStarted, itemEvent(t, msp.Item{ItemID: "c", Kind: msp.ItemCompaction, Status: msp.ItemInProgress, Trigger: c.it.Trigger}))
		r.event(msp.NotifyItemCompleted, itemEvent(t, c.it))
		if out.String() != c.want+"\n" {
			t.Errorf("%+v: printed %q, want %q", c.it, out.String(), c.want)
		}
	}
}
