package server

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"mspd/schema/msp"
	"mspd/session"
)

// maxOutstandingAsks bounds the server-to-client requests one connection
// has waiting for their answer: a client that never answers makes the
// oldest be forgotten, not the table grow. An answer to a forgotten
// request is ignored, like any response nobody waits for.
const maxOutstandingAsks = 64

// asks are a connection's server-to-client requests (approval/request)
// waiting for the client's answer, a RequestReceipt. The answer changes
// nothing (the decision travels as approval/decide), so what it tells is
// logged; the table only has to match it to its request. It dies with
// the connection.
type asks struct {
	mu      sync.Mutex
	next    uint64
	pending map[string]ask // by id
	order   []string       // ids, oldest first
}

// ask is one request sent and not yet answered.
type ask struct {
	method    string
	sessionID string
	sent      time.Time
}

// add records a request about to be sent and returns its id: a string of
// mspd's own ("mspd-1"), which a client's numeric ids never equal.
func (a *asks) add(method, sessionID string, now time.Time) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		a.pending = make(map[string]ask)
	}
	if len(a.order) == maxOutstandingAsks {
		delete(a.pending, a.order[0])
		a.order = slices.Delete(a.order, 0, 1)
	}
	a.next++
	id := "mspd-" + strconv.FormatUint(a.next, 10)
	a.pending[id] = ask{method: method, sessionID: sessionID, sent: now}
	a.order = append(a.order, id)
	return id
}

// answered takes the request rawID (the response's id, as sent) answers;
// ok is false for an id no request waits under.
func (a *asks) answered(rawID json.RawMessage) (ask, bool) {
	var id string
	if json.Unmarshal(rawID, &id) != nil {
		return ask{}, false // not a string: none of mspd's
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.pending[id]
	if ok {
		delete(a.pending, id)
		a.order = slices.DeleteFunc(a.order, func(o string) bool { return o == id })
	}
	return r, ok
}

// outstanding is how many requests wait for their answer.
func (a *asks) outstanding() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pending)
}

var _ session.Asker = (*conn)(nil)

// Ask implements session.Asker: it sends a server-to-client request on
// the protected lane (never dropped, gapped or opted out of). params are
// already encoded (the approval/requested record's, byte for byte).
func (c *conn) Ask(sessionID, method string, params json.RawMessage) {
	id := c.asks.add(method, sessionID, time.Now())
	frame := make([]byte, 0, len(params)+len(method)+len(id)+48)
	frame = append(frame, `{"jsonrpc":"2.0","id":"`...)
	frame = append(frame, id...)
	frame = append(frame, `","method":`...)
	m, _ := msp.Marshal(method) // a method name always encodes
	frame = append(frame, m...)
	frame = append(frame, `,"params":`...)
	frame = append(frame, params...)
	frame = append(frame, '}')
	if errors.Is(c.out.pushProtected(frame), errWedged) {
		c.wedged()
	}
}

// answer handles a client's response (a frame with an id, a result or an
// error, and no method): the answer to one of the server's requests, or
// to nothing, which is ignored.
func (c *conn) answer(rawID json.RawMessage, env map[string]json.RawMessage) {
	r, ok := c.asks.answered(rawID)
	if !ok {
		c.log.Debug("ignoring a response that answers no request", "id", string(rawID))
		return
	}
	took := time.Since(r.sent)
	if e, failed := env["error"]; failed {
		// The client could not present it: the approval stays pending, and
		// is presented again when this or another connection subscribes.
		c.log.Debug("the client could not present a request", "method", r.method, "session", r.sessionID, "after", took, "error", strings.ToValidUTF8(string(e[:min(len(e), 200)]), ""))
		return
	}
	c.log.Debug("the client presented a request", "method", r.method, "session", r.sessionID, "after", took)
}
