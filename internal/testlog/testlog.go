// Package testlog is a log sink for tests: a buffer the goroutines of a
// daemon or client under test may write to at once, read back whole.
package testlog

import (
	"bytes"
	"log/slog"
	"sync"
)

// Buffer collects log output. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// JSONLogger logs to l as JSON lines, debug level up.
func (l *Buffer) JSONLogger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TextLogger logs to l as text lines, debug level up.
func (l *Buffer) TextLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
