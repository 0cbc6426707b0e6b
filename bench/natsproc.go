package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// startNATSServers runs n nats-server processes from bin (--nats-server),
// routed into one JetStream cluster when n > 1, each taking secret as its
// clients' token and its routes' password, and waits until each takes
// connections. These are the servers a production deployment runs apart
// from its mspd nodes; env is added to their environment, clientPorts
// and routePorts are theirs, and
// profPorts, when given, their profiling ports (net/http/pprof, at the
// process's base URL).
func startNATSServers(ctx context.Context, bin, workDir, secret string, env []string, clientPorts, routePorts, profPorts []int) ([]*server, error) {
	var procs []*server
	stop := func() { stopAll(procs) }
	for i := range clientPorts {
		dir, err := os.MkdirTemp(workDir, "nats-data-")
		if err != nil {
			stop()
			return nil, err
		}
		conf := filepath.Join(dir, "nats.conf")
		config := natsConfig(i, dir, secret, clientPorts, routePorts)
		if profPorts != nil {
			config += fmt.Sprintf("prof_port: %d\n", profPorts[i])
		}
		if err := os.WriteFile(conf, []byte(config), 0o600); err != nil {
			stop()
			return nil, err
		}
		cmd := exec.Command(bin, "--config", conf)
		cmd.Env = append(os.Environ(), env...)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("starting %s: %w", bin, err)
		}
		p := &server{cmd: cmd, pid: cmd.Process.Pid, dir: dir, stderr: &tailBuffer{max: 64}, exited: make(chan struct{})}
		if profPorts != nil {
			p.base = fmt.Sprintf("http://127.0.0.1:%d", profPorts[i])
		}
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				p.stderr.add(sc.Text())
			}
		}()
		go func() { cmd.Wait(); close(p.exited) }()
		procs = append(procs, p)
	}
	for i, p := range procs {
		if err := p.waitAccepting(ctx, clientPorts[i], clusterStartLimit); err != nil {
			stop()
			return nil, fmt.Errorf("nats-server %d: %w", i+1, err)
		}
	}
	return procs, nil
}

// natsConfig is the configuration file of nats-server i of those whose
// clients and routes listen on clientPorts and routePorts.
func natsConfig(i int, dir, secret string, clientPorts, routePorts []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: nats%d\nlisten: 127.0.0.1:%d\n", i+1, clientPorts[i])
	fmt.Fprintf(&b, "authorization { token: %q }\n", secret)
	fmt.Fprintf(&b, "jetstream { store_dir: %q }\n", filepath.Join(dir, "jetstream"))
	if len(routePorts) < 2 {
		return b.String()
	}
	var routes []string
	for j, p := range routePorts {
		if j != i {
			routes = append(routes, fmt.Sprintf("%q", fmt.Sprintf("nats://route:%s@127.0.0.1:%d", secret, p)))
		}
	}
	fmt.Fprintf(&b, "cluster {\n  name: mspbench\n  listen: 127.0.0.1:%d\n", routePorts[i])
	fmt.Fprintf(&b, "  authorization { user: route, password: %q }\n", secret)
	fmt.Fprintf(&b, "  routes: [%s]\n}\n", strings.Join(routes, ", "))
	return b.String()
}

// waitAccepting waits up to limit for a process to take connections on
// the loopback port; one that exits or does not in time is stopped and
// reported with its last log lines.
func (s *server) waitAccepting(ctx context.Context, port int, limit time.Duration) error {
	wait, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var d net.Dialer
		if c, err := d.DialContext(wait, "tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-s.exited:
			os.RemoveAll(s.dir)
			return fmt.Errorf("exited before listening:\n%s", s.stderr)
		case <-wait.Done():
			s.stop()
			return fmt.Errorf("did not listen in time:\n%s", s.stderr)
		case <-tick.C:
		}
	}
}
