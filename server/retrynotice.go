package server

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"

	"mspd/schema/msp"
	"mspd/session"
)

// turn/modelRetryScheduled is MSP's experimental surface: clients built on
// the upstream SDK skip it as an unknown method, so they would show nothing
// while a provider backs off. turn/retryScheduled is the stable surface
// every client knows. So a connection gets each model-layer notice as a
// turn/retryScheduled — the same durable record (attempt fields, cursor,
// source range) rendered with a reason in words — unless it asked for the
// capability modelRetryScheduled or opted into the experimental API at
// initialize. Nothing is recorded twice: one record, one cursor, two
// renderings chosen per connection.

// CapabilityModelRetryScheduled is the capability a client requests to get
// turn/modelRetryScheduled as is.
const CapabilityModelRetryScheduled = "modelRetryScheduled"

// retryRendering is how a connection is sent model-layer retry notices.
type retryRendering int32

const (
	// retryAsStable renders them as turn/retryScheduled, the default.
	retryAsStable retryRendering = iota
	// retryAsModel sends turn/modelRetryScheduled as recorded, to a
	// connection that asked for it.
	retryAsModel
)

// stableNotice renders a model-layer retry notice as turn/retryScheduled;
// any other notification passes unchanged.
func stableNotice(n session.Notification) session.Notification {
	if n.Method != msp.NotifyTurnModelRetryScheduled {
		return n
	}
	var f struct {
		Params      json.RawMessage `json:"params"`
		EmittedAtMs int64           `json:"emittedAtMs"`
	}
	if err := json.Unmarshal(n.Frame, &f); err != nil {
		return n
	}
	params, ok := stableParams(f.Params)
	if !ok {
		return n
	}
	n.Method = msp.NotifyTurnRetryScheduled
	n.Frame = msp.EncodeNotification(n.Method, params, f.EmittedAtMs)
	return n
}

// stableParams turns turn/modelRetryScheduled params into
// turn/retryScheduled params.
func stableParams(raw json.RawMessage) (json.RawMessage, bool) {
	var p msp.TurnModelRetryScheduledParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, false
	}
	reason := msp.ErrorKindWords(p.ErrorKind)
	if p.HTTPStatus != 0 {
		reason = fmt.Sprintf("%s (HTTP %d)", reason, p.HTTPStatus)
	}
	if p.System != "" {
		reason = p.System + " · " + reason
	}
	if p.Fallback {
		// The route change in words: a client that knows only
		// turn/retryScheduled still reads who answers next.
		if p.FallbackReason == msp.FallbackCircuitOpen {
			reason += ", circuit open"
		}
		reason += " · answering with " + cmp.Or(p.NextModelID, p.NextProviderID)
	}
	if len(reason) > msp.MaxReason {
		reason = strings.ToValidUTF8(reason[:msp.MaxReason], "")
	}
	out, err := msp.Marshal(msp.TurnRetryScheduledParams{ViewHeader: p.ViewHeader, TurnID: p.TurnID, Attempt: p.Attempt,
		NextAttempt: p.NextAttempt, MaxAttempts: p.MaxAttempts, RetryDelayMs: p.RetryDelayMs, Reason: reason})
	return out, err == nil
}

// stablePage renders the model-layer notices of a view/page result the
// same way.
func stablePage(res *msp.ViewPageResult) {
	for i, e := range res.Events {
		if e.Method != msp.NotifyTurnModelRetryScheduled {
			continue
		}
		if params, ok := stableParams(e.Params); ok {
			res.Events[i] = msp.ViewEvent{Method: msp.NotifyTurnRetryScheduled, Params: params}
		}
	}
}
