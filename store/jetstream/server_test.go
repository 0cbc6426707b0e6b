package jetstream_test

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"mspd/store"
	msjs "mspd/store/jetstream"
)

// startServer runs an embedded nats-server with JetStream on dir, on a
// random loopback port, until the test ends or it is shut down.
func startServer(t testing.TB, dir string) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		ServerName: "mspd-test",
		Host:       "127.0.0.1",
		Port:       -1,
		JetStream:  true,
		StoreDir:   dir,
		// fsync per write, as a deployment that wants SQLite's durability
		// would configure (sync_interval: always).
		SyncAlways: os.Getenv("NOSYNC") == "",
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	srv.Start()
	t.Cleanup(func() { shutdown(srv) })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready within 10s")
	}
	return srv
}

func shutdown(srv *server.Server) {
	srv.Shutdown()
	srv.WaitForShutdown()
}

// connect opens a store on the server at url, closed when the test ends.
func connect(t testing.TB, url string, opts msjs.Options) *msjs.Store {
	t.Helper()
	s, err := msjs.Connect(t.Context(), url, opts)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// dialJetStream connects to url and returns its JetStream context, the
// connection closed with the test.
func dialJetStream(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// serverStore is a store whose Close also stops its server, so that the
// suite's reopen is a server restart on the same directory.
type serverStore struct {
	*msjs.Store
	srv *server.Server
}

func (s serverStore) Close() error {
	err := s.Store.Close()
	shutdown(s.srv)
	return err
}

// startCluster runs three embedded JetStream servers routed to each other
// and returns their client URLs once the cluster accepts a stream.
func startCluster(t *testing.T) []string {
	t.Helper()
	var urls []string
	for _, srv := range startClusterServers(t) {
		urls = append(urls, srv.ClientURL())
	}
	return urls
}

// startClusterServers is startCluster returning the servers, for tests
// that stop one.
func startClusterServers(t *testing.T) []*server.Server {
	t.Helper()
	ports := make([]int, 3)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var (
		urls    []string
		servers []*server.Server
	)
	for i, p := range ports {
		srv, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       -1,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			Cluster:    server.ClusterOpts{Name: "mspd-test", Host: "127.0.0.1", Port: p},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
			NoLog:      true,
			NoSigs:     true,
		})
		if err != nil {
			t.Fatalf("nats-server %d: %v", i+1, err)
		}
		srv.Start()
		t.Cleanup(func() { shutdown(srv) })
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatalf("nats-server %d not ready within 10s", i+1)
		}
		urls = append(urls, srv.ClientURL())
		servers = append(servers, srv)
	}
	// The meta group elects a leader some time after the routes connect;
	// until then stream creation fails as unavailable.
	eventually(t, 30*time.Second, func() error {
		s, err := msjs.Connect(t.Context(), urls[0], msjs.Options{Stream: "READY", Subject: "ready", Replicas: 3})
		if err != nil {
			return err
		}
		return s.Close()
	})
	return servers
}

// eventually retries f until it succeeds, failing the test after limit.
func eventually(t *testing.T, limit time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", limit, err)
		}
		<-tick.C
	}
}

// nameFor derives a stream name and subject prefix from a directory, so
// that each subtest of the suite has its own stream on a shared cluster.
func nameFor(dir string) (stream, subject string) {
	h := fnv.New64a()
	h.Write([]byte(dir))
	return fmt.Sprintf("T%016x", h.Sum64()), fmt.Sprintf("t%016x", h.Sum64())
}

// roundRobin hands out the cluster's URLs in turn, so that a reopened
// store usually talks to another node than the one that wrote.
type roundRobin struct {
	urls []string
	n    atomic.Uint64
}

func (r *roundRobin) next() string { return r.urls[(r.n.Add(1)-1)%uint64(len(r.urls))] }

// mustCommit is the suite's helper for this package's own tests.
func mustCommit(t testing.TB, s store.Store, b store.Batch) {
	t.Helper()
	if err := s.Commit(t.Context(), b); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func isConflict(err error) bool { return errors.Is(err, store.ErrConflict) }
