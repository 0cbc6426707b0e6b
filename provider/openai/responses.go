package openai

import (
	"context"
	"encoding/json"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"mspd/modelretry"
	"mspd/provider"
)

// streamResponses streams from the Responses API (retry-background §6.3).
// Text deltas go to onText as they come, before, between or after
// function calls; a function_call output item is assembled from
// response.output_item.added (its call_id and name), the
// response.function_call_arguments deltas and .done, and
// response.output_item.done (the item whole). The terminal events decide
// the outcome:
//
//	response.completed   → finish "toolCalls" with the function calls its
//	                       output holds (those streamed, if it lists none);
//	                       else "stop" (contentFilter after a refusal)
//	response.incomplete  → incomplete_details.reason: max_output_tokens →
//	                       "length", content_filter → "contentFilter",
//	                       others verbatim
//	response.failed      → response.error.code through streamError's table
//	error                → code through streamError's table
//	none before EOF      → streamInterrupted
func (m *Model) streamResponses(ctx context.Context, req provider.Request, onText func(string),
	opts []option.RequestOption) (provider.Response, error) {
	var resp provider.Response
	params, err := m.responsesParams(req)
	if err != nil {
		return resp, err
	}
	stream := m.responses.NewStreaming(ctx, params, opts...)
	defer stream.Close()

	refused := false
	var calls callParts
	thought := responsesThought{parts: provider.NewReasoningParts(req)}
	for stream.Next() {
		ev := stream.Current()
		r := ev.Response
		if r.Model != "" {
			resp.Model = r.Model
		}
		switch ev.Type {
		case "response.output_text.delta":
			if ev.Delta != "" {
				onText(ev.Delta)
			}
		case "response.refusal.delta":
			refused = true
		case "response.output_item.added":
			switch ev.Item.Type {
			case "function_call":
				calls.open(ev.OutputIndex, ev.Item.CallID, ev.Item.Name).args.WriteString(ev.Item.Arguments.OfString)
			case "reasoning":
				thought.added(ev)
			}
		case "response.reasoning_summary_text.delta":
			thought.summaryDelta(ev)
		case "response.reasoning_text.delta":
			thought.textDelta(ev)
		case "response.function_call_arguments.delta":
			if p := calls.get(ev.OutputIndex); p != nil {
				p.args.WriteString(ev.Delta)
			}
		case "response.function_call_arguments.done":
			calls.whole(ev.OutputIndex, "", "", ev.Arguments)
		case "response.output_item.done":
			switch ev.Item.Type {
			case "function_call":
				calls.whole(ev.OutputIndex, ev.Item.CallID, ev.Item.Name, ev.Item.Arguments.OfString)
			case "reasoning":
				thought.done(ev.OutputIndex, ev.Item)
			}
		case "response.completed", "response.incomplete", "response.failed":
			if r.JSON.Usage.Valid() {
				resp.Usage = &provider.Usage{
					InputTokens:     r.Usage.InputTokens,
					OutputTokens:    r.Usage.OutputTokens,
					CachedTokens:    r.Usage.InputTokensDetails.CachedTokens,
					ReasoningTokens: r.Usage.OutputTokensDetails.ReasoningTokens,
				}
			}
			var finish string
			switch ev.Type {
			case "response.completed":
				finish = finishReason("stop", refused)
			case "response.incomplete":
				finish = incompleteReason(r.IncompleteDetails.Reason)
			default:
				return resp, m.eventError(string(r.Error.Code), r.Error.Message)
			}
			resp.FinishReason, resp.ToolCalls = withCalls(finish, outputCalls(r.Output, &calls))
			resp.Reasoning = thought.reasoning(r.Output)
			return resp, nil
		case "error":
			return resp, m.eventError(ev.Code, ev.Message)
		}
	}
	if err := stream.Err(); err != nil {
		return resp, err
	}
	return resp, &provider.Error{Kind: modelretry.KindStreamInterrupted,
		Message: "the stream ended before response.completed"}
}

// outputCalls returns the function calls a finished response's output
// holds, the final word on them; a server that leaves its output empty
// gets the calls its events streamed.
func outputCalls(output []responses.ResponseOutputItemUnion, streamed *callParts) []provider.ToolCall {
	var final callParts
	for i, it := range output {
		if it.Type == "function_call" {
			final.whole(int64(i), it.CallID, it.Name, it.Arguments.OfString)
		}
	}
	if calls := final.calls(); calls != nil {
		return calls
	}
	return streamed.calls()
}

// eventError maps a response.failed or error event like a Chat
// Completions error frame.
func (m *Model) eventError(code, message string) *provider.Error {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": message}})
	return m.streamError(b)
}

func incompleteReason(reason string) string {
	switch reason {
	case "max_output_tokens":
		return provider.FinishLength
	case "content_filter":
		return provider.FinishContentFilter
	}
	return reason
}

// responsesParams builds the responses body; checkMessages has vetted req.
// store is false: mspd keeps the history, and nothing needs a stored
// response to refer back to.
func (m *Model) responsesParams(req provider.Request) (responses.ResponseNewParams, error) {
	p := responses.ResponseNewParams{
		Model: shared.ResponsesModel(m.cfg.Model),
		Store: param.NewOpt(false),
	}
	if req.Model != "" {
		p.Model = shared.ResponsesModel(req.Model)
	}
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: convertHistory(req.Messages, responsesUser, responsesAssistant, responsesResult)}
	if req.Instructions != "" {
		p.Instructions = param.NewOpt(req.Instructions)
	}
	tools, err := convertTools(req.Tools, responsesTool)
	if err != nil {
		return p, err
	}
	p.Tools = tools
	if err := responsesReasoningParams(req, &p); err != nil {
		return p, err
	}
	if req.MaxTokens > 0 {
		p.MaxOutputTokens = param.NewOpt(int64(req.MaxTokens))
	}
	if len(req.ResponseSchema) > 0 {
		var schema map[string]any
		if err := json.Unmarshal(req.ResponseSchema, &schema); err != nil {
			return p, &provider.Error{Kind: modelretry.KindInvalidRequest, Message: "the response schema is not a JSON object"}
		}
		p.Text = responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{
			OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{
				Name: responseSchemaName, Schema: schema, Strict: param.NewOpt(false)}}}
	}
	return p, nil
}

// responsesTool is a tool as the Responses API declares it: flat, type
// function with name, description and parameters. strict is sent false:
// left out, the Responses API turns the schema strict (every property
// required, additionalProperties false), making optional arguments
// mandatory; mspd checks every call's arguments itself.
func responsesTool(s provider.ToolSpec, parameters map[string]any) responses.ToolUnionParam {
	t := responses.ToolParamOfFunction(s.Name, parameters, false)
	if s.Description != "" {
		t.OfFunction.Description = param.NewOpt(s.Description)
	}
	return t
}

// responsesUser is a user message: its text alone as a string, or, with
// images, a content list: input_text, then an input_image per image (a
// data: URL, detail auto).
func responsesUser(m provider.Message) responses.ResponseInputItemUnionParam {
	if len(m.Images) == 0 {
		return responses.ResponseInputItemParamOfMessage(m.Text, responses.EasyInputMessageRoleUser)
	}
	content := make(responses.ResponseInputMessageContentListParam, 0, 1+len(m.Images))
	if m.Text != "" {
		content = append(content, responses.ResponseInputContentParamOfInputText(m.Text))
	}
	for _, im := range m.Images {
		part := responses.ResponseInputContentParamOfInputImage(responses.ResponseInputImageDetailAuto)
		part.OfInputImage.ImageURL = param.NewOpt(im.DataURL())
		content = append(content, part)
	}
	return responses.ResponseInputItemParamOfMessage(content, responses.EasyInputMessageRoleUser)
}

// responsesAssistant is an assistant message's items: the reasoning items
// it sends back (a tool step's, with their encrypted content), its text
// as a message (also when empty, if it called nothing), then one
// function_call item per call. The function calls carry no id (fc_…):
// with store false the API keeps no item for an id to name.
func responsesAssistant(m provider.Message) []responses.ResponseInputItemUnionParam {
	text, calls := m.Text, m.ToolCalls
	items := responsesReasoningItems(m)
	if text != "" || len(calls) == 0 {
		items = append(items, responses.ResponseInputItemParamOfMessage(text, responses.EasyInputMessageRoleAssistant))
	}
	for _, c := range calls {
		items = append(items, responses.ResponseInputItemParamOfFunctionCall(c.Args, c.ID, c.Name))
	}
	return items
}

// responsesResult is a function_call_output item answering callID.
func responsesResult(callID, output string) responses.ResponseInputItemUnionParam {
	item := responses.ResponseInputItemParamOfFunctionCallOutput(output)
	item.OfFunctionCallOutput.CallID = param.NewOpt(callID)
	return item
}
