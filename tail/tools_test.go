package tail

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"mspd/schema/msp"
)

// The recorded frames in testdata are what `mspd tail -o json` printed
// of a daemon running the demo model, asked "What is (2+3)*4?" then
// "What is 1/0?" (the built-in calculator answers 20, then fails): the
// session's log read back (--from-start --no-follow), and the same turns
// followed live, deltas and ephemeral item/started included.
var recordedFiles = []string{"demo-tools-log.jsonl", "demo-tools-live.jsonl"}

// recorded is one line `mspd tail -o json` wrote.
type recorded struct {
	Cursor string          `json:"cursor"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// readRecorded reads a testdata file of recorded frames.
func readRecorded(t *testing.T, name string) []recorded {
	t.Helper()
	raw, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var out []recorded
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e recorded
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no frames", name)
	}
	return out
}

// replay renders recorded frames in a format.
func replay(t *testing.T, name, format string, color bool) string {
	t.Helper()
	var out strings.Builder
	r := newRenderer(&out, format, color)
	for _, e := range readRecorded(t, name) {
		r.event(e.Method, e.Params)
	}
	return out.String()
}

// TestToolCallsPretty: pretty output shows each tool call where it
// happened — after the step's text that asked for it, before the answer
// made of its result — as a line when it starts (tool, server, arguments)
// and one when it ends (✓ with its time and output, ✗ with why), the same
// from the log as live.
func TestToolCallsPretty(t *testing.T) {
	want := `── turn 776ef94a ──
you: What is (2+3)*4?
agent: Let me work that out.
→ calculator (builtin) {"expression":"(2+3)*4"}
✓ calculator 0 ms: 20
agent: The calculator says 20.
✓ completed · 0s · 2 attempts · 9 output tokens
── turn cbea4d8b ──
you: What is 1/0?
agent: Let me work that out.
→ calculator (builtin) {"expression":"1/0"}
✗ calculator failed after 0 ms: the tool reported an error: at character 2: division by zero
agent: The tool could not help: at character 2: division by zero.
✓ completed · 0s · 2 attempts · 16 output tokens
`
	for _, name := range recordedFiles {
		if got := replay(t, name, Pretty, false); got != want {
			t.Errorf("%s: printed\n%s\nwant\n%s", name, got, want)
		}
	}
	colored := replay(t, recordedFiles[1], Pretty, true)
	for _, want := range []string{
		"\x1b[36m→ calculator\x1b[0m (builtin) {",
		"\x1b[32m✓ calculator 0 ms\x1b[0m: 20\n",
		"\x1b[31m✗ calculator failed after 0 ms\x1b[0m: the tool reported an error: at character 2",
	} {
		if !strings.Contains(colored, want) {
			t.Errorf("in colour: %q lacks %q", colored, want)
		}
	}
}

// jsonLines replays the recording name as JSON lines and checks that
// each passes its frame through whole, with its cursor; it returns them.
func jsonLines(t *testing.T, name string) []recorded {
	t.Helper()
	frames := readRecorded(t, name)
	lines := strings.Split(strings.TrimSuffix(replay(t, name, JSON, false), "\n"), "\n")
	if len(lines) != len(frames) {
		t.Fatalf("%s: %d lines for %d frames", name, len(lines), len(frames))
	}
	out := make([]recorded, len(lines))
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &out[i]); err != nil {
			t.Fatalf("%s line %d: %v", name, i+1, err)
		}
		if got := out[i]; got.Method != frames[i].Method || got.Cursor != frames[i].Cursor || string(got.Params) != string(frames[i].Params) {
			t.Errorf("%s line %d: %s, want the frame %s %s", name, i+1, l, frames[i].Method, frames[i].Params)
		}
	}
	return out
}

// TestToolCallsJSONLines: JSON-lines output passes every tool call event
// through whole, with its cursor, like any other event.
func TestToolCallsJSONLines(t *testing.T) {
	for _, name := range recordedFiles {
		frames := readRecorded(t, name)
		lines := strings.Split(strings.TrimSuffix(replay(t, name, JSON, false), "\n"), "\n")
		if len(lines) != len(frames) {
			t.Fatalf("%s: %d lines for %d frames", name, len(lines), len(frames))
		}
		calls := 0
		for i, l := range lines {
			var got recorded
			if err := json.Unmarshal([]byte(l), &got); err != nil {
				t.Fatalf("%s line %d: %v", name, i+1, err)
			}
			var p msp.ItemParams
			json.Unmarshal(got.Params, &p)
			if p.Item.Kind != msp.ItemToolCall {
				continue
			}
			calls++
			if got.Cursor != frames[i].Cursor || got.Method != frames[i].Method || !bytes.Equal(got.Params, frames[i].Params) {
				t.Errorf("%s line %d: %s, want the frame as it came: %s %s", name, i+1, l, frames[i].Method, frames[i].Params)
			}
		}
		if calls != 4 { // two calls, each started and completed
			t.Errorf("%s: %d tool call events, want 4", name, calls)
		}
	}
}

// TestToolCallsLeftOutOfRaw: raw output is the answers' text only.
func TestToolCallsLeftOutOfRaw(t *testing.T) {
	want := "Let me work that out.\nThe calculator says 20.\nLet me work that out.\nThe tool could not help: at character 2: division by zero.\n"
	for _, name := range recordedFiles {
		if got := replay(t, name, Raw, false); got != want {
			t.Errorf("%s: raw output %q, want %q", name, got, want)
		}
	}
}

// TestToolCallLines: how each end of a call reads — every status, long
// and many-lined output cut to two lines, output the server truncated —
// and that a tool's text (its name, arguments, output, failure) never
// reaches the terminal as control characters.
func TestToolCallLines(t *testing.T) {
	ms := func(n int64) *int64 { return &n }
	str := func(s string) *string { return &s }
	long := strings.Repeat("x", 150)
	for _, tt := range []struct {
		name string
		it   msp.Item
		want string
	}{
		{"completed, no output", msp.Item{Tool: "ping", Status: msp.ItemCompleted, DurationMs: ms(3), VisibleOutput: str("")},
			"✓ ping 3 ms\n"},
		{"seconds", msp.Item{Tool: "slow", Status: msp.ItemCompleted, DurationMs: ms(1450), VisibleOutput: str("done")},
			"✓ slow 1.4 s: done\n"},
		{"minutes", msp.Item{Tool: "slow", Status: msp.ItemCompleted, DurationMs: ms(125_400), VisibleOutput: str("done")},
			"✓ slow 2m5s: done\n"},
		{"two lines of many", msp.Item{Tool: "ls", Status: msp.ItemCompleted, DurationMs: ms(12), VisibleOutput: str("\n\na.go\nb.go\nc.go\n")},
			"✓ ls 12 ms: a.go\n    b.go …\n"},
		{"two lines exactly", msp.Item{Tool: "ls", Status: msp.ItemCompleted, DurationMs: ms(12), VisibleOutput: str("a.go\r\nb.go\r\n\r\n")},
			"✓ ls 12 ms: a.go\n    b.go\n"},
		{"a long line", msp.Item{Tool: "big", Status: msp.ItemCompleted, DurationMs: ms(12), VisibleOutput: str(long)},
			"✓ big 12 ms: " + long[:99] + "…\n"},
		{"truncated by the server", msp.Item{Tool: "big", Status: msp.ItemCompleted, DurationMs: ms(12), VisibleOutput: str("éxéx"), Truncated: true},
			"✓ big 12 ms: éxéx …\n"},
		{"timed out", msp.Item{Tool: "slow", Status: msp.ItemTimedOut, FailureKind: "timed_out", FailureReason: "the call ran past 2s",
			DurationMs: ms(2000), VisibleOutput: str("")},
			"✗ slow timed out after 2.0 s: the call ran past 2s\n"},
		{"unavailable", msp.Item{Tool: "lookup", Status: msp.ItemFailed, FailureKind: "unavailable", FailureReason: "connection refused",
			DurationMs: ms(5)},
			"✗ lookup failed after 5 ms: connection refused\n"},
		{"rejected", msp.Item{Tool: "deploy", Status: msp.ItemRejected, FailureReason: "denied by alice"},
			"✗ deploy rejected: denied by alice\n"},
		{"cancelled", msp.Item{Tool: "slow", Status: msp.ItemCancelled, FailureReason: "the turn was stopped during the call", DurationMs: ms(800)},
			"■ slow cancelled after 800 ms: the turn was stopped during the call\n"},
		{"unknown outcome, no duration", msp.Item{Tool: "append", Status: msp.ItemFailed, FailureKind: "unknown_outcome",
			FailureReason: "the server stopped during the call"},
			"✗ append failed: the server stopped during the call\n"},
		{"a status this version does not know", msp.Item{Tool: "t", Status: "backgrounded"},
			"? t backgrounded\n"},
		{"control characters", msp.Item{Tool: "ev\x1b[2Jil", Status: msp.ItemFailed, FailureReason: "bad\x07\nthing", DurationMs: ms(1),
			VisibleOutput: str("\x1b]52;c;cm0gLXJmIH4K\x07out\rput")},
			"✗ ev\uFFFD[2Jil failed after 1 ms: bad\uFFFD thing: \uFFFD]52;c;cm0gLXJmIH4K\uFFFDout\uFFFDput\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			r := newRenderer(&out, Pretty, false)
			tt.it.ItemID, tt.it.Kind, tt.it.Revision = "c", msp.ItemToolCall, 2
			r.event(msp.NotifyItemCompleted, itemEvent(t, tt.it))
			if out.String() != tt.want {
				t.Errorf("printed %q, want %q", out.String(), tt.want)
			}
		})
	}

	t.Run("started", func(t *testing.T) {
		var out strings.Builder
		r := newRenderer(&out, Pretty, false)
		args := `{"esc":"` + "\x1b[31m" + `","text":"` + long + `"}`
		r.event(msp.NotifyItemStarted, itemEvent(t, msp.Item{ItemID: "c", Kind: msp.ItemToolCall, Revision: 1,
			Status: msp.ItemInProgress, Tool: "append", Server: "notes\x1b", Args: &args}))
		want := `→ append (notes` + "\uFFFD" + `) {"esc":"` + "\uFFFD" + `[31m","text":"` + long[:76] + "…\n"
		if out.String() != want {
			t.Errorf("printed %q, want %q", out.String(), want)
		}
	})

	t.Run("labelled", func(t *testing.T) {
		// With --all, each line of a call carries its session's label.
		var out strings.Builder
		r := newScreen(&out, false, nil).renderer(Pretty, false, "Paris trip")
		r.event(msp.NotifyItemCompleted, itemEvent(t, msp.Item{ItemID: "c", Kind: msp.ItemToolCall, Revision: 2,
			Status: msp.ItemCompleted, Tool: "ls", DurationMs: ms(4), VisibleOutput: str("a\nb\nc")}))
		if want := "[Paris trip] ✓ ls 4 ms: a\n[Paris trip]     b …\n"; out.String() != want {
			t.Errorf("printed %q, want %q", out.String(), want)
		}
	})

	t.Run("ends the streamed line", func(t *testing.T) {
		// A call asked for after streamed text starts on a line of its own.
		var out strings.Builder
		r := newRenderer(&out, Pretty, false)
		args := "{}"
		r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "a", Delta: "Let me check."}))
		r.event(msp.NotifyItemStarted, itemEvent(t, msp.Item{ItemID: "c", Kind: msp.ItemToolCall, Revision: 1,
			Status: msp.ItemInProgress, Tool: "clock", Server: "builtin", Args: &args}))
		if want := "agent: Let me check.\n→ clock (builtin) {}\n"; out.String() != want {
			t.Errorf("printed %q, want %q", out.String(), want)
		}
	})
}
