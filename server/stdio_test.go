package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

// A line write to a pipe nobody reads gives up when its context ends, both
// through a write deadline (an os.Pipe is pollable) and without one (an
// io.Pipe is not); writes after it fail at once.
func TestLineWriteGivesUpOnAPipeNobodyReads(t *testing.T) {
	osR, osW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer osR.Close()
	defer osW.Close()
	ioR, ioW := io.Pipe()
	defer ioR.Close()
	for _, tc := range []struct {
		name string
		w    io.Writer
	}{{"os.Pipe", osW}, {"io.Pipe", ioW}} {
		t.Run(tc.name, func(t *testing.T) {
			lt := newLineTransport(strings.NewReader(""), tc.w, nil, 1<<20)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			big := []byte(`"` + strings.Repeat("x", 1<<20) + `"`) // more than a pipe buffers
			if err := within(t, "a write nobody reads", func() error { return lt.WriteFrame(ctx, big) }); err == nil {
				t.Fatal("a write nobody reads succeeded")
			}
			if err := lt.WriteFrame(context.Background(), []byte("{}")); !errors.Is(err, errWriteAbandoned) {
				t.Fatalf("a write after an abandoned one: %v", err)
			}
		})
	}
}

// A stdio peer that stops reading its output is closed as wedged once a
// write stays stuck past the write timeout, even with its input still open;
// it used to hold the connection (and its memory) forever.
func TestStdioPeerThatDoesNotReadIsClosed(t *testing.T) {
	m, head := testManager(t)
	sid := startWithTurnsText(t, m, head, nopSub{}, 1, strings.Repeat("x", 1<<20))
	srv, err := New(m, Config{WriteTimeout: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe() // input that stays open
	defer inW.Close()
	outR, outW, err := os.Pipe() // output nobody reads
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	defer outW.Close()
	served := make(chan struct{})
	go func() { srv.ServeStdio(context.Background(), inR, outW); close(served) }()
	go io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}`+"\n"+
		`{"jsonrpc":"2.0","id":2,"method":"view/page","params":{"sessionId":"`+sid+`","limit":10}}`+"\n")
	select {
	case <-served:
	case <-time.After(20 * time.Second):
		t.Fatal("a stdio peer that does not read was never closed")
	}
}

// Closing stdin is an orderly drain: every request read before the end of
// the input is answered. The end of input used to shut the connection at
// once, and the writes still queued failed on its cancelled context.
func TestStdioAnswersEverythingBeforeEOF(t *testing.T) {
	m, _ := testManager(t)
	srv, err := New(m, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var in strings.Builder
	in.WriteString(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}` + "\n")
	const requests = 50
	for i := range requests {
		in.WriteString(`{"jsonrpc":"2.0","id":` + itoa(i+1) + `,"method":"session/list","params":{}}` + "\n")
	}
	var out bytes.Buffer // takes no write deadline
	done := make(chan struct{})
	go func() { srv.ServeStdio(context.Background(), strings.NewReader(in.String()), &out); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("ServeStdio did not return at the end of its input")
	}
	if n := bytes.Count(out.Bytes(), []byte("\n")); n != requests+1 {
		t.Fatalf("%d answers to %d requests before EOF", n, requests+1)
	}
}

// TestServeStdioHonoursContext: ServeStdio documents "until r ends or
// ctx is done", and cmd/mspd passes the SIGINT/SIGTERM context. run()
// wraps it in context.WithoutCancel, so `mspd serve --stdio` ignores
// SIGTERM until the client closes stdin.
func TestServeStdioHonoursContext(t *testing.T) {
	m, _ := testManager(t)
	srv, err := New(m, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r, w := io.Pipe() // stdin that stays open
	defer w.Close()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.ServeStdio(ctx, r, outW); close(done) }()
	// Serving: initialize is answered.
	go io.WriteString(w, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	if line, err := bufio.NewReader(outR).ReadString('\n'); err != nil || !strings.Contains(line, `"id":1`) {
		t.Fatalf("initialize answered %q, %v", line, err)
	}
	go io.Copy(io.Discard, outR)
	cancel() // SIGTERM
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("ServeStdio still serving 2s after its context was cancelled")
	}
}
