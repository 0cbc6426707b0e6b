package session

import (
	"encoding/json"
	"testing"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/turn"
)

// pricedAt makes a test runner price every model at p (nil: no price).
func pricedAt(p *provider.Price) func(*turn.Config) {
	return func(c *turn.Config) {
		c.Models = func(string) provider.ModelInfo {
			return provider.ModelInfo{Capabilities: provider.Capabilities{Tools: true}, Price: p}
		}
	}
}

// costs are the cumulative costs of r's session/tokenUsage events, and
// each one's costUsd.
func costs(t *testing.T, r *recSub) (cumulative []*msp.CumulativeCost, legs []*float64) {
	t.Helper()
	for _, u := range of[msp.SessionTokenUsageParams](t, r, msp.NotifySessionTokenUsage) {
		cumulative, legs = append(cumulative, u.Cumulative.Cost), append(legs, u.CostUSD)
	}
	return cumulative, legs
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestCostAcrossRestartsAndPrices: a session's cost is absent while no
// completion was priced; a priced completion after an unpriced one — an
// unpriced one from before a restart, known from the log — makes it
// partial for good; an unpriced one after priced ones leaves the sum and
// marks it partial. A session priced throughout is not partial. Read back
// from the log, every event carries what it carried live.
func TestCostAcrossRestartsAndPrices(t *testing.T) {
	st := openStore(t)
	model := newHistModel() // every response: 10 prompt tokens, 5 output
	price := &provider.Price{In: 2, Out: 4, CachedIn: 2}
	leg := (10*2 + 5*4) / 1e6

	m1 := newManager(t, st, model, mgrOpts{runner: pricedAt(nil)})
	sub := newRecSub()
	sid := startSession(t, m1, sub)
	runTurn(t, m1, sub, textTurn(sid, "unpriced"))
	m1.Close()

	m2 := newManager(t, st, model, mgrOpts{runner: pricedAt(price)})
	sub2 := newRecSub()
	subscribe(t, m2, sub2, sid)
	runTurn(t, m2, sub2, textTurn(sid, "priced"))
	runTurn(t, m2, sub2, textTurn(sid, "priced again"))
	other := newRecSub()
	osid := startSession(t, m2, other)
	runTurn(t, m2, other, textTurn(osid, "one"))
	runTurn(t, m2, other, textTurn(osid, "two"))
	m2.Close()

	m3 := newManager(t, st, model, mgrOpts{runner: pricedAt(nil)})
	sub3 := newRecSub()
	subscribe(t, m3, sub3, sid)
	runTurn(t, m3, sub3, textTurn(sid, "unpriced again"))

	cum, legs := costs(t, sub3)
	want := []*msp.CumulativeCost{nil, {USD: leg, Partial: true}, {USD: 2 * leg, Partial: true}, {USD: 2 * leg, Partial: true}}
	if js(cum) != js(want) {
		t.Errorf("cumulative costs %s, want %s", js(cum), js(want))
	}
	if wantLegs := []*float64{nil, &leg, &leg, nil}; js(legs) != js(wantLegs) {
		t.Errorf("costUsd %s, want %s", js(legs), js(wantLegs))
	}
	live, _ := costs(t, sub2)
	if js(live) != js(want[:3]) {
		t.Errorf("the live events' costs %s differ from the log's %s", js(live), js(want[:3]))
	}
	if cum, _ := costs(t, other); js(cum) != js([]*msp.CumulativeCost{{USD: leg}, {USD: 2 * leg}}) {
		t.Errorf("a session priced throughout: %s", js(cum))
	}
}

// TestAddCost: each case of folding one completion's cost.
func TestAddCost(t *testing.T) {
	one, two := 1.5, 2.0
	for _, tc := range []struct {
		name           string
		total          *msp.CumulativeCost
		leg            *float64
		unpricedBefore bool
		want           *msp.CumulativeCost
	}{
		{"nothing priced", nil, nil, true, nil},
		{"first priced", nil, &one, false, &msp.CumulativeCost{USD: 1.5}},
		{"first priced after unpriced", nil, &one, true, &msp.CumulativeCost{USD: 1.5, Partial: true}},
		{"priced", &msp.CumulativeCost{USD: 1.5}, &two, false, &msp.CumulativeCost{USD: 3.5}},
		{"partial stays partial", &msp.CumulativeCost{USD: 1.5, Partial: true}, &two, true, &msp.CumulativeCost{USD: 3.5, Partial: true}},
		{"unpriced after priced", &msp.CumulativeCost{USD: 1.5}, nil, false, &msp.CumulativeCost{USD: 1.5, Partial: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before msp.CumulativeCost
			if tc.total != nil {
				before = *tc.total
			}
			got := addCost(tc.total, tc.leg, tc.unpricedBefore)
			if js(got) != js(tc.want) {
				t.Errorf("addCost = %s, want %s", js(got), js(tc.want))
			}
			if tc.total != nil && *tc.total != before {
				t.Errorf("addCost changed the total it was given: %s", js(tc.total))
			}
		})
	}
}
