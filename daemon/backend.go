package daemon

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"mspd/internal/datadir"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"mspd/cluster"
	"mspd/observe"
	"mspd/session"
	"mspd/store"
	msjs "mspd/store/jetstream"
	"mspd/store/sqlite"
)

// Backend says where sessions live: one node's SQLite file, or NATS
// JetStream shared by several nodes.
type Backend struct {
	// Store is "sqlite" (the default: DataDir/mspd.db, one node) or
	// "jetstream" (several nodes: the log and the ledger in JetStream, a
	// lease per session deciding which node runs its turns).
	Store string
	// NATS is the URL of the NATS servers of a JetStream deployment; with
	// Embedded it is ignored.
	NATS string
	// Embedded runs a NATS server with JetStream in this process, its
	// files under DataDir/nats, so that nodes need no other software.
	Embedded bool
	// NATSListen is the embedded server's client address (default
	// 127.0.0.1:4222; port 0 picks one).
	NATSListen string
	// ClusterName, ClusterListen and Routes make the embedded servers of
	// several nodes one NATS cluster: its name, this server's route
	// address, and the other servers' routes (nats://host:port).
	ClusterName   string
	ClusterListen string
	Routes        []string
	// Secret is the embedded NATS servers' shared secret: each node's mspd
	// presents it as its token, and the servers' routes as their
	// password. Without it, the embedded server's client and route
	// addresses must be loopback ones: anyone who reached them could read
	// and write every session. Its clients then present a random token of
	// this process's own, which the other local users do not know; its
	// routes present nothing (another process cannot know the token).
	Secret string
	// Replicas is the replication of the stream and the lease bucket: 1,
	// or 3 on a cluster of three or more.
	Replicas int
	// Streams is how many JetStream streams the sessions are spread over
	// (default 1; see store/jetstream's Options.Streams): the same on every
	// node, and it may grow but never shrink.
	Streams int
	// Node names this node in the deployment (default: the host's name and
	// the listen address).
	Node string
	// LeaseTTL is how soon the sessions of a node that died are taken over
	// (default 10 s).
	LeaseTTL time.Duration
}

// backend is an open Backend.
type backend struct {
	store   store.Store
	cluster *cluster.Cluster // nil on one node
	logPath string           // reported as every Session's path
	close   func() error
}

// openBackend opens the configured store (and, on JetStream, joins the
// cluster).
func openBackend(ctx context.Context, cfg Config, dir string, metrics *observe.Metrics) (*backend, error) {
	switch cfg.Backend.Store {
	case "", "sqlite":
		path := filepath.Join(dir, "mspd.db")
		st, err := sqlite.Open(path,
			sqlite.WithIndexer(session.Indexer), // sessions written before the search index
			sqlite.WithCommitObserver(func(g sqlite.GroupCommit) { metrics.StoreCommit(g.Batches, g.Took, g.Pages) }),
			sqlite.WithCheckpointObserver(func(c sqlite.Checkpoint) {
				metrics.StoreCheckpoint(c.Kind, c.Frames, c.Copied, c.Blocked, c.Err)
			}))
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", path, err)
		}
		return &backend{store: st, logPath: path, close: st.Close}, nil
	case "jetstream":
		return openJetStream(ctx, cfg, dir)
	}
	return nil, fmt.Errorf("store %q: want sqlite or jetstream", cfg.Backend.Store)
}

// refusedForGood tells an Open refused by what the streams hold (a newer
// layout, fewer streams than they use), which waiting does not change.
func refusedForGood(err error) bool {
	return errors.Is(err, msjs.ErrNewerLayout) || errors.Is(err, msjs.ErrFewerStreams)
}

func openJetStream(ctx context.Context, cfg Config, dir string) (*backend, error) {
	b := cfg.Backend
	var closers []func() error
	fail := func(err error) (*backend, error) {
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i]()
		}
		return nil, err
	}
	url := b.NATS
	node := b.Node
	if node == "" {
		host, _ := os.Hostname()
		node = host + "-" + strings.NewReplacer(":", "-", ".", "-", "[", "", "]", "").Replace(cfg.Listen)
	}
	connOpts := []nats.Option{nats.Name("mspd " + node), nats.MaxReconnects(-1)}
	if b.Embedded {
		// The embedded server keeps its JetStream files in dir: a second
		// process on them would serve a split half of the sessions and
		// overwrite the first's files. Locked before anything is opened,
		// as the SQLite store locks its directory.
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fail(err)
		}
		held, err := datadir.Lock(dir)
		if err != nil {
			return fail(err)
		}
		closers = append(closers, held.Unlock)
		srv, token, err := startNATS(b, node, filepath.Join(dir, "nats"))
		if err != nil {
			return fail(err)
		}
		closers = append(closers, func() error { srv.Shutdown(); srv.WaitForShutdown(); return nil })
		url = srv.ClientURL()
		connOpts = append(connOpts, embeddedConnOptions(b, token)...)
	}
	if url == "" {
		return fail(errors.New("store jetstream needs --nats URL or --nats-embedded"))
	}
	if err := checkNATSURLs(url); err != nil {
		return fail(err)
	}
	nc, err := nats.Connect(url, connOpts...)
	if err != nil {
		return fail(connectError(url, err))
	}
	closers = append(closers, func() error { nc.Close(); return nil })
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	replicas := max(b.Replicas, 1)
	// A cluster takes a moment to elect its JetStream leader: wait for it.
	var st *msjs.Store
	wait, cancel := context.WithTimeout(ctx, electionWait)
	defer cancel()
	for {
		st, err = msjs.Open(wait, js, msjs.Options{Replicas: replicas, Streams: b.Streams})
		if err == nil || wait.Err() != nil || refusedForGood(err) {
			break
		}
		select {
		case <-wait.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err != nil && wait.Err() != nil && b.Embedded && b.ClusterListen != "" {
		// Clustered, the embedded server elects a JetStream leader only
		// once enough of the others route to it.
		return fail(fmt.Errorf("opening the JetStream store: no JetStream leader within %v: a node with --nats-cluster-listen waits for the other nodes of its cluster (--nats-routes on it or on them); one node alone runs without --nats-cluster-listen: %w", electionWait, err))
	}
	if err != nil {
		return fail(fmt.Errorf("opening the JetStream store: %w", err))
	}
	closers = append(closers, st.Close)
	join, cancelJoin := context.WithTimeout(ctx, time.Minute)
	defer cancelJoin()
	cl, err := cluster.New(join, nc, js, cluster.Options{Node: node, LeaseTTL: b.LeaseTTL, Replicas: replicas, Logger: cfg.Logger})
	if err != nil {
		return fail(err)
	}
	cfg.Logger.Info("cluster node", "node", node, "nats", withoutCredentials(url), "replicas", replicas)
	return &backend{store: st, cluster: cl, logPath: "jetstream:" + withoutCredentials(url), close: func() error {
		cl.Close()
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		return errors.Join(errs...)
	}}, nil
}

// withoutCredentials drops the user information (a user and password, or
// a token) from each of a comma-separated list of NATS URLs: the list is
// logged, and reported to every client as its sessions' path. NATS URLs
// have no path, so all up to the last '@' is user information, a '/' or
// '#' in an unescaped token or password included.
func withoutCredentials(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		u = strings.TrimSpace(u)
		at := strings.LastIndexByte(u, '@')
		if at < 0 {
			parts[i] = u
			continue
		}
		host := u[at+1:]
		if scheme, _, ok := strings.Cut(u[:at], "://"); ok && isScheme(scheme) {
			host = scheme + "://" + host
		}
		parts[i] = host
	}
	return strings.Join(parts, ",")
}

// connectError is the error of a failed connection to the NATS servers
// at urls, which it names without their credentials.
func connectError(urls string, err error) error {
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		// Its text quotes a URL, credentials included (checkNATSURLs
		// should have refused it first).
		err = errors.New("a URL does not parse")
	}
	return fmt.Errorf("connecting to NATS at %s: %w", withoutCredentials(urls), err)
}

// isScheme tells whether s can be a URL's scheme (RFC 3986), and not a
// user and password ("u:p://x@host").
func isScheme(s string) bool {
	return s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '+' || r == '-' || r == '.')
	}) < 0
}

// checkNATSURLs refuses a list of NATS URLs that nats.go would not read as
// withoutCredentials does: one that does not parse, or where a '/', '#'
// or '?' left unescaped in a token or password makes part of it a host, a
// path or a port. nats.go's errors would quote those parts, the password's
// among them; this one names the URLs without their credentials.
func checkNATSURLs(urls string) error {
	for _, raw := range strings.Split(urls, ",") {
		raw = strings.TrimSpace(raw)
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw // as nats.go reads it
		}
		u, err := url.Parse(raw)
		at := strings.LastIndexByte(raw, '@')
		switch {
		case at < 0 && err != nil:
			// No credentials to quote: the detail helps.
			return fmt.Errorf("NATS URL %s: %w", raw, errors.Unwrap(err))
		case at < 0:
		case err != nil || strings.TrimSuffix(raw[at+1:], "/") != u.Host:
			return fmt.Errorf("NATS URL %s does not parse as scheme://[user[:password]@]host[:port] (a '/', '#', '?' or '%%' in a user or password must be percent-encoded)",
				withoutCredentials(raw))
		}
	}
	return nil
}

// embeddedConnOptions are the options of a node's connection to its
// embedded NATS server, which takes token.
func embeddedConnOptions(b Backend, token string) []nats.Option {
	opts := []nats.Option{nats.Token(token)}
	if b.Secret == "" {
		// The token is this process's own: the other nodes' servers, which
		// the client learns of and would reconnect to, refuse it, and the
		// same refusal twice closes the connection for good.
		opts = append(opts, nats.IgnoreDiscoveredServers())
	}
	return opts
}

// electionWait bounds how long a node waits for its JetStream cluster to
// elect a leader and take the stream (a variable: tests shorten it).
var electionWait = time.Minute

// startNATS runs the embedded NATS server of a node, and returns the
// token its clients must present: the secret, or without one a token of
// this process's own, so that the other users of the machine, who can
// reach a loopback address too, cannot read or write the sessions.
func startNATS(b Backend, node, dir string) (*natsserver.Server, string, error) {
	listen := b.NATSListen
	if listen == "" {
		listen = "127.0.0.1:4222"
	}
	host, port, err := splitHostPort(listen)
	if err != nil {
		return nil, "", fmt.Errorf("--nats-listen %q: %w", listen, err)
	}
	opts := &natsserver.Options{
		ServerName: node,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		// Every write fsynced, as the SQLite store does: an acknowledged
		// event survives a power cut.
		SyncAlways: true,
		NoSigs:     true,
		NoLog:      os.Getenv("MSPD_NATS_LOG") == "",
	}
	if b.Secret == "" && !isLoopback(listen) {
		return nil, "", fmt.Errorf("--nats-listen %s is reachable from other machines: set --nats-secret (MSPD_NATS_SECRET), or every one of them could read and write every session", listen)
	}
	opts.Authorization = b.Secret
	if opts.Authorization == "" {
		opts.Authorization = rand.Text() // 128 random bits
	}
	if b.ClusterListen != "" {
		chost, cport, err := splitHostPort(b.ClusterListen)
		if err != nil {
			return nil, "", fmt.Errorf("--nats-cluster-listen %q: %w", b.ClusterListen, err)
		}
		if b.Secret == "" && !isLoopback(b.ClusterListen) {
			return nil, "", fmt.Errorf("--nats-cluster-listen %s is reachable from other machines: set --nats-secret (MSPD_NATS_SECRET) on every node, or any server could join the cluster", b.ClusterListen)
		}
		opts.Cluster.Name = b.ClusterName
		if opts.Cluster.Name == "" {
			opts.Cluster.Name = "mspd"
		}
		opts.Cluster.Host, opts.Cluster.Port = chost, cport
		opts.Routes = natsserver.RoutesFromStr(strings.Join(b.Routes, ","))
		if b.Secret != "" {
			opts.Cluster.Username, opts.Cluster.Password = routeUser, b.Secret
			for _, r := range opts.Routes {
				r.User = url.UserPassword(routeUser, b.Secret)
			}
		}
	}
	srv, err := natsserver.NewServer(opts)
	if err != nil {
		return nil, "", fmt.Errorf("embedded NATS server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, "", errors.New("embedded NATS server: not ready within 30s")
	}
	return srv, opts.Authorization, nil
}

// routeUser is the user the embedded servers' routes authenticate as,
// with the deployment's secret as password.
const routeUser = "mspd"

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, err
	}
	if port == 0 {
		port = -1 // nats-server: any free port
	}
	return host, port, nil
}
