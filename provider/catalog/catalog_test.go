package catalog

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mspd/provider/demo"
	"mspd/schema/msp"
)

func env(vars map[string]string) Env { return func(k string) string { return vars[k] } }

func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mspd.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const threeProviders = `
default = "claude"

[[providers]]
id = "gpt"
type = "openai"
model = "gpt-4o-mini"
models = ["gpt-4o"]
max_output_tokens = 16384

[[providers]]
id = "claude"
type = "anthropic"
model = "claude-sonnet-4-5"
idle_timeout = "30s"

[[providers]]
id = "local"
type = "openai"
base_url = "http://127.0.0.1:11434/v1"
system = "ollama"
model = "llama3.2"
api_key_env = "NO_KEY_NEEDED"
`

func TestLoadAndResolve(t *testing.T) {
	cat, err := Load(writeFile(t, threeProviders), env(map[string]string{"OPENAI_API_KEY": "sk-openai-secret", "ANTHROPIC_API_KEY": "sk-ant-secret"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := cat.Default().ID; got != "claude" {
		t.Fatalf("default %s", got)
	}
	if s := cat.Get("local").Model.System(); s != "ollama" {
		t.Errorf("local system %q", s)
	}
	tests := []struct {
		provider, model string
		wantP, wantM    string
		field           string // of the invalidParams refusal
	}{
		{"", "", "claude", "claude-sonnet-4-5", ""},
		{"gpt", "", "gpt", "gpt-4o-mini", ""},
		{"gpt", "gpt-4o", "gpt", "gpt-4o", ""},
		{"gpt", "gpt-5-nonexistent", "", "", "modelId"},
		{"mistral", "", "", "", "providerId"},
	}
	for _, tc := range tests {
		p, m, err := cat.Resolve(tc.provider, tc.model)
		if tc.field != "" {
			var me *msp.Error
			if !errors.As(err, &me) || me.Code != msp.CodeInvalidParams || me.Data.Details["field"] != tc.field {
				t.Errorf("Resolve(%q, %q): %v, want invalidParams on %s", tc.provider, tc.model, err, tc.field)
			}
			continue
		}
		if err != nil || p != tc.wantP || m != tc.wantM {
			t.Errorf("Resolve(%q, %q) = %s %s %v", tc.provider, tc.model, p, m, err)
		}
	}
	list := cat.List("gpt", "gpt-4o")
	var ids []string
	for _, e := range list.Models {
		ids = append(ids, e.ProviderID+"/"+e.ModelID)
		if e.IsActive != (e.ProviderID == "gpt" && e.ModelID == "gpt-4o") {
			t.Errorf("%s active = %v", e.ModelID, e.IsActive)
		}
		if e.IsDefault != (e.ProviderID == "claude") {
			t.Errorf("%s default = %v", e.ModelID, e.IsDefault)
		}
	}
	if got := strings.Join(ids, " "); got != "gpt/gpt-4o-mini gpt/gpt-4o claude/claude-sonnet-4-5 local/llama3.2" {
		t.Errorf("listed %s", got)
	}
	if list.ProviderID != "gpt" {
		t.Errorf("list providerId %s", list.ProviderID)
	}
	if strings.Contains(jsonOf(t, list), "secret") {
		t.Error("a key leaked into model/list")
	}
}

func TestConfigErrorsNameTheProblem(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"unknown key", "[[providers]]\ntype = \"demo\"\napikey = \"x\"\n", "unknown key"},
		{"unknown type", "[[providers]]\ntype = \"gemini\"\n", "unknown type"},
		{"duplicate id", "[[providers]]\ntype = \"demo\"\n[[providers]]\ntype = \"demo\"\n", "twice"},
		{"bad default", "default = \"x\"\n[[providers]]\ntype = \"demo\"\n", "default provider"},
		{"no providers", "", "no providers"},
		{"anthropic without key", "[[providers]]\ntype = \"anthropic\"\n", "ANTHROPIC_API_KEY"},
		{"bad duration", "[[providers]]\ntype = \"demo\"\nword_delay = \"soon\"\n", "duration"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tc.file), env(nil))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want mention of %q", err, tc.want)
			}
		})
	}
}

func TestSingleFromFlags(t *testing.T) {
	cat, err := Single("openai", "", demoConfig(), env(map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}))
	if err != nil {
		t.Fatal(err)
	}
	p := cat.Default()
	if p.ID != "openai" || p.DefaultModel != DefaultOpenAIModel || p.Model.System() != "openai" {
		t.Fatalf("%+v", p)
	}
	if _, err := Single("anthropic", "", demoConfig(), env(nil)); err == nil || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") {
		t.Fatalf("anthropic without a key: %v", err)
	}
}

func demoConfig() demo.Config { return demo.Config{WordDelay: demo.NoDelay} }

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
