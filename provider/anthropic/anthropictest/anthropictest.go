// Package anthropictest is a fake Anthropic Messages API server speaking
// the exact wire format (SSE events, headers, error bodies), for tests of
// mspd's Anthropic provider and of mspd end to end.
//
// It speaks the Messages streaming format of retry-background §6.4, checks
// what every request carries (POST /v1/messages, the API key Key, an
// anthropic-version header, a JSON body with "stream": true, a system that
// is a string or text blocks, image blocks only in user messages, each
// base64 of an image of its media_type), answers each
// request with the next scripted Reply, and records every request so tests
// can count attempts and inspect bodies. Replies are canned (Answer,
// ToolUse, the failures) or scripted event by event (Frames, Broken) from
// the event payloads below, tool_use blocks included.
package anthropictest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"mspd/provider"
	"mspd/provider/providertest"
)

// Key is the API key the server expects; a request carrying any other
// credential fails the test.
const Key = "sk-ant-api03-TESTKEY-0123456789abcdef"

// Model is the model the server answers as (message_start's model).
const Model = "claude-test-1"

// Path is the one path the server serves.
const Path = "/v1/messages"

// Reply answers one request.
type Reply = providertest.Reply

// Request is one request the server received.
type Request = providertest.Request

// Server is a running fake. URL returns the base URL to configure clients
// with (ANTHROPIC_BASE_URL, anthropic.Config.BaseURL): scheme and host
// only, as the SDK appends /v1/messages itself.
type Server struct {
	*providertest.Server
}

// wire is the Messages API's part of the scripted server.
var wire = providertest.Wire{
	Name:  "anthropictest",
	Check: check,
	Unscripted: func(msg string) Reply {
		return APIError(http.StatusTeapot, "invalid_request_error", msg)
	},
}

// New starts a server answering request n with replies[n-1]; a request
// beyond the script fails the test and gets a 418 invalid_request_error,
// which mspd does not retry. Every request is checked: POST to Path,
// credential Key (x-api-key, or authorization: Bearer), an
// anthropic-version header, a JSON content type and a JSON body asking to
// stream, and what extended thinking demands (checkThinking); a miss fails
// the test. The server is closed when the test ends.
func New(t testing.TB, replies ...Reply) *Server {
	t.Helper()
	return &Server{providertest.New(t, wire, replies...)}
}

// NewInMemory is New on an in-memory network (package memnet), for tests
// in a testing/synctest bubble: there the provider's idle timers and the
// replies' waits run on the bubble's fake clock. Only Client reaches it.
func NewInMemory(t testing.TB, replies ...Reply) *Server {
	t.Helper()
	return &Server{providertest.NewInMemory(t, wire, replies...)}
}

// check fails the test for what the Messages API would refuse.
func check(t testing.TB, r Request) {
	if r.Method != http.MethodPost || r.Path != Path {
		t.Errorf("anthropictest: request %s %s; want POST %s", r.Method, r.Path, Path)
	}
	if got := credential(r.Header); got != Key {
		t.Errorf("anthropictest: credential %q; want the configured key", got)
	}
	if r.Header.Get("anthropic-version") == "" {
		t.Error("anthropictest: no anthropic-version header")
	}
	if ct := r.Header.Get("content-type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("anthropictest: content-type %q; want application/json", ct)
	}
	if r.Body["stream"] != true {
		t.Errorf("anthropictest: stream = %v; want true", r.Body["stream"])
	}
	checkSystem(t, r.Body["system"])
	msgs, _ := r.Body["messages"].([]any)
	for i, m := range msgs {
		msg, _ := m.(map[string]any)
		blocks, _ := msg["content"].([]any)
		for j, b := range blocks {
			if block, _ := b.(map[string]any); block["type"] == "image" {
				if err := checkImage(block, msg["role"]); err != nil {
					t.Errorf("anthropictest: messages[%d].content[%d]: %v", i, j, err)
				}
			}
		}
	}
	checkThinking(t, r)
}

// checkSystem fails the test for a system the API refuses: it takes a
// string or text blocks, none empty.
func checkSystem(t testing.TB, system any) {
	switch s := system.(type) {
	case nil:
	case string:
		if s == "" {
			t.Error("anthropictest: an empty system")
		}
	case []any:
		for i, b := range s {
			block, _ := b.(map[string]any)
			if text, _ := block["text"].(string); block["type"] != "text" || text == "" {
				t.Errorf("anthropictest: system[%d] = %v; want a text block with text", i, b)
			}
		}
	default:
		t.Errorf("anthropictest: system %T; want a string or text blocks", system)
	}
}

// checkImage tells what the API would refuse of an image block: one in
// an assistant message, a source other than base64 of one of the four
// media types, or data that is not base64 of an image of that type.
func checkImage(block map[string]any, role any) error {
	if role != "user" {
		return fmt.Errorf("an image in a %v message", role)
	}
	src, _ := block["source"].(map[string]any)
	mediaType, _ := src["media_type"].(string)
	data, _ := src["data"].(string)
	if src["type"] != "base64" {
		return fmt.Errorf("image source type %v; want base64", src["type"])
	}
	raw, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return fmt.Errorf("image data is not base64: %v", err)
	}
	if got := provider.Sniff(raw); got == "" || got != mediaType {
		return fmt.Errorf("image media_type %q, bytes %q", mediaType, got)
	}
	return nil
}

// credential is the API key a request carries: x-api-key, or the bearer
// token SDK v2's WithAPIKey sends.
func credential(h http.Header) string {
	if k := h.Get("x-api-key"); k != "" {
		return k
	}
	return strings.TrimPrefix(h.Get("authorization"), "Bearer ")
}

// SSE writes an event stream: Send writes one "event: <event>\ndata:
// <data>\n\n" frame, flushed so the client sees it at once.
type SSE = providertest.SSE

// StartSSE answers 200 with the stream's headers, flushed, and returns a
// writer for its events.
func StartSSE(w http.ResponseWriter) *SSE {
	w.Header().Set("content-type", "text/event-stream")
	w.Header().Set("cache-control", "no-cache")
	w.Header().Set("request-id", "req_011CStreamTest")
	return providertest.StartSSE(w)
}

// Event data, byte for byte as the API sends it.

// MsgStart is message_start with in input tokens (and 1 output token).
func MsgStart(in int) string {
	return fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":%q,"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":1}}}`, Model, in)
}

// MsgStartCached is message_start with in uncached input tokens, read
// tokens read from the prompt cache and create tokens written to it.
func MsgStartCached(in, read, create int) string {
	return fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":%q,"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":1}}}`, Model, in, create, read)
}

const (
	// TextStart is content_block_start of text block 0.
	TextStart = `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`
	// ToolStart is content_block_start of tool_use block 0, the forced
	// "respond" tool mspd uses for structured output.
	ToolStart = `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01","name":"respond","input":{}}}`
	// Ping is a ping event, spaced as the API sends it.
	Ping = `{"type": "ping"}`
	// BlockStop is content_block_stop of block 0.
	BlockStop = `{"type":"content_block_stop","index":0}`
	// MsgStop is message_stop.
	MsgStop = `{"type":"message_stop"}`
)

// TextDelta is a content_block_delta adding text to block 0.
func TextDelta(text string) string { return TextDeltaAt(0, text) }

// JSONDelta is a content_block_delta adding partial tool input JSON to
// block 0.
func JSONDelta(partial string) string { return JSONDeltaAt(0, partial) }

// TextStartAt is content_block_start of text block i.
func TextStartAt(i int) string {
	return fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"text","text":""}}`, i)
}

// TextDeltaAt is a content_block_delta adding text to block i.
func TextDeltaAt(i int, text string) string {
	return fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":%s}}`, i, quote(text))
}

// ToolUseStart is content_block_start of tool_use block i calling tool
// name under call id (toolu_…), with the empty input the API starts every
// streamed tool_use block with.
func ToolUseStart(i int, id, name string) string {
	return fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"tool_use","id":%s,"name":%s,"input":{}}}`, i, quote(id), quote(name))
}

// JSONDeltaAt is a content_block_delta adding a fragment of tool input
// JSON to block i.
func JSONDeltaAt(i int, partial string) string {
	return fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}`, i, quote(partial))
}

// BlockStopAt is content_block_stop of block i.
func BlockStopAt(i int) string {
	return fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, i)
}

// quote is s as a JSON string.
func quote(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// Call is one tool_use block of a scripted response.
type Call struct {
	// ID is the call id (toolu_…) and Name the tool called.
	ID, Name string
	// Fragments are the input's partial_json deltas, in order; none
	// sends no delta, as the API does for a call without arguments.
	Fragments []string
}

// Split cuts s into fragments of n runes (the last may be shorter),
// which land mid-token as the API's input_json_delta fragments do.
func Split(s string, n int) []string {
	var out []string
	r := []rune(s)
	for len(r) > n {
		out = append(out, string(r[:n]))
		r = r[n:]
	}
	if len(r) > 0 {
		out = append(out, string(r))
	}
	return out
}

// ToolUseBlocks are the content block events of a response calling tools:
// a text block 0 holding text unless text is "", then a tool_use block
// per call (content_block_start, an input_json_delta per fragment,
// content_block_stop), indexed on from there.
func ToolUseBlocks(text string, calls ...Call) []string {
	var out []string
	i := 0
	if text != "" {
		out = append(out, TextStartAt(0), TextDeltaAt(0, text), BlockStopAt(0))
		i++
	}
	for _, c := range calls {
		out = append(out, ToolUseStart(i, c.ID, c.Name))
		for _, f := range c.Fragments {
			out = append(out, JSONDeltaAt(i, f))
		}
		out = append(out, BlockStopAt(i))
		i++
	}
	return out
}

// ToolUse streams a complete response asking for calls: message_start
// (25 input tokens), ToolUseBlocks(text, calls...), message_delta with
// stop_reason tool_use and outputTokens, and message_stop.
func ToolUse(outputTokens int, text string, calls ...Call) Reply {
	frames := append([]string{MsgStart(25)}, ToolUseBlocks(text, calls...)...)
	return Frames(append(frames, MsgDelta("tool_use", outputTokens), MsgStop)...)
}

// Frames streams the payloads given, each as an event named after its
// type (an "event: <type>" line, then its data), then ends the body
// cleanly: a stream scripted event by event, and one cut short unless it
// ends with message_stop.
func Frames(payloads ...string) Reply {
	return func(w http.ResponseWriter, r *http.Request) {
		StartSSE(w).Frames(payloads...)
	}
}

// Broken streams the payloads as Frames does, then drops the connection
// mid-body: the client reads an unexpected EOF.
func Broken(payloads ...string) Reply {
	return func(w http.ResponseWriter, r *http.Request) {
		StartSSE(w).Frames(payloads...)
		providertest.Abort()
	}
}

// MsgDelta is message_delta with stop_reason stop and out output tokens.
func MsgDelta(stop string, out int) string {
	return fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d}}`, stop, out)
}

// ErrEvent is an in-stream error event of type typ.
func ErrEvent(typ, msg string) string {
	return fmt.Sprintf(`{"type": "error", "error": {"type": %q, "message": %q}}`, typ, msg)
}

// Answer streams a complete text answer: message_start (25 input tokens),
// a text block with one delta per chunk, message_delta with stop_reason
// stop and outputTokens, and message_stop.
func Answer(stop string, outputTokens int, chunks ...string) Reply {
	return func(w http.ResponseWriter, r *http.Request) {
		s := StartSSE(w)
		s.Send("message_start", MsgStart(25))
		s.Send("content_block_start", TextStart)
		s.Send("ping", Ping)
		for _, c := range chunks {
			s.Send("content_block_delta", TextDelta(c))
		}
		s.Send("content_block_stop", BlockStop)
		s.Send("message_delta", MsgDelta(stop, outputTokens))
		s.Send("message_stop", MsgStop)
	}
}

// APIError answers status with the API's JSON error body of type typ,
// plus header pairs ("retry-after-ms", "1500", ...).
func APIError(status int, typ, msg string, header ...string) Reply {
	return func(w http.ResponseWriter, r *http.Request) {
		providertest.SetPairs(w.Header(), header...)
		w.Header().Set("content-type", "application/json")
		w.Header().Set("request-id", "req_011CErrorTest")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"type":"error","error":{"type":%q,"message":%q},"request_id":"req_011CErrorTest"}`, typ, msg)
	}
}

// PromptTooLong is the API's 400 for a prompt that does not fit: "prompt
// is too long: 208310 tokens > 200000 maximum".
func PromptTooLong(tokens, maximum int) Reply {
	return APIError(http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("prompt is too long: %d tokens > %d maximum", tokens, maximum))
}

// AnswerUsage streams a complete text answer reporting in input and out
// output tokens: message_start, one text block, message_delta with
// stop_reason end_turn, message_stop.
func AnswerUsage(in, out int, text string) Reply {
	return Frames(MsgStart(in), TextStart, TextDelta(text), BlockStop, MsgDelta("end_turn", out), MsgStop)
}

// PlainError answers status with a non-JSON (HTML) body, as a proxy in
// front of the API would.
func PlainError(status int) Reply {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/html")
		w.WriteHeader(status)
		fmt.Fprintf(w, "<html><body>%d %s</body></html>", status, http.StatusText(status))
	}
}

// Reset resets the TCP connection. Before any response byte the client
// sees a connection error; called inside a Reply after StartSSE, it cuts
// the stream mid-body.
func Reset() Reply { return providertest.Reset() }

// Cut streams message_start, a text block with one delta per chunk, then
// ends the body cleanly without message_delta or message_stop: a stream
// cut short.
func Cut(chunks ...string) Reply {
	return func(w http.ResponseWriter, r *http.Request) {
		s := StartSSE(w)
		s.Send("message_start", MsgStart(25))
		s.Send("content_block_start", TextStart)
		for _, c := range chunks {
			s.Send("content_block_delta", TextDelta(c))
		}
	}
}

// StreamError streams message_start, a text block with one delta per chunk
// (no block without chunks), then an in-stream error event of type typ
// with message "Overloaded".
func StreamError(typ string, chunks ...string) Reply {
	return func(w http.ResponseWriter, r *http.Request) {
		s := StartSSE(w)
		s.Send("message_start", MsgStart(25))
		if len(chunks) > 0 {
			s.Send("content_block_start", TextStart)
		}
		for _, c := range chunks {
			s.Send("content_block_delta", TextDelta(c))
		}
		s.Send("error", ErrEvent(typ, "Overloaded"))
	}
}

// Stall starts a stream with message_start and then sends nothing until
// the client leaves: an idle stream.
func Stall() Reply {
	return func(w http.ResponseWriter, r *http.Request) {
		s := StartSSE(w)
		s.Send("message_start", MsgStart(25))
		providertest.Stall(r)
	}
}

// StallHeaders never answers: the request waits for headers until the
// client leaves.
func StallHeaders() Reply { return providertest.StallHeaders() }
