package anthropic

import (
	"github.com/anthropics/anthropic-sdk-go/v2"

	"mspd/provider"
)

// streamState folds the events of one stream.
type streamState struct {
	plan   plan
	onText func(string)

	model      string
	stopReason anthropic.StopReason
	stopped    bool // message_stop seen

	// Usage as reported: message_start gives the prompt counts, the last
	// message_delta the cumulative output (and, in newer API versions, the
	// final prompt counts, which then win).
	hasStart, hasOutput                  bool
	input, cacheRead, cacheCreate, think int64
	output                               int64

	// toolBlock is the index of the forced tool's content block, -1 when
	// none is open; toolText says its input has streamed any text.
	toolBlock int64
	toolText  bool
}

func newStreamState(p plan, onText func(string)) *streamState {
	return &streamState{plan: p, onText: onText, toolBlock: -1}
}

// handle applies one event. Unknown event and delta types are ignored, as
// the API asks.
func (s *streamState) handle(ev anthropic.MessageStreamEventUnion) {
	switch ev.Type {
	case "message_start":
		msg := ev.Message
		s.model = msg.Model
		if msg.JSON.Usage.Valid() {
			s.hasStart = true
			s.input = msg.Usage.InputTokens
			s.cacheRead = msg.Usage.CacheReadInputTokens
			s.cacheCreate = msg.Usage.CacheCreationInputTokens
		}
	case "content_block_start":
		cb := ev.ContentBlock
		switch {
		case s.plan.tool && cb.Type == "tool_use" && cb.Name == ToolName:
			s.toolBlock, s.toolText = ev.Index, false
		case !s.plan.tool && cb.Type == "text":
			s.emit(cb.Text)
		}
	case "content_block_delta":
		d := ev.Delta
		switch {
		case d.Type == "text_delta" && !s.plan.tool:
			s.emit(d.Text)
		case d.Type == "input_json_delta" && s.plan.tool && ev.Index == s.toolBlock:
			if d.PartialJSON != "" {
				s.toolText = true
				s.emit(d.PartialJSON)
			}
		}
	case "content_block_stop":
		if s.plan.tool && ev.Index == s.toolBlock {
			if !s.toolText {
				s.emit("{}") // a tool called without arguments has input {}
			}
			s.toolBlock = -1
		}
	case "message_delta":
		if r := ev.Delta.StopReason; r != "" {
			s.stopReason = r
		}
		if !ev.JSON.Usage.Valid() {
			break
		}
		u := ev.Usage
		if u.JSON.OutputTokens.Valid() {
			s.hasOutput, s.output = true, u.OutputTokens
		}
		if u.JSON.InputTokens.Valid() {
			s.hasStart, s.input = true, u.InputTokens
		}
		if u.JSON.CacheReadInputTokens.Valid() {
			s.cacheRead = u.CacheReadInputTokens
		}
		if u.JSON.CacheCreationInputTokens.Valid() {
			s.cacheCreate = u.CacheCreationInputTokens
		}
		if u.JSON.OutputTokensDetails.Valid() {
			s.think = u.OutputTokensDetails.ThinkingTokens
		}
	case "message_stop":
		s.stopped = true
	}
}

func (s *streamState) emit(text string) {
	if text != "" {
		s.onText(text)
	}
}

// usage is the request's usage, or nil unless both the prompt and the
// output counts were reported (see the package doc).
func (s *streamState) usage() *provider.Usage {
	if !s.hasStart || !s.hasOutput {
		return nil
	}
	return &provider.Usage{
		InputTokens:     s.input + s.cacheRead + s.cacheCreate,
		OutputTokens:    s.output,
		CachedTokens:    s.cacheRead,
		ReasoningTokens: s.think,
	}
}
