package catalog

import (
	"strings"
	"testing"

	"mspd/provider"
)

const withSettings = `
[[providers]]
id = "gpt"
type = "openai"
model = "gpt-4o-mini"
models = ["gpt-3.5-turbo", "o3-mini", "openai/gpt-4.1", "mystery-7b"]
instructions = "Be terse."

[[providers]]
id = "local"
type = "openai"
base_url = "http://127.0.0.1:11434/v1"
model = "llava"
images = true
tools = false
context_window = 4096
instructions = "You run on a laptop."

[[providers.overrides]]
model = "qwen2.5"
images = false
tools = true
context_window = 32768
instructions = "Think step by step."

[[providers]]
id = "script"
type = "scripted"

[[providers.overrides]]
model = "blind"
images = false
`

// TestModelInfo: the built-in families, an entry's keys over them for all
// its models, an override's over the entry's for one (which it also
// offers), and the conservative default for a model nobody knows.
func TestModelInfo(t *testing.T) {
	cat, err := Load(writeFile(t, withSettings), env(map[string]string{"OPENAI_API_KEY": "sk-x"}))
	if err != nil {
		t.Fatal(err)
	}
	caps := func(images, tools, reasoning bool, window int) provider.Capabilities {
		return provider.Capabilities{Images: images, Tools: tools, Reasoning: reasoning, ContextWindow: window}
	}
	for _, tc := range []struct {
		provider, model string
		want            provider.ModelInfo
	}{
		{"gpt", "", provider.ModelInfo{Capabilities: caps(true, true, false, 128000), Instructions: "Be terse."}},
		{"gpt", "gpt-3.5-turbo", provider.ModelInfo{Capabilities: caps(false, true, false, 16385), Instructions: "Be terse."}},
		{"gpt", "o3-mini", provider.ModelInfo{Capabilities: caps(false, true, true, 200000), Instructions: "Be terse."}},
		{"gpt", "openai/gpt-4.1", provider.ModelInfo{Capabilities: caps(true, true, false, 1047576), Instructions: "Be terse."}},
		{"gpt", "mystery-7b", provider.ModelInfo{Capabilities: Unknown, Instructions: "Be terse."}},
		{"local", "llava", provider.ModelInfo{Capabilities: caps(true, false, false, 4096), Instructions: "You run on a laptop."}},
		{"local", "qwen2.5", provider.ModelInfo{Capabilities: caps(false, true, false, 32768), Instructions: "Think step by step."}},
		{"script", "", provider.ModelInfo{Capabilities: caps(true, true, false, 0)}},
		{"script", "blind", provider.ModelInfo{Capabilities: caps(false, true, false, 0)}},
		{"", "claude-sonnet-4-5", provider.ModelInfo{Capabilities: caps(true, true, true, 200000), Instructions: "Be terse."}},
		{"nowhere", "gpt-4o", provider.ModelInfo{Capabilities: Unknown}},
	} {
		if got := cat.Info(tc.provider, tc.model); got != tc.want {
			t.Errorf("Info(%q, %q) = %+v; want %+v", tc.provider, tc.model, got, tc.want)
		}
	}
	if _, _, err := cat.Resolve("local", "qwen2.5"); err != nil {
		t.Errorf("an override's model is not offered: %v", err)
	}
	if w, ok := cat.Window("gpt", "gpt-4o-mini"); w != 128000 || !ok {
		t.Errorf("Window(gpt-4o-mini) = %d, %v", w, ok)
	}
	if w, ok := cat.Window("gpt", "mystery-7b"); w != ConservativeWindow || ok {
		t.Errorf("Window(mystery-7b) = %d, %v; want the conservative guess, unknown", w, ok)
	}
	windows := map[string]int{}
	for _, l := range cat.Models() {
		windows[l.ProviderID+"/"+l.ModelID] = l.ContextWindow
	}
	if windows["local/qwen2.5"] != 32768 || windows["gpt/mystery-7b"] != 0 || windows["gpt/gpt-4o-mini"] != 128000 {
		t.Errorf("listed windows %v", windows)
	}
}

// TestKnownFamilies pins the built-in table's answers for ids as the
// providers spell them.
func TestKnownFamilies(t *testing.T) {
	for model, images := range map[string]bool{
		"gpt-4o": true, "gpt-4o-2024-08-06": true, "GPT-4o-mini": true, "chatgpt-4o-latest": true, "gpt-4o-audio-preview": false,
		"gpt-4.1-nano": true, "gpt-4-turbo": true, "gpt-4": false, "gpt-4-0613": false, "gpt-3.5-turbo-0125": false,
		"gpt-5-mini": true, "o1": true, "o1-mini": false, "o3": true, "o3-mini": false, "o4-mini": true,
		"claude-sonnet-4-5": true, "claude-opus-4-1-20250805": true, "claude-3-7-sonnet-latest": true,
		"claude-3-5-haiku-20241022": true, "claude-haiku-4-5": true,
		"llama3.2": false, "llama3.2:3b": false, "llama3.2-vision:11b": true, "llava:13b": true, "mistral": false,
	} {
		if got := defaults(TypeOpenAI, model).Images; got != images {
			t.Errorf("%s takes images: %v; want %v", model, got, images)
		}
	}
	if defaults(TypeOpenAI, "o1-mini").Tools || !defaults(TypeOpenAI, "mistral").Tools {
		t.Error("o1-mini takes no tools; an unknown model is offered them")
	}
	if !defaults(TypeAnthropic, "claude-opus-4-20250514").Reasoning || defaults(TypeAnthropic, "claude-3-5-sonnet-latest").Reasoning {
		t.Error("claude 4 reasons, claude 3.5 does not")
	}
}

// TestModelSettingsRefused: what the settings refuse, by name.
func TestModelSettingsRefused(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"override without model", "[[providers]]\ntype = \"demo\"\n[[providers.overrides]]\nimages = true\n", "names no model"},
		{"override twice", "[[providers]]\ntype = \"demo\"\n[[providers.overrides]]\nmodel = \"a\"\n[[providers.overrides]]\nmodel = \"a\"\n", "twice"},
		{"negative window", "[[providers]]\ntype = \"demo\"\ncontext_window = -1\n", "negative"},
		{"long instructions", "[[providers]]\ntype = \"demo\"\ninstructions = \"" + strings.Repeat("x", MaxInstructionsBytes+1) + "\"\n", "at most"},
		{"unknown override key", "[[providers]]\ntype = \"demo\"\n[[providers.overrides]]\nmodel = \"a\"\nvision = true\n", "unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Load(writeFile(t, tc.file), env(nil)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want mention of %q", err, tc.want)
			}
		})
	}
}

const withPrices = `
[[providers]]
id = "gpt"
type = "openai"
model = "gpt-4o-mini"
models = ["gpt-4o", "free"]
price_in = 0.15
price_out = 0.6

[[providers.overrides]]
model = "gpt-4o"
price_in = 2.5
price_out = 10
price_cached_in = 1.25

[[providers.overrides]]
model = "free"
price_in = 0
price_out = 0

[[providers]]
id = "local"
type = "scripted"
`

// TestPrices: an entry's prices apply to all its models, an override's to
// its one; the cached price defaults to the input price; zero is a price;
// an entry without prices has none.
func TestPrices(t *testing.T) {
	cat, err := Load(writeFile(t, withPrices), env(map[string]string{"OPENAI_API_KEY": "sk-x"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		provider, model string
		want            *provider.Price
	}{
		{"gpt", "gpt-4o-mini", &provider.Price{In: 0.15, Out: 0.6, CachedIn: 0.15}},
		{"gpt", "gpt-4o", &provider.Price{In: 2.5, Out: 10, CachedIn: 1.25}},
		{"gpt", "free", &provider.Price{}},
		{"local", "", nil},
	} {
		got := cat.Info(tc.provider, tc.model).Price
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("Info(%q, %q).Price = %+v; want %+v", tc.provider, tc.model, got, tc.want)
		}
	}
}

// TestPriceCost: one completion's cost, its cached prompt tokens at the
// cached price.
func TestPriceCost(t *testing.T) {
	p := provider.Price{In: 2, Out: 8, CachedIn: 0.5}
	got := p.Cost(provider.Usage{InputTokens: 1_000_000, CachedTokens: 500_000, OutputTokens: 250_000, ReasoningTokens: 100_000})
	if want := 0.5*2 + 0.5*0.5 + 0.25*8; got != want {
		t.Errorf("Cost = %v; want %v", got, want)
	}
}

// TestPricesRefused: a price that is not a finite number of 0 or more, or
// half a price, is refused naming the key.
func TestPricesRefused(t *testing.T) {
	entry := "[[providers]]\ntype = \"demo\"\n"
	override := entry + "[[providers.overrides]]\nmodel = \"a\"\n"
	for _, tc := range []struct{ name, file, want string }{
		{"price_in alone", entry + "price_in = 1\n", "price_in is set without price_out"},
		{"price_out alone", entry + "price_out = 1\n", "price_out is set without price_in"},
		{"override's price_out alone", override + "price_out = 1\n", "overrides 1 (a): price_out is set without price_in"},
		{"cached alone", entry + "price_cached_in = 1\n", "price_cached_in is set without price_in"},
		{"negative", entry + "price_in = -1\nprice_out = 1\n", "price_in -1 must be a finite number"},
		{"nan", override + "price_in = 1\nprice_out = nan\n", "price_out NaN must be a finite number"},
		{"infinite", entry + "price_in = 1\nprice_out = 1\nprice_cached_in = inf\n", "price_cached_in +Inf must be a finite number"},
		{"a string", entry + "price_in = \"1.5\"\nprice_out = 1\n", "price_in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Load(writeFile(t, tc.file), env(nil)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want mention of %q", err, tc.want)
			}
		})
	}
}
