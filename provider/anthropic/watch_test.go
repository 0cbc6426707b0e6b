package anthropic_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"mspd/provider"
	"mspd/provider/anthropic"
	"mspd/provider/anthropic/anthropictest"
)

// TestIdleTimeoutIgnoresSlowOnText: the server sends the whole
// answer at once; only the consumer (onText: the runner writing the
// item/started event to the durable log, a slow client...) is slow. That is
// not the server's silence, and must not fail the attempt as a timeout.
// The OpenAI provider gets this right (TestIdleMeansSilence/slow_onText).
// It runs in a synctest bubble: the waits below are on the bubble's fake
// clock, as is the idle timer, so the timings are exact and take no time.
func TestIdleTimeoutIgnoresSlowOnText(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// The server is never silent for more than 20 ms.
		f := anthropictest.NewInMemory(t, func(w http.ResponseWriter, r *http.Request) {
			s := anthropictest.StartSSE(w)
			s.Send("message_start", anthropictest.MsgStart(25))
			s.Send("content_block_start", anthropictest.TextStart)
			s.Send("content_block_delta", anthropictest.TextDelta("a"))
			<-time.After(20 * time.Millisecond)
			s.Send("content_block_delta", anthropictest.TextDelta("b"))
			<-time.After(20 * time.Millisecond)
			s.Send("content_block_delta", anthropictest.TextDelta("c"))
			s.Send("content_block_stop", anthropictest.BlockStop)
			s.Send("message_delta", anthropictest.MsgDelta("end_turn", 3))
			s.Send("message_stop", anthropictest.MsgStop)
		})
		m := newModel(t, f, func(c *anthropic.Config) { c.IdleTimeout = 60 * time.Millisecond })
		var got strings.Builder
		resp, err := m.Stream(context.Background(),
			provider.Request{Messages: []provider.Message{{Role: provider.RoleUser, Text: "Hi"}}, Attempt: 1},
			func(s string) {
				got.WriteString(s)
				<-time.After(150 * time.Millisecond) // a slow consumer, not a silent server
			})
		if err != nil {
			t.Fatalf("Stream failed with %v after %q; the server was never silent, only onText was slow", err, got.String())
		}
		if got.String() != "abc" || resp.FinishReason != provider.FinishStop {
			t.Errorf("text %q finish %q; want abc stop", got.String(), resp.FinishReason)
		}
	})
}
