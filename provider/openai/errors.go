package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"mspd/modelretry"
	"mspd/provider"
)

// maxMessage bounds provider.Error.Message; OpenAI's rate-limit messages
// (which carry "try again in 1.2s") fit easily.
const maxMessage = 500

// maxErrorBody bounds how much of an unparsed error body is read.
const maxErrorBody = 64 << 10

// failure turns what ended a stream into a *provider.Error. The caller has
// already returned ctx.Err() if the caller's context ended.
//
//	idle watchdog fired               → timeout (HTTP 0)
//	HTTP status >= 400                → the status, retry headers, and a Kind
//	                                    from the body's code/type (bodyKind)
//	data: {"error": {...}} frame      → streamError's table
//	client timeout (net.Error)        → timeout
//	body broke after a 2xx            → streamInterrupted (reset, unexpected
//	                                    EOF, a chunk that does not parse)
//	no response at all                → connectionError (refused, reset, DNS,
//	                                    TLS, EOF before headers)
func (m *Model) failure(err error, w *watch) error {
	if pe := provider.RedirectError(err); pe != nil {
		return pe
	}
	if w.Fired() {
		return w.IdleFailure()
	}
	var ae *oai.Error
	if errors.As(err, &ae) {
		return m.apiError(ae, w)
	}
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		return m.streamError(se.Event.Data)
	}
	if status, header := w.Response(); status >= 400 {
		// The SDK failed to parse the error body ({"error": "text"}, say):
		// the status and headers still say what happened.
		return &provider.Error{HTTPStatus: status, Header: modelretry.KeepSignals(header),
			Message: statusText(status)}
	}
	cause := unwrapURL(err)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return &provider.Error{Kind: modelretry.KindTimeout, Message: "request timed out: " + m.redact(cause.Error()), Err: cause}
	}
	if w.GotHeaders() {
		return &provider.Error{Kind: modelretry.KindStreamInterrupted, Message: "the stream broke: " + m.redact(cause.Error()), Err: cause}
	}
	return &provider.Error{Kind: modelretry.KindConnectionError, Message: "no response: " + m.redact(cause.Error()), Err: cause}
}

// apiError maps an HTTP error response. The *oai.Error itself is not kept
// as Err: it holds the request (Authorization header included) and the raw
// body, which may quote the key.
func (m *Model) apiError(ae *oai.Error, w *watch) *provider.Error {
	code, typ, msg := ae.Code, ae.Type, ae.Message
	if msg == "" && ae.Response != nil && ae.Response.Body != nil {
		// vLLM and some gateways put the error at the top level.
		code, typ, msg = topLevelError(ae.Response.Body)
	}
	if msg == "" {
		msg = statusText(ae.StatusCode)
	}
	_, h := w.Response()
	if ae.Response != nil {
		h = ae.Response.Header
	}
	return &provider.Error{Kind: bodyKind(code, typ), HTTPStatus: ae.StatusCode,
		Header: modelretry.KeepSignals(h), Message: m.redact(msg)}
}

// bodyKind is the Kind an HTTP error body's code or type adds to its
// status. Only what the status cannot tell is named; everything else is
// left to the status (429 → rateLimited, 401 → auth, 5xx → serverError...).
//
//	insufficient_quota        → quotaExhausted (a 429 that must not be retried)
//	rate_limit_exceeded       → rateLimited
//	context_length_exceeded   → contextLengthExceeded
//	model_not_found           → notFound
func bodyKind(code, typ string) string {
	for _, s := range [...]string{code, typ} {
		switch strings.ToLower(s) {
		case "insufficient_quota":
			return modelretry.KindQuotaExhausted
		case "rate_limit_exceeded":
			return modelretry.KindRateLimited
		case "context_length_exceeded":
			return modelretry.KindContextLengthExceeded
		case "model_not_found":
			return modelretry.KindNotFound
		case "content_filter", "content_policy_violation":
			// Azure's filter: asking again gets the same answer.
			return modelretry.KindContentFilter
		}
	}
	return ""
}

// streamError maps a data: {"error": {...}} frame received after a 200.
// There is no status, so the one the error type implies is reported
// (retry-background §10), so that mspd's notice shows it:
//
//	insufficient_quota                          → quotaExhausted, 429
//	rate_limit_exceeded, rate_limit_error       → rateLimited, 429
//	context_length_exceeded                     → contextLengthExceeded, 400
//	model_not_found                             → notFound, 404
//	invalid_request_error, BadRequestError,
//	  invalid_prompt                            → invalidRequest, 400
//	server_error, api_error, internal_error,
//	  InternalServerError                       → serverError, 500
//	overloaded, overloaded_error, slow_down,
//	  engine_overloaded, server_overloaded,
//	  service_unavailable, ServiceUnavailableError → overloaded, 503
//	numeric code 400..599 (vLLM)                → Kind "", that status
//	anything else                               → streamInterrupted, 0
//
// OpenAI reports overload as 503 (not Anthropic's 529), hence 503. An
// unrecognised frame is a stream that ended without its terminal event:
// streamInterrupted, retried while nothing was committed.
func (m *Model) streamError(data []byte) *provider.Error {
	var f struct {
		Error struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(data, &f) // a frame that is not an object is still an error frame
	e := f.Error
	var code string
	var status int
	if err := json.Unmarshal(e.Code, &code); err != nil {
		if n, err := strconv.Atoi(string(e.Code)); err == nil {
			status = n
		}
	}
	msg := e.Message
	if msg == "" {
		msg = "the server sent an error in the stream"
	}
	// The stream was open: whatever it cost is unknown, not zero.
	pe := &provider.Error{Message: m.redact(msg), Accepted: true}
	pe.Kind, pe.HTTPStatus = frameKind(code, e.Type)
	if pe.Kind == modelretry.KindStreamInterrupted && status >= 400 && status <= 599 {
		pe.Kind, pe.HTTPStatus = "", status
	}
	return pe
}

func frameKind(code, typ string) (string, int) {
	if k := bodyKind(code, typ); k != "" {
		switch k {
		case modelretry.KindQuotaExhausted, modelretry.KindRateLimited:
			return k, http.StatusTooManyRequests
		case modelretry.KindNotFound:
			return k, http.StatusNotFound
		}
		return k, http.StatusBadRequest
	}
	for _, s := range [...]string{code, typ} {
		switch strings.ToLower(s) {
		case "rate_limit_error":
			return modelretry.KindRateLimited, http.StatusTooManyRequests
		case "invalid_request_error", "badrequesterror", "invalid_prompt":
			return modelretry.KindInvalidRequest, http.StatusBadRequest
		case "server_error", "api_error", "internal_error", "internalservererror":
			return modelretry.KindServerError, http.StatusInternalServerError
		case "overloaded", "overloaded_error", "slow_down", "engine_overloaded",
			"server_overloaded", "service_unavailable", "serviceunavailableerror":
			return modelretry.KindOverloaded, http.StatusServiceUnavailable
		}
	}
	return modelretry.KindStreamInterrupted, 0
}

// topLevelError reads {"message", "type", "code"} from an error body that
// has no "error" member.
func topLevelError(body io.Reader) (code, typ, msg string) {
	b, _ := io.ReadAll(io.LimitReader(body, maxErrorBody))
	var f struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(b, &f) != nil {
		return "", "", ""
	}
	_ = json.Unmarshal(f.Code, &code)
	return code, f.Type, f.Message
}

// unwrapURL drops *url.Error's "Post \"<url>\":" prefix: the URL says
// nothing the caller does not know, and a configured one may carry
// credentials in its query or user info.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}

func statusText(status int) string {
	if t := http.StatusText(status); t != "" {
		return t
	}
	return fmt.Sprintf("HTTP %d", status)
}

// secretPattern matches OpenAI-style secret keys ("sk-...", "sk-proj-...")
// and bearer tokens, including the masked forms OpenAI quotes back in 401
// messages ("sk-proj-****abcd").
var secretPattern = regexp.MustCompile(`(?i)\bsk-[A-Za-z0-9_\-*.]{4,}|\bbearer\s+[A-Za-z0-9_\-*.~+/=]{8,}`)

// redact removes the configured key and anything shaped like a key from a
// message, and bounds its length.
func (m *Model) redact(s string) string {
	if k := m.cfg.APIKey; k != "" {
		s = strings.ReplaceAll(s, k, "[redacted]")
	}
	s = secretPattern.ReplaceAllString(s, "[redacted]")
	if len(s) > maxMessage {
		s = strings.ToValidUTF8(s[:maxMessage], "") + "…"
	}
	return s
}
