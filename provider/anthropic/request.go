package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"mspd/modelretry"
	"mspd/provider"
)

// plan is how a request's output is read back.
type plan struct {
	// tool says the answer is the input of the forced ToolName call.
	tool bool
	// structured is the provider.Structured* mode, "" without a schema.
	structured string
}

// promptInstruction introduces the schema in prompt mode.
const promptInstruction = "Answer with a single JSON value that satisfies the JSON Schema below, " +
	"and nothing else: no prose before or after it, no Markdown code fence.\n\nJSON Schema:\n"

// toolDescription tells the model what the forced tool is for.
const toolDescription = "Give your complete answer as this tool's input."

// params builds the Messages request for req.
func (m *Model) params(req provider.Request) (anthropic.MessageNewParams, plan, error) {
	var p plan
	msgs, err := messages(req.Messages)
	if err != nil {
		return anthropic.MessageNewParams{}, p, err
	}
	tools, err := toolParams(req.Tools)
	if err != nil {
		return anthropic.MessageNewParams{}, p, err
	}
	model := req.Model
	if model == "" {
		model = m.cfg.Model
	}
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = DefaultMaxTokens
	}
	params := anthropic.MessageNewParams{
		Model:     model,
		MaxTokens: int64(maxTokens),
		Messages:  msgs,
		Tools:     tools,
	}
	if req.Instructions != "" {
		params.System = []anthropic.TextBlockParam{{Text: req.Instructions}}
	}
	thinks, err := m.thinkingParams(req, &params)
	if err != nil {
		return params, p, err
	}
	if len(req.ResponseSchema) == 0 {
		return params, p, nil
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, req.ResponseSchema); err != nil {
		return params, p, &provider.Error{Kind: modelretry.KindInvalidRequest, Message: "the response schema is not JSON", Err: err}
	}
	schema := compact.Bytes()
	// With tools to offer, forcing the answer tool would forbid them, and
	// thinking forbids forcing any: the schema goes in the prompt instead
	// (see Config.StructuredMode).
	if m.cfg.StructuredMode == StructuredTool && objectSchema(schema) && len(tools) == 0 && !thinks {
		p.tool, p.structured = true, provider.StructuredNative
		params.Tools = []anthropic.ToolUnionParam{toolParam(ToolName, toolDescription, schema)}
		params.ToolChoice = anthropic.ToolChoiceParamOfTool(ToolName)
		return params, p, nil
	}
	p.structured = provider.StructuredPrompt
	params.System = append(params.System, anthropic.TextBlockParam{Text: promptInstruction + string(schema)})
	return params, p, nil
}

// toolParam is one custom tool; its schema is sent verbatim, since the
// SDK's typed schema would drop keywords.
func toolParam(name, description string, schema json.RawMessage) anthropic.ToolUnionParam {
	t := anthropic.ToolParam{
		Name:        name,
		InputSchema: param.Override[anthropic.ToolInputSchemaParam](schema),
	}
	if description != "" {
		t.Description = param.NewOpt(description)
	}
	return anthropic.ToolUnionParam{OfTool: &t}
}

// toolParams maps the tools the model may call.
func toolParams(specs []provider.ToolSpec) ([]anthropic.ToolUnionParam, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	out := make([]anthropic.ToolUnionParam, len(specs))
	for i, s := range specs {
		schema, err := inputSchema(s.InputSchema)
		if err != nil {
			return nil, &provider.Error{Kind: modelretry.KindInvalidRequest,
				Message: fmt.Sprintf("tool %q: %v", s.Name, err)}
		}
		out[i] = toolParam(s.Name, s.Description, schema)
	}
	return out, nil
}

// inputSchema is a tool's input_schema as the API takes it: an object
// schema. No schema is one accepting any object, and a schema without a
// top-level type gets "type": "object" (a call's input is always an
// object); any other type is refused rather than sent to a certain 400.
func inputSchema(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage(`{"type":"object"}`), nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil || top == nil {
		return nil, errors.New("the input schema is not a JSON object")
	}
	switch t := top["type"]; {
	case t == nil:
		top["type"] = json.RawMessage(`"object"`)
		return json.Marshal(top)
	case string(t) != `"object"`:
		return nil, fmt.Errorf("the input schema has type %s; the API takes only object", t)
	}
	return raw, nil
}

// objectSchema reports whether a schema's top level is {"type": "object"},
// which a tool's input_schema must be.
func objectSchema(schema []byte) bool {
	var top struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(schema, &top) != nil {
		return false
	}
	t, ok := top.Type.(string)
	return ok && t == "object"
}

// messages maps the history, its tool steps grouped by provider.Steps, to
// the API's alternating turns. Tool results go in a user turn (the API has
// no tool role); consecutive messages of one role become one turn (the API
// rejects two user turns in a row, so a step's results and the next turn's
// user text share one, results first as the API requires); empty texts
// are dropped (it rejects empty text blocks). Everything before the first
// user text is dropped: the first turn must be the user's, inventing a
// user line would put words in the user's mouth, and results whose calls
// were dropped would name unknown tool_use ids.
func messages(history []provider.Message) ([]anthropic.MessageParam, error) {
	for i, msg := range history {
		switch msg.Role {
		case provider.RoleUser, provider.RoleAssistant, provider.RoleTool:
		default:
			return nil, &provider.Error{Kind: modelretry.KindInvalidRequest,
				Message: fmt.Sprintf("message %d has role %q; want user, assistant or tool", i, msg.Role)}
		}
	}
	var out []anthropic.MessageParam
	var user bool // the role of blocks
	var blocks []anthropic.ContentBlockParamUnion
	flush := func() {
		if len(blocks) == 0 {
			return
		}
		if user {
			out = append(out, anthropic.NewUserMessage(blocks...))
		} else {
			out = append(out, anthropic.NewAssistantMessage(blocks...))
		}
		blocks = nil
	}
	started := false
	for _, msg := range provider.Steps(history) {
		content := contentOf(msg)
		if len(content) == 0 {
			continue
		}
		if !started && msg.Role != provider.RoleUser {
			continue
		}
		started = true
		if isUser := msg.Role != provider.RoleAssistant; isUser != user {
			flush()
			user = isUser
		}
		blocks = append(blocks, content...)
	}
	flush()
	if len(out) == 0 {
		return nil, &provider.Error{Kind: modelretry.KindInvalidRequest, Message: "no user message to send"}
	}
	return out, nil
}

// contentOf is a message's content blocks: for an assistant, the
// thinking blocks it is to send back first, as the response had them; a
// user's images (base64 image blocks, before the text, where Anthropic
// advises them); its text; then, for an assistant, a tool_use block per
// call, or, for tool results, a tool_result block per result, in order.
func contentOf(msg provider.Message) []anthropic.ContentBlockParamUnion {
	var out []anthropic.ContentBlockParamUnion
	if msg.Role == provider.RoleAssistant {
		out = thinkingBlocks(msg)
	}
	for _, im := range msg.Images {
		out = append(out, anthropic.NewImageBlockBase64(im.MediaType, im.Data))
	}
	if msg.Text != "" {
		out = append(out, anthropic.NewTextBlock(msg.Text))
	}
	if msg.Role == provider.RoleAssistant {
		for _, c := range msg.ToolCalls {
			out = append(out, anthropic.NewToolUseBlock(callID(c.ID), callInput(c.Args), c.Name))
		}
	}
	if msg.Role == provider.RoleTool {
		for _, r := range msg.ToolResults {
			out = append(out, toolResult(r))
		}
	}
	return out
}

// toolResult is a tool_result block. Its text goes as one text block, or
// none when empty (the API refuses empty text blocks); is_error is sent
// only when set.
func toolResult(r provider.ToolResult) anthropic.ContentBlockParamUnion {
	b := anthropic.ToolResultBlockParam{ToolUseID: callID(r.CallID)}
	if r.Text != "" {
		b.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: r.Text}}}
	}
	if r.IsError {
		b.IsError = param.NewOpt(true)
	}
	return anthropic.ContentBlockParamUnion{OfToolResult: &b}
}

// unparsedKey holds, in a tool_use block's input, arguments that were not
// a JSON object.
const unparsedKey = "unparsed_arguments"

// callInput is a recorded call's arguments as a tool_use input, which the
// API takes only as a JSON object. Arguments are recorded as the model
// wrote them (another provider's model, perhaps): none become {}, and
// anything but an object becomes {"unparsed_arguments": "<as written>"},
// so the request is accepted and the model still reads what it wrote.
func callInput(args string) json.RawMessage {
	trimmed := strings.TrimSpace(args)
	if trimmed == "" {
		return json.RawMessage(`{}`)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(trimmed), &obj) == nil && obj != nil {
		return json.RawMessage(trimmed)
	}
	wrapped, _ := json.Marshal(map[string]string{unparsedKey: args})
	return wrapped
}

// callID is a call id as the API takes it (^[a-zA-Z0-9_-]+$): another
// provider's id keeps its letters, digits, _ and -, and every other
// character becomes _. tool_use and tool_result blocks map it alike, so
// they still pair.
func callID(id string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			return r
		}
		return '_'
	}, id)
}
