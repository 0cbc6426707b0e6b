package tool

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"net/http"
	"os/exec"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioDialer starts the command for each connection, env added to the
// base environment, its stderr logged line by line.
func stdioDialer(command string, args, base []string, env map[string]string, log *slog.Logger) dialFunc {
	return func(context.Context) (mcp.Transport, func() int, func(), error) {
		cmd := exec.Command(command, args...)
		cmd.Env = slices.Clone(base)
		for _, k := range slices.Sorted(maps.Keys(env)) {
			cmd.Env = append(cmd.Env, k+"="+env[k])
		}
		stderr := &lineLogger{log: log}
		cmd.Stderr = stderr
		pid := func() int {
			if cmd.Process == nil {
				return 0
			}
			return cmd.Process.Pid
		}
		// The process is waited for by the connection's Close; the last
		// stderr line may lack its newline.
		return &mcp.CommandTransport{Command: cmd}, pid, stderr.flush, nil
	}
}

// maxStderrLine bounds one logged line of a server's stderr.
const maxStderrLine = 4 << 10

// lineLogger logs each line written to it.
type lineLogger struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.buf = append(l.buf, p...)
			if len(l.buf) >= maxStderrLine {
				l.emitLocked()
			}
			break
		}
		l.buf = append(l.buf, p[:i]...)
		p = p[i+1:]
		l.emitLocked()
	}
	return n, nil
}

func (l *lineLogger) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emitLocked()
	}
}

func (l *lineLogger) emitLocked() {
	line := bytes.TrimRight(l.buf, "\r")
	if len(line) > maxStderrLine {
		line = line[:maxStderrLine]
	}
	l.log.Info("mcp server stderr", "line", string(line))
	l.buf = l.buf[:0]
}

// httpDialer connects over streamable HTTP through base (nil: the
// default client), sending headers with every request.
func httpDialer(endpoint string, headers map[string]string, base *http.Client) dialFunc {
	if base == nil {
		base = http.DefaultClient
	}
	rt := base.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	client := &http.Client{Transport: headerTransport{base: rt, headers: headers}, CheckRedirect: base.CheckRedirect, Timeout: base.Timeout}
	return func(context.Context) (mcp.Transport, func() int, func(), error) {
		t := &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: client}
		return t, func() int { return 0 }, func() {}, nil
	}
}

// headerTransport adds the configured headers to each request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(t.headers) == 0 {
		return t.base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	return t.base.RoundTrip(req)
}
