package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"reflect"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Defaults of Options.
const (
	DefaultCallTimeout    = 120 * time.Second
	DefaultConnectTimeout = 30 * time.Second
)

// Options configure a Client. Zero fields take the defaults.
type Options struct {
	// Logger receives the client's log lines and a stdio server's stderr,
	// each with the attribute mcp_server naming the server (default: a
	// logger that discards).
	Logger *slog.Logger
	// Version is the client version sent in initialize (default "dev").
	Version string
	// CallTimeout bounds a call when the caller's context allows longer
	// (default DefaultCallTimeout).
	CallTimeout time.Duration
	// ConnectTimeout bounds initialize and tools/list (default
	// DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// BaseEnv is the environment a stdio server starts from, before its
	// env is added (default: mspd's own, os.Environ()). The daemon passes
	// one without its provider keys.
	BaseEnv []string
	// Limits bound a call's output.
	Limits Limits
	// HTTPClient reaches a streamable HTTP server: its Transport (under
	// the configured headers), CheckRedirect and Timeout are used
	// (default: http.DefaultTransport, redirects followed). A server whose
	// configuration a client gave is reached through one that vets the
	// addresses it dials and follows no redirect.
	HTTPClient *http.Client
	// Backoff spaces reconnections of a server that died or failed to start.
	Backoff Backoff
	// Sleep waits d or until ctx ends, returning ctx's error then (default:
	// a timer). Tests inject it to hold a server down, then release it.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a number in [0, 1) for the backoff's jitter (default
	// math/rand/v2).
	Rand func() float64
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.BaseEnv == nil {
		o.BaseEnv = os.Environ()
	}
	o.Limits = o.Limits.withDefaults()
	o.Backoff = o.Backoff.withDefaults()
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	return o
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Tool is one tool a server lists.
type Tool struct {
	Server string // the server's configured name
	Name   string // the tool's MCP name
	// ModelName is the name models call it by (see ModelName).
	ModelName   string
	Description string
	// InputSchema is the JSON Schema of the arguments, as the server sent it.
	InputSchema json.RawMessage
	// Annotations are the server's hints. Trust them only as far as you
	// trust the server.
	Annotations Annotations
	// NeedsApproval reports that the server's configuration makes calls of
	// this tool wait for a person (approval, approval_tools).
	NeedsApproval bool
}

// Annotations are the behaviour hints of a tool, with MCP's defaults for
// hints the server left out.
type Annotations struct {
	ReadOnlyHint    bool // default false
	IdempotentHint  bool // default false
	DestructiveHint bool // default true unless ReadOnlyHint
}

// Repeatable reports whether calling the tool again, after a call whose
// outcome is unknown, is harmless by its server's word: it is read-only
// or idempotent.
func (t Tool) Repeatable() bool { return t.Annotations.ReadOnlyHint || t.Annotations.IdempotentHint }

// Status is a Client's connection state.
type Status struct {
	Connected bool
	// PID is a connected stdio server's process id, else 0.
	PID int
	// Restarts counts connections after the first.
	Restarts int
	// Err is why the server is not connected, if it is not.
	Err error
}

// Client is a supervised connection to one MCP server: it connects, lists
// the tools, reconnects with backoff whenever the connection ends (a
// stdio server's process is started again), and calls tools. Its methods
// are safe for concurrent use; calls run concurrently.
type Client struct {
	name     string
	approval func(tool string) bool
	opts     Options
	dial     dialFunc
	mcp      *mcp.Client

	stop   context.CancelFunc
	done   chan struct{}
	relist chan struct{}

	mu       sync.Mutex
	session  *mcp.ClientSession
	pid      int
	restarts int
	lastErr  error
	tools    []Tool
	schemas  map[string]*inputSchema // by MCP name
	version  uint64
	changed  chan struct{}
}

// A dialFunc opens one connection's transport: each reconnection dials
// again (a stdio server is a new process). pid reports the process, if
// any; closed runs after the connection has closed.
type dialFunc func(ctx context.Context) (t mcp.Transport, pid func() int, closed func(), err error)

// Start validates a server's configuration and starts supervising it. It
// does not wait for the connection: see WaitReady. Close stops it.
func Start(cfg ServerConfig, opts Options) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	log := opts.Logger.With("mcp_server", cfg.Name)
	var dial dialFunc
	if cfg.URL != "" {
		dial = httpDialer(cfg.URL, cfg.Headers, opts.HTTPClient)
	} else {
		dial = stdioDialer(cfg.Command, cfg.Args, opts.BaseEnv, cfg.Env, log)
	}
	log.Info("mcp server configured", "config", cfg)
	return start(cfg.Name, cfg.NeedsApproval, dial, opts), nil
}

// StartInProcess connects to an MCP server running in this process over
// the SDK's in-memory transport; its tools need no approval. The name
// follows ServerConfig.Name's rules.
func StartInProcess(name string, server *mcp.Server, opts Options) (*Client, error) {
	if err := validateServerName(name); err != nil {
		return nil, err
	}
	dial := func(ctx context.Context) (mcp.Transport, func() int, func(), error) {
		serverSide, clientSide := mcp.NewInMemoryTransports()
		ss, err := server.Connect(ctx, serverSide, nil)
		if err != nil {
			return nil, nil, nil, err
		}
		return clientSide, func() int { return 0 }, func() { _ = ss.Close() }, nil
	}
	return start(name, func(string) bool { return false }, dial, opts.withDefaults()), nil
}

func start(name string, approval func(string) bool, dial dialFunc, opts Options) *Client {
	ctx, stop := context.WithCancel(context.Background())
	c := &Client{
		name:     name,
		approval: approval,
		opts:     opts,
		dial:     dial,
		stop:     stop,
		done:     make(chan struct{}),
		relist:   make(chan struct{}, 1),
		changed:  make(chan struct{}),
	}
	c.opts.Logger = opts.Logger.With("mcp_server", name)
	c.mcp = mcp.NewClient(&mcp.Implementation{Name: "mspd", Version: opts.Version}, &mcp.ClientOptions{
		Logger: c.opts.Logger,
		// Tools only: no roots, sampling or elicitation are offered.
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			// The handler runs on the connection's reader: listing here
			// would wait on itself. The supervisor lists.
			select {
			case c.relist <- struct{}{}:
			default:
			}
		},
	})
	go c.supervise(ctx)
	return c
}

// Name is the server's configured name.
func (c *Client) Name() string { return c.name }

// Tools returns the tools the server listed last, and the listing's
// version, which grows whenever the list changes. A server that is down
// keeps its last list: its tools' calls fail with KindUnavailable. The
// slice is shared: do not modify it.
func (c *Client) Tools() ([]Tool, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tools, c.version
}

// Status reports the connection's state.
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Status{Connected: c.session != nil, PID: c.pid, Restarts: c.restarts, Err: c.lastErr}
}

// Changed returns a channel closed at the next change of the status or of
// the tool list.
func (c *Client) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// notifyLocked wakes those waiting on Changed; c.mu is held.
func (c *Client) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// WaitReady waits until the server is connected and its tools listed, or
// ctx ends; then it returns an error saying why the server is not up.
func (c *Client) WaitReady(ctx context.Context) error {
	for {
		ch := c.Changed()
		st := c.Status()
		if st.Connected {
			return nil
		}
		select {
		case <-ch:
		case <-c.done:
			return fmt.Errorf("mcp server %q: closed", c.name)
		case <-ctx.Done():
			if st.Err != nil {
				return fmt.Errorf("mcp server %q is not connected: %w", c.name, st.Err)
			}
			return fmt.Errorf("mcp server %q is not connected: %w", c.name, ctx.Err())
		}
	}
}

// WaitTried waits until the server's first connection attempt has ended,
// connected and listed or failed, or ctx ends: a turn waits for it before
// it offers a session's servers' tools, and then goes on without a
// server that failed.
func (c *Client) WaitTried(ctx context.Context) {
	for {
		ch := c.Changed()
		if st := c.Status(); st.Connected || st.Err != nil || st.Restarts > 0 {
			return
		}
		select {
		case <-ch:
		case <-c.done:
			return
		case <-ctx.Done():
			return
		}
	}
}

// Close stops supervising, closes the connection (a stdio server's stdin
// closes, then it is terminated if it does not exit) and waits for it. It
// returns nil; it is an io.Closer.
func (c *Client) Close() error {
	c.stop()
	<-c.done
	return nil
}

// supervise keeps the server connected until ctx ends.
func (c *Client) supervise(ctx context.Context) {
	defer close(c.done)
	policy := restartPolicy{backoff: c.opts.Backoff, rand: c.opts.Rand}
	for {
		began := time.Now()
		err := c.connectAndServe(ctx)
		if ctx.Err() != nil {
			return
		}
		d := policy.next(time.Since(began))
		c.opts.Logger.Warn("mcp server is down; reconnecting", "error", err, "in", d)
		if c.opts.Sleep(ctx, d) != nil {
			return
		}
		c.mu.Lock()
		c.restarts++
		c.mu.Unlock()
	}
}

// connectAndServe runs one connection: it returns why it ended.
func (c *Client) connectAndServe(ctx context.Context) error {
	cs, pid, closed, err := c.connect(ctx)
	if err != nil {
		c.setDown(err)
		return err
	}
	defer closed()
	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }()
	for {
		select {
		case <-ctx.Done():
			_ = cs.Close()
			<-ended
			c.setDown(errors.New("closed"))
			return ctx.Err()
		case err := <-ended:
			_ = cs.Close()
			if err == nil {
				err = errors.New("the server closed the connection")
			}
			c.setDown(err)
			return err
		case <-c.relist:
			tools, err := c.list(ctx, cs)
			if err != nil {
				c.opts.Logger.Warn("mcp server: re-listing tools failed", "error", err)
				continue
			}
			c.setUp(cs, pid(), tools)
		}
	}
}

// connect dials, initializes and lists the tools.
func (c *Client) connect(ctx context.Context) (*mcp.ClientSession, func() int, func(), error) {
	cctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	t, pid, closed, err := c.dial(cctx)
	if err != nil {
		return nil, nil, nil, err
	}
	cs, err := c.mcp.Connect(cctx, t, nil)
	if err != nil {
		closed()
		return nil, nil, nil, fmt.Errorf("initialize: %w", err)
	}
	tools, err := c.list(cctx, cs)
	if err != nil {
		_ = cs.Close()
		closed()
		return nil, nil, nil, err
	}
	c.setUp(cs, pid(), tools)
	c.opts.Logger.Info("mcp server connected", "pid", pid(), "tools", len(tools))
	return cs, pid, closed, nil
}

// list reads every page of tools/list. A tool whose input schema does not
// compile, or whose model-facing name another tool already has, is left
// out with a warning: no call of it could be checked, or routed.
func (c *Client) list(ctx context.Context, cs *mcp.ClientSession) ([]listed, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	var out []listed
	names := map[string]bool{}
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		raw, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("tools/list: tool %q: %w", t.Name, err)
		}
		schema, err := compileInputSchema(raw)
		if err != nil {
			c.opts.Logger.Warn("mcp server: tool left out", "tool", t.Name, "error", err)
			continue
		}
		tool := Tool{
			Server:        c.name,
			Name:          t.Name,
			ModelName:     ModelName(c.name, t.Name),
			Description:   t.Description,
			InputSchema:   raw,
			Annotations:   annotations(t.Annotations),
			NeedsApproval: c.approval(t.Name),
		}
		if names[tool.ModelName] {
			c.opts.Logger.Warn("mcp server: tool left out: its model-facing name is taken", "tool", t.Name, "name", tool.ModelName)
			continue
		}
		names[tool.ModelName] = true
		out = append(out, listed{tool, schema})
	}
	return out, nil
}

type listed struct {
	tool   Tool
	schema *inputSchema
}

func annotations(a *mcp.ToolAnnotations) Annotations {
	if a == nil {
		return Annotations{DestructiveHint: true}
	}
	out := Annotations{ReadOnlyHint: a.ReadOnlyHint, IdempotentHint: a.IdempotentHint, DestructiveHint: !a.ReadOnlyHint}
	if a.DestructiveHint != nil && !a.ReadOnlyHint {
		out.DestructiveHint = *a.DestructiveHint
	}
	return out
}

// setUp records a connected session and its tools; the version grows only
// when the list differs from the last one.
func (c *Client) setUp(cs *mcp.ClientSession, pid int, l []listed) {
	tools := make([]Tool, len(l))
	schemas := make(map[string]*inputSchema, len(l))
	for i, t := range l {
		tools[i] = t.tool
		schemas[t.tool.Name] = t.schema
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.session, c.pid, c.lastErr = cs, pid, nil
	if c.version == 0 || !reflect.DeepEqual(tools, c.tools) {
		c.tools, c.schemas = tools, schemas
		c.version++
	}
	c.notifyLocked()
}

func (c *Client) setDown(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.session, c.pid, c.lastErr = nil, 0, err
	c.notifyLocked()
}

// Call calls the server's tool by its MCP name. It checks args (a JSON
// object; empty means {}) against the tool's input schema first: an
// *ArgumentError refuses it without calling. The call is bounded by ctx
// and Options.CallTimeout. A tool that ran and failed is a Result with
// IsError, not an error; every other failure is an *Error.
func (c *Client) Call(ctx context.Context, tool string, args json.RawMessage) (Result, error) {
	c.mu.Lock()
	cs := c.session
	c.mu.Unlock()
	args, err := c.check(tool, args)
	if err != nil {
		return Result{}, err
	}
	fail := func(k Kind, sent bool, err error) (Result, error) {
		return Result{}, &Error{Kind: k, Server: c.name, Tool: tool, MayHaveRun: sent, Err: err}
	}
	if cs == nil {
		return fail(KindUnavailable, false, errDown)
	}
	if err := ctx.Err(); err != nil {
		return fail(ctxKind(err), false, err)
	}
	callCtx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
	defer cancel()
	res, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: tool, Arguments: args})
	var wire *jsonrpc.Error
	switch {
	case err == nil && res == nil:
		return fail(KindProtocol, true, errors.New("no result"))
	case err == nil:
		return newResult(res, c.opts.Limits), nil
	case ctx.Err() != nil:
		return fail(ctxKind(ctx.Err()), true, ctx.Err())
	case callCtx.Err() != nil:
		return fail(KindTimeout, true, fmt.Errorf("no answer within %s", c.opts.CallTimeout))
	case errors.As(err, &wire):
		return fail(KindProtocol, true, err)
	default:
		// The connection failed under the call (mcp.ErrConnectionClosed,
		// or an HTTP request that did not complete).
		return fail(KindUnavailable, true, err)
	}
}

// Check tells whether args would be accepted by the tool's input schema,
// calling nothing: an *ArgumentError says why not.
func (c *Client) Check(tool string, args json.RawMessage) error {
	_, err := c.check(tool, args)
	return err
}

// check vets args for tool and returns them as sent (empty means {}).
func (c *Client) check(tool string, args json.RawMessage) (json.RawMessage, error) {
	c.mu.Lock()
	schema := c.schemas[tool]
	c.mu.Unlock()
	if schema == nil {
		return nil, &ArgumentError{Name: ModelName(c.name, tool), Message: "no such tool"}
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	if path, msg, ok := schema.check(args); !ok {
		return nil, &ArgumentError{Name: ModelName(c.name, tool), Path: path, Message: msg}
	}
	return args, nil
}

func ctxKind(err error) Kind {
	if errors.Is(err, context.DeadlineExceeded) {
		return KindTimeout
	}
	return KindCancelled
}
