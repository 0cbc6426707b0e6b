package daemon

import (
	"cmp"
	"errors"
	"fmt"

	"mspd/modelretry"
	"mspd/provider/catalog"
	"mspd/schema/msp"
	"mspd/turn"
)

// chain builds the router's runners from each provider's runner
// configuration, with its fallback chain. An entry of a chain is driven
// by its provider's runner without a chain of its own, so that a chain is
// exactly the list its provider names (two providers may name each
// other); both runners of a provider share its model, retry budget and
// breaker.
func chain(r *router, cat *catalog.Catalog, configs map[string]turn.Config) {
	plain := make(map[string]*turn.Runner, len(configs))
	for id, c := range configs {
		plain[id] = turn.NewRunner(c)
	}
	for _, p := range cat.Providers() {
		if len(p.Fallback) == 0 {
			r.byID[p.ID] = plain[p.ID]
			continue
		}
		c := configs[p.ID]
		for _, f := range p.Fallback {
			c.Fallback = append(c.Fallback, turn.Fallback{ProviderID: f.ProviderID, Model: f.Model, Runner: plain[f.ProviderID]})
		}
		r.byID[p.ID] = turn.NewRunner(c)
	}
}

// newBreaker builds a provider's circuit breaker (nil: off), its zero
// figures mspd's defaults.
func newBreaker(cfg Config) (*modelretry.Breaker, error) {
	bc := cfg.Breaker
	if bc.Failures < 0 {
		return nil, nil
	}
	def := modelretry.DefaultBreakerConfig()
	bc.Failures = cmp.Or(bc.Failures, def.Failures)
	bc.Window = cmp.Or(bc.Window, def.Window)
	bc.Cooldown = cmp.Or(bc.Cooldown, def.Cooldown)
	b, err := modelretry.NewBreaker(bc, cfg.Clock)
	if err != nil {
		return nil, errBreaker(err)
	}
	return b, nil
}

// errBreaker names the flag behind an invalid breaker figure.
func errBreaker(err error) error {
	var pe *modelretry.PolicyError
	if errors.As(err, &pe) {
		return fmt.Errorf("circuit breaker: --breaker-%s: %s", pe.Field, pe.Reason)
	}
	return fmt.Errorf("circuit breaker: %w", err)
}

// chainOf adds to a model/list row its provider's breaker state and
// fallback chain.
func (m models) chainOf(e *msp.ModelEntry) {
	if b := m.breakers[e.ProviderID]; b != nil {
		e.BreakerState = b.State().String()
	}
	if p := m.Get(e.ProviderID); p != nil {
		for _, f := range p.Fallback {
			e.Fallback = append(e.Fallback, msp.ModelRef{ProviderID: f.ProviderID, ModelID: f.Model})
		}
	}
}
