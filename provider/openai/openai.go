// Package openai is mspd's OpenAI provider: streaming Chat Completions
// through the official SDK (github.com/openai/openai-go/v3), for OpenAI
// itself or any compatible endpoint (vLLM, llama.cpp, gateways), or the
// Responses API when Config.API says so.
//
// The SDK's own retries are off: every Stream call is exactly one HTTP
// request, so mspd's retry layer counts and announces every attempt. A failed
// request is returned as a *provider.Error carrying the raw signals mspd
// classifies: the HTTP status, the headers that steer retries, and a Kind
// when the body or the stream says more than the status does (see errors.go
// for the table). Credentials never appear in errors.
//
// Images and instructions: a user message with images is sent as content
// parts, its text then each image as a data: URL (Chat's
// image_url parts, the Responses API's input_image with detail auto);
// Request.Instructions is Chat's leading system message and the Responses
// API's instructions.
//
// When ctx is cancelled, Stream returns ctx.Err() unwrapped.
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"mspd/modelretry"
	"mspd/provider"
)

// Defaults for Config.
const (
	// DefaultBaseURL is OpenAI's API root.
	DefaultBaseURL = "https://api.openai.com/v1/"
	// DefaultSystem is the OTel gen_ai.provider.name reported for OpenAI.
	DefaultSystem = "openai"
	// DefaultIdleTimeout bounds silence on an open request. Codex waits
	// 300 s; a chat user watching nothing happen for a minute is already
	// better served by a retry.
	DefaultIdleTimeout = 60 * time.Second
)

// APIs a Model can speak.
const (
	// APIChatCompletions is POST chat/completions, which every compatible
	// server implements.
	APIChatCompletions = "chat"
	// APIResponses is POST responses, OpenAI's newer API.
	APIResponses = "responses"
)

// Names of the request field that carries Request.MaxTokens.
const (
	// MaxCompletionTokens is OpenAI's current field, required by reasoning
	// models.
	MaxCompletionTokens = "max_completion_tokens"
	// MaxTokens is the deprecated field older compatible servers still read.
	MaxTokens = "max_tokens"
)

// responseSchemaName is the json_schema.name sent with a ResponseSchema;
// OpenAI requires one, and nothing else reads it.
const responseSchemaName = "response"

// Config configures a Model. Of its Endpoint, APIKey is sent as a bearer
// token and may be empty for a compatible server without authentication;
// BaseURL is the API root, e.g. "http://localhost:8000/v1" for vLLM, ""
// meaning DefaultBaseURL (chat/completions is resolved against it); System
// defaults to DefaultSystem (set e.g. "vllm" for a compatible endpoint),
// IdleTimeout to DefaultIdleTimeout, and HTTPClient to Pool.Client(), a
// transport of the Model's own.
type Config struct {
	provider.Endpoint
	// MaxTokensField names the Chat Completions field for
	// Request.MaxTokens: MaxCompletionTokens ("" means this) or MaxTokens
	// for older compatible servers. The Responses API always uses
	// max_output_tokens.
	MaxTokensField string
	// API selects the endpoint: APIChatCompletions ("" means this) or
	// APIResponses.
	API string
	// Organization, when set, is sent as OpenAI-Organization.
	Organization string
	// Project, when set, is sent as OpenAI-Project.
	Project string
}

// Model streams Chat Completions. It keeps no per-request state and is safe
// for concurrent use.
type Model struct {
	cfg       Config
	chat      oai.ChatCompletionService
	responses responses.ResponseService
}

// New validates cfg and returns a Model. The SDK client is built from cfg
// alone: OPENAI_* environment variables are not read, so what mspd's
// configuration says is what is sent.
func New(cfg Config) (*Model, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if err := cfg.Resolve("openai", DefaultSystem, DefaultIdleTimeout); err != nil {
		return nil, err
	}
	switch cfg.MaxTokensField {
	case "":
		cfg.MaxTokensField = MaxCompletionTokens
	case MaxCompletionTokens, MaxTokens:
	default:
		return nil, fmt.Errorf("openai: Config.MaxTokensField %q is neither %q nor %q",
			cfg.MaxTokensField, MaxCompletionTokens, MaxTokens)
	}
	switch cfg.API {
	case "":
		cfg.API = APIChatCompletions
	case APIChatCompletions, APIResponses:
	default:
		return nil, fmt.Errorf("openai: Config.API %q is neither %q nor %q", cfg.API, APIChatCompletions, APIResponses)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = cfg.Pool.Client()
	}
	cfg.HTTPClient = provider.NoRedirects(cfg.HTTPClient)
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithHTTPClient(cfg.HTTPClient),
		// mspd owns every attempt: one Stream, one HTTP request.
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.Organization != "" {
		opts = append(opts, option.WithOrganization(cfg.Organization))
	}
	if cfg.Project != "" {
		opts = append(opts, option.WithProject(cfg.Project))
	}
	// The services, not oai.NewClient, which would fold in OPENAI_API_KEY,
	// OPENAI_BASE_URL and OPENAI_CUSTOM_HEADERS from the environment.
	return &Model{cfg: cfg, chat: oai.NewChatCompletionService(opts...),
		responses: responses.NewResponseService(opts...)}, nil
}

// System implements provider.Model.
func (m *Model) System() string { return m.cfg.System }

// Stream implements provider.Model: one streamed request. On Chat
// Completions a stream that ends without a finish_reason and without
// data: [DONE] fails as streamInterrupted; one that finished but lost its
// usage chunk succeeds with nil Usage. On the Responses API a stream that
// ends without response.completed, response.incomplete or response.failed
// fails as streamInterrupted. Tool calls are returned only with a
// response that finished asking for them (FinishToolCalls), each whole:
// a failed stream returns none of the calls it had begun.
func (m *Model) Stream(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	if err := checkMessages(req); err != nil {
		return provider.Response{}, err
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := newWatch(m.cfg.IdleTimeout, cancel)
	defer w.Stop()
	opts := []option.RequestOption{
		option.WithMiddleware(w.middleware),
		// The SDK counts its own retries (always 0 here); tell the server
		// how many mspd has made instead.
		option.WithHeader("X-Stainless-Retry-Count", strconv.Itoa(max(req.Attempt-1, 0))),
	}
	var resp provider.Response
	var err error
	if m.cfg.API == APIResponses {
		resp, err = m.streamResponses(sctx, req, onText, opts)
	} else {
		resp, err = m.streamChat(sctx, req, onText, opts, w)
	}
	if len(req.ResponseSchema) > 0 {
		resp.StructuredOutput = provider.StructuredNative
	}
	if err == nil {
		return resp, nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return resp, cerr
	}
	var pe *provider.Error
	if errors.As(err, &pe) {
		return resp, err
	}
	return resp, m.failure(err, w)
}

// checkMessages refuses what no OpenAI API accepts, before any request.
func checkMessages(req provider.Request) error {
	for i, msg := range req.Messages {
		if msg.Role != provider.RoleUser && msg.Role != provider.RoleAssistant && msg.Role != provider.RoleTool {
			return &provider.Error{Kind: modelretry.KindInvalidRequest,
				Message: fmt.Sprintf("message %d has unsupported role %q", i, msg.Role)}
		}
	}
	if len(req.ResponseSchema) > 0 && !json.Valid(req.ResponseSchema) {
		return &provider.Error{Kind: modelretry.KindInvalidRequest, Message: "the response schema is not valid JSON"}
	}
	return nil
}

// streamChat streams from chat/completions. Errors other than
// *provider.Error are left to Stream to map.
func (m *Model) streamChat(ctx context.Context, req provider.Request, onText func(string),
	opts []option.RequestOption, w *watch) (provider.Response, error) {
	var resp provider.Response
	params, err := m.params(req)
	if err != nil {
		return resp, err
	}
	stream := m.newChatStream(ctx, params, opts)
	defer stream.Close()

	var finish string
	var calls callParts
	thought := chatThought{parts: provider.NewReasoningParts(req)}
	refused := false
	for stream.Next() {
		c := stream.Current()
		if c.Model != "" {
			resp.Model = c.Model
		}
		if c.Usage != nil {
			// The last one wins: some compatible servers report running
			// totals in every chunk.
			resp.Usage = &provider.Usage{
				InputTokens:     c.Usage.PromptTokens,
				OutputTokens:    c.Usage.CompletionTokens,
				CachedTokens:    c.Usage.PromptTokensDetails.CachedTokens,
				ReasoningTokens: c.Usage.CompletionTokensDetails.ReasoningTokens,
			}
		}
		for _, ch := range c.Choices {
			if ch.Index != 0 { // only one choice is asked for
				continue
			}
			if r := chatReasoning(ch.Delta); r != "" {
				thought.add(r)
			}
			if ch.Delta.Content != "" {
				onText(ch.Delta.Content)
			}
			if ch.Delta.Refusal != "" {
				refused = true
			}
			for _, d := range ch.Delta.ToolCalls {
				addChatCall(&calls, d)
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil && finish == "" {
		return resp, err
	}
	// With a finish_reason the answer is whole even if the connection then
	// broke or went quiet before data: [DONE]; only usage may be missing.
	if finish == "" && !w.sawDone() {
		return resp, &provider.Error{Kind: modelretry.KindStreamInterrupted,
			Message: "the stream ended before a finish_reason or data: [DONE]"}
	}
	resp.FinishReason, resp.ToolCalls = withCalls(finishReason(finish, refused), calls.calls())
	resp.Reasoning = thought.reasoning()
	return resp, nil
}

// addChatCall adds one delta.tool_calls fragment: the first of a call
// carries its id, type and name, the later ones only pieces of its
// arguments under the same index. A new id at an index already holding
// another call starts a new call, for servers that number every call 0.
func addChatCall(c *callParts, d chatToolCall) {
	p := c.get(d.Index)
	if p == nil || d.ID != "" && p.id != "" && d.ID != p.id {
		p = c.open(d.Index, d.ID, d.Function.Name)
	}
	if p.id == "" {
		p.id = d.ID
	}
	if p.name == "" {
		p.name = d.Function.Name
	}
	p.args.WriteString(d.Function.Arguments)
}

// params builds the chat/completions body; checkMessages has vetted req.
func (m *Model) params(req provider.Request) (oai.ChatCompletionNewParams, error) {
	p := oai.ChatCompletionNewParams{
		Model:         shared.ChatModel(m.cfg.Model),
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)},
	}
	if req.Model != "" {
		p.Model = shared.ChatModel(req.Model)
	}
	p.Messages = convertHistory(req.Messages, chatUser, chatAssistant, chatResult)
	if req.Instructions != "" {
		p.Messages = append([]oai.ChatCompletionMessageParamUnion{oai.SystemMessage(req.Instructions)}, p.Messages...)
	}
	tools, err := convertTools(req.Tools, chatTool)
	if err != nil {
		return p, err
	}
	p.Tools = tools
	if p.ReasoningEffort, err = reasoningEffort(req.ReasoningEffort); err != nil {
		return p, err
	}
	if req.MaxTokens > 0 {
		if m.cfg.MaxTokensField == MaxTokens {
			p.MaxTokens = param.NewOpt(int64(req.MaxTokens))
		} else {
			p.MaxCompletionTokens = param.NewOpt(int64(req.MaxTokens))
		}
	}
	if len(req.ResponseSchema) > 0 {
		// strict false: strict mode rejects common schemas (optional
		// properties, additionalProperties unset), and mspd validates the
		// answer itself.
		p.ResponseFormat = oai.ChatCompletionNewParamsResponseFormatUnion{
			OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
					Name:   responseSchemaName,
					Schema: req.ResponseSchema,
					Strict: param.NewOpt(false),
				},
			},
		}
	}
	return p, nil
}

// chatTool is a tool as Chat Completions declares it: type function, with
// the name, description and parameters under function. strict is left
// out (false): strict mode refuses common schemas, and mspd checks every
// call's arguments itself.
func chatTool(s provider.ToolSpec, parameters map[string]any) oai.ChatCompletionToolUnionParam {
	f := shared.FunctionDefinitionParam{Name: s.Name, Parameters: parameters}
	if s.Description != "" {
		f.Description = param.NewOpt(s.Description)
	}
	return oai.ChatCompletionFunctionTool(f)
}

// chatUser is a user message: its text alone as a string, or, with
// images, content parts: the text, then an image_url part per image (a
// data: URL).
func chatUser(m provider.Message) oai.ChatCompletionMessageParamUnion {
	if len(m.Images) == 0 {
		return oai.UserMessage(m.Text)
	}
	parts := make([]oai.ChatCompletionContentPartUnionParam, 0, 1+len(m.Images))
	if m.Text != "" {
		parts = append(parts, oai.TextContentPart(m.Text))
	}
	for _, im := range m.Images {
		parts = append(parts, oai.ImageContentPart(oai.ChatCompletionContentPartImageImageURLParam{URL: im.DataURL()}))
	}
	return oai.UserMessage(parts)
}

// chatAssistant is an assistant message: its text, or, when it called
// tools, its calls with content null if it said nothing. Its reasoning is
// never sent back: no compatible server takes it.
func chatAssistant(m provider.Message) []oai.ChatCompletionMessageParamUnion {
	text, calls := m.Text, m.ToolCalls
	if len(calls) == 0 {
		return []oai.ChatCompletionMessageParamUnion{oai.AssistantMessage(text)}
	}
	a := oai.ChatCompletionAssistantMessageParam{ToolCalls: make([]oai.ChatCompletionMessageToolCallUnionParam, len(calls))}
	a.Content.OfString = param.Null[string]()
	if text != "" {
		a.Content.OfString = param.NewOpt(text)
	}
	for i, c := range calls {
		a.ToolCalls[i] = oai.ChatCompletionMessageToolCallUnionParam{OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{
			ID: c.ID, Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: c.Args}}}
	}
	return []oai.ChatCompletionMessageParamUnion{{OfAssistant: &a}}
}

// chatResult is a tool message answering callID; resultText says how a
// failure is told.
func chatResult(callID, output string) oai.ChatCompletionMessageParamUnion {
	return oai.ToolMessage(output, callID)
}

// finishReason normalises OpenAI's finish_reason. A refusal (the model
// declining, reported in delta.refusal with finish_reason "stop") is a
// content filter, as Anthropic's stop_reason "refusal" is: retrying it
// would only be refused again.
func finishReason(reason string, refused bool) string {
	switch reason {
	case "stop":
		if refused {
			return provider.FinishContentFilter
		}
		return provider.FinishStop
	case "length":
		return provider.FinishLength
	case "content_filter":
		return provider.FinishContentFilter
	case "tool_calls":
		return provider.FinishToolCalls
	}
	return reason
}
