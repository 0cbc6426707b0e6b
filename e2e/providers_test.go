package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/anthropic/anthropictest"
	"mspd/provider/openai/openaitest"
	"mspd/schema/msp"
)

func streamedText(t *testing.T, events []client.Notification) string {
	var b strings.Builder
	for _, n := range only(events, msp.NotifyItemDelta) {
		b.WriteString(decode[msp.ItemDeltaParams](t, n).Delta)
	}
	return b.String()
}

// TestOpenAIProvider: `mspd serve --provider openai` with OPENAI_BASE_URL
// pointed at an OpenAI-compatible server streams its answers into a
// session, retrying a 429 with the server's delay announced first.
func TestOpenAIProvider(t *testing.T) {
	fake := openaitest.New(t, "/v1",
		openaitest.Error(429, openaitest.RateLimitBody, "Retry-After-Ms", "30"),
		openaitest.Stream(openaitest.Answer("Hello", " from", " a compatible server")...),
		openaitest.Stream(openaitest.Answer("Second", " answer")...))
	d := startDaemon(t, daemon.Config{Provider: "openai", Model: "gpt-test",
		Env: mapEnv(map[string]string{"OPENAI_BASE_URL": fake.URL(), "OPENAI_API_KEY": "sk-e2e-secret"})})
	c := dial(t, d.URL(), client.Options{})
	start, err := c.StartSession(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if *start.Session.ProviderID != "openai" || *start.Session.ModelID != "gpt-test" {
		t.Fatalf("session provider %v model %v", *start.Session.ProviderID, *start.Session.ModelID)
	}
	events, done := answerTurn(t, c, start.Session.SessionID, "Say hello")
	notices := only(events, msp.NotifyTurnModelRetryScheduled)
	if len(notices) != 1 {
		t.Fatalf("events: %s", compact(methods(events)))
	}
	r := decode[msp.TurnModelRetryScheduledParams](t, notices[0])
	if r.System != "openai" || r.ErrorKind != "rateLimited" || r.HTTPStatus != 429 || r.RetryDelayMs != 30 {
		t.Errorf("notice: %s", notices[0].Params)
	}
	if got := streamedText(t, events); got != "Hello from a compatible server" {
		t.Errorf("streamed %q", got)
	}
	if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 2 || done.Attempts.OutputTokens != 3 || !done.Attempts.UsageComplete {
		t.Errorf("terminal: %s", events[len(events)-1].Params)
	}
	// The second turn carries the first exchange as history.
	answerTurn(t, c, start.Session.SessionID, "Again")
	reqs := fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	var body struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	json.Unmarshal(reqs[2].Raw, &body)
	var roles []string
	for _, m := range body.Messages {
		roles = append(roles, m.Role+":"+m.Content)
	}
	if got := strings.Join(roles, " | "); body.Model != "gpt-test" || got != "user:Say hello | assistant:Hello from a compatible server | user:Again" {
		t.Errorf("model %s, history %s", body.Model, got)
	}
	for _, r := range reqs {
		if r.Header.Get("Authorization") != "Bearer sk-e2e-secret" {
			t.Errorf("authorization %q", r.Header.Get("Authorization"))
		}
	}
}

// TestAnthropicProvider: the same through Anthropic's Messages API,
// including an overloaded_error inside the stream before any text.
func TestAnthropicProvider(t *testing.T) {
	fake := anthropictest.New(t,
		anthropictest.StreamError("overloaded_error"),
		anthropictest.Answer("end_turn", 4, "Hello", " from", " Claude"))
	d := startDaemon(t, daemon.Config{Provider: "anthropic", Model: anthropictest.Model,
		Env: mapEnv(map[string]string{"ANTHROPIC_BASE_URL": fake.URL(), "ANTHROPIC_API_KEY": anthropictest.Key})})
	c := dial(t, d.URL(), client.Options{})
	start, err := c.StartSession(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	events, done := answerTurn(t, c, start.Session.SessionID, "Say hello")
	notices := only(events, msp.NotifyTurnModelRetryScheduled)
	if len(notices) != 1 {
		t.Fatalf("events: %s", compact(methods(events)))
	}
	r := decode[msp.TurnModelRetryScheduledParams](t, notices[0])
	if r.System != "anthropic" || r.ErrorKind != "overloaded" || r.HTTPStatus != 529 {
		t.Errorf("notice: %s", notices[0].Params)
	}
	if got := streamedText(t, events); got != "Hello from Claude" {
		t.Errorf("streamed %q", got)
	}
	if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 2 || done.Attempts.OutputTokens != 4 {
		t.Errorf("terminal: %s", events[len(events)-1].Params)
	}
	for _, e := range events {
		if strings.Contains(string(e.Params), anthropictest.Key) {
			t.Errorf("the API key leaked into %s", e.Method)
		}
	}
}

// TestSeveralProviders: a configuration file names providers; a session
// picks one by providerId and modelId; model/list shows what is configured.
func TestSeveralProviders(t *testing.T) {
	oa := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Answer("from openai")...))
	an := anthropictest.New(t, anthropictest.Answer("end_turn", 2, "from claude"))
	file := filepath.Join(t.TempDir(), "mspd.toml")
	os.WriteFile(file, []byte(`
default = "local"
[[providers]]
id = "local"
type = "openai"
base_url = "`+oa.URL()+`"
system = "vllm"
model = "llama3.2"
models = ["qwen2.5"]
[[providers]]
id = "claude"
type = "anthropic"
base_url = "`+an.URL()+`"
api_key_env = "TEST_ANTHROPIC_KEY"
model = "`+anthropictest.Model+`"
`), 0o600)
	d := startDaemon(t, daemon.Config{ConfigFile: file, Env: mapEnv(map[string]string{"TEST_ANTHROPIC_KEY": anthropictest.Key})})
	c := dial(t, d.URL(), client.Options{})
	ctx := testCtx(t)

	var list msp.ModelListResult
	if err := c.Call(ctx, msp.MethodModelList, map[string]any{}, &list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Models {
		ids = append(ids, m.ProviderID+"/"+m.ModelID)
	}
	if got := strings.Join(ids, " "); got != "local/llama3.2 local/qwen2.5 claude/"+anthropictest.Model || list.ProviderID != "local" {
		t.Fatalf("model/list: %s (%s)", got, list.ProviderID)
	}

	claude := "claude"
	var start msp.SessionStartResult
	if err := c.Call(ctx, msp.MethodSessionStart, msp.SessionStartParams{CommandID: client.NewCommandID(), ProviderID: &claude}, &start); err != nil {
		t.Fatal(err)
	}
	c.Next(ctx) // session/started
	events, done := answerTurn(t, c, start.Session.SessionID, "hi")
	if got := streamedText(t, events); got != "from claude" || done.Terminal != msp.TerminalCompleted {
		t.Fatalf("claude session streamed %q (%s)", got, done.Terminal)
	}
	if err := c.Call(ctx, msp.MethodModelList, map[string]any{"sessionId": start.Session.SessionID}, &list); err != nil {
		t.Fatal(err)
	}
	for _, m := range list.Models {
		if m.IsActive != (m.ProviderID == "claude") {
			t.Errorf("%s/%s active=%v", m.ProviderID, m.ModelID, m.IsActive)
		}
	}

	if err := c.Call(ctx, msp.MethodSessionStart, msp.SessionStartParams{CommandID: client.NewCommandID()}, &start); err != nil {
		t.Fatal(err)
	}
	c.Next(ctx)
	events, _ = answerTurn(t, c, start.Session.SessionID, "hi")
	if got := streamedText(t, events); got != "from openai" || *start.Session.ProviderID != "local" || *start.Session.ModelID != "llama3.2" {
		t.Fatalf("default session: %q on %s/%s", got, *start.Session.ProviderID, *start.Session.ModelID)
	}

	for _, bad := range []msp.SessionStartParams{
		{CommandID: client.NewCommandID(), ProviderID: ptr("gemini")},
		{CommandID: client.NewCommandID(), ProviderID: ptr("local"), ModelID: "gpt-9"},
	} {
		err := c.Call(ctx, msp.MethodSessionStart, bad, nil)
		if me, ok := err.(*msp.Error); !ok || me.Code != msp.CodeInvalidParams {
			t.Errorf("start %+v: %v", bad, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func mapEnv(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}
