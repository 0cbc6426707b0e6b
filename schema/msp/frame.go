package msp

import (
	"encoding/json"
	"strconv"
)

// EncodeNotification renders a server-to-client notification frame from
// already-encoded params, so that one encoding serves every connection.
// method must be a plain ASCII method name.
func EncodeNotification(method string, params json.RawMessage, emittedAtMs int64) []byte {
	b := make([]byte, 0, len(params)+len(method)+64)
	b = append(b, `{"jsonrpc":"2.0","method":`...)
	b = strconv.AppendQuote(b, method)
	b = append(b, `,"params":`...)
	b = append(b, params...)
	b = append(b, `,"emittedAtMs":`...)
	b = strconv.AppendInt(b, emittedAtMs, 10)
	return append(b, '}')
}
