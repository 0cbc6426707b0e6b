package anthropic

import (
	"cmp"
	"slices"
	"strings"

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

	// uses are the response's tool_use blocks as they started; in
	// StructuredTool mode only the forced tool's, whose input streams as
	// text.
	uses []*toolUse
	// thoughts reads its thinking blocks.
	thoughts thinking
}

// toolUse is one tool_use content block being read.
type toolUse struct {
	index int64
	id    string
	name  string
	// start is the input content_block_start carried; args the
	// concatenated partial_json of its input_json_delta events.
	start  string
	args   strings.Builder
	closed bool // content_block_stop seen
}

// input is the block's input JSON: its deltas, or without any the input
// it started with ({} when that is empty too).
func (u *toolUse) input() string {
	if u.args.Len() > 0 {
		return u.args.String()
	}
	if s := strings.TrimSpace(u.start); s != "" && s != "null" {
		return s
	}
	return "{}"
}

func newStreamState(p plan, onText func(string)) *streamState {
	return &streamState{plan: p, onText: onText}
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
		case cb.Type == "tool_use" && (!s.plan.tool || cb.Name == ToolName):
			s.uses = append(s.uses, &toolUse{index: ev.Index, id: cb.ID, name: cb.Name, start: cb.JSON.Input.Raw()})
		case cb.Type == "text" && !s.plan.tool:
			s.emit(cb.Text)
		case cb.Type == provider.ReasoningThinking || cb.Type == provider.ReasoningRedacted:
			s.thoughts.start(ev.Index, cb)
		}
	case "content_block_delta":
		d := ev.Delta
		switch {
		case d.Type == "text_delta" && !s.plan.tool:
			s.emit(d.Text)
		case d.Type == "thinking_delta":
			s.thoughts.text(ev.Index, d.Thinking)
		case d.Type == "signature_delta":
			s.thoughts.sign(ev.Index, d.Signature)
		case d.Type == "input_json_delta":
			if u := s.use(ev.Index); u != nil {
				u.args.WriteString(d.PartialJSON)
				if s.plan.tool {
					s.emit(d.PartialJSON)
				}
			}
		}
	case "content_block_stop":
		if u := s.use(ev.Index); u != nil {
			u.closed = true
			if s.plan.tool && u.args.Len() == 0 {
				s.emit(u.input()) // a tool called without arguments has input {}
			}
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

// use is the open tool_use block at a content block index, or nil.
func (s *streamState) use(index int64) *toolUse {
	for _, u := range s.uses {
		if u.index == index && !u.closed {
			return u
		}
	}
	return nil
}

// calls are the response's tool calls in block order; ok is false unless
// there is at least one and every tool_use block ended, since a call cut
// short has partial arguments.
func (s *streamState) calls() (calls []provider.ToolCall, ok bool) {
	uses := slices.Clone(s.uses)
	slices.SortStableFunc(uses, func(a, b *toolUse) int { return cmp.Compare(a.index, b.index) })
	for _, u := range uses {
		if !u.closed {
			return nil, false
		}
		calls = append(calls, provider.ToolCall{ID: u.id, Name: u.name, Args: u.input()})
	}
	return calls, len(calls) > 0
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
