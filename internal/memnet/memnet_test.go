package memnet_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"mspd/internal/memnet"
)

// A client waiting on the in-memory network leaves the bubble idle, so a
// server that answers after an hour of fake time answers at once.
func TestServerRunsOnTheBubbleClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, client := memnet.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-time.After(time.Hour) // fake time: the bubble idles until it is due
			io.WriteString(w, "late")
		}))
		start := time.Now()
		res, err := client.Get(srv.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || string(body) != "late" {
			t.Fatalf("body %q, %v", body, err)
		}
		if d := time.Since(start); d != time.Hour {
			t.Errorf("answered after %v of bubble time, want exactly 1h", d)
		}
	})
}

func TestClosedListener(t *testing.T) {
	l := memnet.Listen()
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v", err)
	}
	if _, err := l.DialContext(context.Background(), "tcp", l.Addr().String()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("DialContext after Close: %v", err)
	}
}
