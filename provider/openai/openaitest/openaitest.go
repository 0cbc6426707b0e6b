// Package openaitest is a fake OpenAI API server speaking the exact wire
// format (SSE chunks, headers, error bodies), for tests of mspd's OpenAI
// provider and of mspd end to end.
//
// It covers Chat Completions and Responses streaming as retry-background
// §6.1–6.3 describes them (headers, chunk and event shapes, error bodies,
// mid-stream error frames) and streamed tool calls as OpenAI sends them
// (Chat's delta.tool_calls by index, the Responses function_call events
// with their event: lines), answers
// each request with the next scripted Reply, and records every request so
// tests can count attempts and inspect bodies. It checks the images a
// request carries as OpenAI would: Chat's image_url parts and the
// Responses API's input_image parts only in user messages, each a data:
// URL of base64 bytes of the image type it names.
package openaitest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"mspd/provider"
	"mspd/provider/providertest"
)

// Model is the model the fake answers as unless a frame names another.
const Model = "gpt-4o-mini-2024-07-18"

// Done is the stream's terminal frame payload.
const Done = "[DONE]"

// Reply answers one request.
type Reply = providertest.Reply

// Request is one request the server received.
type Request = providertest.Request

// Server is a running fake. Requests to <prefix>/chat/completions and
// <prefix>/responses share one script; any other path gets OpenAI's 404
// body.
type Server struct {
	*providertest.Server
	prefix string
}

// New starts a server under prefix (e.g. "/v1") answering the i-th
// request with replies[i]; a request beyond the script fails the test. The
// server is closed when the test ends.
func New(t testing.TB, prefix string, replies ...Reply) *Server {
	t.Helper()
	prefix = strings.TrimSuffix(prefix, "/")
	return &Server{providertest.New(t, wire(prefix), replies...), prefix}
}

// NewInMemory is New on an in-memory network (package memnet), for tests
// in a testing/synctest bubble: there the provider's idle timers and the
// replies' waits run on the bubble's fake clock. Only Client reaches it.
func NewInMemory(t testing.TB, prefix string, replies ...Reply) *Server {
	t.Helper()
	prefix = strings.TrimSuffix(prefix, "/")
	return &Server{providertest.NewInMemory(t, wire(prefix), replies...), prefix}
}

// URL returns the base URL to configure clients with, prefix included
// (e.g. "http://127.0.0.1:1234/v1").
func (s *Server) URL() string { return s.Server.URL() + s.prefix }

// wire is the OpenAI API's part of the scripted server, under prefix.
func wire(prefix string) providertest.Wire {
	return providertest.Wire{
		Name: "openaitest",
		Misrouted: func(r *http.Request) Reply {
			if r.Method == http.MethodPost && (r.URL.Path == prefix+"/chat/completions" || r.URL.Path == prefix+"/responses") {
				return nil
			}
			return Error(http.StatusNotFound, ErrorBody("Invalid URL ("+r.Method+" "+r.URL.Path+")", "invalid_request_error", ""))
		},
		Check: checkImages,
		Stamp: func(h http.Header, n int) { h.Set("X-Request-Id", fmt.Sprintf("req_fake%04d", n)) },
		Unscripted: func(msg string) Reply {
			return Error(http.StatusTeapot, ErrorBody(msg, "invalid_request_error", ""))
		},
	}
}

// checkImages fails the test for an image OpenAI would refuse: Chat's
// messages[].content[] image_url parts and the Responses API's
// input[].content[] input_image parts, each in a user message, with a
// data: URL of base64 bytes of the media type it names (input_image with
// a detail).
func checkImages(t testing.TB, r Request) {
	for _, list := range []string{"messages", "input"} {
		msgs, _ := r.Body[list].([]any)
		for i, m := range msgs {
			msg, _ := m.(map[string]any)
			parts, _ := msg["content"].([]any)
			for j, p := range parts {
				part, _ := p.(map[string]any)
				var url string
				switch part["type"] {
				case "image_url":
					img, _ := part["image_url"].(map[string]any)
					url, _ = img["url"].(string)
				case "input_image":
					url, _ = part["image_url"].(string)
					if part["detail"] == nil {
						t.Errorf("openaitest: %s[%d].content[%d]: an input_image without a detail", list, i, j)
					}
				default:
					continue
				}
				if msg["role"] != "user" {
					t.Errorf("openaitest: %s[%d]: an image in a %v message", list, i, msg["role"])
				}
				if err := checkDataURL(url); err != nil {
					t.Errorf("openaitest: %s[%d].content[%d]: %v", list, i, j, err)
				}
			}
		}
	}
}

// checkDataURL tells what is wrong with an image's data: URL.
func checkDataURL(url string) error {
	mediaType, data, ok := strings.Cut(strings.TrimPrefix(url, "data:"), ";base64,")
	if !ok || !strings.HasPrefix(url, "data:") {
		return fmt.Errorf("image URL %.40q is not a base64 data: URL", url)
	}
	raw, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return fmt.Errorf("image data is not base64: %v", err)
	}
	if got := provider.Sniff(raw); got == "" || got != mediaType {
		return fmt.Errorf("image URL says %q, the bytes are %q", mediaType, got)
	}
	return nil
}

// commonHeaders are the headers OpenAI sends on every response.
func commonHeaders(h http.Header) {
	h.Set("Openai-Organization", "user-fake")
	h.Set("Openai-Processing-Ms", "42")
	h.Set("Openai-Version", "2020-10-01")
	h.Set("X-Ratelimit-Limit-Requests", "5000")
	h.Set("X-Ratelimit-Limit-Tokens", "160000")
	h.Set("X-Ratelimit-Remaining-Requests", "4999")
	h.Set("X-Ratelimit-Remaining-Tokens", "159976")
	h.Set("X-Ratelimit-Reset-Requests", "12ms")
	h.Set("X-Ratelimit-Reset-Tokens", "9ms")
}

// writeFrames sends the stream's headers and then each payload as one
// flushed frame, a Responses event (a JSON object with a "type") preceded
// by its "event: <type>" line, as OpenAI sends it.
func writeFrames(w http.ResponseWriter, frames []string) {
	h := w.Header()
	commonHeaders(h)
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache, must-revalidate")
	providertest.StartSSE(w).Frames(frames...)
}

// Stream answers 200 with frames, then ends the response cleanly. Without
// Done among the frames that is a stream cut short.
func Stream(frames ...string) Reply {
	return func(w http.ResponseWriter, r *http.Request) { writeFrames(w, frames) }
}

// StreamStall sends frames, then sends nothing more until the client
// gives up: an idle stream.
func StreamStall(frames ...string) Reply {
	return func(w http.ResponseWriter, r *http.Request) {
		writeFrames(w, frames)
		providertest.Stall(r)
	}
}

// StreamAbort sends frames, then drops the connection mid-body, so the
// client reads an unexpected EOF.
func StreamAbort(frames ...string) Reply {
	return func(w http.ResponseWriter, r *http.Request) {
		writeFrames(w, frames)
		providertest.Abort()
	}
}

// StallHeaders never answers: the request waits for headers until the
// client gives up.
func StallHeaders() Reply { return providertest.StallHeaders() }

// Reset resets the TCP connection before any response byte is written.
func Reset() Reply { return providertest.Reset() }

// Error answers status with body as application/json, plus header pairs
// ("Retry-After-Ms", "1500", ...).
func Error(status int, body string, header ...string) Reply {
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		commonHeaders(h)
		h.Set("Content-Type", "application/json; charset=utf-8")
		providertest.SetPairs(h, header...)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// ErrorBody renders OpenAI's error JSON (§6.2); a code of "" is null.
func ErrorBody(message, typ, code string) string {
	e := errorObject{Message: message, Type: typ}
	if code != "" {
		e.Code = &code
	}
	b, _ := json.Marshal(map[string]errorObject{"error": e})
	return string(b)
}

type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Bodies of §6.2, verbatim.
const (
	// RateLimitBody is a transient 429.
	RateLimitBody = `{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-fake on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	// QuotaBody is a 429 that waiting will not cure.
	QuotaBody = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
	// ContextLengthBody is a 400 for a prompt that does not fit.
	ContextLengthBody = `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	// ResponsesContextLengthBody is the Responses API's 400 for an input
	// that does not fit.
	ResponsesContextLengthBody = `{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`
	// ServerErrorBody is a 500.
	ServerErrorBody = `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`
	// OverloadedBody is a 503.
	OverloadedBody = `{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error","param":null,"code":null}}`
)

// chunk is a chat.completion.chunk in OpenAI's member order.
type chunk struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"`
	Created           int64    `json:"created"`
	Model             string   `json:"model"`
	ServiceTier       string   `json:"service_tier"`
	SystemFingerprint string   `json:"system_fingerprint"`
	Choices           []choice `json:"choices"`
	Usage             *usage   `json:"usage"`
}

type choice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	Logprobs     *string `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type delta struct {
	Role string `json:"role,omitempty"`
	// Content is a JSON string, or null.
	Content   json.RawMessage `json:"content,omitempty"`
	Refusal   *string         `json:"refusal,omitempty"`
	ToolCalls []toolCallDelta `json:"tool_calls,omitempty"`
	// ReasoningContent and Reasoning are compatible servers' reasoning
	// (reasoning.go).
	ReasoningContent *string `json:"reasoning_content,omitempty"`
	Reasoning        *string `json:"reasoning,omitempty"`
}

// toolCallDelta is one fragment of a streamed tool call: the first
// carries id, type and name, the later ones only arguments.
type toolCallDelta struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function functionDelta `json:"function"`
}

type functionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type usage struct {
	PromptTokens            int64          `json:"prompt_tokens"`
	CompletionTokens        int64          `json:"completion_tokens"`
	TotalTokens             int64          `json:"total_tokens"`
	PromptTokensDetails     map[string]any `json:"prompt_tokens_details"`
	CompletionTokensDetails map[string]any `json:"completion_tokens_details"`
}

func render(c chunk) string {
	c.ID, c.Object, c.Created = "chatcmpl-fake1", "chat.completion.chunk", 1700000000
	c.ServiceTier, c.SystemFingerprint = "default", "fp_fake"
	if c.Model == "" {
		c.Model = Model
	}
	if c.Choices == nil {
		c.Choices = []choice{}
	}
	b, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// jsonString is s as a JSON string.
func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// Role is the first chunk: the assistant role with empty content.
func Role() string {
	return render(chunk{Choices: []choice{{Delta: delta{Role: "assistant", Content: jsonString("")}}}})
}

// Delta is a content chunk.
func Delta(text string) string {
	return render(chunk{Choices: []choice{{Delta: delta{Content: jsonString(text)}}}})
}

// Refusal is a refusal chunk.
func Refusal(text string) string {
	return render(chunk{Choices: []choice{{Delta: delta{Refusal: &text}}}})
}

// Finish is the chunk carrying finish_reason, with an empty delta.
func Finish(reason string) string {
	return render(chunk{Choices: []choice{{FinishReason: &reason}}})
}

// Usage is the include_usage chunk: empty choices and the counters.
func Usage(prompt, completion, cached, reasoning int64) string {
	return render(chunk{Usage: &usage{
		PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion,
		PromptTokensDetails:     map[string]any{"cached_tokens": cached, "audio_tokens": 0},
		CompletionTokensDetails: map[string]any{"reasoning_tokens": reasoning, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
	}})
}

// ErrorFrame is a mid-stream error frame: data: {"error": {...}}.
func ErrorFrame(message, typ, code string) string { return ErrorBody(message, typ, code) }

// Answer is a whole successful stream: role, one delta per part, finish
// "stop", usage (prompt 12, completion len(parts)) and Done.
func Answer(parts ...string) []string {
	frames := []string{Role()}
	for _, p := range parts {
		frames = append(frames, Delta(p))
	}
	return append(frames, Finish("stop"), Usage(12, int64(len(parts)), 0, 0), Done)
}

// AnswerUsage is Answer reporting prompt and completion tokens: the usage
// that tells a client how full the model's context window is.
func AnswerUsage(prompt, completion int64, parts ...string) []string {
	frames := Answer(parts...)
	frames[len(frames)-2] = Usage(prompt, completion, 0, 0)
	return frames
}

// RAnswer is a whole Responses stream answering text: response.created,
// one output_text delta and response.completed with input and output
// tokens.
func RAnswer(text string, input, output int64) []string {
	return []string{RCreated(), RTextDelta(1, text), RCompleted(2, input, output, 0, 0)}
}

// Call is a tool call to script: its call id (call_…), the function's
// name and its arguments as the model writes them (valid JSON or not).
type Call struct {
	ID, Name, Args string
}

// ToolCallStart is the first chunk of the call at index: its id, type and
// name, with arguments "".
func ToolCallStart(index int, id, name string) string {
	return render(chunk{Choices: []choice{{Delta: delta{ToolCalls: []toolCallDelta{
		{Index: index, ID: id, Type: "function", Function: functionDelta{Name: name}}}}}}})
}

// ToolCallArgs is a later chunk of the call at index: one fragment of its
// arguments.
func ToolCallArgs(index int, fragment string) string {
	return render(chunk{Choices: []choice{{Delta: delta{ToolCalls: []toolCallDelta{
		{Index: index, Function: functionDelta{Arguments: fragment}}}}}}})
}

// ToolCallFrames are the chunks of calls, indexed 0, 1, … in order: each
// call's ToolCallStart, then its arguments in fragments of split bytes
// (the last shorter), cut wherever they fall as a model's tokens do.
func ToolCallFrames(split int, calls ...Call) []string {
	var frames []string
	for i, c := range calls {
		frames = append(frames, ToolCallStart(i, c.ID, c.Name))
		for _, f := range fragments(c.Args, split) {
			frames = append(frames, ToolCallArgs(i, f))
		}
	}
	return frames
}

// fragments cuts s into pieces of n bytes (n < 1 is 1); "" is no piece.
func fragments(s string, n int) []string {
	n = max(n, 1)
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// Tool-call responses' usage: what ToolCalls and RToolCalls report.
const (
	ToolCallPromptTokens     = 80
	ToolCallCompletionTokens = 18
)

// ToolCalls is a whole streamed response calling tools, as OpenAI streams
// it: the first chunk carries the assistant role, content null and the
// first call's start; then ToolCallFrames' chunks, finish_reason
// "tool_calls", the usage chunk (ToolCallPromptTokens,
// ToolCallCompletionTokens) and Done.
func ToolCalls(split int, calls ...Call) []string {
	frames := ToolCallFrames(split, calls...)
	if len(frames) > 0 {
		// Merge the role into the first call's chunk, as OpenAI does.
		var c chunk
		if err := json.Unmarshal([]byte(frames[0]), &c); err != nil {
			panic(err)
		}
		c.Choices[0].Delta.Role, c.Choices[0].Delta.Content = "assistant", json.RawMessage("null")
		frames[0] = render(c)
	}
	return append(frames, Finish("tool_calls"), Usage(ToolCallPromptTokens, ToolCallCompletionTokens, 0, 0), Done)
}

// Responses API events (§6.3). Each carries its sequence_number.

// responseObject is the "response" member of lifecycle events.
type responseObject struct {
	ID                string         `json:"id"`
	Object            string         `json:"object"`
	CreatedAt         int64          `json:"created_at"`
	Status            string         `json:"status"`
	Error             map[string]any `json:"error"`
	IncompleteDetails map[string]any `json:"incomplete_details"`
	Model             string         `json:"model"`
	Output            []any          `json:"output"`
	Usage             map[string]any `json:"usage"`
}

func event(typ string, seq int, fields map[string]any) string {
	fields["type"], fields["sequence_number"] = typ, seq
	b, err := json.Marshal(fields)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func response(status string) *responseObject {
	return &responseObject{ID: "resp_fake1", Object: "response", CreatedAt: 1700000000, Status: status,
		Model: Model, Output: []any{}}
}

func responseUsage(input, output, cached, reasoning int64) map[string]any {
	return map[string]any{"input_tokens": input, "output_tokens": output, "total_tokens": input + output,
		"input_tokens_details": map[string]any{"cached_tokens": cached}, "output_tokens_details": map[string]any{"reasoning_tokens": reasoning}}
}

// RCreated is response.created.
func RCreated() string {
	return event("response.created", 0, map[string]any{"response": response("in_progress")})
}

// RTextDelta is response.output_text.delta number seq.
func RTextDelta(seq int, text string) string {
	return event("response.output_text.delta", seq, map[string]any{"item_id": "msg_fake1", "output_index": 0,
		"content_index": 0, "delta": text, "logprobs": []any{}})
}

// RCompleted is response.completed with usage and the given output items
// (RFunctionCallItem's, say; none is an empty output).
func RCompleted(seq int, input, output, cached, reasoning int64, items ...any) string {
	r := response("completed")
	r.Usage = responseUsage(input, output, cached, reasoning)
	r.Output = append(r.Output, items...)
	return event("response.completed", seq, map[string]any{"response": r})
}

// ItemID is the id (fc_…) the fake gives the function_call output item of
// call c.
func ItemID(c Call) string { return "fc_" + strings.TrimPrefix(c.ID, "call_") }

// RFunctionCallItem is c as a function_call output item: status
// in_progress and arguments "" while it streams (done false), completed
// with its arguments once done.
func RFunctionCallItem(c Call, done bool) map[string]any {
	item := map[string]any{"type": "function_call", "id": ItemID(c), "call_id": c.ID, "name": c.Name,
		"arguments": "", "status": "in_progress"}
	if done {
		item["arguments"], item["status"] = c.Args, "completed"
	}
	return item
}

// RFunctionCall is the events of call c as output item outputIndex,
// numbered from seq: response.output_item.added, its arguments as
// response.function_call_arguments.delta events of split bytes,
// response.function_call_arguments.done and response.output_item.done.
// It returns them and the next sequence number.
func RFunctionCall(seq, outputIndex, split int, c Call) ([]string, int) {
	at := func(fields map[string]any) map[string]any {
		fields["output_index"] = outputIndex
		return fields
	}
	events := []string{event("response.output_item.added", seq, at(map[string]any{"item": RFunctionCallItem(c, false)}))}
	seq++
	for _, f := range fragments(c.Args, split) {
		events = append(events, event("response.function_call_arguments.delta", seq,
			at(map[string]any{"item_id": ItemID(c), "delta": f})))
		seq++
	}
	events = append(events,
		event("response.function_call_arguments.done", seq, at(map[string]any{"item_id": ItemID(c), "arguments": c.Args})),
		event("response.output_item.done", seq+1, at(map[string]any{"item": RFunctionCallItem(c, true)})))
	return events, seq + 2
}

// RToolCalls is a whole Responses stream calling tools: response.created,
// each call's RFunctionCall events (output items 0, 1, …), then
// response.completed whose output lists the calls, with usage
// (ToolCallPromptTokens, ToolCallCompletionTokens).
func RToolCalls(split int, calls ...Call) []string {
	frames, seq := []string{RCreated()}, 1
	items := make([]any, len(calls))
	for i, c := range calls {
		var evs []string
		evs, seq = RFunctionCall(seq, i, split, c)
		frames = append(frames, evs...)
		items[i] = RFunctionCallItem(c, true)
	}
	return append(frames, RCompleted(seq, ToolCallPromptTokens, ToolCallCompletionTokens, 0, 0, items...))
}

// RIncomplete is response.incomplete for reason ("max_output_tokens",
// "content_filter"), with usage.
func RIncomplete(seq int, reason string, input, output int64) string {
	r := response("incomplete")
	r.IncompleteDetails = map[string]any{"reason": reason}
	r.Usage = responseUsage(input, output, 0, 0)
	return event("response.incomplete", seq, map[string]any{"response": r})
}

// RFailed is response.failed with error code and message.
func RFailed(seq int, code, message string) string {
	r := response("failed")
	r.Error = map[string]any{"code": code, "message": message}
	return event("response.failed", seq, map[string]any{"response": r})
}

// RError is the standalone error event.
func RError(seq int, code, message string) string {
	return event("error", seq, map[string]any{"code": code, "message": message, "param": nil})
}
