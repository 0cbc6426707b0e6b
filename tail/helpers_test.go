package tail

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mspd/schema/msp"
	"mspd/server"
	"mspd/session"
	"mspd/store/sqlite"
	"mspd/turn"
)

// waitLimit bounds every wait for a condition; only a broken test
// reaches it.
const waitLimit = 30 * time.Second

// instantRunner ends every turn at once (three durable records a turn).
type instantRunner struct{}

func (instantRunner) Run(context.Context, turn.Spec, turn.Sink) turn.Outcome {
	return turn.Outcome{Completed: msp.TurnCompletedParams{Terminal: msp.TerminalCompleted}}
}

type nopSub struct{}

func (nopSub) Deliver(session.Notification)                       {}
func (nopSub) Replay(context.Context, session.Notification) error { return nil }
func (nopSub) Subscribed(string, string)                          {}
func (nopSub) Broadcasts() bool                                   { return false }

var seq atomic.Int64

func cmd() string {
	return fmt.Sprintf("0198f0aa-0000-7000-8000-%012d", seq.Add(1))
}

// serve runs a manager and an MSP server on a loopback port.
func serve(t *testing.T) (*session.Manager, *httptest.Server) {
	return serveWith(t, instantRunner{}, server.Config{}, nil)
}

// serveWith runs a manager over runner and an MSP server with cfg, its
// handler wrapped by wrap when given.
func serveWith(t *testing.T, runner session.TurnRunner, cfg server.Config, wrap func(http.Handler) http.Handler) (*session.Manager, *httptest.Server) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mspd.db"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := session.New(context.Background(), session.Config{Store: st, Runner: runner, LogPath: "x.db",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cfg.PingInterval = -1
	cfg.Logger = slog.New(slog.DiscardHandler)
	srv, err := server.New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(func() { hs.Close(); m.Close(); st.Close() })
	return m, hs
}

func wsURL(hs *httptest.Server) string { return "ws://" + hs.Listener.Addr().String() + "/msp" }

func newSession(t *testing.T, m *session.Manager) string {
	t.Helper()
	raw, _, err := m.StartSession(context.Background(), nopSub{}, mustJSON(msp.SessionStartParams{CommandID: cmd()}))
	if err != nil {
		t.Fatal(err)
	}
	var res msp.SessionStartResult
	json.Unmarshal(raw, &res)
	return res.Session.SessionID
}

func runTurn(t *testing.T, m *session.Manager, sid, text string) string {
	t.Helper()
	id := cmd()
	_, launch, err := m.StartTurn(context.Background(), nil, mustJSON(msp.TurnStartParams{CommandID: id, SessionID: sid,
		Input: []msp.TurnInputPart{{Type: "text", Text: text}}}))
	if err != nil {
		t.Fatal(err)
	}
	launch()
	return id
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// syncBuf is a goroutine-safe buffer that can be waited on.
type syncBuf struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed (and replaced) by every write
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return s.b.Write(p)
}

func (s *syncBuf) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// waitFor waits until what was written contains want.
func (s *syncBuf) waitFor(t *testing.T, want string) {
	t.Helper()
	s.waitCount(t, want, 1)
}

// waitCount waits until what was written contains want n times.
func (s *syncBuf) waitCount(t *testing.T, want string, n int) {
	t.Helper()
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	for {
		s.mu.Lock()
		has := strings.Count(s.b.String(), want) >= n
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		changed := s.changed
		s.mu.Unlock()
		if has {
			return
		}
		select {
		case <-changed:
		case <-limit.C:
			t.Fatalf("timed out waiting for %d× %q in:\n%s", n, want, s.String())
		}
	}
}

// receive waits for a value on ch.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// harness runs a tailer whose clock the test drives: each backoff wait is
// handed to the test on slept and ends when the test takes it, and each
// successful view/subscribe is announced on subscribed.
type harness struct {
	*tailer
	slept      chan time.Duration
	subscribed chan struct{}
	done       chan error
	cancel     context.CancelFunc
}

// startTail starts a run; configure, when given, adjusts the tailer first.
func startTail(t *testing.T, opts Options, out io.Writer, configure ...func(*tailer)) *harness {
	t.Helper()
	h := &harness{tailer: newTailer(opts, out), slept: make(chan time.Duration),
		subscribed: make(chan struct{}, 100), done: make(chan error, 1)}
	for _, f := range configure {
		f(h.tailer)
	}
	h.sleep = func(ctx context.Context, d time.Duration) error {
		select {
		case h.slept <- d:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	h.onSubscribe = func() { h.subscribed <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.runClean(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-h.done
	})
	return h
}

// waitSubscribed waits for the next successful view/subscribe.
func (h *harness) waitSubscribed(t *testing.T) {
	t.Helper()
	receive(t, h.subscribed, "view/subscribe")
}

// wait waits for the run to end and returns its error.
func (h *harness) wait(t *testing.T) error {
	t.Helper()
	err := receive(t, h.done, "the run to end")
	h.done <- err // for the cleanup
	return err
}

// proxy forwards TCP to target; cut severs every connection so far, and
// while refusing it closes each new connection at once.
type proxy struct {
	ln       net.Listener
	refusing atomic.Bool
	mu       sync.Mutex
	conns    []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.refusing.Load() {
				c.Close()
				continue
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) url() string { return "ws://" + p.ln.Addr().String() + "/msp" }

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
