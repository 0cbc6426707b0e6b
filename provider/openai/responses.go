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
// The terminal events decide the outcome:
//
//	response.completed   → finish "stop" (contentFilter after a refusal)
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
		case "response.completed", "response.incomplete", "response.failed":
			if r.JSON.Usage.Valid() {
				resp.Usage = &provider.Usage{
					InputTokens:     r.Usage.InputTokens,
					OutputTokens:    r.Usage.OutputTokens,
					CachedTokens:    r.Usage.InputTokensDetails.CachedTokens,
					ReasoningTokens: r.Usage.OutputTokensDetails.ReasoningTokens,
				}
			}
			switch ev.Type {
			case "response.completed":
				resp.FinishReason = finishReason("stop", refused)
			case "response.incomplete":
				resp.FinishReason = incompleteReason(r.IncompleteDetails.Reason)
			default:
				return resp, m.eventError(string(r.Error.Code), r.Error.Message)
			}
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
	items := make(responses.ResponseInputParam, 0, len(req.Messages))
	for _, msg := range req.Messages {
		role := responses.EasyInputMessageRoleUser
		if msg.Role == provider.RoleAssistant {
			role = responses.EasyInputMessageRoleAssistant
		}
		items = append(items, responses.ResponseInputItemParamOfMessage(msg.Text, role))
	}
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: items}
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
