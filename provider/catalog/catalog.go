// Package catalog builds the model providers mspd is configured with —
// from the --provider/--model flags and the providers' environment
// variables, or from a TOML file naming several — and answers which
// provider and model a session may use and what model/list returns.
//
// API keys are read from the environment only, never from the file, and
// never appear in errors or listings.
package catalog

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"mspd/provider"
	"mspd/provider/anthropic"
	"mspd/provider/demo"
	"mspd/provider/openai"
	"mspd/provider/scripted"
	"mspd/tool"
)

// Provider types.
const (
	TypeDemo      = "demo"
	TypeScripted  = "scripted"
	TypeOpenAI    = "openai"
	TypeAnthropic = "anthropic"
)

// Default models when a configuration names none.
const (
	DefaultOpenAIModel    = "gpt-4o-mini"
	DefaultAnthropicModel = "claude-sonnet-4-5"
)

// Entry configures one provider: a [[providers]] table of the file.
type Entry struct {
	// ID is the providerId clients pick in session/start (default: Type).
	ID string `toml:"id"`
	// Type is openai (also any OpenAI-compatible server), anthropic, demo
	// or scripted.
	Type string `toml:"type"`
	// Model is the default model; Models lists every model offered
	// (default: just Model).
	Model  string   `toml:"model"`
	Models []string `toml:"models"`
	// BaseURL points an openai entry at a compatible server, or an
	// anthropic entry at a proxy (default: the provider's own, or
	// OPENAI_BASE_URL / ANTHROPIC_BASE_URL).
	BaseURL string `toml:"base_url"`
	// APIKeyEnv names the environment variable holding the key. Without
	// it an entry that names no base_url uses OPENAI_API_KEY /
	// ANTHROPIC_API_KEY; one that does gets no OpenAI key (a local server
	// needs none) and must name its Anthropic key, so that a provider's
	// key never goes to another endpoint by default.
	APIKeyEnv string `toml:"api_key_env"`
	// System is the OpenTelemetry gen_ai.provider.name reported in retry
	// notices (default: openai, anthropic, demo, scripted).
	System string `toml:"system"`
	// IdleTimeout fails an attempt whose stream is silent this long.
	IdleTimeout duration `toml:"idle_timeout"`
	// MaxIdleConns is how many idle connections to an openai or anthropic
	// entry's API are kept for reuse (default 2048; negative: none): size it
	// for the turns the provider runs at once, or most requests open a
	// new connection (and TLS session).
	MaxIdleConns int `toml:"max_idle_conns"`
	// MaxConns bounds the connections open to the entry's API at once,
	// busy or idle; a request beyond it waits for one (default 0: no
	// bound).
	MaxConns int `toml:"max_conns"`
	// MaxOutputTokens caps truncation growth (the model's output limit).
	MaxOutputTokens int `toml:"max_output_tokens"`
	// MaxTokensField is "max_tokens" for older OpenAI-compatible servers.
	MaxTokensField string `toml:"max_tokens_field"`
	// API is "chat" (Chat Completions, the default) or "responses" for an
	// openai entry.
	API string `toml:"api"`
	// Organization and Project are sent as OpenAI-Organization and
	// OpenAI-Project.
	Organization string `toml:"organization"`
	Project      string `toml:"project"`
	// StructuredMode is "tool" (default) or "prompt" for anthropic.
	StructuredMode string `toml:"structured_mode"`
	// Thinking is how an anthropic entry asks for a reasoning effort:
	// "budget" (default: extended thinking's budget_tokens) or "adaptive"
	// (for the models that no longer take budget_tokens).
	Thinking string `toml:"thinking"`
	// WordDelay, Faults and Seed set a demo entry: its pace per word, the
	// share of its requests that fail first (0..1), and its seed.
	WordDelay duration `toml:"word_delay"`
	Faults    float64  `toml:"faults"`
	Seed      int64    `toml:"seed"`
	// ModelSettings (images, tools, reasoning, context_window,
	// instructions) apply to every model of the entry.
	ModelSettings `toml:""`
	// Overrides are [[providers.overrides]] tables, each the settings of
	// one model of the entry.
	Overrides []Override `toml:"overrides"`
	// Fallback names, in order, the providers that answer a turn this
	// one cannot (its attempts spent on its service's failures, its quota
	// or key refused; docs/providers.md says which failures move): each
	// "id" (its default model) or "id:model" (one of its models). Not this
	// provider, not one twice; an entry's own fallback is not followed.
	Fallback []string `toml:"fallback"`
}

// File is the configuration file.
type File struct {
	// Default is the id of the provider a session gets when it names none
	// (default: the first).
	Default   string  `toml:"default"`
	Providers []Entry `toml:"providers"`
	// MCP are the operator's MCP servers, whose tools every session's
	// turns may call (see package tool for the keys).
	MCP []tool.ServerConfig `toml:"mcp"`
}

// duration reads "60s"-style TOML strings.
type duration struct{ time.Duration }

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	d.Duration = v
	return err
}

// Provider is one configured provider.
type Provider struct {
	ID    string
	Type  string
	Model provider.Model
	// DefaultModel is what a session gets when it names no model.
	DefaultModel string
	// Models are the model ids sessions may pick.
	Models []string
	// MaxOutputTokens caps truncation growth; 0 for the runner default.
	MaxOutputTokens int
	// models knows what each model takes (Info).
	models models
	// Fallback is the provider's fallback chain, in order (see
	// Entry.Fallback).
	Fallback []Ref
}

// Ref names a configured model: a fallback chain's entry.
type Ref struct {
	ProviderID string
	Model      string
}

// Catalog is the set of configured providers.
type Catalog struct {
	providers []*Provider
	def       *Provider
	mcp       []tool.ServerConfig
}

// MCP are the configured MCP servers, validated.
func (c *Catalog) MCP() []tool.ServerConfig { return c.mcp }

// Env looks up an environment variable (os.Getenv in production).
type Env func(string) string

// Load reads a TOML configuration file.
func Load(path string, env Env) (*Catalog, error) {
	var f File
	md, err := toml.DecodeFile(path, &f)
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		return nil, fmt.Errorf("catalog: %s: unknown key %s", path, undecoded[0])
	}
	return Build(f, env)
}

// Single builds a catalog of the one provider the command-line flags
// describe; its key and base URL come from the provider's environment
// variables.
func Single(e Entry, env Env) (*Catalog, error) {
	return Build(File{Providers: []Entry{e}}, env)
}

// Duration makes a duration for an Entry field.
func Duration(d time.Duration) duration { return duration{d} }

// Build makes the providers of f.
func Build(f File, env Env) (*Catalog, error) {
	if env == nil {
		env = os.Getenv
	}
	if len(f.Providers) == 0 {
		return nil, errors.New("catalog: no providers configured")
	}
	c := &Catalog{}
	var err error
	for i, e := range f.Providers {
		p, err := build(e, env)
		if err != nil {
			return nil, fmt.Errorf("catalog: provider %d (%s): %w", i+1, e.ID, err)
		}
		if c.Get(p.ID) != nil {
			return nil, fmt.Errorf("catalog: provider id %q configured twice", p.ID)
		}
		c.providers = append(c.providers, p)
	}
	for i, e := range f.Providers {
		p := c.providers[i]
		if p.Fallback, err = c.chain(p, e.Fallback); err != nil {
			return nil, fmt.Errorf("catalog: provider %q: fallback: %w", p.ID, err)
		}
	}
	if err := tool.ValidateServers(f.MCP); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	c.mcp = f.MCP
	c.def = c.providers[0]
	if f.Default != "" {
		if c.def = c.Get(f.Default); c.def == nil {
			return nil, fmt.Errorf("catalog: default provider %q is not configured", f.Default)
		}
	}
	return c, nil
}

// chain resolves p's fallback entries: each names another configured
// provider, and a model of it, once. A chain is not followed through its
// entries' own chains, so two providers naming each other loop nowhere;
// what would loop within one chain — the provider itself, a provider
// twice — is refused.
func (c *Catalog) chain(p *Provider, names []string) ([]Ref, error) {
	var out []Ref
	for _, name := range names {
		q, model := c.Get(name), ""
		if q == nil {
			id, m, ok := strings.Cut(name, ":")
			if q = c.Get(id); q == nil || !ok || m == "" {
				return nil, fmt.Errorf("%q names no configured provider (want \"id\" or \"id:model\")", name)
			}
			if !slices.Contains(q.Models, m) {
				return nil, fmt.Errorf("%q: model %q is not configured for provider %q (its models: %s)", name, m, q.ID, strings.Join(q.Models, ", "))
			}
			model = m
		}
		if model == "" {
			model = q.DefaultModel
		}
		switch {
		case q == p:
			return nil, fmt.Errorf("%q is the provider itself: a fallback must be another provider, since the breaker and the retry budget are a provider's", name)
		case slices.ContainsFunc(out, func(r Ref) bool { return r.ProviderID == q.ID }):
			return nil, fmt.Errorf("%q: provider %q is in the chain twice (each is tried once)", name, q.ID)
		}
		out = append(out, Ref{ProviderID: q.ID, Model: model})
	}
	return out, nil
}

func build(e Entry, env Env) (*Provider, error) {
	if e.Type == "" {
		e.Type = TypeDemo
	}
	if e.ID == "" {
		e.ID = e.Type
	}
	p := &Provider{ID: e.ID, Type: e.Type, MaxOutputTokens: e.MaxOutputTokens}
	if e.MaxConns < 0 {
		return nil, fmt.Errorf("max_conns %d: want 0 (no bound) or more", e.MaxConns)
	}
	keyEnv := e.APIKeyEnv
	switch e.Type {
	case TypeDemo:
		p.DefaultModel = or(e.Model, demo.DefaultModel)
		p.Model = demo.New(demo.Config{WordDelay: e.WordDelay.Duration, FaultRate: e.Faults, Seed: e.Seed})
	case TypeScripted:
		p.DefaultModel = or(e.Model, "script")
		p.Model = scripted.New()
	case TypeOpenAI:
		p.DefaultModel = or(e.Model, DefaultOpenAIModel)
		if keyEnv == "" && e.BaseURL == "" {
			keyEnv = "OPENAI_API_KEY"
		}
		key := ""
		if keyEnv != "" {
			key = env(keyEnv)
		}
		m, err := openai.New(openai.Config{
			Endpoint: provider.Endpoint{
				APIKey:      key,
				BaseURL:     or(e.BaseURL, env("OPENAI_BASE_URL")),
				Model:       p.DefaultModel,
				System:      e.System,
				IdleTimeout: e.IdleTimeout.Duration,
				Pool:        provider.Pool{MaxIdleConns: e.MaxIdleConns, MaxConns: e.MaxConns},
			},
			MaxTokensField: e.MaxTokensField,
			API:            e.API,
			Organization:   e.Organization,
			Project:        e.Project,
		})
		if err != nil {
			return nil, err
		}
		p.Model = m
	case TypeAnthropic:
		p.DefaultModel = or(e.Model, DefaultAnthropicModel)
		if keyEnv == "" {
			if e.BaseURL != "" {
				return nil, errors.New("an entry with its own base_url must name its key with api_key_env")
			}
			keyEnv = "ANTHROPIC_API_KEY"
		}
		key := env(keyEnv)
		if key == "" {
			return nil, fmt.Errorf("no API key: set %s", keyEnv)
		}
		m, err := anthropic.New(anthropic.Config{
			Endpoint: provider.Endpoint{
				APIKey:      key,
				BaseURL:     or(e.BaseURL, env("ANTHROPIC_BASE_URL")),
				Model:       p.DefaultModel,
				System:      e.System,
				IdleTimeout: e.IdleTimeout.Duration,
				Pool:        provider.Pool{MaxIdleConns: e.MaxIdleConns, MaxConns: e.MaxConns},
			},
			StructuredMode:  e.StructuredMode,
			MaxOutputTokens: e.MaxOutputTokens,
			Thinking:        e.Thinking,
		})
		if err != nil {
			return nil, err
		}
		p.Model = m
	default:
		return nil, fmt.Errorf("unknown type %q (want openai, anthropic, demo or scripted)", e.Type)
	}
	p.Models = e.Models
	if !slices.Contains(p.Models, p.DefaultModel) {
		p.Models = append([]string{p.DefaultModel}, p.Models...)
	}
	var err error
	if p.models, err = newModels(e); err != nil {
		return nil, err
	}
	for _, o := range e.Overrides {
		if !slices.Contains(p.Models, o.Model) {
			p.Models = append(p.Models, o.Model)
		}
	}
	return p, nil
}

func or(v, fallback string) string {
	if v != "" {
		return v
	}
	return fallback
}

// Get returns the provider with an id, or nil.
func (c *Catalog) Get(id string) *Provider {
	for _, p := range c.providers {
		if p.ID == id {
			return p
		}
	}
	return nil
}

// Default returns the provider sessions get when they name none.
func (c *Catalog) Default() *Provider { return c.def }

// Providers returns every configured provider, in configuration order.
func (c *Catalog) Providers() []*Provider { return slices.Clone(c.providers) }

// RefusedError is a provider or model a session may not use; Field names
// the session/start member ("providerId", "modelId").
type RefusedError struct {
	Field   string
	Message string
}

func (e *RefusedError) Error() string { return e.Message }

// Resolve checks a session's providerId and modelId (empty for the
// defaults) and returns what it will use, or a *RefusedError.
func (c *Catalog) Resolve(providerID, modelID string) (string, string, error) {
	p := c.def
	if providerID != "" {
		if p = c.Get(providerID); p == nil {
			return "", "", &RefusedError{"providerId", fmt.Sprintf("provider %q is not configured (model/list names the configured ones)", providerID)}
		}
	}
	if modelID == "" {
		return p.ID, p.DefaultModel, nil
	}
	if !slices.Contains(p.Models, modelID) {
		return "", "", &RefusedError{"modelId", fmt.Sprintf("model %q is not configured for provider %q", modelID, p.ID)}
	}
	return p.ID, modelID, nil
}

// Listing is one configured model.
type Listing struct {
	ProviderID, ModelID string
	// IsDefault marks the model a session gets when it names none.
	IsDefault bool
	// OutputLimit is the provider's configured output cap (0: unknown).
	OutputLimit int
	// ContextWindow is the model's context window in tokens (0: unknown).
	ContextWindow int
	// Capabilities are what the model takes (images, tools, reasoning).
	Capabilities provider.Capabilities
}

// Models lists every configured model of every provider, in
// configuration order.
func (c *Catalog) Models() []Listing {
	var out []Listing
	for _, p := range c.providers {
		for _, m := range p.Models {
			out = append(out, Listing{ProviderID: p.ID, ModelID: m,
				IsDefault: p == c.def && m == p.DefaultModel, OutputLimit: p.MaxOutputTokens,
				ContextWindow: p.Info(m).ContextWindow, Capabilities: p.Info(m).Capabilities})
		}
	}
	return out
}
