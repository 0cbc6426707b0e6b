package openai_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"mspd/modelretry"
	"mspd/provider"
	"mspd/provider/openai"
	"mspd/provider/openai/openaitest"
	"mspd/schema/msp"
	"mspd/turn"
)

// TestFinishedThenDropped: the stream delivered every delta and
// finish_reason "stop", then the connection dropped before the usage chunk
// and data: [DONE]. The answer is whole, exactly as in TestStreamEnds' "cut
// after finish, before usage and DONE" (which ends the body cleanly), so it
// succeeds the same way, with nil Usage.
func TestFinishedThenDropped(t *testing.T) {
	srv := openaitest.New(t, "/v1", openaitest.StreamAbort(openaitest.Role(), openaitest.Delta("Hi"),
		openaitest.Finish("stop")))
	text, resp, err := stream(t, newModel(t, srv, nil), hello)
	if err != nil || text != "Hi" || resp.FinishReason != provider.FinishStop || resp.Usage != nil {
		t.Errorf("got %q %+v %v; want Hi, stop, nil usage (the answer finished; only the accounting was lost)", text, resp, err)
	}
}

// TestFinishedThenDroppedTurn: the same through the runner: the finished
// answer is kept after one request, not thrown away and bought again.
func TestFinishedThenDroppedTurn(t *testing.T) {
	srv := openaitest.New(t, "/v1",
		openaitest.StreamAbort(openaitest.Role(), openaitest.Delta("Hel"), openaitest.Delta("lo"), openaitest.Finish("stop")),
		openaitest.Stream(openaitest.Answer("Hel", "lo")...))
	start := time.Now().Truncate(time.Second)
	r := runTurn(t, newModel(t, srv, nil), turn.Spec{SessionID: "session-1", TurnID: "turn-1",
		History: []provider.Message{{Role: provider.RoleUser, Text: "Hi"}}}, start, nil)
	c := r.out.Completed
	if n := srv.Count(); n != 1 || c.Attempts == nil || c.Attempts.Count != 1 {
		t.Errorf("%d requests, attempts %+v; want the finished answer kept after 1 request (events: %s)",
			n, c.Attempts, r.sink.Methods())
	}
	if got := items(r.sink); len(got) == 0 || got[0] != [2]string{msp.ItemCompleted, "Hello"} {
		t.Errorf("items %v; want the finished answer completed", got)
	}
}

// TestSlowOnTextStaggered: frames arrive 20 ms apart while onText takes
// 150 ms per delta; the idle watchdog times only waits on the server, so a
// slow consumer is no timeout. In a synctest bubble: the waits are on the
// bubble's fake clock, as is the watchdog, so the timings are exact.
func TestSlowOnTextStaggered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := openaitest.NewInMemory(t, "/v1", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
			f := w.(http.Flusher)
			for _, p := range openaitest.Answer("a", "b", "c") {
				fmt.Fprintf(w, "data: %s\n\n", p)
				f.Flush()
				<-time.After(20 * time.Millisecond)
			}
		})
		m := newModel(t, srv, func(c *openai.Config) { c.IdleTimeout = 60 * time.Millisecond })
		if _, err := m.Stream(context.Background(), hello, func(string) { <-time.After(150 * time.Millisecond) }); err != nil {
			t.Errorf("Stream: %v", err)
		}
	})
}

// TestFinishedThenSilent: a compatible server sends finish_reason and the
// usage chunk, then keeps the connection open without data: [DONE]. The
// answer and its accounting are complete, so the idle watchdog's firing
// does not fail the attempt.
func TestFinishedThenSilent(t *testing.T) {
	srv := openaitest.New(t, "/v1", openaitest.StreamStall(openaitest.Role(), openaitest.Delta("Hi"),
		openaitest.Finish("stop"), openaitest.Usage(12, 1, 0, 0)))
	text, resp, err := stream(t, newModel(t, srv, func(c *openai.Config) { c.IdleTimeout = 50 * time.Millisecond }), hello)
	if err != nil || text != "Hi" || resp.FinishReason != provider.FinishStop || resp.Usage == nil {
		t.Errorf("got %q %+v %v; want Hi, stop, usage kept", text, resp, err)
	}
}

// TestRedirectIsNotFollowed: one attempt is one HTTP request; a redirect
// fails the attempt as an invalid request (a base URL to fix) instead of
// becoming a second request.
func TestRedirectIsNotFollowed(t *testing.T) {
	srv := openaitest.New(t, "/v1", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/v1/elsewhere", http.StatusTemporaryRedirect)
	})
	_, _, err := stream(t, newModel(t, srv, nil), hello)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Kind != modelretry.KindInvalidRequest || srv.Count() != 1 {
		t.Fatalf("err %v, %d requests; want an invalid request after one request", err, srv.Count())
	}
}
