package e2e

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/demo"
	"mspd/schema/msp"
)

// validator is compiled once for every test.
var validator = func() *msp.Validator {
	v, err := msp.NewValidator()
	if err != nil {
		panic(err)
	}
	return v
}()

// startDaemon runs an in-process daemon on a free loopback port with a
// temporary data directory (or dir, when given).
func startDaemon(t *testing.T, cfg daemon.Config) *daemon.Daemon {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Provider == "" {
		cfg.Provider = "scripted"
	}
	if cfg.Demo.WordDelay == 0 {
		cfg.Demo.WordDelay = demo.NoDelay
	}
	if cfg.Retry.InitialBackoff == 0 {
		// Real backoffs, kept short: these tests run the real clock.
		cfg.Retry.InitialBackoff = 5 * time.Millisecond
		cfg.Retry.MaxBackoff = 20 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	if cfg.RetryBudget.Tokens == 0 {
		// The scenario tests script failures back to back on one daemon;
		// TestRetryBudget covers the budget.
		cfg.RetryBudget.Tokens = -1
	}
	d, err := daemon.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("daemon.New: %v", err)
	}
	if err := d.Start(); err != nil {
		t.Fatalf("daemon.Start: %v", err)
	}
	t.Cleanup(func() {
		// No grace period: turns still running stop, to resume on a
		// restart, as after a shutdown deadline.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		d.Close(ctx)
	})
	return d
}

// checkedClient is a client whose every frame, both ways, is validated.
type checkedClient struct {
	*client.Client
	t *testing.T

	mu      sync.Mutex
	checker *msp.FrameChecker
}

// dialListening dials a connection granted sessionListStream and returns
// once the server has taken its initialized notification: the server reads
// a connection's frames in order, so the answer to a request sent after it
// proves the connection is indexed for list news. Without that round trip
// a session another connection starts at once may be announced before this
// one is listening, and missed, as a real client would miss it.
func dialListening(t *testing.T, url string, opts client.Options) *checkedClient {
	t.Helper()
	opts.Capabilities = append(opts.Capabilities, "sessionListStream")
	c := dial(t, url, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Call(ctx, msp.MethodSessionList, struct{}{}, nil); err != nil {
		t.Fatalf("session/list after initialized: %v", err)
	}
	return c
}

func dial(t *testing.T, url string, opts client.Options) *checkedClient {
	t.Helper()
	cc := &checkedClient{t: t, checker: validator.NewFrameChecker()}
	seen := opts.OnFrame
	opts.OnFrame = func(frame []byte) {
		cc.check("server", frame)
		if seen != nil {
			seen(frame)
		}
	}
	opts.OnSend = func(frame []byte) { cc.check("client", frame) }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, url, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	cc.Client = c
	t.Cleanup(func() { c.Close() })
	return cc
}

func (cc *checkedClient) check(dir string, frame []byte) {
	cc.mu.Lock()
	errs := cc.checker.Check(frame)
	cc.mu.Unlock()
	for _, fe := range errs {
		cc.t.Errorf("%s frame fails the schema at %q: %s\n%s", dir, fe.Field, fe.Message, frame)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// methods lists the methods of notifications, in order.
func methods(ns []client.Notification) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Method
	}
	return out
}

// compact collapses runs of one method ("item/delta ×3").
func compact(ms []string) string {
	var b strings.Builder
	for i := 0; i < len(ms); {
		j := i
		for j < len(ms) && ms[j] == ms[i] {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(ms[i])
		if j-i > 1 {
			b.WriteString(" ×")
			b.WriteString(strconv.Itoa(j - i))
		}
		i = j
	}
	return b.String()
}

// decode unmarshals a notification's params, failing the test on error.
func decode[T any](t *testing.T, n client.Notification) T {
	t.Helper()
	var v T
	if err := n.Decode(&v); err != nil {
		t.Fatalf("decoding %s: %v", n.Method, err)
	}
	return v
}

// only returns the notifications of one method.
func only(ns []client.Notification, method string) []client.Notification {
	var out []client.Notification
	for _, n := range ns {
		if n.Method == method {
			out = append(out, n)
		}
	}
	return out
}

// assertCursorsIncrease checks that cursors are unique and delivered in
// one increasing order (compared by position: seq, then sub-position).
func assertCursorsIncrease(t *testing.T, ns []client.Notification) {
	t.Helper()
	seen := map[string]bool{}
	var last [2]int64
	for _, n := range ns {
		c := n.Cursor()
		if c == "" {
			continue
		}
		if seen[c] {
			t.Errorf("cursor %s delivered twice", c)
		}
		seen[c] = true
		pos := cursorPos(t, c)
		if pos[0] < last[0] || (pos[0] == last[0] && pos[1] <= last[1]) {
			t.Errorf("cursor %s does not follow %v", c, last)
		}
		last = pos
	}
}

// cursorPos reads a cursor's position. Clients treat cursors as opaque;
// the tests know mspd's format (v:<session>:[<epoch>-]<seq>[.<n>]).
func cursorPos(t *testing.T, c string) [2]int64 {
	t.Helper()
	i := strings.LastIndexByte(c, ':')
	var seq, sub int64
	pos := c[i+1:]
	if _, at, ok := strings.Cut(pos, "-"); ok {
		pos = at
	}
	s, d, _ := strings.Cut(pos, ".")
	if err := json.Unmarshal([]byte(s), &seq); err != nil {
		t.Fatalf("cursor %q: %v", c, err)
	}
	if d != "" {
		if err := json.Unmarshal([]byte(d), &sub); err != nil {
			t.Fatalf("cursor %q: %v", c, err)
		}
	}
	return [2]int64{seq, sub}
}

// withSeq is the cursor of durable record seq of the session (and
// incarnation) cursor c names.
func withSeq(c string, seq int64) string {
	i := strings.LastIndexByte(c, ':')
	epoch, _, ok := strings.Cut(c[i+1:], "-")
	if !ok {
		epoch = ""
	} else {
		epoch += "-"
	}
	return c[:i+1] + epoch + strconv.FormatInt(seq, 10)
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newSession starts a session on c and returns its id.
func newSession(t *testing.T, c *checkedClient) string {
	t.Helper()
	start, err := c.StartSession(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return start.Session.SessionID
}

// answerTurn runs one turn and returns its events and terminal.
func answerTurn(t *testing.T, c *checkedClient, sid, text string) ([]client.Notification, msp.TurnCompletedParams) {
	t.Helper()
	ack, err := c.StartTurn(testCtx(t), sid, text)
	if err != nil {
		t.Fatal(err)
	}
	events, err := c.WaitTurn(testCtx(t), ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	return events, decode[msp.TurnCompletedParams](t, events[len(events)-1])
}

// twoProviders writes a configuration of two scripted providers: a (the
// default, model "small", also offering "large") and b (model "other"),
// and returns its path.
func twoProviders(t *testing.T) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "mspd.toml")
	if err := os.WriteFile(cfg, []byte(`default = "a"
[[providers]]
id = "a"
type = "scripted"
model = "small"
models = ["large"]
[[providers]]
id = "b"
type = "scripted"
model = "other"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// lacking ends a test whose dependency this machine lacks: skipped,
// saying so, except under CI, where a missing dependency is a failure.
func lacking(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
