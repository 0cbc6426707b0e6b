package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mspd/client"
	"mspd/daemon"
	"mspd/modelretry"
	"mspd/provider/anthropic/anthropictest"
	"mspd/provider/openai/openaitest"
	"mspd/provider/providertest"
	"mspd/schema/msp"
)

// imageChainConfig is chainConfig (OpenAI "oa", model gpt-test, falling
// back on Anthropic "claude") with both entries taking images, which
// the catalog does not know of their test models.
func imageChainConfig(t *testing.T, oaURL, anURL string) string {
	t.Helper()
	file := chainConfig(t, oaURL, anURL, "")
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.ReplaceAll(string(raw), "api_key_env = \"TEST_KEY\"\n", "api_key_env = \"TEST_KEY\"\nimages = true\n")
	conf = strings.ReplaceAll(conf, "api_key_env = \"TEST_ANTHROPIC_KEY\"\n", "api_key_env = \"TEST_ANTHROPIC_KEY\"\nimages = true\n")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestTailFallback runs `mspd tail` against a daemon whose OpenAI
// provider answers 429 to every request, with a fallback chain to
// Anthropic and a breaker that opens after three failures. The first
// turn carries an image and falls back after its third attempt; the
// second skips OpenAI, its breaker open. Pretty output reads each
// fallback and skip as one line ("↪ openai rate limited (HTTP 429) ·
// answering with claude-test-1", "↪ openai down (circuit open) ·
// answering with claude-test-1") and the image as "[image: image/png
// 800×600, …]" on the user's line, the same live and read from the log;
// JSON lines carry the notices whole, with their cursors; raw output
// holds the answers only. With -update the live and logged JSON lines
// are written to tail/testdata, whose frames the tail package's tests
// replay.
func TestTailFallback(t *testing.T) {
	oa := openaitest.New(t, "/v1", append([]openaitest.Reply{openaitest.Stream(openaitest.Answer("Hello.")...)},
		times(3, openaitest.Error(429, openaitest.RateLimitBody, "Retry-After-Ms", "5"))...)...)
	an := anthropictest.New(t, anthropictest.Answer("end_turn", 4, "A red", " square."), anthropictest.Answer("end_turn", 2, "Still red."))
	d := startDaemon(t, daemon.Config{ConfigFile: imageChainConfig(t, oa.URL(), an.URL()), Env: chainEnv,
		Retry:   modelretry.Policy{MaxAttempts: 3},
		Breaker: modelretry.BreakerConfig{Failures: 3, Window: time.Minute, Cooldown: time.Hour}})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})
	sid := newSession(t, c)

	turn := func(p msp.TurnStartParams) {
		t.Helper()
		p.SessionID = sid
		ack, err := c.StartTurnWith(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		events, err := c.WaitTurn(ctx, ack.TurnID)
		if err != nil {
			t.Fatal(err)
		}
		if done := decode[msp.TurnCompletedParams](t, events[len(events)-1]); done.Terminal != msp.TerminalCompleted {
			t.Fatalf("turn %s", events[len(events)-1].Params)
		}
	}
	jsonLines, _ := startCommand(t, "tail", "--url", d.URL(), "--from-start", "-o", "json", sid)
	pretty, _ := startCommand(t, "tail", "--url", d.URL(), "--from-start", "--color", "never", sid)
	// A first turn OpenAI answers: once each tail shows its end, the
	// next turns reach it live.
	turn(msp.TurnStartParams{Input: []msp.TurnInputPart{{Type: "text", Text: "Hello?"}}})
	jsonLines.waitFor(t, `"method":"turn/completed"`)
	pretty.waitFor(t, "✓ completed")
	png := providertest.PNG(800, 600)
	turn(msp.TurnStartParams{Input: []msp.TurnInputPart{{Type: "text", Text: "What is in this picture?"},
		{Type: "image", MediaType: "image/png", Base64Data: providertest.B64(png), Width: new(800), Height: new(600)}}})
	turn(msp.TurnStartParams{Input: []msp.TurnInputPart{{Type: "text", Text: "And now?"}}})
	jsonLines.waitCount(t, `"method":"turn/completed"`, 3)
	pretty.waitCount(t, "✓ completed", 3)
	if oa.Count() != 4 || an.Count() != 2 {
		t.Fatalf("requests: openai %d, anthropic %d", oa.Count(), an.Count())
	}

	want := []string{
		"you: What is in this picture? [image: image/png 800×600, " + byteSizeOf(len(png)) + "]",
		"⟳ openai · rate limited (429) · retrying in 5ms · attempt 2/6",
		"⟳ openai · rate limited (429) · retrying in 5ms · attempt 3/6",
		"↪ openai rate limited (HTTP 429)",
		"agent: A red square.",
		"✓ completed",
		"you: And now?",
		"↪ openai down (circuit open) · answering with " + anthropictest.Model,
		"agent: Still red.",
		"✓ completed",
	}
	inOrder(t, "followed live", pretty.text(), want)
	if !strings.Contains(pretty.text(), " · answering with "+anthropictest.Model+"\n") {
		t.Errorf("no fallback line naming the model answering:\n%s", pretty.text())
	}
	logged, err := mspdCommand(ctx, "tail", "--url", d.URL(), "--from-start", "--no-follow", "--color", "never", sid).Output()
	if err != nil {
		t.Fatal(err)
	}
	inOrder(t, "read from the log", string(logged), want)
	logJSON, err := mspdCommand(ctx, "tail", "--url", d.URL(), "--from-start", "--no-follow", "-o", "json", sid).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, recorded := range []string{jsonLines.text() + "\n", string(logJSON)} {
		if !strings.Contains(recorded, `"method":"turn/providerSkipped"`) || !strings.Contains(recorded, `"fallback":true`) ||
			!strings.Contains(recorded, `"attachments":[{"type":"image","mediaType":"image/png","width":800,"height":600`) {
			t.Errorf("json lines lack the notices or the attachment:\n%s", recorded)
		}
	}
	raw, err := mspdCommand(ctx, "tail", "--url", d.URL(), "--from-start", "--no-follow", "-o", "raw", sid).Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != "Hello.\nA red square.\nStill red.\n" {
		t.Errorf("raw output %q, want the answers only", raw)
	}

	if *update {
		for name, text := range map[string]string{"fallback-live.jsonl": jsonLines.text() + "\n", "fallback-log.jsonl": string(logJSON)} {
			if err := os.WriteFile(filepath.Join(tailTestdata, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("wrote %s/fallback-live.jsonl and fallback-log.jsonl", tailTestdata)
	}
}

// byteSizeOf words a byte count as mspd tail does: "812 B", "4.2 KB",
// "120 KB".
func byteSizeOf(n int) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 10*1024:
		return fmt.Sprintf("%.1f KB", float64(n)/1024)
	}
	return fmt.Sprintf("%d KB", (n+512)/1024)
}
