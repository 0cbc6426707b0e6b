package catalog

// What each configured model takes (images, tools, reasoning), its context
// window and the operator's instructions for it: built-in defaults for
// well-known model families, which an entry's keys override for all its
// models and an [[providers.overrides]] table for one.

import (
	"errors"
	"fmt"
	"math"
	"path"
	"strings"

	"mspd/provider"
	"mspd/schema/msp"
)

// ConservativeWindow is the context window, in tokens, to assume of a
// model whose window the catalog does not know (Window's known is false):
// small enough for any chat model mspd may be pointed at.
const ConservativeWindow = 8192

// MaxInstructionsBytes bounds an entry's (or override's) instructions as
// a session's are: they are sent with every request.
const MaxInstructionsBytes = msp.MaxInstructionsBytes

// ModelSettings are what an entry's keys, or an override's, say of a
// model; keys left out keep the defaults (see docs/providers.md).
type ModelSettings struct {
	// Images says whether the model reads images (default: true for
	// well-known vision models — gpt-4o, gpt-4.1, gpt-5, o1, o3, o4-mini,
	// claude-3 and later — and for demo and scripted entries; false for
	// any other model). A turn with images is refused before any request
	// to a model without; earlier images of its history reach it as
	// "[image omitted: …]".
	Images *bool `toml:"images"`
	// Tools says whether the model takes tools (default: false for the
	// few well-known models without function calling, true otherwise); a
	// model without is offered none.
	Tools *bool `toml:"tools"`
	// Reasoning says whether the model reasons before answering (default:
	// true for o-series, gpt-5, claude-3-7 and claude 4 models, false
	// otherwise).
	Reasoning *bool `toml:"reasoning"`
	// ContextWindow is the model's context window in tokens (default:
	// known for well-known models, unknown otherwise; model/list reports
	// it as contextLimit).
	ContextWindow int `toml:"context_window"`
	// Instructions is the system prompt sent with every request to the
	// model, before the session's own instructions (at most 32 KiB); an
	// override's replaces its entry's.
	Instructions string `toml:"instructions"`
	// PriceIn is the model's price in USD per million prompt tokens
	// (default: none, and mspd reports no cost for the model). Set with
	// price_out; an override's prices replace its entry's. model/list
	// reports them as cost, and each completion is priced with them
	// (session/tokenUsage's costUsd and cumulative.cost; see
	// docs/providers.md#prices).
	PriceIn *float64 `toml:"price_in"`
	// PriceOut is the model's price in USD per million output tokens,
	// reasoning tokens included; set with price_in.
	PriceOut *float64 `toml:"price_out"`
	// PriceCachedIn is the price in USD per million prompt tokens the
	// provider read from its cache (default: price_in); it needs
	// price_in and price_out in the same table.
	PriceCachedIn *float64 `toml:"price_cached_in"`
}

// Override is one [[providers.overrides]] table of an entry: settings
// for one of its models, over the entry's own.
type Override struct {
	// Model is the model id the settings are for; it is offered with the
	// entry's other models.
	Model         string `toml:"model"`
	ModelSettings `toml:""`
}

// models is what a provider knows of its models.
type models struct {
	typ       string
	entry     ModelSettings
	overrides map[string]ModelSettings
}

// newModels checks an entry's settings and indexes its overrides.
func newModels(e Entry) (models, error) {
	ms := models{typ: e.Type, entry: e.ModelSettings, overrides: make(map[string]ModelSettings, len(e.Overrides))}
	if err := e.ModelSettings.check(); err != nil {
		return ms, err
	}
	for i, o := range e.Overrides {
		if o.Model == "" {
			return ms, fmt.Errorf("overrides %d names no model", i+1)
		}
		if _, dup := ms.overrides[o.Model]; dup {
			return ms, fmt.Errorf("overrides name model %q twice", o.Model)
		}
		if err := o.check(); err != nil {
			return ms, fmt.Errorf("overrides %d (%s): %w", i+1, o.Model, err)
		}
		ms.overrides[o.Model] = o.ModelSettings
	}
	return ms, nil
}

func (s ModelSettings) check() error {
	if s.ContextWindow < 0 {
		return fmt.Errorf("context_window %d is negative", s.ContextWindow)
	}
	if len(s.Instructions) > MaxInstructionsBytes {
		return fmt.Errorf("instructions are %d bytes; at most %d", len(s.Instructions), MaxInstructionsBytes)
	}
	return s.checkPrices()
}

// checkPrices refuses a price that is negative or not a finite number,
// and a price without the others it needs: a cost computed from half a
// price would be wrong without saying so.
func (s ModelSettings) checkPrices() error {
	for _, p := range []struct {
		key string
		v   *float64
	}{{"price_in", s.PriceIn}, {"price_out", s.PriceOut}, {"price_cached_in", s.PriceCachedIn}} {
		if p.v != nil && (*p.v < 0 || math.IsNaN(*p.v) || math.IsInf(*p.v, 0)) {
			return fmt.Errorf("%s %v must be a finite number, 0 or more (USD per million tokens)", p.key, *p.v)
		}
	}
	switch {
	case s.PriceIn != nil && s.PriceOut == nil:
		return errors.New("price_in is set without price_out: set both (USD per million tokens) or neither")
	case s.PriceOut != nil && s.PriceIn == nil:
		return errors.New("price_out is set without price_in: set both (USD per million tokens) or neither")
	case s.PriceCachedIn != nil && s.PriceIn == nil:
		return errors.New("price_cached_in is set without price_in and price_out: set them in the same table")
	}
	return nil
}

// price is the settings' price, nil when they name none.
func (s ModelSettings) price() *provider.Price {
	if s.PriceIn == nil {
		return nil
	}
	p := &provider.Price{In: *s.PriceIn, Out: *s.PriceOut, CachedIn: *s.PriceIn}
	if s.PriceCachedIn != nil {
		p.CachedIn = *s.PriceCachedIn
	}
	return p
}

// info is what the provider knows of model: the override's settings over
// the entry's over the defaults.
func (ms models) info(model string) provider.ModelInfo {
	info := provider.ModelInfo{Capabilities: defaults(ms.typ, model)}
	for _, s := range []ModelSettings{ms.entry, ms.overrides[model]} {
		if s.Images != nil {
			info.Images = *s.Images
		}
		if s.Tools != nil {
			info.Tools = *s.Tools
		}
		if s.Reasoning != nil {
			info.Reasoning = *s.Reasoning
		}
		if s.ContextWindow > 0 {
			info.ContextWindow = s.ContextWindow
		}
		if s.Instructions != "" {
			info.Instructions = s.Instructions
		}
		if p := s.price(); p != nil {
			info.Price = p
		}
	}
	return info
}

// Unknown is what the catalog assumes of a model it knows nothing of: no
// images (sending one to a text model fails the request), tools (what
// every model got before the catalog knew more; set tools = false for a
// model that refuses them), no reasoning, an unknown window.
var Unknown = provider.Capabilities{Tools: true}

// defaults are the built-in capabilities of model on an entry of type
// typ: everything for the local demo and scripted models, the known
// family's for openai and anthropic entries (whatever their endpoint:
// a gateway serving gpt-4o serves gpt-4o), else Unknown.
func defaults(typ, model string) provider.Capabilities {
	if typ == TypeDemo || typ == TypeScripted {
		return provider.Capabilities{Images: true, Tools: true}
	}
	id := strings.ToLower(model)
	// A gateway's vendor prefix (openrouter's "openai/gpt-4o").
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		id = id[i+1:]
	}
	for _, k := range known {
		if ok, _ := path.Match(k.pattern, id); ok {
			return k.caps
		}
	}
	return Unknown
}

// Capability sets of the known families.
var (
	vision          = provider.Capabilities{Images: true, Tools: true}
	text            = provider.Capabilities{Tools: true}
	visionReasoning = provider.Capabilities{Images: true, Tools: true, Reasoning: true}
)

// with is c with a context window.
func with(c provider.Capabilities, window int) provider.Capabilities {
	c.ContextWindow = window
	return c
}

// known are the well-known model families, the first whose pattern
// (path.Match, on the lower-cased id without a vendor prefix) matches
// wins: the more specific come first. Figures are the providers'
// published ones; a dated or tagged id ("gpt-4o-2024-08-06",
// "llama3.2:3b") matches its family.
var known = []struct {
	pattern string
	caps    provider.Capabilities
}{
	{"gpt-4o-audio*", with(text, 128000)},
	{"gpt-4o*", with(vision, 128000)},
	{"chatgpt-4o*", with(vision, 128000)},
	{"gpt-4.1*", with(vision, 1047576)},
	{"gpt-4.5*", with(vision, 128000)},
	{"gpt-4-turbo*", with(vision, 128000)},
	{"gpt-4-32k*", with(text, 32768)},
	{"gpt-4*", with(text, 8192)},
	{"gpt-3.5*", with(text, 16385)},
	{"gpt-5*", with(visionReasoning, 400000)},
	{"o1-mini*", provider.Capabilities{Reasoning: true, ContextWindow: 128000}},
	{"o1-preview*", provider.Capabilities{Reasoning: true, ContextWindow: 128000}},
	{"o1*", with(visionReasoning, 200000)},
	{"o3-mini*", provider.Capabilities{Tools: true, Reasoning: true, ContextWindow: 200000}},
	{"o3*", with(visionReasoning, 200000)},
	{"o4-mini*", with(visionReasoning, 200000)},
	{"claude-3-7*", with(visionReasoning, 200000)},
	{"claude-*-4*", with(visionReasoning, 200000)},
	{"claude-3*", with(vision, 200000)},
	{"llama3.2-vision*", provider.Capabilities{Images: true, ContextWindow: 131072}},
	{"llama3.1*", with(text, 131072)},
	{"llama3.2*", with(text, 131072)},
	{"llama3.3*", with(text, 131072)},
	{"llava*", provider.Capabilities{Images: true, ContextWindow: 4096}},
}

// Info is what the catalog knows of a model of a provider ("" for the
// default provider, or for the provider's default model); a provider not
// configured gets Unknown.
func (c *Catalog) Info(providerID, model string) provider.ModelInfo {
	p := c.def
	if providerID != "" {
		p = c.Get(providerID)
	}
	if p == nil {
		return provider.ModelInfo{Capabilities: Unknown}
	}
	return p.Info(model)
}

// Info is what the provider knows of one of its models ("" for its
// default model).
func (p *Provider) Info(model string) provider.ModelInfo {
	if model == "" {
		model = p.DefaultModel
	}
	return p.models.info(model)
}

// Window is a model's context window in tokens, for a compactor: known
// is false when the catalog does not know it, and tokens is then
// ConservativeWindow.
func (c *Catalog) Window(providerID, model string) (tokens int, known bool) {
	if w := c.Info(providerID, model).ContextWindow; w > 0 {
		return w, true
	}
	return ConservativeWindow, false
}
