package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"mspd/schema/msp"
	"mspd/session"
)

// TestForwardTooLarge: a command that does not fit the NATS max_payload
// (a turn/start with megabytes of images, forwarded to its session's
// leader) is refused inputTooLarge with the payload as its limit; one
// that fits reaches the leader.
func TestForwardTooLarge(t *testing.T) {
	nc, js := startNATS(t)
	ctx := t.Context()
	node := func(name string) *Cluster {
		c, err := New(ctx, nc, js, Options{Node: name})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := node("a"), node("b")
	if err := b.Serve(func(_ context.Context, cmd session.Command) (json.RawMessage, error) {
		return json.RawMessage(`{"got":` + strings.TrimSpace(string(cmd.Params)) + `}`), nil
	}); err != nil {
		t.Fatal(err)
	}
	res, err := a.Forward(ctx, "b", session.Command{Method: msp.MethodTurnStart, Params: json.RawMessage(`1`)})
	if err != nil || string(res) != `{"got":1}` {
		t.Fatalf("a small command: %s, %v", res, err)
	}
	big := json.RawMessage(`"` + strings.Repeat("A", int(nc.MaxPayload())) + `"`)
	_, err = a.Forward(ctx, "b", session.Command{Method: msp.MethodTurnStart, Params: big})
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindInputTooLarge || me.Data.LimitBytes != nc.MaxPayload() {
		t.Fatalf("a command over max_payload: %v", err)
	}
}

// startNATS starts an in-process NATS server with JetStream for one test
// and connects to it.
func startNATS(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}
