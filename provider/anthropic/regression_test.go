package anthropic_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"mspd/modelretry"
	"mspd/provider"
	"mspd/provider/anthropic"
	"mspd/provider/anthropic/anthropictest"
	"mspd/turn"
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

// TestErrorBodyCutKeepsStatusAndRetryAfter: a 429 whose JSON body
// is cut short (a proxy or the API dropping the connection while the error
// body streams) still has its status and its retry-after header. The SDK
// returns a plain "error reading response body" error; the provider then
// reports a streamInterrupted failure with no status and no headers, so
// the retry ignores retry-after (and a 401 cut the same way would be
// retried as a transient failure). The OpenAI provider keeps the status
// from its watch in the same case.
func TestErrorBodyCutKeepsStatusAndRetryAfter(t *testing.T) {
	t.Parallel()
	f := anthropictest.New(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		w.Header().Set("retry-after", "30")
		w.Header().Set("content-length", "500")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"type":"error","error":{"type":"rate_limit_error","mess`)
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	})
	_, _, err := stream(t, newModel(t, f), provider.Request{})
	var pe *provider.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T); want *provider.Error", err, err)
	}
	if pe.HTTPStatus != http.StatusTooManyRequests || pe.Header.Get("Retry-After") != "30" {
		t.Errorf("kind %q status %d header %v; want status 429 with retry-after 30 kept", pe.Kind, pe.HTTPStatus, pe.Header)
	}
	fl := modelretry.Classify(modelretry.Signal{Kind: pe.Kind, HTTPStatus: pe.HTTPStatus, Header: pe.Header, Message: pe.Message}, time.Now())
	if !fl.HasRetryAfter || fl.RetryAfter != 30*time.Second {
		t.Errorf("classified %+v; want the server-directed 30 s delay honoured", fl)
	}
}

// TestMalformedBaseURLIsRefusedByNew: a base URL the SDK cannot
// parse is accepted by New; every request then fails as a retryable
// connectionError (five attempts with backoff for a configuration error)
// and the error message carries the raw URL, user info included. The
// OpenAI provider validates its base URL in New and never echoes it.
func TestMalformedBaseURLIsRefusedByNew(t *testing.T) {
	t.Parallel()
	const secret = "pr0xyS3cret"
	m, err := anthropic.New(anthropic.Config{APIKey: testKey, Model: testModel,
		BaseURL: "http://mspd:" + secret + "@proxy.internal:80 80/"})
	if err != nil {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("New error carries the URL's credentials: %v", err)
		}
		return // refused up front: fine
	}
	_, _, err = stream(t, m, provider.Request{})
	var pe *provider.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T)", err, err)
	}
	t.Errorf("New accepted a malformed base URL; Stream then fails with kind %q (retryable: %v)",
		pe.Kind, modelretry.Retryable(pe.Kind))
	if strings.Contains(pe.Message, secret) || strings.Contains(pe.Error(), secret) {
		t.Errorf("the provider error carries the base URL's credentials: %q", pe.Message)
	}
}

// TestSpendLimit429IsQuotaExhausted: Anthropic's counterpart of
// OpenAI's 429 insufficient_quota is a 429 rate_limit_error whose
// error.details.error_code is enforced_spend_limit_reached (or
// contract_spend_limit_reached): the organisation hit its monthly spend
// limit, and waiting seconds will not help (the SDK v2.15 documents both
// codes, next to the transient ramp_limit_exceeded). The provider ignores
// error.details, so the failure is a retryable rateLimited and the turn
// burns all its attempts (and the key's retry budget).
func TestSpendLimit429IsQuotaExhausted(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"enforced_spend_limit_reached", "contract_spend_limit_reached"} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			f := anthropictest.New(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("content-type", "application/json")
				w.Header().Set("request-id", "req_011CSpend")
				w.WriteHeader(http.StatusTooManyRequests)
				fmt.Fprintf(w, `{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your specified API usage limits. You will regain access on 2026-11-01 at 00:00 UTC.","details":{"error_code":%q}},"request_id":"req_011CSpend"}`, code)
			})
			_, _, err := stream(t, newModel(t, f), provider.Request{})
			var pe *provider.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T)", err, err)
			}
			fl := modelretry.Classify(modelretry.Signal{Kind: pe.Kind, HTTPStatus: pe.HTTPStatus, Header: pe.Header, Message: pe.Message}, time.Now())
			if fl.Kind != modelretry.KindQuotaExhausted || fl.Retryable {
				t.Errorf("kind %q → classified %q retryable %v; want quotaExhausted, not retried", pe.Kind, fl.Kind, fl.Retryable)
			}
		})
	}
}

// TestAnswerStandsWhenOnlyMessageStopIsLost: message_delta carried the
// final stop_reason and the cumulative output_tokens (7), then the
// connection dropped before message_stop. The answer and its usage were
// complete, so the turn keeps them: no re-run paid for twice, and the
// reported tokens counted (RFC 0248 §A.2).
func TestAnswerStandsWhenOnlyMessageStopIsLost(t *testing.T) {
	t.Parallel()
	dropAfterDelta := func(w http.ResponseWriter, r *http.Request) {
		s := anthropictest.StartSSE(w)
		s.Send("message_start", anthropictest.MsgStart(25))
		s.Send("content_block_start", anthropictest.TextStart)
		s.Send("content_block_delta", anthropictest.TextDelta("Hello"))
		s.Send("content_block_stop", anthropictest.BlockStop)
		s.Send("message_delta", anthropictest.MsgDelta("end_turn", 7))
		anthropictest.Reset()(w, r)
	}
	f := anthropictest.New(t, dropAfterDelta)
	res := runTurn(t, newClock(), newModel(t, f), turn.Spec{})
	a := res.out.Completed.Attempts
	// message_delta announced the end: the answer stands, with its usage,
	// and nothing is paid for twice.
	if res.out.Completed.Terminal != "completed" || res.out.Answer != "Hello" || a == nil || a.Count != 1 || a.OutputTokens != 7 || !a.UsageComplete {
		t.Fatalf("terminal %s answer %q attempts %+v (events %s)", res.out.Completed.Terminal, res.out.Answer, a, res.sink.Methods())
	}
}

// TestRedirectIsNotFollowed: one attempt is one HTTP request; a redirect
// fails the attempt as an invalid request instead of a second request.
func TestRedirectIsNotFollowed(t *testing.T) {
	f := anthropictest.New(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/v1/elsewhere", http.StatusTemporaryRedirect)
	})
	_, _, err := stream(t, newModel(t, f), provider.Request{})
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Kind != modelretry.KindInvalidRequest || f.Count() != 1 {
		t.Fatalf("err %v, %d requests; want an invalid request after one request", err, f.Count())
	}
}
