package httpwatch

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"mspd/modelretry"
)

const idle = time.Second

// respond is a send that answers at once with status and a body read from
// the returned pipe writer.
func respond(status int) (func(*http.Request) (*http.Response, error), *io.PipeWriter) {
	pr, pw := io.Pipe()
	send := func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {"2"}}, Body: pr}, nil
	}
	return send, pw
}

func request(t *testing.T) *http.Request {
	req, err := http.NewRequest(http.MethodPost, "http://provider.test/v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// A wait for headers longer than the idle timeout cancels the request,
// and the failure says nothing answered.
func TestSilenceBeforeHeadersCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		w := New(idle, cancel)
		defer w.Stop()
		start := time.Now()
		_, err := w.RoundTrip(request(t), func(*http.Request) (*http.Response, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
		if !errors.Is(err, context.Canceled) || !w.Fired() || w.GotHeaders() {
			t.Fatalf("error %v, fired %v, headers %v; want cancelled, fired, no headers", err, w.Fired(), w.GotHeaders())
		}
		if d := time.Since(start); d != idle {
			t.Errorf("cancelled after %v; want %v", d, idle)
		}
		f := w.IdleFailure()
		if f.Kind != modelretry.KindTimeout || f.Message != "no response from the server within 1s" || !errors.Is(f, ErrIdle) {
			t.Errorf("failure %+v", f)
		}
	})
}

// Only waits on the server count: a consumer slower than the idle timeout
// between reads is no timeout, a body silent that long is.
func TestOnlyWaitsOnTheServerCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		send, pw := respond(http.StatusOK)
		w := New(idle, func() { pw.CloseWithError(context.Canceled) })
		defer w.Stop()
		res, err := w.RoundTrip(request(t), send)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for _, s := range []string{"a", "b", "c"} {
				_, _ = io.WriteString(pw, s)
			}
			// Then silence: the third read waits on the server.
		}()
		buf := make([]byte, 1)
		for range 3 {
			if _, err := res.Body.Read(buf); err != nil {
				t.Fatalf("read: %v", err)
			}
			time.Sleep(5 * idle) // the consumer's own time
		}
		if w.Fired() {
			t.Fatal("the consumer's time counted as the server's silence")
		}
		start := time.Now()
		if _, err := res.Body.Read(buf); !errors.Is(err, context.Canceled) {
			t.Fatalf("read of a silent body: %v; want cancelled", err)
		}
		if d := time.Since(start); d != idle || !w.Fired() || !w.GotHeaders() {
			t.Errorf("cancelled after %v (fired %v, headers %v); want %v", d, w.Fired(), w.GotHeaders(), idle)
		}
		if got := w.IdleFailure().Message; got != "no data from the server for 1s" {
			t.Errorf("message %q", got)
		}
	})
}

// A stopped watch, or one without an idle timeout, never fires.
func TestStoppedOrOffNeverFires(t *testing.T) {
	for _, tc := range []struct {
		name string
		idle time.Duration
		stop bool
	}{{"stopped", idle, true}, {"off", 0, false}, {"negative", -1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				send, pw := respond(http.StatusOK)
				w := New(tc.idle, func() { pw.CloseWithError(context.Canceled) })
				res, err := w.RoundTrip(request(t), send)
				if err != nil {
					t.Fatal(err)
				}
				if tc.stop {
					w.Stop()
				}
				go func() {
					time.Sleep(10 * idle)
					_, _ = io.WriteString(pw, "late")
				}()
				buf := make([]byte, 4)
				if n, err := res.Body.Read(buf); err != nil || string(buf[:n]) != "late" || w.Fired() {
					t.Errorf("read %q, %v, fired %v; want late, no firing", buf[:n], err, w.Fired())
				}
			})
		})
	}
}

// The response's status and headers are kept, copied, for a failure the
// SDK cannot parse.
func TestResponseIsKept(t *testing.T) {
	send, pw := respond(http.StatusTooManyRequests)
	defer pw.Close()
	w := New(idle, func() {})
	defer w.Stop()
	if status, _ := w.Response(); status != 0 {
		t.Errorf("status %d before any response", status)
	}
	res, err := w.RoundTrip(request(t), send)
	if err != nil {
		t.Fatal(err)
	}
	res.Header.Set("Retry-After", "9")
	status, header := w.Response()
	if status != http.StatusTooManyRequests || header.Get("Retry-After") != "2" || !w.GotHeaders() {
		t.Errorf("kept %d %v (headers %v); want 429 with Retry-After 2", status, header, w.GotHeaders())
	}
}
