package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// server is an mspd process the benchmark started, with a fresh data
// directory of its own.
type server struct {
	cmd    *exec.Cmd
	pid    int
	url    string // ws://host:port/msp
	base   string // http://host:port
	dir    string
	stderr *tailBuffer
	exited chan struct{}
	// listening receives the WebSocket URL once the server listens.
	listening chan string
}

// serverArgs are the flags every benchmark server runs with: the scripted
// provider, a retry budget that does not throttle the scripted 429s (a
// thousand turns failing at once would exhaust it), and JSON logs so the
// listening address can be read back.
func serverArgs(dataDir string) []string {
	return []string{"serve", "--listen", "127.0.0.1:0", "--data", dataDir, "--provider", "scripted",
		"--retry-budget-tokens", "-1", "--log-format", "json", "--log-level", "info"}
}

// startServer runs bin with a fresh data directory under workDir, env
// added to its environment, and waits for it to listen.
func startServer(ctx context.Context, bin, workDir string, extra, env []string) (*server, error) {
	s, err := launchServer(bin, workDir, extra, env)
	if err != nil {
		return nil, err
	}
	if err := s.waitListening(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	return s, nil
}

// launchServer runs bin with a fresh data directory under workDir, and
// env (KEY=value) over this process's environment, without waiting for
// it: the nodes of a cluster must all be running before any of them can
// elect a JetStream leader and listen.
func launchServer(bin, workDir string, extra, env []string) (*server, error) {
	dir, err := os.MkdirTemp(workDir, "mspd-data-")
	if err != nil {
		return nil, err
	}
	return launchServerOn(bin, dir, extra, env)
}

// launchServerOn is launchServer on the data directory dir, which may
// hold what an earlier server left (see halt).
func launchServerOn(bin, dir string, extra, env []string) (*server, error) {
	cmd := exec.Command(bin, append(serverArgs(dir), extra...)...)
	// Flags win over MSPD_* variables; the rest of the environment passes,
	// env's variables winning over this process's (exec keeps the last).
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	s := &server{cmd: cmd, pid: cmd.Process.Pid, dir: dir, stderr: &tailBuffer{max: 64}, exited: make(chan struct{}),
		listening: make(chan string, 1)}
	go s.readLog(stderr, s.listening)
	go func() { cmd.Wait(); close(s.exited) }()
	return s, nil
}

// waitListening waits up to limit for the server to listen; a server that
// exits or does not listen in time is stopped and reported with its last
// log lines.
func (s *server) waitListening(ctx context.Context, limit time.Duration) error {
	wait, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	select {
	case u := <-s.listening:
		s.url = u
		s.base = "http://" + strings.TrimSuffix(strings.TrimPrefix(u, "ws://"), "/msp")
		return nil
	case <-s.exited:
		os.RemoveAll(s.dir)
		return fmt.Errorf("mspd exited before listening:\n%s", s.stderr)
	case <-wait.Done():
		s.stop()
		return fmt.Errorf("mspd did not listen in time:\n%s", s.stderr)
	}
}

// readLog keeps the last log lines (for error reports) and reports the
// WebSocket URL from the "mspd listening" line.
func (s *server) readLog(r io.Reader, listening chan<- string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		s.stderr.add(string(line))
		var rec struct {
			Msg string `json:"msg"`
			URL string `json:"url"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "mspd listening" {
			select {
			case listening <- rec.URL:
			default:
			}
		}
	}
}

// stop ends the server (SIGTERM, then SIGKILL) and removes its data.
func (s *server) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	s.awaitExit()
}

// halt ends the server as stop does but keeps its data directory, for
// another server to start on.
func (s *server) halt() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	s.awaitHalt()
}

// awaitExit waits for a server told to stop, killing it after 10 s, and
// removes its data.
func (s *server) awaitExit() {
	s.awaitHalt()
	os.RemoveAll(s.dir)
}

// awaitHalt waits for a server told to stop, killing it after 10 s.
func (s *server) awaitHalt() {
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// cpu is the server's CPU time so far (user and system, all threads).
func (s *server) cpu() (time.Duration, error) { return procCPU(s.pid) }

// rss is the server's resident set size in bytes.
func (s *server) rss() (int64, error) { return procRSS(s.pid) }

// metric reads one unlabelled sample from the server's /metrics.
func (s *server) metric(ctx context.Context, name string) (float64, error) {
	var v float64
	found := false
	err := s.eachMetricLine(ctx, func(line string) error {
		rest, ok := strings.CutPrefix(line, name+" ")
		if !ok || found {
			return nil
		}
		found = true
		var err error
		v, err = strconv.ParseFloat(rest, 64)
		return err
	})
	if err == nil && !found {
		err = fmt.Errorf("metric %s not found", name)
	}
	return v, err
}

// metricSum adds every sample of a metric from the server's /metrics,
// whatever its labels.
func (s *server) metricSum(ctx context.Context, name string) (float64, error) {
	var sum float64
	err := s.eachMetricLine(ctx, func(line string) error {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			return nil
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			return nil
		}
		v, err := strconv.ParseFloat(f[0], 64)
		sum += v
		return err
	})
	return sum, err
}

// eachMetricLine calls fn with each line of the server's /metrics until
// fn fails.
func (s *server) eachMetricLine(ctx context.Context, fn func(string) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if err := fn(sc.Text()); err != nil {
			return err
		}
	}
	return sc.Err()
}

// procCPU sums the time the threads of a process spent on a CPU, from
// /proc/<pid>/task/*/schedstat (nanoseconds; /proc/<pid>/stat counts in
// 10 ms ticks, too coarse for short runs). Threads that exited are not
// counted; the Go runtime keeps its threads.
func procCPU(pid int) (time.Duration, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil {
		return 0, err
	}
	if len(tasks) == 0 {
		return 0, fmt.Errorf("process %d has no tasks", pid)
	}
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, errors.New("malformed schedstat")
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, err
		}
		total += time.Duration(ns)
	}
	return total, nil
}

// procRSS reads VmRSS of a process from /proc/<pid>/status.
func procRSS(pid int) (int64, error) { return procStatus(pid, "VmRSS") }

// procPeakRSS reads VmHWM of a process: its peak resident set size.
func procPeakRSS(pid int) (int64, error) { return procStatus(pid, "VmHWM") }

// procStatus reads one of the kB figures of /proc/<pid>/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc status", field)
}

// buildServer builds ./cmd/mspd of the module at moduleDir into dir.
func buildServer(ctx context.Context, moduleDir, dir string) (string, error) {
	bin := filepath.Join(dir, "mspd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/mspd")
	cmd.Dir = moduleDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/mspd: %w\n%s", err, out)
	}
	return bin, nil
}

// raiseFileLimit lifts the soft RLIMIT_NOFILE to the hard limit: ten
// thousand connections need as many descriptors on each side. It returns
// the soft limit in force.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, err
		}
	}
	return lim.Cur, nil
}

// tailBuffer keeps the last max lines written to it.
type tailBuffer struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *tailBuffer) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// profileSeconds is how long a CPU profile of a scenario runs.
const profileSeconds = 5

// profile writes a CPU profile of srv (started with --pprof) to file,
// running load over and over until the profile is taken.
func (r *runner) profile(ctx context.Context, srv *server, file string, load func(context.Context) error) error {
	return r.profileAll(ctx, []*server{srv}, []string{file}, load)
}

// profileAll writes a CPU profile of each of srvs to the file of the same
// index, and what it allocated over the same seconds to that file plus
// ".allocs", taken at the same time, running load over and over until all
// are taken.
func (r *runner) profileAll(ctx context.Context, srvs []*server, files []string, load func(context.Context) error) error {
	got := make(chan error, 2*len(srvs))
	for i, srv := range srvs {
		go func() {
			got <- fetch(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", srv.base, profileSeconds), files[i])
		}()
		go func() {
			got <- fetch(ctx, fmt.Sprintf("%s/debug/pprof/allocs?seconds=%d", srv.base, profileSeconds), files[i]+".allocs")
		}()
	}
	var errs []error
	for pending := 2 * len(srvs); pending > 0; {
		select {
		case err := <-got:
			pending--
			if err != nil {
				errs = append(errs, err)
			}
			continue
		default:
		}
		if err := load(ctx); err != nil {
			return err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, f := range files {
		r.logf("  CPU profile: %s, allocations: %s.allocs", f, f)
	}
	return nil
}

// fetch GETs url into file.
func fetch(ctx context.Context, url, file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := fetchTo(ctx, url, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fetchTo GETs url from a server's debug listener into w.
func fetchTo(ctx context.Context, url string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s (is the server started with --pprof?)", url, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// machineTicks is the whole machine's CPU time from /proc/stat's first
// line, in clock ticks: busy (user, nice, system, irq, softirq, steal) and
// the total with idle and iowait. Kernel work on a process's behalf that
// runs in threads of the kernel's own (writeback of the files it wrote,
// the file system's journal) is in busy but in no process's schedstat.
type machineTicks struct{ busy, total uint64 }

// readMachineTicks reads the machine's CPU time so far.
func readMachineTicks() (machineTicks, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTicks{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineTicks{}, errors.New("malformed /proc/stat")
	}
	var t machineTicks
	for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return machineTicks{}, err
		}
		t.total += n
		if i != 3 && i != 4 {
			t.busy += n
		}
	}
	return t, nil
}

// busyPercent is the share of the machine's CPU time between a and b that
// was busy, or 0 when /proc/stat could not be read for either.
func busyPercent(a, b machineTicks) float64 {
	if a.total == 0 || b.total <= a.total {
		return 0
	}
	return 100 * float64(b.busy-a.busy) / float64(b.total-a.total)
}
