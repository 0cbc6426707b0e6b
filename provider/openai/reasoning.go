package openai

// Reasoning on both APIs: the effort a request asks for, what streams as
// reasoning, and what goes back. Chat Completions has reasoning_effort and
// nothing to send back: compatible servers (DeepSeek, vLLM, Ollama,
// llama.cpp) stream their reasoning as delta.reasoning_content, some as
// delta.reasoning, and take none of it back. The Responses API has
// reasoning.effort and summary, and reasoning output items: with store
// false the API keeps nothing, so a request that asks for reasoning also
// asks for each item's encrypted_content, and a tool step's next request
// sends its items back (id, summary, encrypted_content) before its
// function calls, so the model goes on from its own reasoning.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"mspd/modelretry"
	"mspd/provider"
	"mspd/schema/msp"
)

// reasoningEffort is a tier as both APIs take it: OpenAI's own tiers go
// verbatim, ultra, which OpenAI has not, as max, the nearest. "" is no
// effort at all.
func reasoningEffort(tier string) (shared.ReasoningEffort, error) {
	switch tier {
	case "":
		return "", nil
	case msp.EffortUltra:
		return shared.ReasoningEffortMax, nil
	}
	if !slices.Contains(msp.ReasoningEfforts, tier) {
		return "", &provider.Error{Kind: modelretry.KindInvalidRequest,
			Message: fmt.Sprintf("reasoning effort %q is not one of %q", tier, msp.ReasoningEfforts)}
	}
	return shared.ReasoningEffort(tier), nil
}

// chatReasoning is the reasoning text a Chat Completions delta carries:
// its reasoning_content, or its reasoning; "" for none (absent, null).
func chatReasoning(d chatDelta) string {
	for _, raw := range [...]json.RawMessage{d.ReasoningContent, d.Reasoning} {
		var text string
		if len(raw) > 0 && json.Unmarshal(raw, &text) == nil && text != "" {
			return text
		}
	}
	return ""
}

// chatThought gathers a Chat Completions stream's reasoning: streamed as
// one part, returned as a ReasoningText block, which nothing sends back.
type chatThought struct {
	parts *provider.ReasoningParts
	text  strings.Builder
}

func (c *chatThought) add(text string) {
	c.text.WriteString(text)
	c.parts.Add("0", text)
}

func (c *chatThought) reasoning() []provider.Reasoning {
	if c.text.Len() == 0 {
		return nil
	}
	return []provider.Reasoning{{Kind: provider.ReasoningText, Text: c.text.String()}}
}

// responsesReasoningParams asks for req's effort: none as such; any other
// tier with its summary (auto) and each item's encrypted content, which
// store false makes the only way to send the reasoning back.
func responsesReasoningParams(req provider.Request, p *responses.ResponseNewParams) error {
	effort, err := reasoningEffort(req.ReasoningEffort)
	if err != nil || effort == "" {
		return err
	}
	p.Reasoning = shared.ReasoningParam{Effort: effort}
	if effort != shared.ReasoningEffortNone {
		p.Reasoning.Summary = shared.ReasoningSummaryAuto
		p.Include = append(p.Include, responses.ResponseIncludableReasoningEncryptedContent)
	}
	return nil
}

// responsesReasoningItems are the reasoning items an assistant message
// sends back, ahead of its own items: those with encrypted content (with
// store false an id alone names nothing).
func responsesReasoningItems(msg provider.Message) []responses.ResponseInputItemUnionParam {
	var out []responses.ResponseInputItemUnionParam
	for _, r := range provider.ReasoningOf(msg.Reasoning, provider.ReasoningItem) {
		if r.Data == "" {
			continue
		}
		summary := make([]responses.ResponseReasoningItemSummaryParam, len(r.Summary))
		for i, s := range r.Summary {
			summary[i] = responses.ResponseReasoningItemSummaryParam{Text: s}
		}
		item := responses.ResponseInputItemParamOfReasoning(r.ID, summary)
		item.OfReasoning.EncryptedContent = param.NewOpt(r.Data)
		out = append(out, item)
	}
	return out
}

// responsesThought gathers a Responses stream's reasoning items: their
// summary parts (and raw reasoning text, from models that show it) stream
// as reasoning parts; each item done is kept whole, and the completed
// response's output has the final word.
type responsesThought struct {
	parts *provider.ReasoningParts
	items []thoughtItem
}

// thoughtItem is one reasoning output item, at its output index.
type thoughtItem struct {
	index int64
	r     provider.Reasoning
}

// added notes a reasoning item beginning: it may stream its summary, or
// show nothing at all.
func (th *responsesThought) added(ev responses.ResponseStreamEventUnion) {
	th.parts.Hidden(ev.Item.ID)
}

// summaryDelta streams part of a summary part.
func (th *responsesThought) summaryDelta(ev responses.ResponseStreamEventUnion) {
	th.parts.AddTo(ev.ItemID, provider.PartKey(ev.ItemID, ev.SummaryIndex), ev.Delta)
}

// textDelta streams raw reasoning text (response.reasoning_text.delta).
func (th *responsesThought) textDelta(ev responses.ResponseStreamEventUnion) {
	th.parts.AddTo(ev.ItemID, provider.PartKey(ev.ItemID+"/text", ev.ContentIndex), ev.Delta)
}

// done keeps a reasoning item whole, as response.output_item.done states it.
func (th *responsesThought) done(index int64, it responses.ResponseOutputItemUnion) {
	r := thoughtOf(it)
	for i := range th.items {
		if th.items[i].index == index {
			th.items[i].r = r
			return
		}
	}
	th.items = append(th.items, thoughtItem{index, r})
}

// reasoning is the response's reasoning items: those its output lists,
// else those streamed, in output order; nil for none.
func (th *responsesThought) reasoning(output []responses.ResponseOutputItemUnion) []provider.Reasoning {
	var out []provider.Reasoning
	for _, it := range output {
		if it.Type == "reasoning" {
			out = append(out, thoughtOf(it))
		}
	}
	if out != nil {
		return out
	}
	items := slices.Clone(th.items)
	slices.SortStableFunc(items, func(a, b thoughtItem) int { return cmp.Compare(a.index, b.index) })
	for _, it := range items {
		out = append(out, it.r)
	}
	return out
}

// thoughtOf is a reasoning output item as a Reasoning block.
func thoughtOf(it responses.ResponseOutputItemUnion) provider.Reasoning {
	r := provider.Reasoning{Kind: provider.ReasoningItem, ID: it.ID, Data: it.EncryptedContent}
	for _, s := range it.Summary {
		r.Summary = append(r.Summary, s.Text)
	}
	return r
}
