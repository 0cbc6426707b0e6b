package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

// nodes are mspd processes sharing NATS JetStream (--store jetstream
// --nats-embedded): each runs a NATS server in its process, and with more
// than one they are routed into one NATS cluster, as e2e's cluster test
// starts them. With --nats-server, node i uses nats-server process i
// instead, as a production deployment does.
type nodes struct {
	srvs []*server
	nats []string // each node's NATS client URL
	// natsProcs are the nats-server processes (--nats-server) the nodes
	// use instead of embedded servers; none with embedded ones.
	natsProcs []*server
	// secret is the NATS servers' token (and their routes' password),
	// which mspbench makes up: without one, each server would take a
	// token of its own process that mspbench cannot know.
	secret string
}

// connOptions are the options a connection to the nodes' NATS servers
// needs.
func (ns *nodes) connOptions() []nats.Option {
	return []nats.Option{nats.Token(ns.secret)}
}

// clusterStartLimit bounds how long a cluster may take to elect its
// JetStream leaders and listen.
const clusterStartLimit = 2 * time.Minute

// startTries is how many times startNodes starts a cluster: a node may
// give up joining while the cluster elects its JetStream leaders (builds
// before 97625d1, which --bin may name, did so now and then: a
// lease-bucket lookup sent meanwhile went unanswered for a minute).
const startTries = 2

// startNodes runs n mspd nodes on JetStream with the stream and the lease
// bucket replicated replicas times, and waits for all of them to listen;
// a cluster that does not come up is started afresh, once.
func (r *runner) startNodes(ctx context.Context, n, replicas int) (*nodes, error) {
	return r.startNodesWith(ctx, n, replicas, nil, nil)
}

// startNodesWith is startNodes with args added to every node's flags and
// env to its environment, after the configured ones.
func (r *runner) startNodesWith(ctx context.Context, n, replicas int, args, env []string) (*nodes, error) {
	var err error
	for try := 1; try <= startTries; try++ {
		var ns *nodes
		if ns, err = r.tryNodes(ctx, n, replicas, args, env); err == nil {
			return ns, nil
		}
		lines := strings.Split(err.Error(), "\n")
		r.logf("  the cluster did not come up (try %d of %d): %s … %s", try, startTries, lines[0], lines[len(lines)-1])
	}
	return nil, err
}

// tryNodes makes one attempt of startNodesWith.
func (r *runner) tryNodes(ctx context.Context, n, replicas int, extra, extraEnv []string) (*nodes, error) {
	ports, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	ns := &nodes{secret: rand.Text()}
	external := r.cfg.NATSServer != ""
	if external {
		// Profiling ports always: through them the store scenario also
		// has the servers collect their garbage before it times reads.
		if ns.natsProcs, err = startNATSServers(ctx, r.cfg.NATSServer, r.cfg.WorkDir, ns.secret, r.cfg.NATSEnv, ports[:n], ports[n:2*n], ports[2*n:]); err != nil {
			return nil, err
		}
	}
	for i := range n {
		nodeEnv := ns.env()
		var args []string
		if external {
			args = []string{"--store", "jetstream", "--jetstream-replicas", fmt.Sprint(replicas), "--node-id", fmt.Sprintf("n%d", i+1)}
			// The URLs through the environment, not a flag: they hold the
			// token, which ps would show.
			nodeEnv = append(nodeEnv, "MSPD_NATS="+ns.urlsFrom(i, ports[:n]))
		} else {
			args = nodeArgs(i, ports[:n], ports[n:2*n], replicas)
		}
		args = append(append(args, r.cfg.ServerArgs...), extra...)
		if r.cfg.Profile != "" {
			args = append(args, "--pprof")
		}
		env := append(append(nodeEnv, r.cfg.ServerEnv...), extraEnv...)
		s, err := launchServer(r.bin, r.cfg.WorkDir, args, env)
		if err != nil {
			ns.stop()
			return nil, err
		}
		ns.srvs = append(ns.srvs, s)
		ns.nats = append(ns.nats, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	var errs []error
	for i, s := range ns.srvs {
		if err := s.waitListening(ctx, clusterStartLimit); err != nil {
			errs = append(errs, fmt.Errorf("node n%d: %w", i+1, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		ns.stop()
		return nil, err
	}
	return ns, nil
}

// urlsFrom lists the NATS servers' client URLs with the token, node i's
// own first, for node i to connect to.
func (ns *nodes) urlsFrom(i int, ports []int) string {
	var urls []string
	for k := range ports {
		urls = append(urls, fmt.Sprintf("nats://%s@127.0.0.1:%d", ns.secret, ports[(i+k)%len(ports)]))
	}
	return strings.Join(urls, ",")
}

// natsHosts are the processes that run the NATS servers: the nats-server
// processes, or the nodes that embed them.
func (ns *nodes) natsHosts() []*server {
	if len(ns.natsProcs) > 0 {
		return ns.natsProcs
	}
	return ns.srvs
}

// processes are every process of the deployment: the nodes, and the
// nats-server processes when they run apart.
func (ns *nodes) processes() []*server {
	return append(slices.Clone(ns.srvs), ns.natsProcs...)
}

// natsWhere says where the NATS servers run, for a figure's note.
func (ns *nodes) natsWhere() string {
	if len(ns.natsProcs) > 0 {
		return "nats-server processes"
	}
	return "in their mspd processes"
}

// env is the environment the nodes run with over mspbench's: the secret
// through it, not a flag, so that ps does not show it, and set even when
// mspbench's environment has one, which would not be ns.secret.
func (ns *nodes) env() []string {
	return []string{"MSPD_NATS_SECRET=" + ns.secret}
}

// nodeArgs are the flags of node i (0-based) of a deployment whose NATS
// servers listen for clients on natsPorts and for routes on routePorts: a
// lone node has no routes.
func nodeArgs(i int, natsPorts, routePorts []int, replicas int) []string {
	args := []string{"--store", "jetstream", "--nats-embedded",
		"--nats-listen", fmt.Sprintf("127.0.0.1:%d", natsPorts[i]),
		"--jetstream-replicas", fmt.Sprint(replicas), "--node-id", fmt.Sprintf("n%d", i+1)}
	if len(routePorts) < 2 {
		return args
	}
	var routes []string
	for j, p := range routePorts {
		if j != i {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
		}
	}
	return append(args, "--nats-cluster-listen", fmt.Sprintf("127.0.0.1:%d", routePorts[i]),
		"--nats-routes", strings.Join(routes, ","))
}

// stop ends every node, all at once: a node stopping after the others
// would find no quorum to let go of its leases with.
func (ns *nodes) stop() {
	stopAll(ns.srvs)
	stopAll(ns.natsProcs)
}

// stopAll tells every server to stop, then waits for each.
func stopAll(srvs []*server) {
	for _, s := range srvs {
		s.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, s := range srvs {
		s.awaitExit()
	}
}

// freePorts reserves n loopback ports and lets them go for the servers
// (a NATS route must name its peers' ports before they start).
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
