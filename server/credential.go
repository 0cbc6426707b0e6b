package server

import (
	"math"
	"time"

	"github.com/coder/websocket"
)

// StatusCredentialEnded is the WebSocket close status of a connection
// whose credential ended: a reload revoked it or it expired. The client
// should get a valid token, reconnect and resume by cursor; reconnecting
// with the same token is refused (401). (4401 mirrors HTTP 401, as
// graphql-ws uses it.)
const StatusCredentialEnded websocket.StatusCode = 4401

// The close reasons sent with StatusCredentialEnded.
const (
	ReasonExpired = "token expired: reconnect with a fresh token and resume by cursor"
	ReasonRevoked = "credential revoked: reconnect with a valid token and resume by cursor"
)

// ReloadAuth re-reads the credentials (tokens file, JWT key file; see
// auth.Authenticator.Reload) and ends every open connection whose
// credential no longer holds: from when it returns, those connections
// have no request handled (one being handled finishes), and each is
// closed with StatusCredentialEnded within the close handshake's bound
// (10 s at worst, at once when the peer answers). The error is the
// reload's: a file that did not load keeps its previous credentials.
func (s *Server) ReloadAuth() error {
	err := s.cfg.Auth.Reload()
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	ended := 0
	for _, c := range conns {
		if !s.cfg.Auth.Valid(c.cred) {
			c.credentialEnded(ReasonRevoked)
			ended++
		}
	}
	if ended > 0 {
		s.log.Info("closed the connections whose credential the reload revoked", "connections", ended)
	}
	return err
}

// watchExpiry arms the timer that ends the connection when its
// credential expires (a JWT's exp plus the clock skew allowed). Like the
// keepalive it is a runtime timer, armed only once assigned, so that end
// finds it set.
func (c *conn) watchExpiry() {
	exp := c.cred.Expires
	if exp.IsZero() {
		return
	}
	c.expiry = time.AfterFunc(time.Duration(math.MaxInt64), func() { c.credentialEnded(ReasonExpired) })
	c.expiry.Reset(time.Until(exp))
}

// credentialEnded ends a connection whose credential no longer holds: no
// request read from now on is handled, and the connection closes with
// StatusCredentialEnded and reason, without waiting for what is queued.
// It returns at once; the close handshake runs on its own.
func (c *conn) credentialEnded(reason string) {
	if !c.credEnded.CompareAndSwap(false, true) {
		return
	}
	c.log.Info("closing a connection whose credential ended", "reason", reason)
	go c.end(func() {
		if sc, ok := c.t.(statusCloser); ok {
			sc.CloseStatus(StatusCredentialEnded, reason)
			return
		}
		c.t.Close(reason, false)
	})
}

// statusCloser is a transport that can close with a status of the
// server's choosing (WebSocket).
type statusCloser interface {
	CloseStatus(code websocket.StatusCode, reason string) error
}

// CloseStatus closes the WebSocket with code and reason.
func (t *wsTransport) CloseStatus(code websocket.StatusCode, reason string) error {
	return t.c.Close(code, reason)
}
