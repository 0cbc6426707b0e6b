package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"mspd/session"
)

// natsWithPassword runs a NATS server with JetStream that wants a user and
// password, and returns its URL with them in it.
func natsWithPassword(t *testing.T, password string) string {
	t.Helper()
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), Username: "mspd", Password: password, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10e9) {
		t.Fatal("NATS server not ready")
	}
	return "nats://mspd:" + password + "@" + srv.Addr().String()
}

// TestNATSCredentialsStayPrivate: credentials in --nats (nats://user:pass@…)
// reach neither the log nor the clients, who are told every session's
// path, nor the error of a failed start.
func TestNATSCredentialsStayPrivate(t *testing.T) {
	const secret = "s3cret-nats-pass"
	var logs bytes.Buffer
	cfg := Config{DataDir: t.TempDir(), Provider: "scripted", Listen: "127.0.0.1:0",
		Backend: Backend{Store: "jetstream", NATS: natsWithPassword(t, secret), Node: "solo"},
		Logger:  slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	d, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.Background())
	ctx := session.WithPrincipal(context.Background(), "")
	raw, _, err := d.mgr.StartSession(ctx, nil, json.RawMessage(`{"commandId":"019ad0a0-0000-7000-8000-000000000002"}`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), secret) {
		t.Errorf("session/start's result carries the NATS password: %s", raw)
	}
	if !strings.Contains(string(raw), `"path":"jetstream:nats://`) {
		t.Errorf("session/start's result lacks the log's path: %s", raw)
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the log carries the NATS password:\n%s", logs.String())
	}

	cfg.Backend.NATS = "nats://mspd:" + secret + "@127.0.0.1:1"
	cfg.DataDir = t.TempDir()
	if _, err := New(context.Background(), cfg); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("a start that cannot connect: %v", err)
	}
}

func TestWithoutCredentials(t *testing.T) {
	for in, want := range map[string]string{
		"nats://a:4222":                          "nats://a:4222",
		"nats://user:pa@ss@a:4222":               "nats://a:4222",
		"nats://s3cret-token@a:4222,tls://u:p@b": "nats://a:4222,tls://b",
		"u:p@a:4222":                             "a:4222",
		"nats://a:4222, nats://b:4222":           "nats://a:4222,nats://b:4222",
	} {
		if got := withoutCredentials(in); got != want {
			t.Errorf("withoutCredentials(%q) = %q, want %q", in, got, want)
		}
	}
}
