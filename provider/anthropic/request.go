package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"

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
	}
	if len(req.ResponseSchema) == 0 {
		return params, p, nil
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, req.ResponseSchema); err != nil {
		return params, p, &provider.Error{Kind: modelretry.KindInvalidRequest, Message: "the response schema is not JSON", Err: err}
	}
	schema := compact.Bytes()
	if m.cfg.StructuredMode == StructuredTool && objectSchema(schema) {
		p.tool, p.structured = true, provider.StructuredNative
		params.Tools = []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
			Name:        ToolName,
			Description: param.NewOpt(toolDescription),
			// Sent verbatim: the SDK's typed schema would drop keywords.
			InputSchema: param.Override[anthropic.ToolInputSchemaParam](json.RawMessage(schema)),
		}}}
		params.ToolChoice = anthropic.ToolChoiceParamOfTool(ToolName)
		return params, p, nil
	}
	p.structured = provider.StructuredPrompt
	params.System = []anthropic.TextBlockParam{{Text: promptInstruction + string(schema)}}
	return params, p, nil
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

// messages maps the history to the API's alternating turns: consecutive
// messages of one role become one message with a text block each (the API
// rejects two user turns in a row), empty texts are dropped (it rejects
// empty text blocks), and leading assistant messages are dropped, since the
// first turn must be the user's and inventing a user line would put words
// in the user's mouth.
func messages(history []provider.Message) ([]anthropic.MessageParam, error) {
	var out []anthropic.MessageParam
	var role string
	var blocks []anthropic.ContentBlockParamUnion
	flush := func() {
		if len(blocks) == 0 {
			return
		}
		if role == provider.RoleUser {
			out = append(out, anthropic.NewUserMessage(blocks...))
		} else {
			out = append(out, anthropic.NewAssistantMessage(blocks...))
		}
		blocks = nil
	}
	for i, msg := range history {
		if msg.Role != provider.RoleUser && msg.Role != provider.RoleAssistant {
			return nil, &provider.Error{Kind: modelretry.KindInvalidRequest,
				Message: fmt.Sprintf("message %d has role %q; want user or assistant", i, msg.Role)}
		}
		if msg.Text == "" || (len(out) == 0 && len(blocks) == 0 && msg.Role == provider.RoleAssistant) {
			continue
		}
		if msg.Role != role {
			flush()
			role = msg.Role
		}
		blocks = append(blocks, anthropic.NewTextBlock(msg.Text))
	}
	flush()
	if len(out) == 0 {
		return nil, &provider.Error{Kind: modelretry.KindInvalidRequest, Message: "no user message to send"}
	}
	return out, nil
}
