package msp

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// EncodeNotification renders a server-to-client notification frame from
// already-encoded params, so that one encoding serves every connection.
// method must be a plain ASCII method name.
func EncodeNotification(method string, params json.RawMessage, emittedAtMs int64) []byte {
	// Room for all of it: the frame is allocated once, never grown.
	b := make([]byte, 0, len(params)+len(method)+notificationOverhead)
	b = append(b, `{"jsonrpc":"2.0","method":`...)
	b = strconv.AppendQuote(b, method)
	b = append(b, `,"params":`...)
	b = append(b, params...)
	b = append(b, `,"emittedAtMs":`...)
	b = strconv.AppendInt(b, emittedAtMs, 10)
	return append(b, '}')
}

// notificationOverhead bounds what EncodeNotification adds to the params
// and the method: the envelope, two quotes and an int64's 20 digits.
const notificationOverhead = len(`{"jsonrpc":"2.0","method":""`) + len(`,"params":`) + len(`,"emittedAtMs":`) + 20 + len(`}`)

// Marshal encodes v as mspd puts JSON on the wire: compact and without
// HTML escaping, which would turn every '<', '>' and '&' of a message into
// six bytes (and push frames past the size budgets measured on them).
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
