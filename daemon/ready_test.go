package daemon

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// TestReadyzFollowsTheStore: /readyz answers for the store as well as the
// drain; a node whose NATS server is gone can commit nothing, and a load
// balancer must send it no new clients.
func TestReadyzFollowsTheStore(t *testing.T) {
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			srv.Shutdown()
			srv.WaitForShutdown()
		}
	}
	t.Cleanup(stop)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	d, err := New(context.Background(), Config{DataDir: t.TempDir(), Provider: "scripted", Listen: "127.0.0.1:0",
		Backend: Backend{Store: "jetstream", NATS: srv.ClientURL(), Node: "solo"},
		Logger:  slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d.Close(ctx)
	})
	readyz := func() int {
		rec := httptest.NewRecorder()
		d.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		_, _ = io.Copy(io.Discard, rec.Body)
		return rec.Code
	}
	if code := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz with NATS up: %d", code)
	}
	stop()
	// The client notices the lost server on its own schedule: poll.
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for readyz() != http.StatusServiceUnavailable {
		if time.Now().After(deadline) {
			t.Fatal("/readyz still 200 with the NATS server gone")
		}
		<-tick.C
	}
}
