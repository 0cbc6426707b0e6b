package msp

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"unicode/utf8"
)

// EncodeNotification renders a server-to-client notification frame from
// already-encoded params, so that one encoding serves every connection.
func EncodeNotification(method string, params json.RawMessage, emittedAtMs int64) []byte {
	// Room for all of it: the frame is allocated once, never grown.
	return AppendNotification(make([]byte, 0, NotificationSize(method, params)), method, params, emittedAtMs)
}

// AppendNotification appends to b the frame EncodeNotification returns,
// byte for byte. A replay renders many frames into one buffer with it,
// one allocation for a run of records rather than one each.
func AppendNotification(b []byte, method string, params json.RawMessage, emittedAtMs int64) []byte {
	b = appendNotificationHead(b, method)
	b = append(b, params...)
	return appendNotificationTail(b, emittedAtMs)
}

// NotificationSize bounds the size of the frame EncodeNotification
// renders: room to append it without growing.
func NotificationSize(method string, params json.RawMessage) int {
	return len(params) + len(method) + notificationOverhead
}

// EncodeItemDelta renders an item/delta notification frame, byte for byte
// as EncodeNotification(NotifyItemDelta, Marshal(p), emittedAtMs) does,
// written by hand: a delta is the one notification sent once per token,
// and going through encoding/json's reflection for it was most of what a
// delta cost the server.
func EncodeItemDelta(p ItemDeltaParams, emittedAtMs int64) []byte {
	size := len(NotifyItemDelta) + notificationOverhead + len(deltaParamsOverhead) +
		len(p.SessionID) + len(p.ViewCursor) + len(p.ItemID) + len(p.Field) + len(p.Delta)
	b := make([]byte, 0, size+size/8) // room for a few escapes
	b = appendNotificationHead(b, NotifyItemDelta)
	b = append(b, `{"sessionId":`...)
	b = appendJSONString(b, p.SessionID)
	b = append(b, `,"viewCursor":`...)
	b = appendJSONString(b, p.ViewCursor)
	b = append(b, `,"itemId":`...)
	b = appendJSONString(b, p.ItemID)
	if p.Field != "" {
		b = append(b, `,"field":`...)
		b = appendJSONString(b, p.Field)
	}
	b = append(b, `,"delta":`...)
	b = appendJSONString(b, p.Delta)
	b = append(b, '}')
	return appendNotificationTail(b, emittedAtMs)
}

// deltaParamsOverhead is what EncodeItemDelta adds around the params'
// strings.
const deltaParamsOverhead = `{"sessionId":"","viewCursor":"","itemId":"","field":"","delta":""}`

// appendNotificationHead appends a notification's envelope up to its
// params.
func appendNotificationHead(b []byte, method string) []byte {
	b = append(b, `{"jsonrpc":"2.0","method":`...)
	b = appendMethod(b, method)
	return append(b, `,"params":`...)
}

// appendNotificationTail appends what follows a notification's params.
func appendNotificationTail(b []byte, emittedAtMs int64) []byte {
	b = append(b, `,"emittedAtMs":`...)
	b = strconv.AppendInt(b, emittedAtMs, 10)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string exactly as Marshal encodes
// it (encoding/json without HTML escaping): quotes, backslashes and
// control characters escaped, U+2028 and U+2029 escaped, invalid UTF-8
// replaced by U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// hexDigits are the digits of JSON's \u escapes, lower case as
// encoding/json writes them.
const hexDigits = "0123456789abcdef"

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
