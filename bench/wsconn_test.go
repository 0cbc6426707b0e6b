package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// A bound run of reads ends when its context does, as a read given that
// context would; once stopped, the context's end leaves the connection be.
func TestBoundReadsEndWithTheirContext(t *testing.T) {
	// An echo server: silent until it is sent a frame.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		for {
			_, f, err := ws.Read(r.Context())
			if err != nil || ws.Write(r.Context(), websocket.MessageText, f) != nil {
				return
			}
		}
	}))
	defer srv.Close()
	dial := func() *mspConn {
		ws, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
		if err != nil {
			t.Fatal(err)
		}
		return &mspConn{ws: ws}
	}

	c := dial()
	defer c.close()
	ctx, cancel := context.WithCancel(context.Background())
	run, stop := c.bound(ctx)
	defer stop()
	if run.Done() != nil {
		t.Fatal("the run's context can end: the library would arm a timeout on every read")
	}
	errs := make(chan error, 1)
	go func() {
		_, err := c.read(run)
		errs <- err
	}()
	cancel()
	select {
	case err := <-errs:
		if err == nil {
			t.Fatal("a read outlived its context and returned a frame")
		}
	case <-time.After(10 * time.Second): // a bound, not a wait: the read returns at once
		t.Fatal("a read outlived its bound context")
	}

	c2 := dial()
	defer c2.close()
	ctx2, cancel2 := context.WithCancel(context.Background())
	run2, stop2 := c2.bound(ctx2)
	if !stop2() {
		t.Fatal("stop found the watch already fired")
	}
	cancel2()
	// Two round trips: a watch left armed would close c2 while the first
	// is on its way, and the second would fail.
	for range 2 {
		if err := c2.ws.Write(run2, websocket.MessageText, []byte(`{"jsonrpc":"2.0","method":"x"}`)); err != nil {
			t.Fatalf("after stop, write: %v", err)
		}
		f, err := c2.read(run2)
		if err != nil || string(methodOf(f)) != "x" {
			t.Fatalf("after stop, read = %s, %v; want the frame", f, err)
		}
	}
}
