package server

import (
	"encoding/json"
	"fmt"

	"mspd/schema/msp"
	"mspd/session"
)

// Clients built on the upstream SDK know turn/retryScheduled but skip
// mspd's turn/modelRetryScheduled, so they show nothing while a provider
// backs off. With Config.LegacyRetryNotices, a connection that did not ask
// for the capability modelRetryScheduled gets each model-layer notice as a
// turn/retryScheduled: the same record (attempt fields, cursor, source
// range) rendered with a reason in words. Nothing is recorded twice.

// CapabilityModelRetryScheduled is the capability a client requests to get
// turn/modelRetryScheduled as is.
const CapabilityModelRetryScheduled = "modelRetryScheduled"

// legacyNotice renders a model-layer retry notice as turn/retryScheduled;
// any other notification passes unchanged.
func legacyNotice(n session.Notification) session.Notification {
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
	params, ok := legacyParams(f.Params)
	if !ok {
		return n
	}
	n.Method = msp.NotifyTurnRetryScheduled
	n.Frame = msp.EncodeNotification(n.Method, params, f.EmittedAtMs)
	return n
}

// legacyParams turns turn/modelRetryScheduled params into
// turn/retryScheduled params.
func legacyParams(raw json.RawMessage) (json.RawMessage, bool) {
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
	out, err := msp.Marshal(msp.TurnRetryScheduledParams{ViewHeader: p.ViewHeader, TurnID: p.TurnID, Attempt: p.Attempt,
		NextAttempt: p.NextAttempt, MaxAttempts: p.MaxAttempts, RetryDelayMs: p.RetryDelayMs, Reason: reason})
	return out, err == nil
}

// legacyPage renders the model-layer notices of a view/page result the
// same way.
func legacyPage(res *msp.ViewPageResult) {
	for i, e := range res.Events {
		if e.Method != msp.NotifyTurnModelRetryScheduled {
			continue
		}
		if params, ok := legacyParams(e.Params); ok {
			res.Events[i] = msp.ViewEvent{Method: msp.NotifyTurnRetryScheduled, Params: params}
		}
	}
}
