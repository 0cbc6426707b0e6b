package session

// A session's running usage and estimated cost, folded from its
// session/tokenUsage records: live as each is appended, and from the log
// when the session loads (after a restart, on another node), to the same
// totals.

import "mspd/schema/msp"

// spend is a session's running usage: the totals its latest
// session/tokenUsage carries, and whether any completion so far had no
// price (a session's first priced completion after unpriced ones makes
// the cost partial).
type spend struct {
	cumulative msp.CumulativeTokenUsage
	unpriced   bool
}

// add folds one completion's usage into the totals and sets its
// cumulative block: prompt and output tokens counted once, and the cost
// (p.CostUSD, priced by the turn runner at the answering model's price)
// summed, partial once some completion had no price.
func (sp spend) add(p *msp.SessionTokenUsageParams) spend {
	c := sp.cumulative
	c.PromptTokens += p.PromptTokens
	c.OutputTokens += p.Usage.OutputTokens
	c.TotalTokens = c.PromptTokens + c.OutputTokens
	c.Cost = addCost(c.Cost, p.CostUSD, sp.unpriced)
	p.Cumulative = c
	return spend{cumulative: c, unpriced: sp.unpriced || p.CostUSD == nil}
}

// recorded is the totals after a session/tokenUsage read back from the
// log: its cumulative block as add wrote it.
func (sp spend) recorded(p msp.SessionTokenUsageParams) spend {
	return spend{cumulative: p.Cumulative, unpriced: sp.unpriced || p.CostUSD == nil}
}

// addCost adds one completion's cost (nil: its model had no price) to a
// session's (nil: nothing priced yet). It never changes total, which an
// appended record may hold.
func addCost(total *msp.CumulativeCost, leg *float64, unpricedBefore bool) *msp.CumulativeCost {
	switch {
	case leg == nil && total == nil:
		return nil
	case leg == nil:
		return &msp.CumulativeCost{USD: total.USD, Partial: true}
	case total == nil:
		return &msp.CumulativeCost{USD: *leg, Partial: unpricedBefore}
	default:
		return &msp.CumulativeCost{USD: total.USD + *leg, Partial: total.Partial}
	}
}
