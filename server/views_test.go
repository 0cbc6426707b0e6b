package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestDeletedSessionsLeaveNoViews: a connection that starts and deletes
// sessions (each start subscribes it) keeps no state for the deleted
// ones: its outbox tracked every session it was ever subscribed to until
// it closed, so a long-lived connection's memory grew with each.
func TestDeletedSessionsLeaveNoViews(t *testing.T) {
	m, _ := testManager(t)
	srv, err := New(m, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	var in strings.Builder
	in.WriteString(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}` + "\n")
	for i := range n {
		sid := fmt.Sprintf("0198f0aa-dddd-7000-8000-%012d", i)
		fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":"s%d","method":"session/start","params":{"commandId":%q,"sessionId":%q}}`+"\n", i, newCommandID(), sid)
		fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":"d%d","method":"session/delete","params":{"commandId":%q,"sessionId":%q}}`+"\n", i, newCommandID(), sid)
	}
	var out strings.Builder
	c := newConn(srv, newLineTransport(strings.NewReader(in.String()), &out, nil, 1<<20), srv.log)
	c.serve(context.Background())
	if got := strings.Count(out.String(), `"outcome":"completed"`); got != n {
		t.Fatalf("%d sessions deleted, want %d:\n%s", got, n, out.String())
	}
	c.out.mu.Lock()
	views := len(c.out.views)
	c.out.mu.Unlock()
	if views != 0 {
		t.Errorf("the connection still tracks %d views of deleted sessions", views)
	}
}

// TestPageResponseStaysUnderTheFrameCap: §5 item 2 — "never emit a frame
// over the cap". view/page bounds a page by the byte size of the stored
// params (withinBudget, ~10 MiB - 64 KiB), and events are stored without
// HTML escaping. But responses are encoded by jsonrpc2 (Response.SetResult
// and MarshalJSON use json.Marshal), which HTML-escapes every '<', '>' and
// '&' inside the json.RawMessage params: one byte becomes six. A session
// whose user message is 1.9 MiB of '<' (a legal turn/start, a fifth of the
// inbound cap) makes every view/page that reaches that event an ~11.4 MiB
// frame: an SDK client with the standard 10 MiB read limit (and `mspd
// tail`'s client after a few such events) drops the connection, reconnects,
// pages again and drops again — the gap fill and the web page's history
// load can never finish.
func TestPageResponseStaysUnderTheFrameCap(t *testing.T) {
	m, head := testManager(t)
	sid := startWithTurnsText(t, m, head, nopSub{}, 1, strings.Repeat("<", 19<<20/10))

	srv, err := New(m, Config{PingInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.ServeStdio(ctx, inR, outW)
	go func() {
		for _, f := range []string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"initialized"}`,
			`{"jsonrpc":"2.0","id":2,"method":"view/page","params":{"sessionId":"` + sid + `","limit":10}}`,
		} {
			io.WriteString(inW, f+"\n")
		}
	}()
	br := bufio.NewReaderSize(outR, 1<<20)
	got := make(chan []byte, 1)
	go func() {
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				close(got)
				return
			}
			var f struct {
				ID json.RawMessage `json:"id"`
			}
			json.Unmarshal(line, &f)
			if string(f.ID) == "2" {
				got <- line
				return
			}
		}
	}()
	select {
	case line := <-got:
		const frameCap = 10 << 20
		if len(line) > frameCap {
			t.Fatalf("view/page response is %d bytes, over the %d-byte frame cap (escaped '<': %d)",
				len(line), frameCap, bytes.Count(line, []byte(`\u003c`)))
		}
	case <-time.After(90 * time.Second):
		t.Fatal("no view/page response")
	}
}
