package turn

import (
	"cmp"
	"fmt"

	"mspd/modelretry"
	"mspd/schema/msp"
)

// A runner's provider may name a fallback chain (Config.Fallback): other
// providers that answer a step it cannot. The policy — which failures
// move on, what a failure says of a provider's health, how a step's
// requests are shared along the chain — is modelretry's (FailsOver,
// HealthOf, Chain); which provider answers next is decided here.
//
// A step starts on the entry the turn's previous step ended on (the
// session's own provider for the first), so a turn that fell back stays
// on the provider that answered it; the next turn starts from the
// session's provider again. Before each request the entry's breaker is
// asked: one that refuses is skipped for the next entry, announced by
// turn/providerSkipped, unless no entry is left after it (the last
// entry is always asked: an open breaker sheds load onto a fallback, it
// never refuses a user outright). A step whose entry fails in a way
// FailsOver accepts goes on with the next entry whose breaker is not
// open, after a turn/modelRetryScheduled naming the failure and the
// provider and model answering next. Both are durable with the checkpoint
// before the next request, which carries the entry (Checkpoint.Route), so
// a turn resumed by another process goes on where it was.

// Fallback is one entry of a runner's fallback chain: another configured
// provider, by the runner that drives it, and the model it answers with.
type Fallback struct {
	// ProviderID is the configured provider's id.
	ProviderID string
	// Model is the model it answers with.
	Model string
	// Runner drives the provider: its Model, Engine (so its retry
	// budget), Breaker, ModelMaxTokens and SameFamily serve the steps
	// this entry answers. Its own Fallback is not followed: a chain is
	// the list its provider names, not its entries' chains too.
	Runner *Runner
}

// Route is where a step stands on its runner's fallback chain, in a
// checkpoint. A checkpoint on the session's own provider has none.
type Route struct {
	// Entry is the chain's entry answering: 1 for the first fallback.
	Entry int `json:"entry"`
	// ProviderID and ModelID name it, so that a process configured
	// otherwise finds it by name, or starts the step's chain over.
	ProviderID string `json:"providerId"`
	ModelID    string `json:"modelId,omitempty"`
	// Base counts the turn's requests before the step came to this entry.
	Base int `json:"base"`
}

// hop is the chain entry a step is on.
type hop struct {
	entry      int // 0: the session's own provider
	providerID string
	model      string
	cfg        *Config // the entry's runner's
	// base counts the turn's requests before the step came to this entry.
	base int
	// adm is the entry's breaker's answer for the request about to be
	// sent, recorded with its outcome.
	adm modelretry.Admission
}

// entries counts the chain's entries, the session's own provider
// included.
func (t *run) entries() int { return 1 + len(t.r.cfg.Fallback) }

// entryAt is entry i of the chain, its base unset.
func (t *run) entryAt(i int) hop {
	if i == 0 {
		return hop{providerID: t.spec.ProviderID, model: t.spec.Model, cfg: &t.r.cfg}
	}
	f := t.r.cfg.Fallback[i-1]
	return hop{entry: i, providerID: f.ProviderID, model: f.Model, cfg: &f.Runner.cfg}
}

// mark is the hop as a checkpoint holds it.
func (h hop) mark() *Route {
	if h.entry == 0 {
		return nil // a step on the session's own provider: base is its StepBase
	}
	return &Route{Entry: h.entry, ProviderID: h.providerID, ModelID: h.model, Base: h.base}
}

// system is the entry's provider's gen_ai.provider.name.
func (h hop) system() string { return h.cfg.Model.System() }

// resumeRoute puts the step back on the entry a checkpoint names: by its
// place when the provider there is the same, else by the provider's id;
// a provider no longer in the chain starts the step's chain over.
func (t *run) resumeRoute(r *Route) {
	t.hop = t.entryAt(0)
	t.hop.base = t.stepBase
	if r == nil {
		return
	}
	at := -1
	if r.Entry > 0 && r.Entry < t.entries() && t.entryAt(r.Entry).providerID == r.ProviderID {
		at = r.Entry
	}
	for i := 1; at < 0 && i < t.entries(); i++ {
		if t.entryAt(i).providerID == r.ProviderID {
			at = i
		}
	}
	if at > 0 {
		t.moveTo(at, max(r.Base, t.stepBase))
	}
}

// moveTo puts the step on entry i, after base requests of the turn.
func (t *run) moveTo(i, base int) {
	t.hop = t.entryAt(i)
	t.hop.base = base
	t.obs.route(t.hop.system(), t.hop.model)
}

// used counts the step's requests so far.
func (t *run) used() int { return t.attempts - t.stepBase }

// allowance is how many requests the step's entry may make.
func (t *run) allowance() int {
	return max(t.chain.Allowance(t.hop.entry, t.hop.base-t.stepBase), 1)
}

// startEntry begins the entry's own modelretry call: its engine, its
// allowance of the step's requests.
func (t *run) startEntry(policy modelretry.Policy) (*modelretry.Call, error) {
	n := t.allowance()
	return t.hop.cfg.Engine.Start(policy.WithMaxAttempts(n, n))
}

// hasNext tells whether an entry after the step's may still be asked.
func (t *run) hasNext() bool {
	return t.hop.entry+1 < t.entries() && t.used() < t.chain.Total
}

// widen turns an entry's decision into the step's: its attempt numbers
// counted from the step's first request, its bound the step's Total.
// Without a chain it is the decision as made.
func (t *run) widen(d modelretry.Decision) modelretry.Decision {
	off := t.hop.base - t.stepBase
	d.Attempt += off
	if d.NextAttempt > 0 {
		d.NextAttempt += off
	}
	d.MaxAttempts = t.chain.Total
	return d
}

// report tells the entry's breaker how the request went.
func (t *run) report(h modelretry.Health) {
	t.hop.cfg.Breaker.Record(t.hop.adm, h)
	t.hop.adm = modelretry.Admitted
}

// admit asks the entry's breaker for the request about to be sent. While
// it refuses and another entry may be asked, the entry is skipped for the
// next: each skip is announced (turn/providerSkipped), durable with the
// checkpoint of the new entry before anything is sent to it. It returns
// the call to go on with: call itself, or the new entry's.
func (t *run) admit(call *modelretry.Call, policy modelretry.Policy, maxTokens *int) (*modelretry.Call, error) {
	var skips []Event
	for {
		adm := t.hop.cfg.Breaker.Allow()
		if adm != modelretry.Refused || !t.hasNext() {
			if adm == modelretry.Refused {
				adm = modelretry.Admitted // the last entry is asked anyway
			}
			t.hop.adm = adm
			break
		}
		from := t.hop
		t.moveTo(from.entry+1, t.attempts)
		skips = append(skips, t.skipNotice(from, modelretry.BreakerOpen))
		t.r.cfg.Metrics.Fallback(from.providerID, t.hop.providerID, msp.FallbackCircuitOpen)
	}
	if len(skips) == 0 {
		return call, nil
	}
	*maxTokens = min(*maxTokens, t.hop.cfg.ModelMaxTokens)
	if err := t.reroute(skips, *maxTokens); err != nil {
		return nil, err
	}
	return t.startEntry(policy)
}

// skipNotice announces that entry from is skipped, its breaker in state,
// for the step's entry now.
func (t *run) skipNotice(from hop, state modelretry.BreakerState) Event {
	return Event{Method: msp.NotifyTurnProviderSkipped, Params: &msp.TurnProviderSkippedParams{
		TurnID: t.spec.TurnID, ProviderID: from.providerID, ModelID: from.model, System: from.system(),
		Breaker: state.String(), NextProviderID: t.hop.providerID, NextModelID: t.hop.model}}
}

// failOver moves a step whose entry cannot answer (d, undecided or not:
// a granted retry is given up when the entry's breaker opened) to the
// next entry whose breaker is not open — the last one if every other
// is — after the notice for the failed attempt naming it, and the
// skipped entries' notices: one durable write with the checkpoint,
// before the next request. why is the fallback reason.
func (t *run) failOver(d modelretry.Decision, why string, policy modelretry.Policy, maxTokens *int) (*modelretry.Call, error) {
	wide := t.widen(d)
	from := t.hop
	next := from.entry + 1
	for next+1 < t.entries() && t.entryAt(next).cfg.Breaker.State() == modelretry.BreakerOpen {
		next++
	}
	t.moveTo(next, t.attempts)
	*maxTokens = min(*maxTokens, t.hop.cfg.ModelMaxTokens)
	f := d.Failure
	events := []Event{{Method: msp.NotifyTurnModelRetryScheduled, Params: &msp.TurnModelRetryScheduledParams{
		TurnID: t.spec.TurnID, Attempt: wide.Attempt, NextAttempt: wide.Attempt + 1, MaxAttempts: wide.MaxAttempts,
		System: from.system(), ErrorKind: cmp.Or(f.OriginalKind, f.Kind), HTTPStatus: f.HTTPStatus,
		Fallback: true, ProviderID: from.providerID, NextProviderID: t.hop.providerID, NextModelID: t.hop.model, FallbackReason: why}}}
	for i := from.entry + 1; i < next; i++ {
		skipped := t.entryAt(i)
		events = append(events, t.skipNotice(skipped, modelretry.BreakerOpen))
		t.r.cfg.Metrics.Fallback(skipped.providerID, t.hop.providerID, msp.FallbackCircuitOpen)
	}
	t.obs.fellBack(wide, from.system(), t.hop.providerID, why)
	t.r.cfg.Metrics.Fallback(from.providerID, t.hop.providerID, why)
	if err := t.reroute(events, *maxTokens); err != nil {
		return nil, err
	}
	return t.startEntry(policy)
}

// reroute writes the notices of a change of entry, with the attempt's
// held events before them and the checkpoint of the new entry: no
// request of it begun, due now.
func (t *run) reroute(notices []Event, maxTokens int) error {
	cp := t.checkpointAt(t.attempts, t.r.clock.Now(), maxTokens)
	cp.Begun = new(false)
	if err := t.sink.EmitRetry(t.emitCtx, cp, append(t.takeHeld(), notices...)); err != nil {
		return err
	}
	t.checkpoint = cp
	for _, n := range notices {
		t.obs.noticeWritten(n)
	}
	return nil
}

// chainWords adds to a failed turn's message how far its chain went.
func (t *run) chainWords(msg string) string {
	if t.hop.entry == 0 {
		return msg
	}
	return fmt.Sprintf("%s (after falling back from %s)", msg, t.entryAt(0).system())
}
