package openai

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"mspd/modelretry"
	"mspd/provider"
)

// What Chat Completions and the Responses API share of tool calling: the
// tools' schemas, the history's steps, what a result says, how a stream's
// fragments become whole calls and when a response asks for them. Each API
// supplies only its own wire types.

// noParameters is the schema of a tool that declares none: both APIs want
// an object schema, and such a tool takes an empty object.
var noParameters = map[string]any{"type": "object", "properties": map[string]any{}}

// convertTools builds one API's tools from specs through its constructor
// tool, each with its input schema decoded. A schema that is not a JSON
// object fails the request before it is sent.
func convertTools[T any](specs []provider.ToolSpec, tool func(s provider.ToolSpec, parameters map[string]any) T) ([]T, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	out := make([]T, len(specs))
	for i, s := range specs {
		p, err := parameters(s)
		if err != nil {
			return nil, err
		}
		out[i] = tool(s, p)
	}
	return out, nil
}

// parameters decodes a tool's input schema. Numbers become float64, not
// json.Number: the SDK's encoder would send a json.Number as a string.
func parameters(s provider.ToolSpec) (map[string]any, error) {
	raw := bytes.TrimSpace(s.InputSchema)
	if len(raw) == 0 {
		return noParameters, nil
	}
	var p map[string]any
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, &provider.Error{Kind: modelretry.KindInvalidRequest,
			Message: fmt.Sprintf("tool %q: the input schema is not a JSON object", s.Name)}
	}
	if p == nil { // null
		return noParameters, nil
	}
	return p, nil
}

// convertHistory builds one API's input from a history, grouped by
// provider.Steps first so that every call is answered exactly once, right
// after the message that made it: user makes a user message (its text and
// images), assistant the items of an assistant message (the reasoning it
// sends back, its text and its calls), and result the answer to one call.
func convertHistory[T any](msgs []provider.Message, user func(m provider.Message) T,
	assistant func(m provider.Message) []T, result func(callID, output string) T) []T {
	msgs = provider.Steps(msgs)
	out := make([]T, 0, len(msgs))
	for _, m := range msgs {
		switch m.Role {
		case provider.RoleAssistant:
			out = append(out, assistant(m)...)
		case provider.RoleTool:
			for _, r := range m.ToolResults {
				out = append(out, result(r.CallID, resultText(r)))
			}
		default:
			out = append(out, user(m))
		}
	}
	return out
}

// resultText is what the model reads of a tool result. Neither a Chat
// Completions tool message nor a Responses function_call_output has an
// error flag (Anthropic's is_error has no counterpart), so a failed call
// is conveyed by its text alone: the turn layer writes it as the reason
// ("the call was denied: …", "the call ran past 2m0s") or it is the
// tool's own error output, which reads as one. A failure with no text at
// all says so, since an empty output would read as success.
func resultText(r provider.ToolResult) string {
	if r.IsError && r.Text == "" {
		return "the tool call failed without saying why"
	}
	return r.Text
}

// callParts assembles a stream's tool calls from their fragments, each
// call keyed by its position in the response: Chat Completions' tool_calls
// index, the Responses API's output_index.
type callParts struct {
	seen []*callPart // in the order they were opened
	at   map[int64]*callPart
}

// callPart is one call being assembled.
type callPart struct {
	key      int64
	id, name string
	args     strings.Builder
}

// open starts a new call at key; a later fragment at key adds to it.
func (c *callParts) open(key int64, id, name string) *callPart {
	if c.at == nil {
		c.at = make(map[int64]*callPart)
	}
	p := &callPart{key: key, id: id, name: name}
	c.seen = append(c.seen, p)
	c.at[key] = p
	return p
}

// get returns the call last opened at key, or nil.
func (c *callParts) get(key int64) *callPart { return c.at[key] }

// whole replaces what fragments said of the call at key with the call
// whole, as a final event states it, opening it if no fragment came.
func (c *callParts) whole(key int64, id, name, args string) {
	p := c.get(key)
	if p == nil {
		p = c.open(key, id, name)
	}
	p.id, p.name = cmp.Or(id, p.id), cmp.Or(name, p.name)
	p.args.Reset()
	p.args.WriteString(args)
}

// calls returns the assembled calls ordered by key, calls sharing a key
// in the order they came; nil when there are none.
func (c *callParts) calls() []provider.ToolCall {
	if len(c.seen) == 0 {
		return nil
	}
	parts := slices.Clone(c.seen)
	slices.SortStableFunc(parts, func(a, b *callPart) int { return cmp.Compare(a.key, b.key) })
	out := make([]provider.ToolCall, len(parts))
	for i, p := range parts {
		out[i] = provider.ToolCall{ID: p.id, Name: p.name, Args: p.args.String()}
	}
	return out
}

// withCalls settles how a finished response that streamed tool calls
// ends. One that stopped normally asks for them (some compatible servers
// finish with "stop", or only with data: [DONE], instead of
// "tool_calls"); a truncated or filtered one keeps its finish and drops
// the calls, which may be cut short and are never run.
func withCalls(finish string, calls []provider.ToolCall) (string, []provider.ToolCall) {
	if len(calls) == 0 {
		return finish, nil
	}
	switch finish {
	case provider.FinishStop, provider.FinishToolCalls, "":
		return provider.FinishToolCalls, calls
	}
	return finish, nil
}
