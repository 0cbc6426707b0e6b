package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"mspd/modelretry"
	"mspd/provider"
)

// maxMessage bounds provider text carried in an Error's Message.
const maxMessage = 300

// typeInfo says what an Anthropic error type (error.type) means to mspd:
// the kind hint, and the HTTP status the type implies when it arrives in a
// stream after a 200 (the API docs pair them so). Unknown types give
// ("", 0).
func typeInfo(typ string) (kind string, status int) {
	switch typ {
	case "invalid_request_error":
		return modelretry.KindInvalidRequest, http.StatusBadRequest
	case "authentication_error":
		return modelretry.KindAuth, http.StatusUnauthorized
	case "billing_error":
		return modelretry.KindQuotaExhausted, http.StatusPaymentRequired
	case "permission_error":
		return modelretry.KindAuth, http.StatusForbidden
	case "not_found_error":
		return modelretry.KindNotFound, http.StatusNotFound
	case "conflict_error":
		return modelretry.KindConflict, http.StatusConflict
	case "request_too_large":
		return modelretry.KindInvalidRequest, http.StatusRequestEntityTooLarge
	case "rate_limit_error":
		return modelretry.KindRateLimited, http.StatusTooManyRequests
	case "api_error":
		return modelretry.KindServerError, http.StatusInternalServerError
	case "timeout_error":
		return modelretry.KindTimeout, http.StatusGatewayTimeout
	case "overloaded_error":
		return modelretry.KindOverloaded, 529
	}
	return "", 0
}

// kindForType maps error.type (and, for invalid requests, the message) to a
// kind hint; "" leaves the kind to the HTTP status.
func kindForType(typ, msg string) string {
	if typ == "invalid_request_error" && contextTooLong(msg) {
		return modelretry.KindContextLengthExceeded
	}
	kind, _ := typeInfo(typ)
	return kind
}

// contextTooLong recognises the 400s that say the prompt does not fit:
// "prompt is too long: 210000 tokens > 200000 maximum", and "input length
// and `max_tokens` exceed context limit", which a grown max_tokens causes
// and a retry cannot fix.
func contextTooLong(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "prompt is too long") || strings.Contains(m, "exceed context limit")
}

// failure describes a failed request. gotHeaders says whether response
// headers had arrived, which splits a dropped connection (nothing came)
// from an interrupted stream; status and header describe an error
// response whose body could not be read.
func (m *Model) failure(err error, gotHeaders bool, status int, header http.Header) *provider.Error {
	var aerr *anthropic.Error
	if errors.As(err, &aerr) {
		return m.redact(apiError(aerr))
	}
	if pe := provider.RedirectError(err); pe != nil {
		return pe
	}
	if status >= 400 {
		// The error body broke off: the status and its headers still say
		// what happened and when to retry.
		return m.redact(&provider.Error{HTTPStatus: status, Header: modelretry.KeepSignals(header), Err: err,
			Message: fmt.Sprintf("HTTP %d; the error body was cut off", status)})
	}
	cause := err
	var uerr *url.Error
	if errors.As(err, &uerr) {
		cause = uerr.Err // the URL adds nothing users need
	}
	pe := &provider.Error{Err: err}
	switch {
	case isTimeout(err):
		pe.Kind, pe.Message = modelretry.KindTimeout, "the request timed out: "+cause.Error()
	case !gotHeaders:
		pe.Kind, pe.Message = modelretry.KindConnectionError, "no response from the provider: "+cause.Error()
	default:
		pe.Kind, pe.Message = modelretry.KindStreamInterrupted, "the stream broke: "+cause.Error()
	}
	return m.redact(pe)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// apiError maps an API error: an HTTP error response, or an SSE error
// event after a 200.
func apiError(aerr *anthropic.Error) *provider.Error {
	typ, msg, code := errorBody(aerr.RawJSON())
	if typ == "" {
		typ = string(aerr.Type())
	}
	if msg == "" {
		msg = aerr.Message
	}
	pe := &provider.Error{Kind: kindForType(typ, msg), HTTPStatus: aerr.StatusCode, Err: detach(aerr)}
	if spendLimit(code) {
		pe.Kind = modelretry.KindQuotaExhausted
	}
	if aerr.StatusCode < 400 {
		// An in-stream error: report the status its type implies
		// (overloaded_error → 529); its 200's headers say nothing about it.
		// A type mspd does not know still broke an accepted stream.
		_, pe.HTTPStatus = typeInfo(typ)
		pe.Accepted = true
		if pe.Kind == "" {
			pe.Kind = modelretry.KindStreamInterrupted
		}
		pe.Message = "error event in the stream: " + describe(typ, msg, 0)
		return pe
	}
	if aerr.Response != nil {
		pe.Header = modelretry.KeepSignals(aerr.Response.Header)
	}
	pe.Message = describe(typ, msg, aerr.StatusCode)
	return pe
}

// errorBody reads {"type":"error","error":{"type":..., "message":...}}
// itself, so types the SDK does not list (request_too_large) still count.
func errorBody(raw string) (typ, msg, code string) {
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Details struct {
				ErrorCode string `json:"error_code"`
			} `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(raw), &body) != nil {
		return "", "", ""
	}
	return body.Error.Type, body.Error.Message, body.Error.Details.ErrorCode
}

// spendLimit tells the 429 error codes of a spent budget: waiting
// seconds will not help, unlike a rate limit.
func spendLimit(code string) bool {
	return code == "enforced_spend_limit_reached" || code == "contract_spend_limit_reached"
}

func describe(typ, msg string, status int) string {
	switch {
	case typ != "" && msg != "":
		return typ + ": " + msg
	case typ != "":
		return typ
	case msg != "":
		return msg
	}
	return http.StatusText(status)
}

// detach copies an API error without its request and response, which
// carry the credential header.
func detach(aerr *anthropic.Error) error {
	c := *aerr
	c.Request, c.Response = nil, nil
	return &c
}

// redact removes the API key from everything an Error says, in case a
// server or proxy echoes it, and only then bounds the message: clipping
// first could leave a partial key behind.
func (m *Model) redact(pe *provider.Error) *provider.Error {
	if key := m.cfg.APIKey; key != "" {
		pe.Message = strings.ReplaceAll(pe.Message, key, "[redacted]")
		if pe.Err != nil && strings.Contains(pe.Err.Error(), key) {
			pe.Err = errors.New(strings.ReplaceAll(pe.Err.Error(), key, "[redacted]"))
		}
	}
	pe.Message = clip(pe.Message)
	return pe
}

func clip(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return strings.ToValidUTF8(s[:maxMessage], "") + "…"
}
