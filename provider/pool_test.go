package provider

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"
)

// A stream closed at its last event, before the chunked body's end has
// been read, keeps its connection: the next request reuses it. Checked:
// with a plain transport (no drain on Close) none of the 9 is reused.
func TestPoolReusesAStreamClosedAtItsLastEvent(t *testing.T) {
	sawDone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"x\":1}\n\ndata: [DONE]\n\n")
		w.(http.Flusher).Flush()
		// The body's end goes out only once the client has read [DONE],
		// so that it cannot have been read before the client closes.
		select {
		case <-sawDone:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	client := Pool{}.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reused := 0
	const requests = 10
	for i := range requests {
		var info httptrace.GotConnInfo
		trace := &httptrace.ClientTrace{GotConn: func(g httptrace.GotConnInfo) { info = g }}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, srv.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() && !strings.Contains(sc.Text(), "[DONE]") {
		}
		sawDone <- struct{}{}
		resp.Body.Close()
		if i > 0 && info.Reused {
			reused++
		}
	}
	// A request sent just as the connection goes back to the pool may dial
	// another.
	if reused < requests-3 {
		t.Fatalf("%d of %d requests reused a connection, want nearly all", reused, requests-1)
	}
}

// Closing an unfinished body reads what is left of it, and no more than
// drainMaxBytes; a body whose request is over is closed at once.
func TestDrainingBodyBounds(t *testing.T) {
	rest := &countingReader{r: strings.NewReader(strings.Repeat("x", 100))}
	b := &drainingBody{ReadCloser: rest, ctx: context.Background()}
	b.Close()
	if rest.n != 100 || !rest.closed {
		t.Fatalf("drained %d of 100 bytes, closed %v", rest.n, rest.closed)
	}
	long := &countingReader{r: strings.NewReader(strings.Repeat("x", 10*drainMaxBytes))}
	(&drainingBody{ReadCloser: long, ctx: context.Background()}).Close()
	if long.n != drainMaxBytes || !long.closed {
		t.Fatalf("drained %d bytes of a long body, want %d", long.n, drainMaxBytes)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	over := &countingReader{r: strings.NewReader("xyz")}
	(&drainingBody{ReadCloser: over, ctx: done}).Close()
	if over.n != 0 || !over.closed {
		t.Fatalf("a cancelled request's body: drained %d bytes, closed %v", over.n, over.closed)
	}
}

// countingReader counts the bytes read from r and notes Close.
type countingReader struct {
	r      io.Reader
	n      int
	closed bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func (c *countingReader) Close() error { c.closed = true; return nil }
