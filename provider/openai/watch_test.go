package openai_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"mspd/provider/openai"
	"mspd/provider/openai/openaitest"
)

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
