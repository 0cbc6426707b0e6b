package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/openai/openaitest"
	"mspd/schema/msp"
)

// smallWindowConfig writes a configuration of one OpenAI provider at url
// whose model has a context window of 2000 tokens.
func smallWindowConfig(t *testing.T, url string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "mspd.toml")
	conf := fmt.Sprintf("[[providers]]\nid = \"chat\"\ntype = \"openai\"\nbase_url = %q\nmodel = \"gpt-4o-mini\"\napi_key_env = \"TEST_KEY\"\ncontext_window = 2000\n", url)
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestTailReasoningAndCompaction runs `mspd tail` against a daemon whose
// OpenAI-compatible provider (a fake server) reasons in
// reasoning_content and whose model has a 2000-token window. The first
// turn reasons, then answers; the second leaves the context nearly full;
// the third compacts first (auto), then reasons and answers; a
// session/compact compacts again (manual). Pretty output prints the
// reasoning on lines of its own, "thinking: …", never on the answer's;
// each compaction as "⇣ context compacted 1.7k → N tokens (auto)"; the
// pressure only when it changes — the same live and read from the log.
// JSON lines carry the reasoning, compaction and context usage whole;
// raw output holds the answers only. With -update the live and logged
// JSON lines are written to tail/testdata/context-*.jsonl, whose frames
// the tail package's tests replay.
func TestTailReasoningAndCompaction(t *testing.T) {
	answer := func(reasoning []string, text string, prompt, completion, reasoningTokens int64) openaitest.Reply {
		frames := []string{openaitest.Role()}
		for _, r := range reasoning {
			frames = append(frames, openaitest.ReasoningContent(r))
		}
		return openaitest.Stream(append(frames, openaitest.Delta(text), openaitest.Finish("stop"),
			openaitest.Usage(prompt, completion, 0, reasoningTokens), openaitest.Done)...)
	}
	fake := openaitest.New(t, "/v1",
		answer([]string{"The user asks", " for France's capital:", " Paris."}, "Paris.", 900, 100, 8),
		answer(nil, "Lyon.", 1500, 200, 0),
		answer(nil, "They asked about Paris and Lyon.", 1650, 40, 0),
		answer([]string{"After Paris and Lyon", " comes Marseille."}, "Marseille.", 300, 20, 6),
		answer(nil, "Paris, Lyon and Marseille.", 100, 20, 0),
	)
	d := startDaemon(t, daemon.Config{ConfigFile: smallWindowConfig(t, fake.URL()), Env: mapEnv(map[string]string{"TEST_KEY": "sk-e2e"})})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})
	sid := newSession(t, c)

	jsonLines, _ := startCommand(t, "tail", "--url", d.URL(), "--from-start", "-o", "json", sid)
	pretty, _ := startCommand(t, "tail", "--url", d.URL(), "--from-start", "--color", "never", sid)
	runTurnOn(t, c, sid, "What is the capital of France?")
	jsonLines.waitFor(t, `"method":"turn/completed"`)
	pretty.waitFor(t, "✓ completed")
	runTurnOn(t, c, sid, "And its second city?")
	runTurnOn(t, c, sid, "And the third?")
	p := msp.SessionCompactParams{CommandID: client.NewCommandID(), SessionID: sid}
	if ack, err := c.Compact(ctx, p); err != nil || ack.Status != msp.StatusAccepted {
		t.Fatalf("session/compact: %+v, %v", ack, err)
	}
	if _, err := c.WaitTurn(ctx, p.CommandID); err != nil {
		t.Fatal(err)
	}
	jsonLines.waitCount(t, `"method":"turn/completed"`, 4)
	pretty.waitCount(t, "✓ completed", 4)

	want := []string{
		"you: What is the capital of France?",
		"thinking: The user asks for France's capital: Paris.",
		"agent: Paris.",
		"✓ completed",
		"you: And its second city?",
		"agent: Lyon.",
		"◔ context nearly full · 1.7k / 2.0k tokens · compacts before the next request",
		"✓ completed",
		"you: And the third?",
		"⇣ context compacted 1.7k → ",
		"○ context back to normal · ",
		"thinking: After Paris and Lyon comes Marseille.",
		"agent: Marseille.",
		"✓ completed",
		"⇣ context compacted 320 → ",
		"✓ completed",
	}
	for name, text := range map[string]string{"followed live": pretty.text()} {
		inOrder(t, name, text, want)
		if strings.Contains(text, "agent: The user") || strings.Contains(text, "thinking: Paris.") || strings.Contains(text, "Paris.agent") {
			t.Errorf("%s: reasoning mixed with the answer:\n%s", name, text)
		}
		if n := strings.Count(text, "◔ context nearly full"); n != 1 {
			t.Errorf("%s: %d pressure lines for one change:\n%s", name, n, text)
		}
		if !strings.Contains(text, " tokens (auto)\n") || !strings.Contains(text, " tokens (manual)\n") {
			t.Errorf("%s: compactions not both worded:\n%s", name, text)
		}
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
		for _, want := range []string{`"kind":"reasoning"`, `"summary":["The user asks for France's capital: Paris."]`,
			`"kind":"compaction"`, `"trigger":"manual"`, `"method":"session/contextUsage"`, `"pressure":"warning"`} {
			if !strings.Contains(recorded, want) {
				t.Errorf("json lines lack %s:\n%s", want, recorded)
			}
		}
	}
	if !strings.Contains(jsonLines.text(), `"field":"summary.0"`) {
		t.Errorf("live json lines lack the reasoning deltas:\n%s", jsonLines.text())
	}
	raw, err := mspdCommand(ctx, "tail", "--url", d.URL(), "--from-start", "--no-follow", "-o", "raw", sid).Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != "Paris.\nLyon.\nMarseille.\n" {
		t.Errorf("raw output %q, want the answers only", raw)
	}

	if *update {
		for name, text := range map[string]string{"context-live.jsonl": jsonLines.text() + "\n", "context-log.jsonl": string(logJSON)} {
			if err := os.WriteFile(filepath.Join(tailTestdata, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("wrote %s/context-live.jsonl and context-log.jsonl", tailTestdata)
	}
}
