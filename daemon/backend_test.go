package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"mspd/session"
	msjs "mspd/store/jetstream"
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

// TestJetStreamStreamsReachTheStore: --jetstream-streams reaches the
// store: a node started on three streams serves its sessions after a
// restart on three, and a restart on fewer is refused, naming the count
// to use.
func TestJetStreamStreamsReachTheStore(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), Provider: "scripted", Listen: "127.0.0.1:0",
		Backend: Backend{Store: "jetstream", Embedded: true, NATSListen: "127.0.0.1:0", Node: "solo", Streams: 3},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil))}
	d, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := session.WithPrincipal(context.Background(), "")
	var ids []string
	for i := range 6 {
		raw, _, err := d.mgr.StartSession(ctx, nil, json.RawMessage(fmt.Sprintf(`{"commandId":"019ad0a0-0000-7000-8000-00000000000%d"}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Session struct {
				SessionID string `json:"sessionId"`
			} `json:"session"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Session.SessionID)
	}
	if err := d.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	fewer := cfg
	fewer.Backend.Streams = 2
	if d, err := New(context.Background(), fewer); !errors.Is(err, msjs.ErrFewerStreams) || !strings.Contains(err.Error(), "open it with 3") {
		if d != nil {
			_ = d.Close(context.Background())
		}
		t.Fatalf("New on 2 streams after 3 = %v, want ErrFewerStreams naming 3", err)
	}

	d2, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close(context.Background())
	for _, id := range ids {
		if _, err := d2.mgr.ReadSession(ctx, json.RawMessage(`{"sessionId":"`+id+`"}`)); err != nil {
			t.Fatalf("session %s after a restart on three streams: %v", id, err)
		}
	}
}
