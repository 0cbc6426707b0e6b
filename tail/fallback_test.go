package tail

import (
	"strings"
	"testing"

	"mspd/schema/msp"
)

// The recorded frames of fallback-*.jsonl are what `mspd tail -o json`
// printed of a daemon (e2e TestTailFallback -update) whose OpenAI
// provider answered one turn, then 429 to every request, with a fallback
// chain to Anthropic and a breaker that opens after three failures: a
// turn with an image that falls back after its third attempt, then one
// that skips OpenAI, its breaker open. The session's log read back
// (--from-start --no-follow), and the same turns followed live, deltas
// included.
var fallbackFiles = []string{"fallback-log.jsonl", "fallback-live.jsonl"}

// TestFallbackPretty: a fallback is one line naming the failure and who
// answers next, a skipped provider one line saying it is down, the
// image one tag on the user's line — the same from the log as live, and
// neither counts down.
func TestFallbackPretty(t *testing.T) {
	want := `── turn aeb59b2d ──
you: Hello?
agent: Hello.
✓ completed · 0s · 1 attempt · 1 output tokens
── turn 557b19e2 ──
you: What is in this picture? [image: image/png 800×600, 2.7 KB]
⟳ openai · rate limited (429) · retrying in 5ms · attempt 2/6
⟳ openai · rate limited (429) · retrying in 5ms · attempt 3/6
↪ openai rate limited (HTTP 429) · answering with claude-test-1
agent: A red square.
✓ completed · 0s · 4 attempts · 4 output tokens
── turn 14002ff0 ──
you: And now?
↪ openai down (circuit open) · answering with claude-test-1
agent: Still red.
✓ completed · 0s · 1 attempt · 2 output tokens
`
	for _, name := range fallbackFiles {
		if got := replay(t, name, Pretty, false); got != want {
			t.Errorf("%s: printed\n%s\nwant\n%s", name, got, want)
		}
	}
	colored := replay(t, fallbackFiles[1], Pretty, true)
	for _, want := range []string{
		"\x1b[33m↪ openai rate limited (HTTP 429) · answering with claude-test-1\x1b[0m\n",
		"\x1b[33m↪ openai down (circuit open) · answering with claude-test-1\x1b[0m\n",
		"\x1b[1myou: \x1b[0mWhat is in this picture? \x1b[2m[image: image/png 800×600, 2.7 KB]\x1b[0m\n",
	} {
		if !strings.Contains(colored, want) {
			t.Errorf("in colour: %q lacks %q", colored, want)
		}
	}
}

// TestFallbackJSONAndRaw: JSON lines pass the fallback notice, the skip
// and the user item with its attachment through whole, with their
// cursors; raw output holds the answers only.
func TestFallbackJSONAndRaw(t *testing.T) {
	for _, name := range fallbackFiles {
		seen := map[string]int{}
		for _, got := range jsonLines(t, name) {
			switch {
			case got.Method == msp.NotifyTurnProviderSkipped:
				seen["skip"]++
			case got.Method == msp.NotifyTurnModelRetryScheduled && strings.Contains(string(got.Params), `"fallback":true`):
				seen["fallback"]++
			case strings.Contains(string(got.Params), `"attachments":[`):
				seen["image"]++
			}
		}
		if seen["skip"] != 1 || seen["fallback"] != 1 || seen["image"] != 1 {
			t.Errorf("%s: %v, want one of each", name, seen)
		}
		if got := replay(t, name, Raw, false); got != "Hello.\nA red square.\nStill red.\n" {
			t.Errorf("%s: raw output %q", name, got)
		}
	}
}

// TestFallbackEndsTheCountdown: on a terminal, a wait counting down for
// the attempt that then failed and handed the turn on settles as
// "retried"; the fallback line itself never counts down (nothing waits).
func TestFallbackEndsTheCountdown(t *testing.T) {
	clk, v := newFakeClock(), &vt{}
	r := clk.terminal(v).renderer(Pretty, false, "")
	r.event(msp.NotifyTurnModelRetryScheduled, rateLimited(1, 3000))
	wantScreen(t, v, retryLine("retrying in 3s"))
	r.event(msp.NotifyTurnModelRetryScheduled, mustJSON(msp.TurnModelRetryScheduledParams{TurnID: turn1, Attempt: 2,
		NextAttempt: 3, MaxAttempts: 5, System: "openai", ErrorKind: "overloaded", HTTPStatus: 503,
		Fallback: true, NextProviderID: "claude", NextModelID: "claude-sonnet-4-5-20250929", FallbackReason: msp.FallbackCircuitOpen}))
	wantScreen(t, v, retryLine("retried"), "↪ openai overloaded (HTTP 503), circuit open · answering with claude-sonnet-4-5")
	if clk.ticking() {
		t.Error("a ticker runs after a fallback: nothing counts down")
	}
}

// TestSkippedAndImageWords: how a skipped provider and images read when
// the notice or the attachment lacks a member.
func TestSkippedAndImageWords(t *testing.T) {
	for _, c := range []struct {
		p    msp.TurnProviderSkippedParams
		want string
	}{
		{msp.TurnProviderSkippedParams{ProviderID: "oa", System: "openai", Breaker: "open", NextProviderID: "claude", NextModelID: "anthropic/claude-opus-4-1@20250805"},
			"↪ openai down (circuit open) · answering with claude-opus-4-1"},
		{msp.TurnProviderSkippedParams{ProviderID: "local", Breaker: "halfOpen", NextProviderID: "backup"},
			"↪ local down (circuit half-open) · answering with backup"},
		{msp.TurnProviderSkippedParams{ProviderID: "x\x1b[2J", System: "evil\x1b]0;t\x07", Breaker: "open", NextModelID: "m\x1b[K"},
			"↪ evil\uFFFD]0;t\uFFFD down (circuit open) · answering with m\uFFFD[K"},
	} {
		if got := skippedLine(c.p); got != c.want {
			t.Errorf("%+v: %q, want %q", c.p, got, c.want)
		}
	}
	for id, want := range map[string]string{
		"gpt-4o-mini-2024-07-18": "gpt-4o-mini", "claude-sonnet-4-5": "claude-sonnet-4-5", "o3-mini": "o3-mini",
		"openai/gpt-4.1": "gpt-4.1", "llama3.2:3b": "llama3.2:3b", "model-12345678": "model-12345678", "x-2024-13-01": "x-2024-13-01",
	} {
		if got := shortModel(id); got != want {
			t.Errorf("shortModel(%q) = %q, want %q", id, got, want)
		}
	}
	w, h := 800, 600
	text := ""
	var out strings.Builder
	r := newRenderer(&out, Pretty, false)
	r.event(msp.NotifyItemCompleted, itemEvent(t, msp.Item{ItemID: "u", Kind: msp.ItemUserMessage, Status: msp.ItemCompleted, Text: &text,
		Attachments: []msp.MessageAttachment{
			{Type: "image", MediaType: "image/png", Width: &w, Height: &h, OutputRef: &msp.OutputRef{ByteLen: 120 << 10}},
			{Type: "image", MediaType: "image/jpeg", OutputRef: &msp.OutputRef{ByteLen: 3 << 20}},
			{Type: "image", MediaType: "image/gif\n"},
		}}))
	if want := "you: [image: image/png 800×600, 120 KB] [image: image/jpeg, 3.0 MB] [image: image/gif ]\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}
