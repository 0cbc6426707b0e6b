package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"mspd/schema/msp"
	"mspd/session"
)

// conn is one client connection: its handshake state, its outbox and the
// writer goroutine that owns the transport.
type conn struct {
	srv *Server
	t   transport
	out *outbox
	log *slog.Logger

	initialized atomic.Bool     // initialize succeeded
	ready       atomic.Bool     // the client sent initialized
	listStream  atomic.Bool     // granted sessionListStream: takes session-list news
	legacy      atomic.Bool     // gets model retry notices as turn/retryScheduled
	busy        atomic.Bool     // a request is being handled on the read loop
	isWedged    atomic.Bool     // closed because its peer does not read
	ctx         context.Context // ends with the connection: bounds waits for room
	cancel      context.CancelFunc

	// optOut is set once by initialize, before any notification can flow,
	// and only read after: a lock-free read on every delivery.
	optOut atomic.Pointer[map[string]bool]

	closeOnce  sync.Once
	done       chan struct{}
	writerDone chan struct{} // the writer has stopped: the outbox is drained or the transport failed
}

func newConn(srv *Server, t transport, log *slog.Logger) *conn {
	return &conn{
		srv:  srv,
		t:    t,
		out:  newOutbox(limitsFor(srv.cfg), gapFrame),
		log:  log,
		ctx:  context.Background(),
		done: make(chan struct{}),

		writerDone: make(chan struct{}),
	}
}

// serve runs the connection until the transport ends or ctx is done.
func (c *conn) serve(ctx context.Context) {
	ctx, c.cancel = context.WithCancel(ctx)
	defer c.cancel()
	c.ctx = ctx
	c.srv.mgr.Listen(c, session.PrincipalFrom(ctx))
	defer c.srv.mgr.Detach(c)

	go func() {
		defer close(c.writerDone)
		c.writeLoop(ctx)
	}()
	if p, ok := c.t.(pinger); ok && c.srv.cfg.PingInterval > 0 {
		go c.keepAlive(ctx, p)
	}

	rpc := jsonrpc2.NewConn(ctx, &objectStream{c: c, ctx: ctx}, &handler{c: c},
		jsonrpc2.SetLogger(slogPrinter{c.log}))
	select {
	case <-rpc.DisconnectNotify():
	case <-ctx.Done():
		rpc.Close()
	}
	c.out.close()
	<-c.writerDone
	c.shut("connection ended", false)
}

// goAway closes the connection once what is queued has been written, each
// frame within the write timeout: a shutdown loses no event already
// fanned out to it.
func (c *conn) goAway(reason string) {
	c.out.close()
	go func() {
		select {
		case <-c.writerDone:
		case <-c.done:
		}
		c.shut(reason, false)
	}()
}

// writeLoop drains the outbox onto the transport. A write that cannot
// finish within the write timeout means the peer is wedged: the
// connection is closed and the client resumes by cursor.
func (c *conn) writeLoop(ctx context.Context) {
	for {
		frame, err := c.out.next(ctx)
		if err != nil {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, c.srv.cfg.WriteTimeout)
		err = c.t.WriteFrame(wctx, frame)
		cancel()
		if err != nil {
			c.log.Debug("write failed; closing", "err", err)
			c.shut("write failed", true)
			return
		}
		c.srv.metrics.framesSent.Add(1)
	}
}

// pinger is a transport with a liveness probe (WebSocket).
type pinger interface {
	Ping(ctx context.Context) error
}

// keepAlive pings the peer until the connection ends, closing it when a
// pong does not come back in time.
func (c *conn) keepAlive(ctx context.Context, p pinger) {
	t := time.NewTicker(c.srv.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.done:
			return
		case <-t.C:
		}
		if c.busy.Load() {
			// The read loop is inside a handler, so a pong would not be
			// read; the writes that handler makes prove the peer alive
			// (or time out and close the connection).
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, c.srv.cfg.WriteTimeout)
		err := p.Ping(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			c.log.Debug("no pong; closing", "err", err)
			c.shut("no pong", true)
			return
		}
	}
}

// shut ends the connection: the transport closes, the outbox stops taking
// frames, and the connection's context ends, so a handler waiting to
// replay into a full outbox gives up instead of holding the connection.
func (c *conn) shut(reason string, dead bool) {
	c.closeOnce.Do(func() {
		close(c.done)
		c.t.Close(reason, dead)
		c.out.close()
		if c.cancel != nil {
			c.cancel()
		}
	})
}

// wedged closes a connection whose peer does not read. It may be called
// with session locks held, so the closing runs on its own.
func (c *conn) wedged() {
	if !c.isWedged.CompareAndSwap(false, true) {
		return
	}
	c.srv.metrics.connsWedged.Add(1)
	c.log.Debug("outbound queue full; closing")
	go c.shut("outbound queue full", true)
}

// push queues a response, waiting for room.
func (c *conn) push(frame []byte) error {
	err := c.out.pushResponse(c.ctx, frame)
	if errors.Is(err, errWedged) {
		c.wedged()
	}
	return err
}

// Deliver implements session.Subscriber.
func (c *conn) Deliver(n session.Notification) {
	if c.legacy.Load() {
		n = legacyNotice(n)
	}
	// Broadcasts and the view/gap a replay reports are never dropped.
	if n.SessionID == "" || msp.Protected(n.Method) {
		if errors.Is(c.out.pushProtected(n.Frame), errWedged) {
			c.wedged()
		}
		return
	}
	if c.optedOut(n.Method) {
		return
	}
	c.out.pushView(n.SessionID, n.Cursor, n.Frame, n.Durable)
}

// Replay implements session.Subscriber.
func (c *conn) Replay(ctx context.Context, n session.Notification) error {
	if c.legacy.Load() {
		n = legacyNotice(n)
	}
	if c.optedOut(n.Method) {
		return nil
	}
	return c.out.pushReplay(ctx, n.SessionID, n.Cursor, n.Frame)
}

// Subscribed implements session.Subscriber.
func (c *conn) Subscribed(sessionID, from string) { c.out.subscribed(sessionID, from) }

// Broadcasts implements session.Subscriber: connections past their
// handshake that were granted sessionListStream take session-list news.
func (c *conn) Broadcasts() bool { return c.ready.Load() && c.listStream.Load() }

func (c *conn) optedOut(method string) bool {
	m := c.optOut.Load()
	return m != nil && (*m)[method] && !msp.Protected(method)
}

// gapFrame renders a view/gap notification.
func gapFrame(sessionID, after, next string) []byte {
	p, _ := msp.Marshal(msp.ViewGapParams{SessionID: sessionID, After: after, Next: next})
	return msp.EncodeNotification(msp.NotifyViewGap, p, time.Now().UnixMilli())
}

// replyError queues an error response for id (raw JSON, or null).
func (c *conn) replyError(id json.RawMessage, e *msp.Error) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	frame, err := msp.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *msp.Error      `json:"error"`
	}{msp.JSONRPCVersion, id, e})
	if err != nil {
		c.log.Error("encoding error response", "err", err)
		return
	}
	c.push(frame)
}

// reply queues a success response. Responses are encoded here, not by
// jsonrpc2, whose json.Marshal would escape HTML in results (stored
// events included) and outgrow the frame budgets measured on them.
func (c *conn) reply(id json.RawMessage, result any) error {
	res, err := msp.Marshal(result)
	if err != nil {
		return err
	}
	frame := make([]byte, 0, len(res)+len(id)+32)
	frame = append(frame, `{"jsonrpc":"2.0","id":`...)
	frame = append(frame, id...)
	frame = append(frame, `,"result":`...)
	frame = append(frame, res...)
	return c.push(append(frame, '}'))
}

// slogPrinter routes jsonrpc2's own log lines (connection ends, mostly)
// to debug level.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Printf(format string, v ...any) {
	p.log.Debug(strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// objectStream bridges jsonrpc2 onto the connection. Reads pass through
// the gate, which answers bad frames itself, so jsonrpc2 only ever sees
// well-formed, permitted requests; writes (responses) go to the outbox.
type objectStream struct {
	c   *conn
	ctx context.Context
}

func (s *objectStream) WriteObject(obj any) error {
	frame, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return s.c.push(frame)
}

// ReadObject reads the next request once the outbox has room for its
// answer: a client that does not read is not read either.
func (s *objectStream) ReadObject(v any) error {
	for {
		// Like a handler, the wait keeps the pong unread: no pings meanwhile.
		s.c.busy.Store(true)
		err := s.c.out.waitReadable(s.ctx)
		s.c.busy.Store(false)
		if err != nil {
			if errors.Is(err, errWedged) {
				s.c.wedged()
			}
			return err
		}
		frame, err := s.c.t.ReadFrame(s.ctx)
		var tl *tooLargeError
		if errors.As(err, &tl) {
			s.c.srv.metrics.framesRejected.Add(1)
			s.c.answerTooLarge(tl.prefix)
			continue
		}
		if err != nil {
			return err
		}
		s.c.srv.metrics.framesReceived.Add(1)
		clean, ok := s.c.gate(frame)
		if !ok {
			s.c.srv.metrics.framesRejected.Add(1)
			continue
		}
		return json.Unmarshal(clean, v)
	}
}

// Close ends the reading side: the outbox takes no more frames, and the
// writer drains what is queued (an orderly drain when stdin closes) before
// serve shuts the connection.
func (s *objectStream) Close() error {
	s.c.out.close()
	return nil
}

// answerTooLarge answers an oversized frame: inputTooLarge when its id can
// be recovered from its first bytes, else parseError with a null id.
func (c *conn) answerTooLarge(prefix []byte) {
	if id, ok := recoverID(prefix); ok {
		e := msp.NewError(msp.CodeInputTooLarge, msp.KindInputTooLarge, "frame exceeds the %d-byte limit", c.srv.cfg.MaxFrameBytes)
		e.Data.LimitBytes = c.srv.cfg.MaxFrameBytes
		c.replyError(id, e)
		return
	}
	e := msp.NewError(msp.CodeParseError, msp.KindParseError, "frame exceeds the %d-byte limit and has no recoverable id", c.srv.cfg.MaxFrameBytes)
	e.Data.LimitBytes = c.srv.cfg.MaxFrameBytes
	c.replyError(nil, e)
}

// recoverID scans the top level of a (possibly cut) JSON object for its
// "id" member.
func recoverID(prefix []byte) (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, false
		}
		if key == "id" {
			// A number running to the end of the cut prefix may itself be
			// cut ("id":12 of "id":1234): only a delimited id is trusted.
			if dec.InputOffset() >= int64(len(prefix)) && !bytes.HasPrefix(val, []byte(`"`)) {
				return nil, false
			}
			if _, ok := validID(val); ok {
				return val, true
			}
			return nil, false
		}
	}
	return nil, false
}
