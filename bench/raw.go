package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// RawServerArg is the argument that makes the benchmark binary serve the
// raw baseline (ServeRaw) instead of benchmarking: the baseline runs in a
// process of its own, as mspd does.
const RawServerArg = "raw-server"

// ServeRaw is the raw baseline's server: coder/websocket alone. Each
// connection sends commands "<count>\n<frame>" or
// "<count>/<pace ms>\n<frame>"; the server writes frame count times, one
// message each, as fast as the library lets it (or pace ms apart, as a
// paced answer streams), exactly as a plain coder/websocket program would
// (one Write per message). It prints "listening <addr>" on out and serves
// until ctx ends.
func ServeRaw(ctx context.Context, out io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "listening %s\n", ln.Addr())
	srv := &http.Server{Handler: http.HandlerFunc(serveRawConn)}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func serveRawConn(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(-1)
	ctx := context.Background()
	for {
		_, cmd, err := c.Read(ctx)
		if err != nil {
			return
		}
		head, frame, ok := bytes.Cut(cmd, []byte("\n"))
		count, paceMs, paced := bytes.Cut(head, []byte("/"))
		n, err := strconv.Atoi(string(count))
		pace := 0
		if paced && err == nil {
			pace, err = strconv.Atoi(string(paceMs))
		}
		if !ok || err != nil {
			c.Close(websocket.StatusUnsupportedData, "want <count>[/<pace ms>]\\n<frame>")
			return
		}
		for i := range n {
			if pace > 0 && i > 0 {
				time.Sleep(time.Duration(pace) * time.Millisecond)
			}
			if err := c.Write(ctx, websocket.MessageText, frame); err != nil {
				return
			}
		}
	}
}

// rawServer is a running raw baseline process.
type rawServer struct {
	cmd  *exec.Cmd
	addr string
}

// startRaw runs this executable as the raw baseline server.
func startRaw(ctx context.Context) (*rawServer, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, RawServerArg)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line := make(chan string, 1)
	go func() {
		var b [128]byte
		n, _ := io.ReadAtLeast(out, b[:], 1)
		line <- string(b[:n])
		io.Copy(io.Discard, out)
	}()
	select {
	case l := <-line:
		addr, ok := strings.CutPrefix(strings.TrimSpace(l), "listening ")
		if !ok {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, fmt.Errorf("raw server said %q", l)
		}
		return &rawServer{cmd: cmd, addr: addr}, nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, errors.New("raw server did not start")
	case <-ctx.Done():
		cmd.Process.Kill()
		cmd.Wait()
		return nil, ctx.Err()
	}
}

func (s *rawServer) stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// cpu is the raw server's CPU time so far.
func (s *rawServer) cpu() (time.Duration, error) { return procCPU(s.cmd.Process.Pid) }

// rawRun is what one raw round delivered.
type rawRun struct {
	frames  int
	elapsed time.Duration
	cpu     time.Duration // the raw server's CPU time
}

// rate is frames/s.
func (r rawRun) rate() float64 { return float64(r.frames) / r.elapsed.Seconds() }

// rawConns are connections to the raw server.
type rawConns struct {
	rs *rawServer
	cs []*websocket.Conn
}

// dialRaw opens n connections to the raw server.
func dialRaw(ctx context.Context, rs *rawServer, n int) (*rawConns, error) {
	rc := &rawConns{rs: rs, cs: make([]*websocket.Conn, n)}
	err := parallel(ctx, n, setupParallelism, func(ctx context.Context, i int) error {
		c, _, err := websocket.Dial(ctx, "ws://"+rs.addr+"/", &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return err
		}
		c.SetReadLimit(-1)
		rc.cs[i] = c
		return nil
	})
	if err != nil {
		rc.close()
		return nil, err
	}
	return rc, nil
}

func (rc *rawConns) close() {
	for _, c := range rc.cs {
		if c != nil {
			c.CloseNow()
		}
	}
}

// round has the raw server write count copies of frame on every
// connection, all at once; it returns when every client has read every
// frame. Each client reads and classifies frames exactly as the MSP
// clients do (methodOf, stringMember), so the client side costs the same
// in both.
func (rc *rawConns) round(ctx context.Context, count int, frame []byte) (rawRun, error) {
	return rc.pacedRound(ctx, count, 0, frame)
}

// pacedRound is round with the frames of each connection written paceMs
// apart (0: as fast as they go).
func (rc *rawConns) pacedRound(ctx context.Context, count, paceMs int, frame []byte) (rawRun, error) {
	head := strconv.Itoa(count)
	if paceMs > 0 {
		head += "/" + strconv.Itoa(paceMs)
	}
	cmd := append([]byte(head+"\n"), frame...)
	cpu0, _ := rc.rs.cpu()
	start := time.Now()
	err := parallel(ctx, len(rc.cs), len(rc.cs), func(ctx context.Context, i int) error {
		return readRaw(ctx, rc.cs[i], cmd, count)
	})
	if err != nil {
		return rawRun{}, err
	}
	cpu1, _ := rc.rs.cpu()
	return rawRun{frames: len(rc.cs) * count, elapsed: time.Since(start), cpu: cpu1 - cpu0}, nil
}

// readRaw sends one command and reads the count frames it asks for.
func readRaw(ctx context.Context, c *websocket.Conn, cmd []byte, count int) error {
	if err := c.Write(ctx, websocket.MessageText, cmd); err != nil {
		return err
	}
	var buf bytes.Buffer
	var text int
	for range count {
		_, r, err := c.Reader(ctx)
		if err != nil {
			return err
		}
		if _, err := discard(r, &buf); err != nil {
			return err
		}
		f := buf.Bytes()
		if m := methodOf(f); m != nil {
			text += len(stringMember(f, "delta"))
		}
	}
	if text == 0 {
		return errors.New("raw frames carry no delta")
	}
	return nil
}
