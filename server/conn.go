package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"mspd/auth"
	"mspd/schema/msp"
	"mspd/session"
)

// conn is one client connection: its handshake state and its outbox. The
// goroutine that serves it reads and handles requests; a writer goroutine
// owns the transport's writing side while frames are queued; a timer
// pings the peer. An idle connection thus keeps one goroutine, blocked
// reading.
type conn struct {
	srv *Server
	t   transport
	out *outbox
	log *slog.Logger

	initialized atomic.Bool     // initialize succeeded
	ready       atomic.Bool     // the client sent initialized
	listStream  atomic.Bool     // granted sessionListStream: takes session-list news
	sessionMCP  atomic.Bool     // granted sessionMcp: its session/start may name MCP servers
	retries     atomic.Int32    // a retryRendering: how model retry notices are sent
	busy        atomic.Bool     // the read loop is not reading (so pongs are not read either)
	isWedged    atomic.Bool     // closed because its peer does not read
	ctx         context.Context // ends with the connection: bounds waits for room
	cancel      context.CancelFunc

	// optOut is set once by initialize, before any notification can flow,
	// and only read after: a lock-free read on every delivery.
	optOut atomic.Pointer[map[string]bool]
	// clientName is the clientInfo.name initialize gave, for the records
	// of commands that name who asked.
	clientName atomic.Pointer[string]
	// asks are the server's requests waiting for the client's answer.
	asks asks

	// cred is what the connection authenticated with, set before it is
	// registered; once credEnded is set (a reload revoked it, or it
	// expired) no request is handled and the connection closes.
	cred      auth.Credential
	credEnded atomic.Bool

	closeOnce sync.Once
	done      chan struct{}
	pings     *time.Timer // the keepalive; nil without one
	expiry    *time.Timer // ends the connection when cred expires; nil if it never does

	// slots holds a token for each request executing: at most
	// Config.MaxConnRequests, and the next frame is read only once one is
	// free. running counts them, so that the end of input waits for their
	// answers.
	slots   chan struct{}
	running sync.WaitGroup
	// charge is what the frame the read loop is reading holds of the
	// server's intake budget (read loop only).
	charge int64
	// follow is held (a token in it) by a request that may follow one
	// session more, from its room check (roomToFollow) to its
	// subscription, so that requests executing at once cannot all pass
	// the check. (A channel: a goroutine waiting on it is durably blocked
	// in a testing/synctest bubble.)
	follow chan struct{}
}

func newConn(srv *Server, t transport, log *slog.Logger) *conn {
	c := &conn{
		srv:    srv,
		t:      t,
		out:    newOutbox(limitsFor(srv.cfg), gapFrame),
		log:    log,
		ctx:    context.Background(),
		done:   make(chan struct{}),
		slots:  make(chan struct{}, srv.cfg.MaxConnRequests),
		follow: make(chan struct{}, 1),
	}
	c.out.onWait = srv.cfg.Metrics.QueueWait
	return c
}

// begin gives the connection its context (it ends with the connection)
// and arms the keepalive. It runs before other goroutines can reach the
// connection: shut reads what it sets.
func (c *conn) begin(ctx context.Context) {
	c.ctx, c.cancel = context.WithCancel(ctx)
	c.startKeepAlive()
}

// serve runs the connection until the transport ends or ctx is done,
// reading and handling requests on the calling goroutine; ctx is the one
// begin took, when it ran.
func (c *conn) serve(ctx context.Context) {
	if c.cancel == nil {
		c.begin(ctx)
	}
	defer c.cancel()
	ctx = c.ctx
	// A read blocked on a transport that ignores ctx (stdin) ends when the
	// transport closes.
	defer context.AfterFunc(ctx, func() { c.shut("connection ended", false) })()
	c.out.serve(func() { go c.writeLoop() })
	defer c.srv.mgr.Detach(c)

	c.readLoop(ctx)
	// The end of input: what is queued is written before the connection
	// closes (an orderly drain when stdin closes).
	c.out.close()
	select {
	case <-c.out.drained:
	case <-c.done:
	}
	c.shut("connection ended", false)
}

// goAway closes the connection once what is queued has been written, each
// write within the write timeout: a shutdown loses no event already
// fanned out to it.
func (c *conn) goAway(reason string) {
	c.out.close()
	go func() {
		select {
		case <-c.out.drained:
		case <-c.done:
		}
		c.shut(reason, false)
	}()
}

// maxBatchBytes bounds what one write carries: frames taken from the
// outbox leave its budget, so a batch is held outside it while written.
const maxBatchBytes = 64 << 10

// writeLoop drains the outbox onto the transport, a batch a write, and
// ends when it finds the outbox empty (the next frame queued starts
// another). A write that cannot finish within the write timeout means the
// peer is wedged: the connection is closed and the client resumes by
// cursor.
func (c *conn) writeLoop() {
	var batch [][]byte
	for {
		batch = c.out.take(batch[:0], maxBatchBytes, false)
		if len(batch) == 0 {
			// Before ending, let goroutines about to queue more (a turn
			// streaming) run: a writer that ended at every frame would
			// cost a goroutine start each.
			runtime.Gosched()
			if batch = c.out.take(batch[:0], maxBatchBytes, true); len(batch) == 0 {
				return
			}
		}
		if err := c.write(batch); err != nil {
			c.log.Debug("write failed; closing", "err", err)
			c.shut("write failed", true)
			return
		}
		c.srv.metrics.framesSent.Add(uint64(len(batch)))
		clear(batch)
	}
}

// write sends a batch within the write timeout, in one write where the
// transport can.
func (c *conn) write(batch [][]byte) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.srv.cfg.WriteTimeout)
	defer cancel()
	if bw, ok := c.t.(batchWriter); ok {
		return bw.WriteFrames(ctx, batch)
	}
	for _, f := range batch {
		if err := c.t.WriteFrame(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// pinger is a transport with a liveness probe (WebSocket).
type pinger interface {
	Ping(ctx context.Context) error
}

// startKeepAlive arms the keepalive: a runtime timer, not a goroutine, so
// an idle connection costs none; each ping runs on the timer's own
// short-lived goroutine.
func (c *conn) startKeepAlive() {
	p, ok := c.t.(pinger)
	every := c.srv.cfg.PingInterval
	if !ok || every <= 0 {
		return
	}
	// Armed only once assigned, so the first ping finds c.pings set.
	c.pings = time.AfterFunc(time.Duration(math.MaxInt64), func() { c.ping(p, every) })
	c.pings.Reset(every)
}

// ping pings the peer and re-arms the timer, or closes the connection
// when the pong does not come back in time.
func (c *conn) ping(p pinger, every time.Duration) {
	if c.ctx.Err() != nil {
		return
	}
	// While the read loop is not reading (it waits for a handler, for
	// room, for the intake budget), a pong would not be read; the writes
	// the connection makes meanwhile prove the peer alive (or time out and
	// close it).
	if !c.busy.Load() {
		ctx, cancel := context.WithTimeout(c.ctx, c.srv.cfg.WriteTimeout)
		err := p.Ping(ctx)
		cancel()
		if err != nil {
			if c.ctx.Err() == nil {
				c.log.Debug("no pong; closing", "err", err)
				c.shut("no pong", true)
			}
			return
		}
	}
	select {
	case <-c.done:
	default:
		c.pings.Reset(every)
	}
}

// shut ends the connection: the transport closes, the outbox stops taking
// frames, and the connection's context ends, so a handler waiting to
// replay into a full outbox gives up instead of holding the connection.
func (c *conn) shut(reason string, dead bool) {
	c.end(func() { c.t.Close(reason, dead) })
}

// end is shut with closeTransport closing the transport: the first call
// ends the connection, later ones do nothing.
func (c *conn) end(closeTransport func()) {
	c.closeOnce.Do(func() {
		close(c.done)
		if c.pings != nil {
			c.pings.Stop()
		}
		if c.expiry != nil {
			c.expiry.Stop()
		}
		closeTransport()
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

// retryRendering is how the connection is sent model-layer retry notices,
// set by initialize before any notification can flow.
func (c *conn) retryRendering() retryRendering { return retryRendering(c.retries.Load()) }

// Deliver implements session.Subscriber.
func (c *conn) Deliver(n session.Notification) {
	if c.retryRendering() == retryAsStable {
		n = stableNotice(n)
	}
	// Broadcasts and the view/gap a replay reports are never dropped.
	if n.SessionID == "" || msp.Protected(n.Method) {
		if errors.Is(c.out.pushProtected(n.Frame), errWedged) {
			c.wedged()
		}
		if id, erased := session.Erased(n); erased {
			// No event of it follows, and a connection kept open for long
			// must not keep view state for each session it ever watched.
			// (A failed erasure leaves the session, and this connection
			// among its subscribers: its view keeps its slot.)
			c.out.forget(id)
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
	if c.retryRendering() == retryAsStable {
		n = stableNotice(n)
	}
	if c.optedOut(n.Method) {
		return nil
	}
	return c.out.pushReplay(ctx, n.SessionID, n.Cursor, n.Frame)
}

// Subscribed implements session.Subscriber.
func (c *conn) Subscribed(sessionID, from string) { c.out.subscribed(sessionID, from) }

// Abort implements session.Aborter: a subscription the client was promised
// failed, so the connection ends and the client resumes by cursor.
func (c *conn) Abort(reason string) { c.goAway(reason) }

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

// replyError queues an error response for id (raw JSON, or null), its
// echoes of the request bounded.
func (c *conn) replyError(id json.RawMessage, e *msp.Error) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	e = bounded(e)
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

// readLoop reads frames and has each handled until the input ends, at
// most Config.MaxConnRequests at once (by default one at a time, in
// order), then waits for those still running. A frame is handled —
// validated, answered, and whatever session work it sets off done — on
// one of the server's workers: the deep stack that work grows stays with
// the worker, and the goroutine an idle connection keeps, blocked reading,
// stays small. Until initialize has been answered, each frame is handled
// before the next is read, so the handshake settles first.
func (c *conn) readLoop(ctx context.Context) {
	h := &handler{c: c}
	defer c.running.Wait()
	for {
		// Whenever the loop is not reading, pongs are not read either: no
		// pings meanwhile (a handler's writes prove the peer alive, or
		// time out and close the connection).
		c.busy.Store(true)
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		frame, charge, err := c.readFrame(ctx)
		var tl *tooLargeError
		if err != nil && !errors.As(err, &tl) {
			<-c.slots
			c.log.Debug("connection input ended", "err", err)
			return
		}
		done := make(chan struct{})
		c.running.Add(1)
		c.srv.workers.Go(func() {
			defer c.running.Done()
			defer func() { <-c.slots }()
			defer close(done)
			c.handleFrame(ctx, h, frame, charge, tl)
		})
		if !c.initialized.Load() {
			<-done
		}
	}
}

// handleFrame answers one frame read, giving its intake charge back once
// it has been dispatched.
func (c *conn) handleFrame(ctx context.Context, h *handler, frame []byte, charge int64, tl *tooLargeError) {
	if tl != nil {
		c.srv.metrics.framesRejected.Add(1)
		c.answerTooLarge(tl.prefix)
		return
	}
	c.srv.metrics.framesReceived.Add(1)
	req, id, refusal := c.gate(frame)
	if req == nil {
		c.release(charge)
		c.srv.metrics.framesRejected.Add(1)
		if refusal != nil {
			c.replyError(id, refusal)
		}
		return
	}
	h.Handle(ctx, req, id, func() { c.release(charge) })
}

// readFrame reads the next frame once the outbox has room for its
// answer: a client that does not read is not read either. A frame over
// the limit is reported as a *tooLargeError. charge is what the frame
// holds of the server's intake budget, for release once dispatched.
func (c *conn) readFrame(ctx context.Context) (frame []byte, charge int64, err error) {
	if err := c.out.waitReadable(ctx); err != nil {
		if errors.Is(err, errWedged) {
			c.wedged()
		}
		return nil, 0, err
	}
	c.busy.Store(false)
	frame, err = c.t.ReadFrame(ctx, c)
	c.busy.Store(true)
	return frame, c.settle(frame), err
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
