package server

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// BenchmarkFrameIntake reads one maximum-size turn/start (10 MiB of text)
// as a WebSocket message and as a stdio line, and gates it: what one such
// frame costs before its handler runs (B/op over the frame's size is the
// multiplier).
func BenchmarkFrameIntake(b *testing.B) {
	srv, err := New(nil, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	c := newConn(srv, nil, srv.log)
	c.initialized.Store(true)
	text := strings.Repeat("x", 10<<20-256)
	frame := []byte(`{"jsonrpc":"2.0","id":1,"method":"turn/start","params":{"commandId":"0198f0aa-0000-7000-8000-000000000001","sessionId":"0198f0aa-0000-7000-8000-000000000002","input":[{"type":"text","text":"` + text + `"}]}}`)
	line := append(bytes.Clone(frame), '\n')
	limit := srv.cfg.MaxFrameBytes
	for _, tc := range []struct {
		name string
		read func() ([]byte, error)
	}{
		{"websocket", func() ([]byte, error) { return readBounded(context.Background(), bytes.NewReader(frame), limit, nil) }},
		{"stdio", func() ([]byte, error) {
			return newLineTransport(bytes.NewReader(line), nil, nil, limit).ReadFrame(context.Background(), nil)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				got, err := tc.read()
				if err != nil {
					b.Fatal(err)
				}
				if req, _, _ := c.gate(got); req == nil {
					b.Fatal("the frame was refused")
				}
			}
		})
	}
}
