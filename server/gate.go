package server

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"

	"mspd/schema/msp"
	"mspd/session"
)

// gate checks one inbound frame before the handler sees it: validation
// happens here, on the raw bytes (params are never re-encoded), and every
// bad frame gets a typed answer on an open connection. It returns the
// request and its id as sent (the answer echoes it byte for byte); or no
// request and the refusal to answer it with (a nil id is answered as
// null); or neither, for a frame that is not answered (a notification, a
// response).
func (c *conn) gate(frame []byte) (req *jsonrpc2.Request, id json.RawMessage, refusal *msp.Error) {
	if !json.Valid(frame) {
		err := json.Unmarshal(frame, &struct{}{}) // the syntax error, found without copying anything
		return nil, nil, msp.NewError(msp.CodeParseError, msp.KindParseError, "frame is not valid JSON: %v", err)
	}
	env, ok := members(frame)
	if !ok {
		return nil, nil, msp.NewError(msp.CodeInvalidRequest, msp.KindInvalidRequest,
			"a frame must be one JSON object (batches are not part of MSP)")
	}
	rawID, hasID := env["id"]
	id, idOK := validID(rawID)
	if !utf8.Valid(frame) {
		// JSON is UTF-8; decoding would turn the bad bytes into U+FFFD,
		// and the id could not be echoed as sent.
		if !idOK {
			id = nil
		}
		return nil, id, msp.NewError(msp.CodeParseError, msp.KindParseError, "frame is not valid UTF-8")
	}
	if hasID && !idOK {
		// Echo an integer id this host cannot take (a negative one) so the
		// client can match the answer; anything else is not an MSP id.
		var echo json.RawMessage
		if n := bytes.TrimSpace(rawID); len(n) > 0 {
			if _, err := strconv.ParseInt(string(n), 10, 64); err == nil {
				echo = n
			}
		}
		return nil, echo, msp.NewError(msp.CodeInvalidRequest, msp.KindInvalidRequest,
			"id must be a string of at most %d bytes (UTF-8) or a non-negative integer", maxIDBytes)
	}
	if string(env["jsonrpc"]) != `"2.0"` {
		return nil, id, msp.NewError(msp.CodeInvalidRequest, msp.KindInvalidRequest, `frame must carry "jsonrpc": "2.0"`)
	}
	rawMethod, hasMethod := env["method"]
	var method string
	if hasMethod {
		if err := json.Unmarshal(rawMethod, &method); err != nil {
			return nil, id, msp.NewError(msp.CodeInvalidRequest, msp.KindInvalidRequest, "method must be a string")
		}
	}
	switch {
	case !hasMethod && hasID && isResponse(env):
		// A response: a receipt for one of the server's requests.
		c.answer(rawID, env)
		return nil, nil, nil
	case !hasMethod && hasID:
		// Identified, so the sender waits for an answer (JSON-RPC 2.0 §5).
		return nil, id, msp.NewError(msp.CodeInvalidRequest, msp.KindInvalidRequest,
			"frame has an id but neither method (a request) nor result or error (a response)")
	case !hasMethod:
		return nil, nil, msp.NewError(msp.CodeInvalidRequest, msp.KindInvalidRequest, "frame has neither method nor id")
	case !hasID:
		c.notification(method)
		return nil, nil, nil
	}
	if e := c.admit(method); e != nil {
		return nil, id, e
	}
	params, hasParams := env["params"]
	if !hasParams {
		params = json.RawMessage("{}")
	}
	if e := tooManyValues(params); e != nil {
		return nil, id, e
	}
	if errs := c.srv.val.Params(method, params); len(errs) > 0 {
		return nil, id, invalidParams(errs)
	}
	return &jsonrpc2.Request{Method: method, Params: &params}, id, nil
}

// members splits a valid JSON document that is an object into its
// members, each value a slice of doc (json.Unmarshal into a map of
// json.RawMessage would copy them: the params of a large frame once more).
// A name given twice keeps its last value, as json.Unmarshal does.
func members(doc []byte) (map[string]json.RawMessage, bool) {
	i := skipSpace(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return nil, false
	}
	env := make(map[string]json.RawMessage, 4)
	for i = skipSpace(doc, i+1); i < len(doc) && doc[i] == '"'; {
		end := skipValue(doc, i)
		var name string
		if quoted := doc[i:end]; bytes.IndexByte(quoted, '\\') < 0 {
			name = string(quoted[1 : len(quoted)-1])
		} else if json.Unmarshal(quoted, &name) != nil {
			return nil, false
		}
		i = skipSpace(doc, end)
		i = skipSpace(doc, i+1) // the colon
		end = skipValue(doc, i)
		env[name] = json.RawMessage(doc[i:end])
		i = skipSpace(doc, end)
		if i < len(doc) && doc[i] == ',' {
			i = skipSpace(doc, i+1)
		}
	}
	return env, true
}

// skipSpace returns the index of the first byte from i on that is not
// JSON white space.
func skipSpace(doc []byte, i int) int {
	for i < len(doc) && isSpace(doc[i]) {
		i++
	}
	return i
}

// isResponse tells whether an envelope without a method is a response: it
// carries a result or an error.
func isResponse(env map[string]json.RawMessage) bool {
	_, hasResult := env["result"]
	_, hasError := env["error"]
	return hasResult || hasError
}

// The JSON values (member names included) a request's params may hold,
// counted before the schema validator reads them: it builds a tree of the
// whole document, and a finding for every bad item, at tens of times the
// frame's size, so a frame of many tiny values under the byte cap would
// cost hundreds of megabytes. No MSP request needs nearly as many; a long
// text is one value. A turn's responseSchema, which the validator takes
// whole (any object) and so finds nothing in, has a bound of its own:
// OpenAI's structured outputs take schemas of 5,000 properties.
const (
	maxParamValues  = 10_000
	maxSchemaValues = 50_000
)

// tooManyValues refuses params of more values than the bounds allow. It
// reads the params in place: every request passes here.
func tooManyValues(params json.RawMessage) *msp.Error {
	refuse := func(what string, limit int) *msp.Error {
		e := msp.NewError(msp.CodeInvalidParams, msp.KindInvalidParams, "%s hold more than %d JSON values", what, limit)
		e.Data.Details = map[string]any{"limitValues": limit}
		if what != "params" {
			e.Data.Details["field"] = what
		}
		return e
	}
	doc := bytes.TrimSpace(params)
	if len(doc) == 0 || doc[0] != '{' {
		// Not an object: the validator says so, once it is small enough.
		if countValues(doc, maxParamValues) > maxParamValues {
			return refuse("params", maxParamValues)
		}
		return nil
	}
	n, schema := 1, 0 // the object; the values of its responseSchema (every copy: a repeated name is decoded each time)
	for i := 1; i < len(doc); {
		switch doc[i] {
		case '"': // a member: its name, then its value after the colon
			end := skipValue(doc, i)
			name := doc[i:end]
			n++
			i = end
			for i < len(doc) && (doc[i] == ':' || isSpace(doc[i])) {
				i++
			}
			end = skipValue(doc, i)
			if string(name) == `"responseSchema"` {
				if schema += countValues(doc[i:end], maxSchemaValues); schema > maxSchemaValues {
					return refuse("responseSchema", maxSchemaValues)
				}
			} else if n += countValues(doc[i:end], maxParamValues); n > maxParamValues {
				return refuse("params", maxParamValues)
			}
			i = end
		default: // a comma, white space, the closing brace
			i++
		}
	}
	return nil
}

// skipValue returns the index just past the value of valid JSON doc that
// starts at i.
func skipValue(doc []byte, i int) int {
	if i >= len(doc) {
		return i
	}
	switch doc[i] {
	case '"':
		for i++; i < len(doc) && doc[i] != '"'; i++ {
			if doc[i] == '\\' {
				i++ // the escaped byte cannot end the string
			}
		}
		return min(i+1, len(doc))
	case '{', '[':
		depth := 0
		for ; i < len(doc); i++ {
			switch doc[i] {
			case '"':
				i = skipValue(doc, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	default:
		for i < len(doc) && isScalarByte(doc[i]) {
			i++
		}
		return i
	}
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// countValues counts the values of doc, a valid JSON document, member
// names included; it stops once the count passes limit.
func countValues(doc []byte, limit int) int {
	n := 0
	for i := 0; i < len(doc) && n <= limit; i++ {
		switch c := doc[i]; {
		case c == '{' || c == '[':
			n++
		case c == '"' || c == '-' || '0' <= c && c <= '9' || c == 't' || c == 'f' || c == 'n':
			n++
			i = skipValue(doc, i) - 1 // a string or a scalar, whole
		}
	}
	return n
}

// isScalarByte tells whether b continues a number or a literal.
func isScalarByte(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || b == '+' || b == '-' || b == '.'
}

// admit applies the handshake order and the method catalogue.
func (c *conn) admit(method string) *msp.Error {
	if method == msp.MethodInitialize {
		if c.initialized.Load() {
			return msp.NewError(msp.CodeInvalidRequest, msp.KindAlreadyInitialized, "initialize was already called on this connection")
		}
		return nil
	}
	if !c.initialized.Load() {
		return msp.NewError(msp.CodeInvalidRequest, msp.KindNotInitialized, "call initialize first")
	}
	if !c.srv.val.HasRequest(method) {
		return msp.NewError(msp.CodeMethodNotFound, msp.KindMethodNotFound, "method %q is not served by this host", method)
	}
	return nil
}

// notification handles a client notification; initialized is the only one
// MSP defines, and unknown ones are ignored.
func (c *conn) notification(method string) {
	if method == msp.NotifyInitialized && c.initialized.Load() && !c.ready.Swap(true) && c.listStream.Load() {
		// Only connections that take list news are indexed: a session's
		// list change then costs nothing when its owner has none.
		c.srv.mgr.Listen(c, session.PrincipalFrom(c.ctx))
	}
}

// invalidParams turns schema findings into one invalidParams error whose
// details name the first offending field and list the first
// maxListedErrors of them, each clipped (see clip), and how many more
// there were: an array of a million bad items is one short answer.
func invalidParams(errs []msp.FieldError) *msp.Error {
	first := errs[0]
	msg := first.Message
	if first.Field != "" {
		msg = first.Field + ": " + first.Message
	}
	listed := errs[:min(len(errs), maxListedErrors)]
	list := make([]map[string]string, len(listed))
	for i, fe := range listed {
		list[i] = map[string]string{"field": clip(fe.Field), "message": clip(fe.Message)}
	}
	e := msp.NewError(msp.CodeInvalidParams, msp.KindInvalidParams, "invalid params: %s", clip(msg))
	e.Data.Details = map[string]any{"field": clip(first.Field), "errors": list}
	if n := len(errs) - len(listed); n > 0 {
		e.Data.Details["omitted"] = n
	}
	return e
}

// What an error answer repeats of a request is bounded, so that the
// answer stays small and under the frame cap whatever the request carried
// (a value quoted grows when JSON escapes it).
const (
	// maxListedErrors is how many schema findings invalidParams lists.
	maxListedErrors = 16
	// maxEcho bounds a string an error answer repeats from the request:
	// a field path, a finding's message, an id in data.
	maxEcho = 256
	// maxMessage bounds an error answer's message.
	maxMessage = 1024
)

// clip cuts s to maxEcho bytes.
func clip(s string) string { return clipTo(s, maxEcho) }

// clipTo cuts s to at most n bytes, on a character boundary, marking the
// cut with an ellipsis.
func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// bounded returns e, or a copy of it whose message and the request's
// strings its data repeats are clipped when they are long.
func bounded(e *msp.Error) *msp.Error {
	d := e.Data
	if len(e.Message) <= maxMessage && len(d.SessionID) <= maxEcho && len(d.CommandID) <= maxEcho && len(d.Anchor) <= maxEcho {
		return e
	}
	b := *e
	b.Message = clipTo(b.Message, maxMessage)
	b.Data.SessionID, b.Data.CommandID, b.Data.Anchor = clip(d.SessionID), clip(d.CommandID), clip(d.Anchor)
	return &b
}

// maxIDBytes bounds a string id as sent, quotes and escapes included.
const maxIDBytes = 1024

// validID accepts the ids MSP takes: strings and non-negative integers
// (within int64).
func validID(raw json.RawMessage) (json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, false
	}
	switch raw[0] {
	case '"':
		// Echoed as sent, so it must be UTF-8 (json.Unmarshal would let bad
		// bytes through as U+FFFD) and short: the budgets of pages and
		// histories leave an answer's envelope maxIDBytes and more.
		var s string
		return raw, len(raw) <= maxIDBytes && utf8.Valid(raw) && json.Unmarshal(raw, &s) == nil
	case '-', 't', 'f', 'n', '{', '[':
		return nil, false
	}
	n, err := strconv.ParseUint(string(raw), 10, 64)
	return raw, err == nil && n <= math.MaxInt64
}
