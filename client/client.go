// Package client is a small Go MSP client over WebSocket: it dials,
// performs the handshake, makes calls, and hands out the notification
// stream in order. The end-to-end tests, the benchmarks and `mspd tail`
// use it.
package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"mspd/schema/msp"
)

// Notification is one server notification as received, or a request
// the server sent (approval/request), which carries an ID to answer with
// Respond.
type Notification struct {
	Method      string
	Params      json.RawMessage
	EmittedAtMs int64
	// ID is a server request's id, as sent; nil for a notification.
	ID json.RawMessage
	// Frame is the whole frame as it arrived.
	Frame []byte
}

// IsRequest tells whether the server sent a request, which must be
// answered (Respond), rather than a notification.
func (n Notification) IsRequest() bool { return n.ID != nil }

// Decode unmarshals the notification's params into v.
func (n Notification) Decode(v any) error { return json.Unmarshal(n.Params, v) }

// Cursor returns params.viewCursor, or "" when the notification has none.
func (n Notification) Cursor() string {
	var h struct {
		ViewCursor string `json:"viewCursor"`
	}
	json.Unmarshal(n.Params, &h)
	return h.ViewCursor
}

// CapabilityModelRetryScheduled asks the server for model-layer retry
// notices as turn/modelRetryScheduled, with their attempt, system,
// errorKind and httpStatus members; without it they come as
// turn/retryScheduled with a reason in words.
const CapabilityModelRetryScheduled = "modelRetryScheduled"

// Options configure Dial.
type Options struct {
	// ClientName is clientInfo.name (default "mspd_client").
	ClientName string
	// OptOut lists notification methods the server should not send.
	OptOut []string
	// Capabilities lists the capabilities to request, e.g.
	// "sessionListStream" for news of the session list. Dial adds
	// "modelRetryScheduled" unless StableRetryNotices is set.
	Capabilities []string
	// StableRetryNotices leaves out the capability modelRetryScheduled, so
	// the server renders model-layer retry notices as turn/retryScheduled,
	// as every client that does not ask for them gets them.
	StableRetryNotices bool
	// ExperimentalAPI opts into MSP's experimental surface at initialize.
	ExperimentalAPI bool
	// OnFrame, when set, sees every inbound frame before it is handled
	// (tests validate each against the schema).
	OnFrame func(frame []byte)
	// OnSend, when set, sees every outbound frame before it is written.
	OnSend func(frame []byte)
	// SkipHandshake leaves the connection uninitialised, for tests of the
	// handshake itself.
	SkipHandshake bool
	// ReadLimit bounds inbound frames (default 16 MiB).
	ReadLimit int64
	// Token is sent as "Authorization: Bearer <token>" when set.
	Token string
}

// RefusedError reports a WebSocket upgrade the server answered with an
// HTTP status instead of switching protocols: 401 for a missing or wrong
// token, 403 for a refused origin, 404 for a wrong path.
type RefusedError struct {
	URL        string
	StatusCode int
	Err        error
}

// Error implements the error interface.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("client: dial %s: the server refused the upgrade: HTTP %d %s", e.URL, e.StatusCode, http.StatusText(e.StatusCode))
}

// Unwrap returns the WebSocket library's error.
func (e *RefusedError) Unwrap() error { return e.Err }

// Client is one MSP connection.
type Client struct {
	ws   *websocket.Conn
	opts Options
	// Init is the server's initialize result (zero with SkipHandshake).
	Init msp.InitializeResult

	nextID atomic.Int64

	mu      sync.Mutex
	pending map[string]chan response
	notes   []Notification
	stray   []response
	signal  chan struct{}
	err     error // why the read loop ended
	done    chan struct{}
}

type response struct {
	ID     json.RawMessage  `json:"id"`
	Result json.RawMessage  `json:"result"`
	Error  *msp.Error       `json:"error"`
	Method *string          `json:"method"`
	Params json.RawMessage  `json:"params"`
	Emit   *json.RawMessage `json:"emittedAtMs"`
}

// Dial connects to an MSP WebSocket endpoint (ws://host:port/msp) and,
// unless told not to, performs the initialize handshake.
func Dial(ctx context.Context, url string, opts Options) (*Client, error) {
	var dial *websocket.DialOptions
	if opts.Token != "" {
		dial = &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + opts.Token}}}
	}
	ws, resp, err := websocket.Dial(ctx, url, dial)
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, &RefusedError{URL: url, StatusCode: resp.StatusCode, Err: err}
		}
		return nil, fmt.Errorf("client: dial %s: %w", url, err)
	}
	if opts.ReadLimit == 0 {
		opts.ReadLimit = 16 << 20
	}
	ws.SetReadLimit(opts.ReadLimit)
	c := &Client{
		ws:      ws,
		opts:    opts,
		pending: make(map[string]chan response),
		signal:  make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	go c.readLoop()
	if opts.SkipHandshake {
		return c, nil
	}
	name := opts.ClientName
	if name == "" {
		name = "mspd_client"
	}
	params := msp.InitializeParams{ClientInfo: msp.ClientInfo{Name: name, Version: "0.1.0"}}
	capabilities := opts.Capabilities
	if !opts.StableRetryNotices {
		capabilities = append(slices.Clip(capabilities), CapabilityModelRetryScheduled)
	}
	if len(opts.OptOut) > 0 || len(capabilities) > 0 || opts.ExperimentalAPI {
		params.Capabilities = &msp.ClientCapabilities{ExperimentalAPI: opts.ExperimentalAPI,
			OptOutNotificationMethods: opts.OptOut, RequestedCapabilities: capabilities}
	}
	if err := c.Call(ctx, msp.MethodInitialize, params, &c.Init); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.Notify(ctx, msp.NotifyInitialized, nil); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() error {
	return c.ws.Close(websocket.StatusNormalClosure, "bye")
}

// Done is closed when the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

func (c *Client) readLoop() {
	defer close(c.done)
	for {
		_, frame, err := c.ws.Read(context.Background())
		if err != nil {
			c.mu.Lock()
			c.err = err
			for id, ch := range c.pending {
				close(ch)
				delete(c.pending, id)
			}
			c.mu.Unlock()
			c.wake()
			return
		}
		if c.opts.OnFrame != nil {
			c.opts.OnFrame(frame)
		}
		var r response
		if err := json.Unmarshal(frame, &r); err != nil {
			continue
		}
		c.mu.Lock()
		switch {
		case r.Method != nil:
			n := Notification{Method: *r.Method, Params: r.Params, ID: r.ID, Frame: frame}
			if r.Emit != nil {
				n.EmittedAtMs, _ = strconv.ParseInt(string(*r.Emit), 10, 64)
			}
			c.notes = append(c.notes, n)
		default:
			if ch, ok := c.pending[string(r.ID)]; ok {
				delete(c.pending, string(r.ID))
				ch <- r
			} else {
				c.stray = append(c.stray, r)
			}
		}
		c.mu.Unlock()
		c.wake()
	}
}

func (c *Client) wake() {
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// Call sends a request and waits for its response. An error response is
// returned as *msp.Error; result, when non-nil, receives the result.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	raw, err := c.CallRaw(ctx, method, params)
	if err != nil {
		return err
	}
	if result != nil {
		return json.Unmarshal(raw, result)
	}
	return nil
}

// CallRaw is Call returning the result's raw JSON.
func (c *Client) CallRaw(ctx context.Context, method string, params any) (json.RawMessage, error) {
	id := strconv.FormatInt(c.nextID.Add(1), 10)
	req := map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": method}
	if params != nil {
		req["params"] = params
	}
	frame, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	ch := make(chan response, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.pending[id] = ch
	c.mu.Unlock()
	if err := c.write(ctx, frame); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, fmt.Errorf("client: %s: %w", method, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("client: connection ended before %s answered: %w", method, c.err)
		}
		if r.Error != nil {
			return nil, r.Error
		}
		return r.Result, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}

// Respond answers a request the server sent (a Notification with an ID)
// with result.
func (c *Client) Respond(ctx context.Context, id json.RawMessage, result any) error {
	frame, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
	if err != nil {
		return err
	}
	return c.write(ctx, frame)
}

// Notify sends a notification.
func (c *Client) Notify(ctx context.Context, method string, params any) error {
	req := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		req["params"] = params
	}
	frame, err := json.Marshal(req)
	if err != nil {
		return err
	}
	return c.write(ctx, frame)
}

// SendRaw writes one frame as given, for tests of malformed input.
func (c *Client) SendRaw(ctx context.Context, frame []byte) error {
	return c.ws.Write(ctx, websocket.MessageText, frame)
}

func (c *Client) write(ctx context.Context, frame []byte) error {
	// An ended context is said so: the WebSocket library would report it
	// as a write lock it failed to acquire, or as a failed write, at random.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("not sent, the context ended first: %w", err)
	}
	if c.opts.OnSend != nil {
		c.opts.OnSend(frame)
	}
	return c.ws.Write(ctx, websocket.MessageText, frame)
}

// Next returns the next notification, waiting for one.
func (c *Client) Next(ctx context.Context) (Notification, error) {
	for {
		c.mu.Lock()
		if len(c.notes) > 0 {
			n := c.notes[0]
			c.notes = c.notes[1:]
			c.mu.Unlock()
			return n, nil
		}
		err := c.err
		c.mu.Unlock()
		if err != nil {
			return Notification{}, err
		}
		select {
		case <-c.signal:
		case <-ctx.Done():
			return Notification{}, ctx.Err()
		}
	}
}

// NextStray returns the next response that answered no pending call
// (for example a parseError with a null id), waiting for one.
func (c *Client) NextStray(ctx context.Context) (id json.RawMessage, e *msp.Error, err error) {
	for {
		c.mu.Lock()
		if len(c.stray) > 0 {
			r := c.stray[0]
			c.stray = c.stray[1:]
			c.mu.Unlock()
			return r.ID, r.Error, nil
		}
		err := c.err
		c.mu.Unlock()
		if err != nil {
			return nil, nil, err
		}
		select {
		case <-c.signal:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// NewCommandID mints a UUIDv7 command id.
func NewCommandID() string { return uuid.Must(uuid.NewV7()).String() }
