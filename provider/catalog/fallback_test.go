package catalog

import (
	"reflect"
	"strings"
	"testing"
)

const chainBase = `
[[providers]]
id = "gpt"
type = "openai"
model = "gpt-4o-mini"
models = ["gpt-4o"]
%s
[[providers]]
id = "claude"
type = "anthropic"
model = "claude-sonnet-4-5"
%s
[[providers]]
id = "local"
type = "openai"
base_url = "http://127.0.0.1:11434/v1"
model = "llama3.2:3b"
`

func chainConfig(gpt, claude string) string {
	return strings.Replace(strings.Replace(chainBase, "%s", gpt, 1), "%s", claude, 1)
}

var chainEnv = env(map[string]string{"OPENAI_API_KEY": "sk-o", "ANTHROPIC_API_KEY": "sk-a"})

// TestFallbackChain: a provider's fallback names other providers, by id
// (their default model) or id:model (a model id may hold colons); two
// providers may name each other, since a chain does not follow its
// entries' own.
func TestFallbackChain(t *testing.T) {
	cat, err := Load(writeFile(t, chainConfig(`fallback = ["claude", "local:llama3.2:3b"]`, `fallback = ["gpt:gpt-4o"]`)), chainEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cat.Get("gpt").Fallback, []Ref{{"claude", "claude-sonnet-4-5"}, {"local", "llama3.2:3b"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("gpt's chain %+v, want %+v", got, want)
	}
	if got, want := cat.Get("claude").Fallback, []Ref{{"gpt", "gpt-4o"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("claude's chain %+v, want %+v", got, want)
	}
	if got := cat.Get("local").Fallback; got != nil {
		t.Errorf("local names no chain, got %+v", got)
	}
}

// TestFallbackChainRefused: every mistake is refused at load, naming the
// provider, the key and the entry.
func TestFallbackChainRefused(t *testing.T) {
	for _, tc := range []struct{ fallback, want string }{
		{`fallback = ["gemini"]`, `"gemini" names no configured provider`},
		{`fallback = ["claude:claude-9"]`, `model "claude-9" is not configured for provider "claude"`},
		{`fallback = ["claude:"]`, `"claude:" names no configured provider`},
		{`fallback = ["gpt"]`, `"gpt" is the provider itself`},
		{`fallback = ["gpt:gpt-4o"]`, `"gpt:gpt-4o" is the provider itself`},
		{`fallback = ["claude", "local", "claude"]`, `provider "claude" is in the chain twice`},
		{`fallback = ["claude", "claude:claude-sonnet-4-5"]`, `provider "claude" is in the chain twice`},
		{`fallback = [""]`, `"" names no configured provider`},
	} {
		_, err := Load(writeFile(t, chainConfig(tc.fallback, "")), chainEnv)
		if err == nil || !strings.Contains(err.Error(), `provider "gpt": fallback: `) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming provider \"gpt\", fallback and %s", tc.fallback, err, tc.want)
		}
	}
}
