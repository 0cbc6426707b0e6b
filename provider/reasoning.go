package provider

import "strconv"

// Reasoning kinds: which API a Reasoning block is of, and so which
// provider takes it back. A provider sends back only its own kinds.
const (
	// ReasoningThinking is an Anthropic thinking block: Text is its
	// thinking, Signature the signature the API verifies when it is sent
	// back.
	ReasoningThinking = "thinking"
	// ReasoningRedacted is an Anthropic redacted_thinking block: Data is
	// its encrypted data, sent back verbatim.
	ReasoningRedacted = "redacted_thinking"
	// ReasoningItem is an OpenAI Responses reasoning output item: ID its
	// rs_… id, Summary its summary parts, Data its encrypted_content.
	ReasoningItem = "reasoning"
	// ReasoningText is reasoning a provider only shows (an
	// OpenAI-compatible server's reasoning_content): nothing takes it
	// back.
	ReasoningText = "text"
)

// Reasoning is one block of a response's reasoning, as the provider that
// made it needs it back in the next request of a tool-calling turn: the
// visible text and the opaque parts (a signature, encrypted content) that
// vouch for it. It is stored in a session's log (JSON) until the turn
// ends.
type Reasoning struct {
	Kind string `json:"kind"`
	// Text is a thinking block's thinking, or a ReasoningText block's
	// text.
	Text string `json:"text,omitempty"`
	// Summary are a reasoning item's summary parts.
	Summary []string `json:"summary,omitempty"`
	// Signature is a thinking block's signature.
	Signature string `json:"signature,omitempty"`
	// Data is a redacted_thinking block's data, or a reasoning item's
	// encrypted_content.
	Data string `json:"data,omitempty"`
	// ID is a reasoning item's id (rs_…).
	ID string `json:"id,omitempty"`
}

// Opaque tells whether the block carries what only its provider reads
// (a signature, redacted or encrypted data): the part a request must send
// back, which the session keeps durable for the rest of the turn.
func (r Reasoning) Opaque() bool { return r.Signature != "" || r.Data != "" }

// SentBack returns the blocks a later request of the turn sends back to
// their provider: those with opaque parts (Opaque), in order; nil when
// none has any.
func SentBack(blocks []Reasoning) []Reasoning {
	var out []Reasoning
	for _, b := range blocks {
		if b.Opaque() {
			out = append(out, b)
		}
	}
	return out
}

// ReasoningOf returns the blocks of the given kinds, in order, or nil.
func ReasoningOf(blocks []Reasoning, kinds ...string) []Reasoning {
	var out []Reasoning
	for _, b := range blocks {
		for _, k := range kinds {
			if b.Kind == k {
				out = append(out, b)
				break
			}
		}
	}
	return out
}

// ReasoningDelta is a piece of a response's reasoning as it streams.
type ReasoningDelta struct {
	// Part is the 0-based part of the response's reasoning Text belongs
	// to; -1, with no Text, says reasoning began that shows none (a
	// redacted or encrypted block).
	Part int
	Text string
	// ItemID is the provider's id of the reasoning (a Responses rs_…
	// item), when it names one.
	ItemID string
}

// ReasoningParts numbers a response's reasoning as it streams: each
// distinct key (an Anthropic content block's index, a Responses item's
// summary part) is the next summary part, in the order they begin, and
// each piece of text goes to Request.OnReasoning under its part's number.
type ReasoningParts struct {
	on   func(ReasoningDelta)
	keys map[string]int
}

// NewReasoningParts numbers the parts of req's response.
func NewReasoningParts(req Request) *ReasoningParts {
	return &ReasoningParts{on: req.OnReasoning}
}

// Add reports text of the part keyed key; empty text reports nothing and
// begins no part.
func (p *ReasoningParts) Add(key, text string) { p.AddTo("", key, text) }

// AddTo is Add for reasoning the provider names itemID.
func (p *ReasoningParts) AddTo(itemID, key, text string) {
	if text == "" {
		return
	}
	n, ok := p.keys[key]
	if !ok {
		if p.keys == nil {
			p.keys = make(map[string]int)
		}
		n = len(p.keys)
		p.keys[key] = n
	}
	if p.on != nil {
		p.on(ReasoningDelta{Part: n, Text: text, ItemID: itemID})
	}
}

// Hidden reports that reasoning began that shows no text yet, or ever (a
// redacted or encrypted block), which the provider names itemID ("" for
// none): OnReasoning gets part -1.
func (p *ReasoningParts) Hidden(itemID string) {
	if p.on != nil {
		p.on(ReasoningDelta{Part: -1, ItemID: itemID})
	}
}

// PartKey is the key of a part numbered within a larger unit (a Responses
// item's summary index, say).
func PartKey(unit string, n int64) string { return unit + "/" + strconv.FormatInt(n, 10) }
