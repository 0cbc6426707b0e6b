// Package modelretry is mspd's provider-agnostic retry engine: it classifies
// failed provider requests, decides whether and when to retry them, throttles
// retries per provider key, and counts attempts (RFC 0248). It knows nothing
// of MSP, sessions or providers; the caller adapts its provider's error into
// a Signal and turns Decisions into notices. Time and randomness are
// injected, so tests never sleep (see modelretry/retrytest).
//
// One Engine serves one provider key (its Budget is shared by every call to
// that key). A model call is driven step by step, because two layers retry
// within one attempt counter and one MaxAttempts bound: model-layer failures
// before output (Attempt.Fail → turn/modelRetryScheduled) and turn-layer
// re-runs of rejected output (Attempt.Rerun → turn/retryScheduled):
//
//	call, err := engine.Start(host.WithMaxAttempts(n, host.MaxAttempts))
//	for {
//		a, err := call.Begin(ctx) // refuses past MaxAttempts or after cancel
//		if err != nil {
//			return err
//		}
//		resp, err := model.Stream(ctx, req(a.N()), onText)
//		if err == nil {
//			a.Succeed()
//			return nil
//		}
//		d := a.Fail(ctx, engine.Classify(signalOf(err)))
//		if !d.Retry {
//			return terminal(d) // d.Failure.Kind, d.Stop
//		}
//		// The notice is appended before the sleep; cancellation ends it.
//		if err := call.Backoff(ctx, appendNotice); err != nil {
//			return err
//		}
//	}
//
// Attempt numbers are 1-based and include the first request: nextAttempt =
// attempt + 1 and maxAttempts counts the original request, as in gRPC.
//
// A call may have a fallback chain: other providers asked in order when
// one cannot answer. The package holds the chain's policy and nothing of
// its providers: FailsOver says whether a call that ended with a decision
// moves to the next provider, Chain shares the call's requests along the
// chain (each provider its own Call, the whole under one bound), and each
// provider key's Breaker (closed, open, half-open) tells its callers to
// skip a provider that failed every request for a while, fed by HealthOf:
//
//	adm := breaker.Allow() // Refused: skip to the next provider, if any
//	… send the request …
//	breaker.Record(adm, modelretry.HealthOf(failure)) // or Healthy
//	if d := a.Fail(ctx, failure); !d.Retry && modelretry.FailsOver(d) {
//		// the next provider, under chain.Allowance(next, used)
//	}
package modelretry
