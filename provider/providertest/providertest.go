// Package providertest is what the fake provider servers (openaitest,
// anthropictest) are built of: a server that answers each request with the
// next scripted Reply and records every request, and the server-sent-event
// writing a scripted stream is made of. Each fake adds its API's wire (the
// paths it serves, what a request must carry, its headers, event and error
// shapes) through a Wire.
package providertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"mspd/internal/memnet"
)

// Reply answers one request.
type Reply func(w http.ResponseWriter, r *http.Request)

// Request is one request a server received.
type Request struct {
	Method string
	Path   string
	Header http.Header
	// Raw is the body as sent; Body is it decoded.
	Raw  []byte
	Body map[string]any
}

// Wire is what one API adds to the scripted server. Every field but Name
// may be nil.
type Wire struct {
	// Name starts every test failure the server reports ("openaitest").
	Name string
	// Misrouted answers a request the API would not route (a wrong path,
	// say) with a non-nil Reply, outside the script and the record; nil
	// lets the request through.
	Misrouted func(r *http.Request) Reply
	// Check fails the test (t.Errorf) for what the API would refuse of a
	// request, once it is recorded.
	Check func(t testing.TB, req Request)
	// Stamp sets the headers of the answer to scripted request n (1-based)
	// before its Reply runs: a request id, say.
	Stamp func(h http.Header, n int)
	// Unscripted answers a request beyond the script, after the test has
	// failed, with an error the API could send and mspd does not retry;
	// msg says which request it was.
	Unscripted func(msg string) Reply
}

// Server is a running scripted server.
type Server struct {
	t      testing.TB
	wire   Wire
	srv    *httptest.Server
	client *http.Client

	mu      sync.Mutex
	replies []Reply
	reqs    []Request
}

// New starts a server speaking wire that answers request n with
// replies[n-1]; a request beyond the script fails the test. The server is
// closed when the test ends.
func New(t testing.TB, wire Wire, replies ...Reply) *Server {
	t.Helper()
	s := &Server{t: t, wire: wire, replies: replies}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.client = s.srv.Client()
	t.Cleanup(func() {
		// Stalled handlers return once their connection is gone.
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

// NewInMemory is New on an in-memory network (package memnet), for tests
// in a testing/synctest bubble: there the provider's idle timers and the
// replies' waits run on the bubble's fake clock. Only Client reaches it.
func NewInMemory(t testing.TB, wire Wire, replies ...Reply) *Server {
	t.Helper()
	s := &Server{t: t, wire: wire, replies: replies}
	s.srv, s.client = memnet.NewServer(t, http.HandlerFunc(s.serve))
	return s
}

// URL returns the server's root: scheme and host, no path.
func (s *Server) URL() string { return s.srv.URL }

// Client returns an HTTP client for the server.
func (s *Server) Client() *http.Client { return s.client }

// Requests returns the requests recorded so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Count returns how many requests were recorded.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if s.wire.Misrouted != nil {
		if reply := s.wire.Misrouted(r); reply != nil {
			reply(w, r)
			return
		}
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		s.t.Errorf("%s: reading request body: %v", s.wire.Name, err)
	}
	req := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Raw: raw}
	if err := json.Unmarshal(raw, &req.Body); err != nil {
		s.t.Errorf("%s: request body is not JSON: %v", s.wire.Name, err)
	}
	if s.wire.Check != nil {
		s.wire.Check(s.t, req)
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	n := len(s.reqs)
	var reply Reply
	if n <= len(s.replies) {
		reply = s.replies[n-1]
	}
	s.mu.Unlock()
	if reply == nil {
		msg := fmt.Sprintf("%s: request %d has no scripted reply (%d scripted)", s.wire.Name, n, len(s.replies))
		s.t.Error(msg)
		if s.wire.Unscripted != nil {
			s.wire.Unscripted(msg)(w, r)
		} else {
			http.Error(w, msg, http.StatusTeapot)
		}
		return
	}
	if s.wire.Stamp != nil {
		s.wire.Stamp(w.Header(), n)
	}
	reply(w, r)
}

// SetPairs sets header pairs ("Retry-After", "2", ...) on h; an odd last
// name is ignored.
func SetPairs(h http.Header, pairs ...string) {
	for i := 0; i+1 < len(pairs); i += 2 {
		h.Set(pairs[i], pairs[i+1])
	}
}

// SSE writes an event stream, one flushed event at a time.
type SSE struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// StartSSE answers 200 with the headers set on w so far (a Content-Type of
// text/event-stream unless one is set), flushed, and returns a writer for
// the stream's events.
func StartSSE(w http.ResponseWriter) *SSE {
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "text/event-stream")
	}
	w.WriteHeader(http.StatusOK)
	s := &SSE{w: w, rc: http.NewResponseController(w)}
	_ = s.rc.Flush()
	return s
}

// Send writes one event, "event: <event>\ndata: <data>\n\n" (without the
// event line when event is ""), flushed so the client sees it at once.
func (s *SSE) Send(event, data string) {
	if event != "" {
		fmt.Fprintf(s.w, "event: %s\n", event)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", data)
	_ = s.rc.Flush()
}

// Frames sends each payload as one event named after its JSON "type"
// member, as Anthropic's Messages and OpenAI's Responses streams name
// theirs; a payload without one (a Chat Completions chunk, [DONE]) goes
// without an event line.
func (s *SSE) Frames(payloads ...string) {
	for _, p := range payloads {
		var ev struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal([]byte(p), &ev)
		s.Send(ev.Type, p)
	}
}

// Stall waits until the client leaves (the server closing its connection
// at the test's end counts), sending nothing: inside a Reply after
// StartSSE, an idle stream; before it, a request waiting for headers.
func Stall(r *http.Request) { <-r.Context().Done() }

// StallHeaders never answers: the request waits for headers until the
// client leaves.
func StallHeaders() Reply {
	return func(w http.ResponseWriter, r *http.Request) { Stall(r) }
}

// Reset resets the TCP connection. Before any response byte the client
// sees a connection error; called inside a Reply after StartSSE, it cuts
// the stream mid-body.
func Reset() Reply {
	return func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, not FIN
		}
		_ = conn.Close()
	}
}

// Abort drops the connection mid-body (the handler panics with
// http.ErrAbortHandler), so the client reads an unexpected EOF.
func Abort() { panic(http.ErrAbortHandler) }
