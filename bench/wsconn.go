package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"mspd/schema/msp"
)

// mspConn is a benchmark client: one WebSocket connection speaking MSP
// with as little client-side work per frame as possible, so that the
// figures are the server's. Frames are read into one reused buffer and
// classified by their method without decoding them (the raw baseline's
// client does the same work on its frames). It is used by one goroutine
// at a time.
type mspConn struct {
	ws     *websocket.Conn
	buf    bytes.Buffer
	nextID int
}

// dialMSP opens a connection and sends initialize, asking for retry
// notices as turn/modelRetryScheduled (the notice scenario times them) and
// opting out of session/started: every session/start is broadcast to every
// connection past its handshake, which would make setting up N sessions
// cost N² frames. The initialized notification is left to the caller (sendReady).
func dialMSP(ctx context.Context, url string) (*mspConn, error) {
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(-1)
	c := &mspConn{ws: ws}
	params := msp.InitializeParams{
		ClientInfo: msp.ClientInfo{Name: "mspbench", Version: "1"},
		Capabilities: &msp.ClientCapabilities{OptOutNotificationMethods: []string{msp.NotifySessionStarted},
			RequestedCapabilities: []string{"modelRetryScheduled"}},
	}
	if _, err := c.call(ctx, msp.MethodInitialize, params); err != nil {
		ws.CloseNow()
		return nil, err
	}
	return c, nil
}

// sendReady sends the initialized notification.
func (c *mspConn) sendReady(ctx context.Context) error {
	return c.ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","method":"initialized"}`))
}

// dialReady dials and completes the handshake.
func dialReady(ctx context.Context, url string) (*mspConn, error) {
	c, err := dialMSP(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := c.sendReady(ctx); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *mspConn) close() { c.ws.CloseNow() }

// send writes a request and returns its id.
func (c *mspConn) send(ctx context.Context, method string, params any) (string, error) {
	c.nextID++
	id := strconv.Itoa(c.nextID)
	p, err := json.Marshal(params)
	if err != nil {
		return "", err
	}
	frame := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"method":%q,"params":%s}`, id, method, p)
	return id, c.ws.Write(ctx, websocket.MessageText, frame)
}

// call sends a request and reads frames until its response, which it
// returns; notifications read meanwhile are discarded.
func (c *mspConn) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	id, err := c.send(ctx, method, params)
	if err != nil {
		return nil, err
	}
	for {
		f, err := c.read(ctx)
		if err != nil {
			return nil, err
		}
		if res, ok, err := responseTo(f, id); ok {
			if err != nil {
				return nil, fmt.Errorf("%s: %w", method, err)
			}
			return res, nil
		}
	}
}

// read returns the next frame; it is valid until the next read.
func (c *mspConn) read(ctx context.Context) ([]byte, error) {
	_, r, err := c.ws.Reader(ctx)
	if err != nil {
		return nil, err
	}
	c.buf.Reset()
	if _, err := c.buf.ReadFrom(r); err != nil {
		return nil, err
	}
	return c.buf.Bytes(), nil
}

// bound returns a context for a run of calls on c that ctx bounds. run
// never ends itself: when ctx ends before stop, c is closed (even between
// calls), as coder/websocket closes a connection whose read or write
// outlives its context. Given a context that can end, the library arms a
// context.AfterFunc for every frame it reads or writes, which was a
// quarter of the append clients' CPU; this watch is armed once. stop
// disarms it, and reports false when c is being or has been closed.
func (c *mspConn) bound(ctx context.Context) (run context.Context, stop func() bool) {
	return context.WithoutCancel(ctx), context.AfterFunc(ctx, c.close)
}

// drainInBackground keeps reading (and discarding) frames, so that pings
// are answered on a connection left idle.
func (c *mspConn) drainInBackground() { c.ws.CloseRead(context.Background()) }

// startSession starts a session and returns its id and head cursor.
func (c *mspConn) startSession(ctx context.Context) (id, cursor string, err error) {
	raw, err := c.call(ctx, msp.MethodSessionStart, msp.SessionStartParams{CommandID: newCommandID()})
	if err != nil {
		return "", "", err
	}
	var res msp.SessionStartResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return "", "", err
	}
	return res.Session.SessionID, res.ViewCursor, nil
}

// sendTurn writes a turn/start of text without waiting for its answer.
func (c *mspConn) sendTurn(ctx context.Context, sessionID, text string) error {
	_, err := c.send(ctx, msp.MethodTurnStart, msp.TurnStartParams{
		CommandID: newCommandID(),
		SessionID: sessionID,
		Input:     []msp.TurnInputPart{{Type: "text", Text: text}},
	})
	return err
}

func newCommandID() string { return uuid.Must(uuid.NewV7()).String() }

// responseTo tells whether frame is the response to id, and returns its
// result or error.
func responseTo(frame []byte, id string) (json.RawMessage, bool, error) {
	if !bytes.HasPrefix(frame, []byte(`{"jsonrpc":"2.0","id":`)) {
		return nil, false, nil
	}
	var r struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *msp.Error      `json:"error"`
	}
	if err := json.Unmarshal(frame, &r); err != nil || string(r.ID) != id {
		return nil, false, nil
	}
	if r.Error != nil {
		return nil, true, r.Error
	}
	return r.Result, true, nil
}

// notificationPrefix starts every notification mspd encodes
// (msp.EncodeNotification): the method is found without decoding.
var notificationPrefix = []byte(`{"jsonrpc":"2.0","method":"`)

// methodOf returns a notification's method, or nil for a response.
func methodOf(frame []byte) []byte {
	rest, ok := bytes.CutPrefix(frame, notificationPrefix)
	if !ok {
		return nil
	}
	if i := bytes.IndexByte(rest, '"'); i >= 0 {
		return rest[:i]
	}
	return nil
}

// stringMember returns the raw (still escaped) contents of the first
// string member name in frame, or nil.
func stringMember(frame []byte, name string) []byte {
	key := `"` + name + `":"`
	i := bytes.Index(frame, []byte(key))
	if i < 0 {
		return nil
	}
	rest := frame[i+len(key):]
	for j := 0; j < len(rest); j++ {
		switch rest[j] {
		case '\\':
			j++
		case '"':
			return rest[:j]
		}
	}
	return nil
}

// intMember returns the integer member name of frame (the first one), or
// -1.
func intMember(frame []byte, name string) int64 {
	key := `"` + name + `":`
	i := bytes.Index(frame, []byte(key))
	if i < 0 {
		return -1
	}
	rest := frame[i+len(key):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	n, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// discard reads a whole message and drops it (raw clients).
func discard(r io.Reader, buf *bytes.Buffer) (int, error) {
	buf.Reset()
	n, err := buf.ReadFrom(r)
	return int(n), err
}
