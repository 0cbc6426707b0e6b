// Package anthropic is mspd's provider.Model for Anthropic's Messages API,
// streamed through the official Go SDK (github.com/anthropics/anthropic-sdk-go/v2).
//
// Every Stream call is exactly one HTTP request: the SDK's own retries are
// off, because mspd's retry layer owns every attempt, counts it and
// announces its backoff. Failures come back as *provider.Error carrying the
// signals modelretry classifies (kind hint, HTTP status, retry headers).
//
// Accounting choices:
//
//   - Usage is reported only for a stream that ended with message_stop and
//     whose message_delta carried output_tokens. A stream that broke, failed
//     or never reported output tokens returns a nil Usage, marking the count
//     unknown (RFC 0248 usageComplete false): the input tokens of
//     message_start alone would make a floor look complete. An HTTP error
//     response also has a nil Usage; the turn runner counts such a refusal
//     as zero.
//   - InputTokens counts every prompt token once: input_tokens +
//     cache_read_input_tokens + cache_creation_input_tokens; CachedTokens is
//     the cache-read part.
//
// Errors: an HTTP error keeps its status and its retry-after,
// retry-after-ms and x-should-retry headers, with a Kind from the body's
// error.type (rate_limit_error → rateLimited, overloaded_error → overloaded,
// api_error → serverError, authentication_error and permission_error →
// auth, billing_error → quotaExhausted, invalid_request_error →
// invalidRequest or, for a prompt too long, contextLengthExceeded,
// not_found_error → notFound, request_too_large → invalidRequest,
// timeout_error → timeout); an unknown type leaves Kind empty for the
// status to decide. An SSE error event after the 200 reports the status its
// type implies (overloaded_error → 529) and, for an unknown type,
// streamInterrupted. No response at all is connectionError, a stream that
// ends or breaks before message_stop streamInterrupted, and a client-side
// or idle timeout timeout.
//
// Tools: Request.Tools go as custom tools (name, description,
// input_schema, the schema verbatim), tool_choice left to the model. A
// response's tool_use blocks are read whole, each input the concatenation
// of its input_json_delta fragments ({} with none), and returned in block
// order as Response.ToolCalls with FinishToolCalls when stop_reason is
// tool_use; text blocks before or between them stream through onText. A
// stream that fails, or stops for tool use with a tool_use block unended,
// returns no calls. History goes through provider.Steps: an assistant's
// calls become tool_use blocks after its text, and a step's results one
// user turn of tool_result blocks in call order (is_error for a failed
// call), shared with the next turn's user text when one follows. Recorded
// arguments that are not a JSON object are sent as
// {"unparsed_arguments": "<as written>"}, and call ids are mapped to the
// characters the API allows, alike in both blocks.
//
// Structured output and tools: StructuredTool forces one tool, which
// would forbid the real ones, so a request with both a ResponseSchema and
// Tools is sent in prompt mode (the schema in the system prompt, the
// tools offered freely) and reports provider.StructuredPrompt; the turn
// checks the final answer against the schema either way. A real tool may
// therefore be named ToolName without ever meeting the forced one.
//
// Images and instructions: a user message's images go as base64 image
// blocks before its text, as Anthropic advises; Request.Instructions is
// the top-level system, one text block (a prompt-mode schema adds its own
// block after it).
// Thinking (thinking.go): Request.ReasoningEffort none disables extended
// thinking, any other tier enables it with the budget ThinkingBudgets
// gives it (or, with Config.Thinking ThinkingAdaptive, adaptive thinking
// at output_config.effort), max_tokens raised by the budget within
// Config.MaxOutputTokens.
// Thinking blocks stream through Request.OnReasoning, one part each, and
// come back in Response.Reasoning with their signatures (redacted_thinking
// blocks verbatim); an assistant message's blocks go back first in its
// content, unchanged, as the API requires of a tool loop's steps. Thinking
// forbids forcing a tool, so a structured answer is asked for in prompt
// mode then.
//
// Liveness: IdleTimeout bounds every silence of the connection, from
// sending the request to the response headers and between any two reads of
// the body. Any bytes count, pings included: the API sends pings precisely
// to show a slow stream is alive, and a model thinking for a long time
// before its first token is not a dead connection.
package anthropic

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"mspd/modelretry"
	"mspd/provider"
	"mspd/provider/httpwatch"
)

// Defaults applied by New.
const (
	// DefaultSystem is the OpenTelemetry gen_ai.provider.name.
	DefaultSystem = "anthropic"
	// DefaultIdleTimeout bounds a silent connection.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxTokens is max_tokens when a Request names none; the API
	// requires the field.
	DefaultMaxTokens = 1024
)

// Structured output modes for Config.StructuredMode.
const (
	// StructuredTool forces a call of the tool ToolName whose input_schema
	// is the response schema; the answer is the tool input, streamed as
	// text. Reported as provider.StructuredNative. A request that also
	// offers tools falls back to prompt mode (see the package doc).
	StructuredTool = "tool"
	// StructuredPromptMode embeds the schema in the system prompt and asks
	// for JSON only. Reported as provider.StructuredPrompt.
	StructuredPromptMode = "prompt"
)

// ToolName is the tool forced in StructuredTool mode.
const ToolName = "respond"

// Config configures a Model. Of its Endpoint, APIKey is required
// (sent as x-api-key); BaseURL is the API root without /v1 (the SDK
// appends v1/messages), "" meaning the SDK's production URL; System
// defaults to DefaultSystem, IdleTimeout to DefaultIdleTimeout and
// HTTPClient to Pool.Client(), a transport of the Model's own.
type Config struct {
	provider.Endpoint
	// StructuredMode is StructuredTool (the default) or
	// StructuredPromptMode. A response schema whose top level is not
	// {"type": "object"} is always sent in prompt mode, since a tool's
	// input must be an object, and so is one in a request offering tools,
	// since forcing the answer tool would forbid them, and one with
	// thinking on, which forbids forcing a tool.
	StructuredMode string
	// MaxOutputTokens is the model's output limit, which a thinking
	// request's max_tokens (the budget and the answer's room) stays
	// within; 0 means DefaultOutputCeiling.
	MaxOutputTokens int
	// Thinking is how a reasoning effort is asked for: ThinkingBudget
	// ("" means this) or ThinkingAdaptive.
	Thinking string
}

// Model is a provider.Model for the Anthropic Messages API. It is safe for
// concurrent use.
type Model struct {
	client anthropic.Client
	cfg    Config
}

var _ provider.Model = (*Model)(nil)

// New validates cfg, applies its defaults and returns a Model.
func New(cfg Config) (*Model, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("anthropic: Config.APIKey is required")
	}
	if err := cfg.Resolve("anthropic", DefaultSystem, DefaultIdleTimeout); err != nil {
		return nil, err
	}
	switch cfg.StructuredMode {
	case "":
		cfg.StructuredMode = StructuredTool
	case StructuredTool, StructuredPromptMode:
	default:
		return nil, errors.New("anthropic: Config.StructuredMode must be \"tool\" or \"prompt\"")
	}
	switch cfg.Thinking {
	case "":
		cfg.Thinking = ThinkingBudget
	case ThinkingBudget, ThinkingAdaptive:
	default:
		return nil, errors.New("anthropic: Config.Thinking must be \"budget\" or \"adaptive\"")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = cfg.Pool.Client()
	}
	hc := provider.NoRedirects(cfg.HTTPClient)
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc.Transport = &watchTransport{base: base}
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0), // mspd's retry layer owns every attempt
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	return &Model{client: anthropic.NewClient(opts...), cfg: cfg}, nil
}

// System returns the configured gen_ai.provider.name.
func (m *Model) System() string { return m.cfg.System }

// Stream sends req as one streamed Messages request and reports its text
// deltas (or, in tool mode, the forced tool's input JSON) through onText.
// It returns ctx.Err() itself when ctx ends, and a *provider.Error for
// every other failure.
func (m *Model) Stream(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	if err := ctx.Err(); err != nil {
		return provider.Response{}, err
	}
	params, plan, err := m.params(req)
	if err != nil {
		return provider.Response{}, err
	}
	if onText == nil {
		onText = func(string) {}
	}
	resp := provider.Response{StructuredOutput: plan.structured}

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := httpwatch.New(m.cfg.IdleTimeout, cancel)
	defer w.Stop()
	sctx = context.WithValue(sctx, watchKey{}, w)

	var opts []option.RequestOption
	if req.Attempt > 1 {
		// Tell the API the true retry count; the SDK would always say 0.
		opts = append(opts, option.WithHeader("X-Stainless-Retry-Count", strconv.Itoa(req.Attempt-1)))
	}
	stream := m.client.Messages.NewStreaming(sctx, params, opts...)
	defer stream.Close()

	st := newStreamState(plan, onText)
	st.thoughts.parts = provider.NewReasoningParts(req)
	for !st.stopped && stream.Next() {
		st.handle(stream.Current())
	}
	// Nothing more is read: a late idle firing must not fail a finished
	// stream.
	w.Stop()
	resp.Model, resp.Reasoning = st.model, st.thoughts.reasoning()
	streamErr := stream.Err()

	switch {
	case ctx.Err() != nil:
		return resp, ctx.Err()
	case st.stopped && streamErr == nil:
		// Finished; read on below.
	case st.stopReason != "":
		// message_delta announced the end (and the output count): only
		// message_stop was lost, so the answer stands.
	case w.Fired():
		return resp, w.IdleFailure()
	case streamErr != nil:
		status, header := w.Response()
		return resp, m.failure(streamErr, w.GotHeaders(), status, header)
	default:
		return resp, &provider.Error{Kind: modelretry.KindStreamInterrupted,
			Message: "the stream ended before message_stop"}
	}
	resp.Usage = st.usage()
	switch st.stopReason {
	case anthropic.StopReasonEndTurn, anthropic.StopReasonStopSequence:
		resp.FinishReason = provider.FinishStop
	case anthropic.StopReasonMaxTokens:
		resp.FinishReason = provider.FinishLength
	case anthropic.StopReasonRefusal:
		resp.FinishReason = provider.FinishContentFilter
	case anthropic.StopReasonModelContextWindowExceeded:
		// Not a truncation: more max_tokens cannot help, so it must not
		// become a growing truncation retry.
		resp.FinishReason = string(st.stopReason)
		return resp, &provider.Error{Kind: modelretry.KindContextLengthExceeded,
			Message: "the conversation filled the model's context window"}
	case anthropic.StopReasonToolUse:
		if plan.tool {
			// The forced tool call is the answer.
			resp.FinishReason = provider.FinishStop
			break
		}
		calls, ok := st.calls()
		if !ok {
			return resp, &provider.Error{Kind: modelretry.KindStreamInterrupted, Accepted: true,
				Message: "the response stopped for tool use without a complete tool_use block"}
		}
		resp.FinishReason, resp.ToolCalls = provider.FinishToolCalls, calls
	default:
		resp.FinishReason = string(st.stopReason)
	}
	return resp, nil
}
