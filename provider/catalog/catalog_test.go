package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mspd/provider"
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
			var re *RefusedError
			if !errors.As(err, &re) || re.Field != tc.field {
				t.Errorf("Resolve(%q, %q): %v, want a refusal naming %s", tc.provider, tc.model, err, tc.field)
			}
			continue
		}
		if err != nil || p != tc.wantP || m != tc.wantM {
			t.Errorf("Resolve(%q, %q) = %s %s %v", tc.provider, tc.model, p, m, err)
		}
	}
	var ids []string
	for _, e := range cat.Models() {
		ids = append(ids, e.ProviderID+"/"+e.ModelID)
		if e.IsDefault != (e.ProviderID == "claude") {
			t.Errorf("%s default = %v", e.ModelID, e.IsDefault)
		}
		if (e.ProviderID == "gpt") != (e.OutputLimit == 16384) {
			t.Errorf("%s output limit %d", e.ModelID, e.OutputLimit)
		}
	}
	if got := strings.Join(ids, " "); got != "gpt/gpt-4o-mini gpt/gpt-4o claude/claude-sonnet-4-5 local/llama3.2" {
		t.Errorf("listed %s", got)
	}
	if strings.Contains(jsonOf(t, cat.Models()), "secret") {
		t.Error("a key leaked into the listing")
	}
}

// TestKeysStayWithTheirEndpoint: an entry pointing at its own server never
// gets the provider's default key unless it names one.
func TestKeysStayWithTheirEndpoint(t *testing.T) {
	vars := env(map[string]string{"OPENAI_API_KEY": "sk-openai-secret", "ANTHROPIC_API_KEY": "sk-ant-secret"})
	if _, err := Load(writeFile(t, "[[providers]]\ntype = \"anthropic\"\nbase_url = \"http://proxy.example\"\n"), vars); err == nil || !strings.Contains(err.Error(), "api_key_env") {
		t.Errorf("anthropic entry with a base_url and no api_key_env: %v", err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if auth := r.Header.Get("Authorization"); strings.Contains(auth, "secret") {
			t.Errorf("the OpenAI key went to a third-party endpoint: %q", auth)
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	cat, err := Load(writeFile(t, "[[providers]]\ntype = \"openai\"\nbase_url = \""+srv.URL+"\"\nmodel = \"m\"\n"), vars)
	if err != nil {
		t.Fatal(err)
	}
	cat.Default().Model.Stream(context.Background(), provider.Request{Messages: []provider.Message{{Role: provider.RoleUser, Text: "hi"}}, Attempt: 1}, func(string) {})
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
	cat, err := Single(Entry{Type: "openai"}, env(map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}))
	if err != nil {
		t.Fatal(err)
	}
	p := cat.Default()
	if p.ID != "openai" || p.DefaultModel != DefaultOpenAIModel || p.Model.System() != "openai" {
		t.Fatalf("%+v", p)
	}
	if _, err := Single(Entry{Type: "anthropic"}, env(nil)); err == nil || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") {
		t.Fatalf("anthropic without a key: %v", err)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
