package msp

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
)

// EncodeNotification renders a server-to-client notification frame from
// already-encoded params, so that one encoding serves every connection.
func EncodeNotification(method string, params json.RawMessage, emittedAtMs int64) []byte {
	// Room for all of it: the frame is allocated once, never grown.
	b := make([]byte, 0, len(params)+len(method)+notificationOverhead)
	b = append(b, `{"jsonrpc":"2.0","method":`...)
	b = appendMethod(b, method)
	b = append(b, `,"params":`...)
	b = append(b, params...)
	b = append(b, `,"emittedAtMs":`...)
	b = strconv.AppendInt(b, emittedAtMs, 10)
	return append(b, '}')
}

// appendMethod appends method as a JSON string. Method names are plain
// ASCII that needs no escaping, which spares a replay quoting each one
// rune by rune; anything else is encoded by encoding/json.
func appendMethod(b []byte, method string) []byte {
	for i := range len(method) {
		if c := method[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			q, _ := json.Marshal(method) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, method...)
	return append(b, '"')
}

// notificationOverhead bounds what EncodeNotification adds to the params
// and the method: the envelope, two quotes and an int64's 20 digits.
const notificationOverhead = len(`{"jsonrpc":"2.0","method":""`) + len(`,"params":`) + len(`,"emittedAtMs":`) + 20 + len(`}`)

// Marshal encodes v as mspd puts JSON on the wire: compact and without
// HTML escaping, which would turn every '<', '>' and '&' of a message into
// six bytes (and push frames past the size budgets measured on them).
func Marshal(v any) ([]byte, error) {
	b := encodeBuffers.Get().(*bytes.Buffer)
	defer putEncodeBuffer(b)
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.Clone(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// encodeBuffers hold Marshal's scratch space: encoding into a buffer that
// has already grown, then copying out exactly, allocates once a value
// rather than at every doubling.
var encodeBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBuffer is the largest buffer kept for reuse: one huge value
// (a long answer) must not stay in memory.
const maxPooledBuffer = 64 << 10

func putEncodeBuffer(b *bytes.Buffer) {
	if b.Cap() > maxPooledBuffer {
		return
	}
	b.Reset()
	encodeBuffers.Put(b)
}
