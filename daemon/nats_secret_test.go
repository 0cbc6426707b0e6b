package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"mspd/session"
)

// The embedded NATS server carries every session: without a secret it
// listens, for clients and for routes, on loopback addresses only.
func TestEmbeddedNATSNeedsASecretBeyondLoopback(t *testing.T) {
	for _, b := range []Backend{
		{NATSListen: "0.0.0.0:0"},
		{NATSListen: ":0"},
		{NATSListen: "127.0.0.1:0", ClusterListen: "0.0.0.0:0"},
	} {
		srv, _, err := startNATS(b, "n", t.TempDir())
		if err == nil {
			srv.Shutdown()
			t.Errorf("%+v: started without a secret", b)
		} else if !strings.Contains(err.Error(), "--nats-secret") {
			t.Errorf("%+v: %v, want a refusal naming --nats-secret", b, err)
		}
	}
	b := Backend{NATSListen: "0.0.0.0:0", Secret: "s3cret"}
	srv, _, err := startNATS(b, "n", t.TempDir())
	if err != nil {
		t.Fatalf("%+v: %v", b, err)
	}
	srv.Shutdown()
}

// With a secret, the embedded server takes no client without it, and a
// node's mspd presents it.
func TestEmbeddedNATSWantsTheSecret(t *testing.T) {
	const secret = "s3cret-of-the-cluster"
	srv, _, err := startNATS(Backend{NATSListen: "127.0.0.1:0", Secret: secret}, "n", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Error("a client without the secret connected")
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.Token(secret))
	if err != nil {
		t.Fatalf("a client with the secret: %v", err)
	}
	nc.Close()

	d, err := New(context.Background(), Config{DataDir: t.TempDir(), Provider: "scripted", Listen: "127.0.0.1:0",
		Backend: Backend{Store: "jetstream", Embedded: true, NATSListen: "127.0.0.1:0", Secret: secret, Node: "solo"},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.Background())
	ctx := session.WithPrincipal(context.Background(), "")
	if _, _, err := d.mgr.StartSession(ctx, nil, json.RawMessage(`{"commandId":"019ad0a0-0000-7000-8000-000000000004"}`)); err != nil {
		t.Fatalf("a session on the node's own secret-guarded server: %v", err)
	}
}

// The embedded servers of several nodes route to each other with the
// secret as their password.
func TestEmbeddedNATSRoutesWithTheSecret(t *testing.T) {
	const secret = "s3cret-of-the-cluster"
	var routes [2]interface{ NumRoutes() int }
	// Each server must know the other's route port before either starts,
	// so the ports are picked free and then listened on: another process
	// on the machine (a parallel package's servers) can take one in
	// between, and that server never gets ready. Such a try is made again
	// on other ports.
	for try := 1; ; try++ {
		ports := freePorts(t, 2)
		var started []*natsserver.Server
		var err error
		for i := range 2 {
			b := Backend{NATSListen: "127.0.0.1:0", Secret: secret, ClusterName: "c",
				ClusterListen: fmt.Sprintf("127.0.0.1:%d", ports[i]),
				Routes:        []string{fmt.Sprintf("nats://127.0.0.1:%d", ports[1-i])}}
			var srv *natsserver.Server
			if srv, _, err = startNATS(b, fmt.Sprintf("n%d", i), t.TempDir()); err != nil {
				break
			}
			started = append(started, srv)
		}
		for _, srv := range started {
			if err != nil {
				srv.Shutdown() // not to route to the next try's servers
			}
			t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
		}
		if err == nil {
			routes[0], routes[1] = started[0], started[1]
			break
		}
		if try == 3 {
			t.Fatal(err)
		}
		t.Logf("try %d: %v; again on other ports", try, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for routes[0].NumRoutes() == 0 || routes[1].NumRoutes() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("routes %d and %d: the servers did not route to each other with the secret", routes[0].NumRoutes(), routes[1].NumRoutes())
		}
		<-tick.C
	}
}

// Without a secret the embedded server listens on loopback, where any
// local user could reach it: it takes only a token of the node's own
// process, which no one else knows, and the node works with it.
func TestEmbeddedNATSWithoutASecretRefusesOtherClients(t *testing.T) {
	d, err := New(context.Background(), Config{DataDir: t.TempDir(), Provider: "scripted", Listen: "127.0.0.1:0",
		Backend: Backend{Store: "jetstream", Embedded: true, NATSListen: "127.0.0.1:0", Node: "solo"},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.Background())
	ctx := session.WithPrincipal(context.Background(), "")
	raw, _, err := d.mgr.StartSession(ctx, nil, json.RawMessage(`{"commandId":"019ad0a0-0000-7000-8000-000000000005"}`))
	if err != nil {
		t.Fatalf("a session on the node's own server: %v", err)
	}
	var res struct {
		Session struct {
			Path string `json:"path"`
		} `json:"session"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	url, ok := strings.CutPrefix(res.Session.Path, "jetstream:")
	if !ok {
		t.Fatalf("session path %q, want jetstream:<the node's NATS URL>", res.Session.Path)
	}
	nc, err := nats.Connect(url, nats.MaxReconnects(0))
	if err == nil {
		nc.Close()
		t.Fatalf("a client without credentials connected to the node's NATS server at %s", url)
	}
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("a client without credentials: %v, want %v", err, nats.ErrAuthorization)
	}
}

// Without a secret the embedded servers of nodes on one machine still
// route to each other, and a node's client keeps to its own server: the
// others refuse its process's token, and being refused twice would close
// its connection for good.
func TestEmbeddedNATSWithoutASecretKeepsToItsServer(t *testing.T) {
	ports := freePorts(t, 2)
	var srvs [2]*natsserver.Server
	var tokens [2]string
	for i := range 2 {
		b := Backend{NATSListen: "127.0.0.1:0", ClusterName: "c", ClusterListen: fmt.Sprintf("127.0.0.1:%d", ports[i]),
			Routes: []string{fmt.Sprintf("nats://127.0.0.1:%d", ports[1-i])}}
		srv, token, err := startNATS(b, fmt.Sprintf("n%d", i), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
		srvs[i], tokens[i] = srv, token
	}
	if tokens[0] == tokens[1] || len(tokens[0]) < 26 {
		t.Fatalf("tokens %q and %q: want a random one a process", tokens[0], tokens[1])
	}
	nc, err := nats.Connect(srvs[0].ClientURL(), embeddedConnOptions(Backend{}, tokens[0])...)
	if err != nil {
		t.Fatalf("the node's own client: %v", err)
	}
	defer nc.Close()
	// Another client with the token learns of the other server once the
	// routes are up; the server tells the node's client in the same breath.
	other, err := nats.Connect(srvs[0].ClientURL(), nats.Token(tokens[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for len(other.DiscoveredServers()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("routes %d and %d: the servers did not route to each other without a secret", srvs[0].NumRoutes(), srvs[1].NumRoutes())
		}
		<-tick.C
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := nc.Servers(); len(got) != 1 {
		t.Errorf("the node's client would reconnect to %v, want its own server alone", got)
	}
}

// freePorts returns n loopback ports free a moment ago, for the routes of
// servers that must know each other's before they start.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	return ports
}

// A node with a route listener whose cluster never forms (here, no other
// node at all) gives up saying what it waited for, not only that a
// deadline passed.
func TestLoneClusteredNodeSaysWhatItWaitsFor(t *testing.T) {
	saved := electionWait
	electionWait = 300 * time.Millisecond
	t.Cleanup(func() { electionWait = saved })
	d, err := New(context.Background(), Config{DataDir: t.TempDir(), Provider: "scripted", Listen: "127.0.0.1:0",
		Backend: Backend{Store: "jetstream", Embedded: true, NATSListen: "127.0.0.1:0", ClusterListen: "127.0.0.1:0", Node: "solo"},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		d.Close(context.Background())
		t.Fatal("a lone node with --nats-cluster-listen started; its cluster cannot elect a JetStream leader")
	}
	if !strings.Contains(err.Error(), "--nats-routes") || !strings.Contains(err.Error(), "without --nats-cluster-listen") {
		t.Fatalf("error %q does not say what the node waited for", err)
	}
}
