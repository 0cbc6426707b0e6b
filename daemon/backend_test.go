package daemon

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	"mspd/session"
)

// TestJetStreamBackendKeepsSessions: a node on an embedded NATS server
// with JetStream serves sessions from it, and a node started again on the
// same directory finds them.
func TestJetStreamBackendKeepsSessions(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Provider: "scripted", Listen: "127.0.0.1:0",
		Backend: Backend{Store: "jetstream", Embedded: true, NATSListen: "127.0.0.1:0", Node: "solo"},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil))}
	d, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := session.WithPrincipal(context.Background(), "")
	raw, _, err := d.mgr.StartSession(ctx, nil, json.RawMessage(`{"commandId":"019ad0a0-0000-7000-8000-000000000001"}`))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Session struct {
			SessionID string `json:"sessionId"`
			Path      string `json:"path"`
		} `json:"session"`
	}
	json.Unmarshal(raw, &res)
	if err := d.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	d2, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close(context.Background())
	if _, err := d2.mgr.ReadSession(ctx, json.RawMessage(`{"sessionId":"`+res.Session.SessionID+`"}`)); err != nil {
		t.Fatalf("the session after a restart on the same directory: %v", err)
	}
}
