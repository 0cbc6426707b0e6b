// Package scripted is mspd's conformance mock: a provider.Model whose every
// request is answered by a script carried in the turn's own user message, so
// tests and outside checkers can make any provider behaviour happen over the
// real protocol.
//
// A user message whose text is a JSON object with an "mspScript" array is a
// script: the request with Request.Attempt == n is served by entry n-1.
// Attempt numbers count every provider request of the turn, so the model
// keeps no state. Each entry is a Step, rendered by Script:
//
//	{"mspScript": [
//	  {"status": 429, "errorKind": "rateLimited", "retryAfterMs": 40},
//	  {"text": "partial", "cut": true},
//	  {"text": "Hello there", "chunks": 3, "outputTokens": 7}
//	]}
//
// An entry with "calls" asks for tool calls: the request finishes
// "toolCalls" and the turn's next step is the next entry.
//
//	{"calls": [{"id": "c1", "name": "builtin__calculator", "args": "{\"expression\":\"2+2\"}"}]}
//
// An entry with "reasoning" streams that text as the response's reasoning
// (part 0, in word-sized deltas) before its answer; with "signature" too,
// the response returns it as a thinking block signed so, which the turn
// sends back in its next step's request as Anthropic's must be.
//
//	{"reasoning": "Two and two…", "signature": "sig-1", "calls": [...]}
//
// An entry with "echoRequest" answers with the request's history, as a
// JSON array of Echoed: the instructions (a "system" entry first), the
// messages, their images (media type, size, digest), the tool calls and
// their results, and the reasoning sent back, so that a test sees what
// the model was told.
//
//	{"echoRequest": true}
//
// Any other user message is echoed back in word-sized deltas.
//
// When ctx is cancelled, Stream stops before the next delta and returns
// ctx.Err() unwrapped, so errors.Is(err, context.Canceled) and
// err == ctx.Err() both hold.
package scripted

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"mspd/modelretry"
	"mspd/provider"
)

// System is the provider name the scripted model reports.
const System = "scripted"

// Error kinds this package produces on its own, beyond those a script names.
const (
	// KindScriptExhausted fails a request whose attempt has no script
	// entry. It is not in the retry vocabulary, so the retry layer treats
	// it as terminal and the turn ends instead of looping.
	KindScriptExhausted = "scriptExhausted"
	// KindInvalidRequest fails every request of a turn whose script is
	// malformed, naming the problem in the Message.
	KindInvalidRequest = modelretry.KindInvalidRequest
	// KindStreamInterrupted is the default kind of a "cut" entry.
	KindStreamInterrupted = modelretry.KindStreamInterrupted
)

// scriptKey is the member of the user message's JSON object that holds the
// script.
const scriptKey = "mspScript"

// Step is one script entry: how one provider request is answered.
//
// An entry with Status or ErrorKind (and no Cut) fails before any output.
// Otherwise it streams Text; with Cut it then fails as a stream cut after
// output began. Pointer fields distinguish "absent" from an explicit zero.
type Step struct {
	// Status is the HTTP status of a failure; 0 means none (for example a
	// dropped connection).
	Status int `json:"status,omitempty"`
	// ErrorKind is the failure's provider.Error Kind. On a Cut entry it
	// replaces the default KindStreamInterrupted.
	ErrorKind string `json:"errorKind,omitempty"`
	// RetryAfterMs sets the retry-after-ms header of a failure.
	RetryAfterMs *int `json:"retryAfterMs,omitempty"`
	// RetryAfter sets the raw retry-after header of a failure (seconds or
	// an HTTP date, or garbage to test parsing).
	RetryAfter string `json:"retryAfter,omitempty"`
	// ShouldRetry sets the x-should-retry header of a failure.
	ShouldRetry *bool `json:"shouldRetry,omitempty"`
	// Message is the failure's message; a default names the attempt.
	Message string `json:"message,omitempty"`

	// Text is the answer to stream.
	Text string `json:"text,omitempty"`
	// Chunks is the exact number of deltas Text is streamed in (default
	// 1, at most one per rune); the split is as even as rune boundaries
	// allow and never yields an empty delta.
	Chunks int `json:"chunks,omitempty"`
	// OutputTokens is the reported output token count; the default is the
	// word count of Text. Either is clamped to Request.MaxTokens when
	// that is positive, so budget growth shows in usage.
	OutputTokens *int `json:"outputTokens,omitempty"`
	// Finish is the finish reason: "stop" (default), "length" or
	// "contentFilter".
	Finish string `json:"finish,omitempty"`
	// Usage false reports no usage. A Cut or failing entry reports usage
	// only when Usage is explicitly true.
	Usage *bool `json:"usage,omitempty"`
	// Calls are tool calls the answer makes after its Text, named as the
	// request's tools are; the request then finishes "toolCalls".
	Calls []Call `json:"calls,omitempty"`
	// ToolNames appends to Text the model-facing names of the tools the
	// request offers, sorted and comma-separated: a test reads what a
	// turn was offered from its answer.
	ToolNames bool `json:"toolNames,omitempty"`
	// StructuredOutput is the mode reported when the request has a
	// ResponseSchema: "native" (default) or "prompt". It is ignored for a
	// request without a schema.
	StructuredOutput string `json:"structuredOutput,omitempty"`
	// EchoRequest streams, as the answer's text, the JSON of the request's
	// messages ([]Echoed); Text is then unset.
	EchoRequest bool `json:"echoRequest,omitempty"`
	// Cut streams Text and then fails with KindStreamInterrupted.
	Cut bool `json:"cut,omitempty"`
	// NeedsMaxTokens makes the request finish "length" unless
	// Request.MaxTokens >= NeedsMaxTokens. An unset MaxTokens (0) counts
	// as too small.
	NeedsMaxTokens int `json:"needsMaxTokens,omitempty"`
	// DelayMs waits before the first delta (or before failing).
	DelayMs int `json:"delayMs,omitempty"`
	// ChunkDelayMs waits between deltas.
	ChunkDelayMs int `json:"chunkDelayMs,omitempty"`
	// Reasoning streams as the response's reasoning before Text; its
	// words count as reasoning tokens, within OutputTokens' default.
	Reasoning string `json:"reasoning,omitempty"`
	// Signature, with Reasoning, returns it as a signed thinking block
	// (provider.ReasoningThinking), for the turn to send back.
	Signature string `json:"signature,omitempty"`
}

// Call is a scripted tool call.
type Call struct {
	// ID is the provider's call id; a default names the attempt and the
	// call's place.
	ID string `json:"id,omitempty"`
	// Name is the tool's model-facing name.
	Name string `json:"name"`
	// Args is the argument text, verbatim: it need not be JSON.
	Args string `json:"args"`
}

// Echoed is one message of an EchoRequest answer: a user's or assistant's
// text and tool calls, a user's images, or a tool message's results; or,
// first, the request's instructions as role "system".
type Echoed struct {
	Role      string               `json:"role"`
	Text      string               `json:"text,omitempty"`
	Images    []EchoedImage        `json:"images,omitempty"`
	Calls     []Call               `json:"calls,omitempty"`
	Results   []Result             `json:"results,omitempty"`
	Reasoning []provider.Reasoning `json:"reasoning,omitempty"`
}

// RoleSystem is the role of the Echoed entry holding the instructions.
const RoleSystem = "system"

// EchoedImage is an image as an EchoRequest answer reports it: what the
// request carried, not the bytes themselves.
type EchoedImage struct {
	MediaType string `json:"mediaType"`
	// Bytes is the size of the bytes sent, decoded.
	Bytes int `json:"bytes"`
	// SHA256 is their digest, hex; "" when Data was not base64.
	SHA256 string `json:"sha256"`
}

// Result is a tool result as an EchoRequest answer reports it.
type Result struct {
	CallID  string `json:"callId"`
	Name    string `json:"name,omitempty"`
	Text    string `json:"text"`
	IsError bool   `json:"isError,omitempty"`
}

// echoRequest renders the messages of req.
func echoRequest(req provider.Request) string {
	out := []Echoed{}
	if req.Instructions != "" {
		out = append(out, Echoed{Role: RoleSystem, Text: req.Instructions})
	}
	for _, m := range req.Messages {
		e := Echoed{Role: m.Role, Text: m.Text, Reasoning: m.Reasoning}
		for _, im := range m.Images {
			e.Images = append(e.Images, echoImage(im))
		}
		for _, c := range m.ToolCalls {
			e.Calls = append(e.Calls, Call{ID: c.ID, Name: c.Name, Args: c.Args})
		}
		for _, r := range m.ToolResults {
			e.Results = append(e.Results, Result{CallID: r.CallID, Name: r.Name, Text: r.Text, IsError: r.IsError})
		}
		out = append(out, e)
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic("scripted: " + err.Error()) // strings and bools always marshal
	}
	return string(b)
}

// echoImage reports what a request carried of an image.
func echoImage(im provider.Image) EchoedImage {
	e := EchoedImage{MediaType: im.MediaType}
	if b, err := base64.StdEncoding.DecodeString(im.Data); err == nil {
		sum := sha256.Sum256(b)
		e.Bytes, e.SHA256 = len(b), hex.EncodeToString(sum[:])
	}
	return e
}

// Script renders steps as the user message text that scripts a turn.
func Script(steps ...Step) string {
	if steps == nil {
		steps = []Step{} // an empty script, not null
	}
	b, err := json.Marshal(map[string][]Step{scriptKey: steps})
	if err != nil {
		// Step holds only strings, ints, bools and slices of them, which always marshal.
		panic("scripted: " + err.Error())
	}
	return string(b)
}

// Model is the scripted provider.Model. The zero value is ready to use and
// safe for concurrent use: it keeps no state between requests.
type Model struct{}

// New returns a scripted model.
func New() *Model { return &Model{} }

// System implements provider.Model.
func (*Model) System() string { return System }

// Stream implements provider.Model by serving the script entry for
// req.Attempt, or by echoing an unscripted user message.
func (m *Model) Stream(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	if err := ctx.Err(); err != nil {
		return provider.Response{}, err
	}
	text := provider.LastUserText(req.Messages)
	steps, scripted, err := parseScript(text)
	if err != nil {
		return provider.Response{}, &provider.Error{Kind: KindInvalidRequest, Message: err.Error(), Err: err}
	}
	if !scripted {
		return echo(ctx, req, text, onText)
	}
	if req.Attempt < 1 {
		return provider.Response{}, &provider.Error{
			Kind:    KindInvalidRequest,
			Message: fmt.Sprintf("scripted: request Attempt is %d; a scripted turn needs the 1-based attempt number", req.Attempt),
		}
	}
	if req.Attempt > len(steps) {
		return provider.Response{}, &provider.Error{
			Kind:    KindScriptExhausted,
			Message: fmt.Sprintf("scripted: attempt %d is beyond the script's %d entries", req.Attempt, len(steps)),
		}
	}
	return serve(ctx, req, steps[req.Attempt-1], onText)
}

// serve answers req with step s.
func serve(ctx context.Context, req provider.Request, s Step, onText func(string)) (provider.Response, error) {
	if err := wait(ctx, s.DelayMs); err != nil {
		return provider.Response{}, err
	}
	resp := provider.Response{Model: modelName(req)}
	if s.failsBeforeOutput() {
		if s.Usage != nil && *s.Usage {
			resp.Usage = s.usage(req, 0)
		}
		return resp, s.failure(req.Attempt, "scripted failure before output")
	}

	if s.EchoRequest {
		s.Text = echoRequest(req)
	}
	if s.ToolNames {
		s.Text += toolNames(req)
	}
	if err := s.reason(ctx, req, &resp); err != nil {
		return provider.Response{}, err
	}
	if err := streamChunks(ctx, split(s.Text, s.Chunks), s.ChunkDelayMs, onText); err != nil {
		return provider.Response{}, err
	}

	if s.Cut {
		if s.Usage != nil && *s.Usage {
			resp.Usage = s.usage(req, wordCount(s.Text)+wordCount(s.Reasoning))
		}
		return resp, s.failure(req.Attempt, "scripted stream cut after output began")
	}

	resp.FinishReason = provider.FinishStop
	if s.Finish != "" {
		resp.FinishReason = s.Finish
	}
	for i, c := range s.Calls {
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", req.Attempt, i+1)
		}
		resp.ToolCalls = append(resp.ToolCalls, provider.ToolCall{ID: id, Name: c.Name, Args: c.Args})
		resp.FinishReason = provider.FinishToolCalls
	}
	if s.NeedsMaxTokens > 0 && req.MaxTokens < s.NeedsMaxTokens {
		resp.FinishReason = provider.FinishLength
	}
	if s.Usage == nil || *s.Usage {
		resp.Usage = s.usage(req, wordCount(s.Text)+wordCount(s.Reasoning))
	}
	if len(req.ResponseSchema) > 0 {
		resp.StructuredOutput = provider.StructuredNative
		if s.StructuredOutput != "" {
			resp.StructuredOutput = s.StructuredOutput
		}
	}
	return resp, nil
}

// toolNames lists the model-facing names of req's tools, sorted.
func toolNames(req provider.Request) string {
	names := make([]string, len(req.Tools))
	for i, t := range req.Tools {
		names[i] = t.Name
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// echo answers an unscripted turn with its own text.
func echo(ctx context.Context, req provider.Request, text string, onText func(string)) (provider.Response, error) {
	if err := streamChunks(ctx, provider.SplitWords(text), 0, onText); err != nil {
		return provider.Response{}, err
	}
	resp := provider.Response{
		FinishReason: provider.FinishStop,
		Usage: &provider.Usage{
			InputTokens:  inputTokens(req.Messages),
			OutputTokens: clamp(wordCount(text), req.MaxTokens),
		},
		Model: modelName(req),
	}
	if len(req.ResponseSchema) > 0 {
		resp.StructuredOutput = provider.StructuredNative
	}
	return resp, nil
}

// failsBeforeOutput reports whether s fails without streaming.
func (s Step) failsBeforeOutput() bool {
	return !s.Cut && (s.Status != 0 || s.ErrorKind != "")
}

// failure builds the *provider.Error s describes.
func (s Step) failure(attempt int, what string) *provider.Error {
	e := &provider.Error{Kind: s.ErrorKind, HTTPStatus: s.Status, Message: s.Message}
	if s.Cut && e.Kind == "" {
		e.Kind = KindStreamInterrupted
	}
	if e.Message == "" {
		e.Message = fmt.Sprintf("%s (attempt %d)", what, attempt)
	}
	h := http.Header{}
	if s.RetryAfterMs != nil {
		h.Set("retry-after-ms", strconv.Itoa(*s.RetryAfterMs))
	}
	if s.RetryAfter != "" {
		h.Set("retry-after", s.RetryAfter)
	}
	if s.ShouldRetry != nil {
		h.Set("x-should-retry", strconv.FormatBool(*s.ShouldRetry))
	}
	if len(h) > 0 {
		e.Header = h
	}
	return e
}

// usage is the usage s reports, with defaultOut output tokens unless the
// step names a count.
func (s Step) usage(req provider.Request, defaultOut int64) *provider.Usage {
	out := defaultOut
	if s.OutputTokens != nil {
		out = int64(*s.OutputTokens)
	}
	return &provider.Usage{InputTokens: inputTokens(req.Messages), OutputTokens: clamp(out, req.MaxTokens),
		ReasoningTokens: clamp(wordCount(s.Reasoning), req.MaxTokens)}
}

// reason streams s's reasoning, and returns it signed when s says so.
func (s Step) reason(ctx context.Context, req provider.Request, resp *provider.Response) error {
	if s.Reasoning == "" {
		return nil
	}
	parts := provider.NewReasoningParts(req)
	err := streamChunks(ctx, provider.SplitWords(s.Reasoning), s.ChunkDelayMs, func(text string) { parts.Add("0", text) })
	if err != nil {
		return err
	}
	resp.Reasoning = []provider.Reasoning{{Kind: provider.ReasoningThinking, Text: s.Reasoning, Signature: s.Signature}}
	return nil
}

// validate rejects entries whose meaning would be ambiguous, so a typo in
// a script fails the turn instead of silently testing something else.
func (s Step) validate() error {
	switch {
	case s.Status != 0 && (s.Status < 100 || s.Status > 599):
		return fmt.Errorf("status %d is not an HTTP status", s.Status)
	case s.Chunks < 0:
		return fmt.Errorf("chunks %d is negative", s.Chunks)
	case s.OutputTokens != nil && *s.OutputTokens < 0:
		return fmt.Errorf("outputTokens %d is negative", *s.OutputTokens)
	case s.NeedsMaxTokens < 0:
		return fmt.Errorf("needsMaxTokens %d is negative", s.NeedsMaxTokens)
	case s.DelayMs < 0 || s.ChunkDelayMs < 0:
		return errors.New("delayMs and chunkDelayMs must not be negative")
	}
	switch s.Finish {
	case "", provider.FinishStop, provider.FinishLength, provider.FinishContentFilter:
	default:
		return fmt.Errorf("finish %q is not stop, length or contentFilter", s.Finish)
	}
	switch s.StructuredOutput {
	case "", provider.StructuredNative, provider.StructuredPrompt:
	default:
		return fmt.Errorf("structuredOutput %q is not native or prompt", s.StructuredOutput)
	}
	if s.Signature != "" && s.Reasoning == "" {
		return errors.New("a signature signs reasoning: add reasoning")
	}
	if s.EchoRequest && (s.Text != "" || s.Cut || s.failsBeforeOutput() || len(s.Calls) > 0) {
		return errors.New("echoRequest answers with its own text: drop text, calls, cut, status and errorKind")
	}
	if s.failsBeforeOutput() {
		if s.Text != "" || s.Reasoning != "" || s.ToolNames || s.Chunks != 0 || s.Finish != "" || s.NeedsMaxTokens != 0 || s.StructuredOutput != "" {
			return errors.New("a failure (status or errorKind) streams nothing; add \"cut\": true to fail after text")
		}
		return nil
	}
	if s.Cut && (s.Finish != "" || s.NeedsMaxTokens != 0 || s.StructuredOutput != "") {
		return errors.New("a cut stream has no finish; drop finish, needsMaxTokens and structuredOutput")
	}
	if !s.Cut && (s.RetryAfterMs != nil || s.RetryAfter != "" || s.ShouldRetry != nil || s.Message != "") {
		return errors.New("retryAfterMs, retryAfter, shouldRetry and message need status, errorKind or cut")
	}
	return nil
}

// parseScript reads the script from a user message. scripted is false for
// a message that is not a script; err is set for a message that tries to
// be one and fails.
func parseScript(text string) (steps []Step, scripted bool, err error) {
	trimmed := strings.TrimSpace(text)
	if !strings.HasPrefix(trimmed, "{") {
		return nil, false, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(trimmed), &top); err != nil {
		// Broken JSON that mentions the key was meant as a script; echoing
		// it would hide the typo.
		if strings.Contains(trimmed, `"`+scriptKey+`"`) {
			return nil, true, fmt.Errorf("scripted: %s is not valid JSON: %v", scriptKey, err)
		}
		return nil, false, nil
	}
	raw, ok := top[scriptKey]
	if !ok {
		return nil, false, nil
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil || entries == nil {
		return nil, true, fmt.Errorf("scripted: %s must be an array of objects", scriptKey)
	}
	steps = make([]Step, len(entries))
	for i, e := range entries {
		if !bytes.HasPrefix(bytes.TrimSpace(e), []byte("{")) {
			return nil, true, fmt.Errorf("scripted: %s[%d] must be an object", scriptKey, i)
		}
		dec := json.NewDecoder(bytes.NewReader(e))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&steps[i]); err != nil {
			return nil, true, fmt.Errorf("scripted: %s[%d]: %v", scriptKey, i, err)
		}
		if err := steps[i].validate(); err != nil {
			return nil, true, fmt.Errorf("scripted: %s[%d]: %v", scriptKey, i, err)
		}
	}
	return steps, true, nil
}

// streamChunks delivers chunks in order, checking ctx before each one so a
// cancelled turn stops streaming at once.
func streamChunks(ctx context.Context, chunks []string, delayMs int, onText func(string)) error {
	for i, c := range chunks {
		if i > 0 {
			if err := wait(ctx, delayMs); err != nil {
				return err
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		onText(c)
	}
	return ctx.Err()
}

// wait sleeps ms milliseconds unless ctx ends first.
func wait(ctx context.Context, ms int) error {
	return provider.Wait(ctx, time.Duration(ms)*time.Millisecond)
}

// split cuts text into n deltas on rune boundaries, as evenly as possible:
// the first len%n deltas carry one rune more. n defaults to 1 and is
// capped at the rune count so no delta is empty.
func split(text string, n int) []string {
	runes := utf8.RuneCountInString(text)
	if runes == 0 {
		return nil
	}
	n = max(1, min(n, runes))
	size, extra := runes/n, runes%n
	chunks := make([]string, 0, n)
	start := 0
	for i := range n {
		want := size
		if i < extra {
			want++
		}
		end := start
		for range want {
			_, w := utf8.DecodeRuneInString(text[end:])
			end += w
		}
		chunks = append(chunks, text[start:end])
		start = end
	}
	return chunks
}

// inputTokens estimates the prompt at about four bytes a token (four
// characters of English): counting bytes keeps the estimate O(messages)
// on a long history, where counting runes cost a pass over every byte.
func inputTokens(msgs []provider.Message) int64 {
	n := 0
	for _, m := range msgs {
		n += len(m.Text)
	}
	return int64(max(1, (n+3)/4))
}

func wordCount(text string) int64 { return int64(len(strings.Fields(text))) }

// clamp bounds reported output tokens by the request's budget.
func clamp(out int64, maxTokens int) int64 {
	if maxTokens > 0 && out > int64(maxTokens) {
		return int64(maxTokens)
	}
	return out
}

func modelName(req provider.Request) string {
	if req.Model != "" {
		return req.Model
	}
	return System
}
