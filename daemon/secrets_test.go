package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"mspd/internal/testlog"
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
	// The node's goroutines (its heartbeat, say) may log while the test
	// reads: a buffer safe for both.
	var logs testlog.Buffer
	cfg := Config{DataDir: t.TempDir(), Provider: "scripted", Listen: "127.0.0.1:0",
		Backend: Backend{Store: "jetstream", NATS: natsWithPassword(t, secret), Node: "solo"},
		Logger:  logs.TextLogger()}
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

// TestNATSParseErrorKeepsThePasswordPrivate: a --nats URL that does not
// parse (a typo in a port, or a '/', '#' or '?' left unescaped in a token
// or password) fails the start with an error naming the URLs without
// their credentials: nats.go's error quotes the whole URL, and url.Parse,
// cutting at the '#', quotes part of the password as a port.
func TestNATSParseErrorKeepsThePasswordPrivate(t *testing.T) {
	const secret = "s3cret-nats-pass"
	for url, named := range map[string]string{
		"nats://mspd:" + secret + "@127.0.0.1:42x":           "nats://127.0.0.1:42x",
		"nats://mspd:" + secret + "@127.0.0.1:1,nats://b:2x": "nats://b:2x",
		"nats://mspd:" + secret + "#x@127.0.0.1:1":           "nats://127.0.0.1:1",
		"nats://" + secret + "/x@127.0.0.1:1":                "nats://127.0.0.1:1",
		"nats://mspd:" + secret + "?x@127.0.0.1:1":           "nats://127.0.0.1:1",
	} {
		cfg := Config{DataDir: t.TempDir(), Provider: "scripted", Listen: "127.0.0.1:0",
			Backend: Backend{Store: "jetstream", NATS: url, Node: "solo"},
			Logger:  slog.New(slog.DiscardHandler)}
		_, err := New(context.Background(), cfg)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("a start that cannot parse --nats: %v", err)
		} else if !strings.Contains(err.Error(), named) {
			t.Errorf("the error does not name %s: %v", named, err)
		}
	}
}

func TestWithoutCredentials(t *testing.T) {
	for in, want := range map[string]string{
		"nats://a:4222":                          "nats://a:4222",
		"nats://user:pa@ss@a:4222":               "nats://a:4222",
		"nats://s3cret-token@a:4222,tls://u:p@b": "nats://a:4222,tls://b",
		"u:p@a:4222":                             "a:4222",
		"nats://a:4222, nats://b:4222":           "nats://a:4222,nats://b:4222",
		"nats://to/ken@a:4222":                   "nats://a:4222",
		"nats://u:p#w/x@a:4222,nats://b:1":       "nats://a:4222,nats://b:1",
		"u:p://x@a:4222":                         "a:4222",
	} {
		if got := withoutCredentials(in); got != want {
			t.Errorf("withoutCredentials(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCheckNATSURLsTakesWellFormedOnes: escaped credentials, IPv6 hosts,
// a trailing '/' and URLs with no scheme pass the check.
func TestCheckNATSURLsTakesWellFormedOnes(t *testing.T) {
	for _, urls := range []string{"nats://u:p%2Fq%23r@[::1]:4222/", "a:4222, tls://tok@b", "nats://a:4222/,u:p@b:1"} {
		if err := checkNATSURLs(urls); err != nil {
			t.Errorf("checkNATSURLs(%q): %v", urls, err)
		}
	}
}
