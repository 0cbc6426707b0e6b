package anthropic_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"mspd/modelretry"
	"mspd/provider"
	"mspd/provider/anthropic/anthropictest"
)

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
