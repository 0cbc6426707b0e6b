package anthropic

// Extended thinking: a reasoning effort becomes a thinking budget, the
// response's thinking blocks stream as reasoning and come back with their
// signatures, and a tool step's next request sends them back unchanged
// before its tool_use blocks, as the API requires while a tool loop goes
// on.

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"mspd/modelretry"
	"mspd/provider"
	"mspd/schema/msp"
)

// Thinking modes for Config.Thinking: how a reasoning effort is asked for.
const (
	// ThinkingBudget is extended thinking, {type: enabled, budget_tokens}:
	// each tier its budget (ThinkingBudgets). The default.
	ThinkingBudget = "budget"
	// ThinkingAdaptive is adaptive thinking, {type: adaptive}, with the
	// tier as output_config.effort (AdaptiveEfforts), for the models that
	// no longer take budget_tokens.
	ThinkingAdaptive = "adaptive"
)

// AdaptiveEfforts maps each reasoning effort but none to
// output_config.effort, the API's nearest.
var AdaptiveEfforts = map[string]anthropic.OutputConfigEffort{
	msp.EffortMinimal: anthropic.OutputConfigEffortLow,
	msp.EffortLow:     anthropic.OutputConfigEffortLow,
	msp.EffortMedium:  anthropic.OutputConfigEffortMedium,
	msp.EffortHigh:    anthropic.OutputConfigEffortHigh,
	msp.EffortXHigh:   anthropic.OutputConfigEffortXhigh,
	msp.EffortMax:     anthropic.OutputConfigEffortMax,
	msp.EffortUltra:   anthropic.OutputConfigEffortMax,
}

// MinThinkingBudget is the smallest budget_tokens the API takes.
const MinThinkingBudget = 1024

// DefaultOutputCeiling is the largest max_tokens a thinking request asks
// for when Config.MaxOutputTokens names none: the output limit of the
// Claude models that think (Opus 4 and 4.1 have 32000: configure it).
const DefaultOutputCeiling = 64000

// ThinkingBudgets maps each reasoning effort to budget_tokens; none
// disables thinking. The answer keeps the request's own max tokens on
// top of the budget (see thinkingParams).
var ThinkingBudgets = map[string]int{
	msp.EffortMinimal: MinThinkingBudget,
	msp.EffortLow:     2048,
	msp.EffortMedium:  8192,
	msp.EffortHigh:    16384,
	msp.EffortXHigh:   24576,
	msp.EffortMax:     32000,
	msp.EffortUltra:   63000,
}

// thinkingParams sets req's reasoning effort on params: none disables
// thinking, any other tier enables it with the tier's budget, and
// max_tokens grows by the budget so that the answer keeps its own room,
// within the output ceiling (Config.MaxOutputTokens, else
// DefaultOutputCeiling). Where the ceiling leaves less, the budget
// shrinks to fit, to MinThinkingBudget at least; a ceiling that cannot
// hold that and an answer refuses the request. In ThinkingAdaptive mode
// the model sets its own budget: it gets the same room, and the tier goes
// as output_config.effort. It reports whether thinking is on.
func (m *Model) thinkingParams(req provider.Request, params *anthropic.MessageNewParams) (bool, error) {
	switch req.ReasoningEffort {
	case "":
		return false, nil
	case msp.EffortNone:
		params.Thinking = anthropic.ThinkingConfigParamUnion{OfDisabled: &anthropic.ThinkingConfigDisabledParam{}}
		return false, nil
	}
	budget, ok := ThinkingBudgets[req.ReasoningEffort]
	if !ok {
		return false, &provider.Error{Kind: modelretry.KindInvalidRequest,
			Message: fmt.Sprintf("reasoning effort %q is not one of %q", req.ReasoningEffort, msp.ReasoningEfforts)}
	}
	ceiling := cmp.Or(m.cfg.MaxOutputTokens, DefaultOutputCeiling)
	answer := params.MaxTokens
	if ceiling <= MinThinkingBudget {
		return false, &provider.Error{Kind: modelretry.KindInvalidRequest,
			Message: fmt.Sprintf("reasoning effort %s needs more than %d output tokens; this model's limit is %d", req.ReasoningEffort, MinThinkingBudget, ceiling)}
	}
	budget = max(min(budget, ceiling-int(answer)), MinThinkingBudget)
	params.MaxTokens = int64(min(budget+int(answer), ceiling))
	if m.cfg.Thinking == ThinkingAdaptive {
		params.Thinking = anthropic.ThinkingConfigParamUnion{OfAdaptive: &anthropic.ThinkingConfigAdaptiveParam{}}
		params.OutputConfig.Effort = AdaptiveEfforts[req.ReasoningEffort]
		return true, nil
	}
	params.Thinking = anthropic.ThinkingConfigParamOfEnabled(int64(budget))
	return true, nil
}

// thinkingBlocks are an assistant message's thinking and redacted_thinking
// blocks, as they came, for the front of its content.
func thinkingBlocks(msg provider.Message) []anthropic.ContentBlockParamUnion {
	var out []anthropic.ContentBlockParamUnion
	for _, r := range provider.ReasoningOf(msg.Reasoning, provider.ReasoningThinking, provider.ReasoningRedacted) {
		if r.Kind == provider.ReasoningRedacted {
			out = append(out, anthropic.NewRedactedThinkingBlock(r.Data))
			continue
		}
		out = append(out, anthropic.NewThinkingBlock(r.Signature, r.Text))
	}
	return out
}

// thinking reads a response's thinking and redacted_thinking blocks.
type thinking struct {
	parts  *provider.ReasoningParts
	blocks []*thoughtBlock
}

// thoughtBlock is one thinking or redacted_thinking block being read.
type thoughtBlock struct {
	index     int64
	kind      string
	data      string
	text, sig strings.Builder
}

// start begins a block at content block index i: a thinking block
// streams its text as a reasoning part, a redacted one shows none.
func (th *thinking) start(i int64, cb anthropic.ContentBlockStartEventContentBlockUnion) {
	b := &thoughtBlock{index: i, kind: cb.Type, data: cb.Data}
	b.sig.WriteString(cb.Signature)
	th.blocks = append(th.blocks, b)
	if cb.Type == provider.ReasoningRedacted {
		th.parts.Hidden("")
		return
	}
	th.text(i, cb.Thinking)
}

// text adds a thinking_delta's text to block i.
func (th *thinking) text(i int64, text string) {
	if b := th.block(i); b != nil && text != "" {
		b.text.WriteString(text)
		th.parts.Add(strconv.FormatInt(i, 10), text)
	}
}

// sign adds a signature_delta to block i.
func (th *thinking) sign(i int64, sig string) {
	if b := th.block(i); b != nil {
		b.sig.WriteString(sig)
	}
}

func (th *thinking) block(i int64) *thoughtBlock {
	for _, b := range th.blocks {
		if b.index == i {
			return b
		}
	}
	return nil
}

// reasoning is the response's blocks in content order; nil for none.
func (th *thinking) reasoning() []provider.Reasoning {
	if len(th.blocks) == 0 {
		return nil
	}
	blocks := slices.Clone(th.blocks)
	slices.SortStableFunc(blocks, func(a, b *thoughtBlock) int { return cmp.Compare(a.index, b.index) })
	out := make([]provider.Reasoning, len(blocks))
	for i, b := range blocks {
		out[i] = provider.Reasoning{Kind: b.kind, Text: b.text.String(), Signature: b.sig.String(), Data: b.data}
	}
	return out
}
