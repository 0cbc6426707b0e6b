package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestDeletedSessionsLeaveNoViews: a connection that starts and deletes
// sessions (each start subscribes it) keeps no state for the deleted
// ones: its outbox tracked every session it was ever subscribed to until
// it closed, so a long-lived connection's memory grew with each.
func TestDeletedSessionsLeaveNoViews(t *testing.T) {
	m, _ := reviewManager(t)
	srv, err := New(m, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	var in strings.Builder
	in.WriteString(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}` + "\n")
	for i := range n {
		sid := fmt.Sprintf("0198f0aa-dddd-7000-8000-%012d", i)
		fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":"s%d","method":"session/start","params":{"commandId":%q,"sessionId":%q}}`+"\n", i, reviewCmd(), sid)
		fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":"d%d","method":"session/delete","params":{"commandId":%q,"sessionId":%q}}`+"\n", i, reviewCmd(), sid)
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
