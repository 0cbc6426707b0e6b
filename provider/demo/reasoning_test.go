package demo_test

import (
	"strings"
	"testing"

	"mspd/provider"
	"mspd/schema/msp"
)

// TestReasoningWhenAsked: asked for an effort, the demo reasons about the
// prompt (part 0) before its answer, more at higher efforts, and counts
// those words as reasoning tokens within its output; without an effort,
// or with none, it answers at once.
func TestReasoningWhenAsked(t *testing.T) {
	thought := func(effort string) (string, provider.Usage) {
		t.Helper()
		var b strings.Builder
		q := req(prompt, 1)
		q.ReasoningEffort = effort
		q.OnReasoning = func(d provider.ReasoningDelta) {
			if d.Part != 0 {
				t.Errorf("part %d", d.Part)
			}
			b.WriteString(d.Text)
		}
		r := run(t.Context(), fast(7, 0), q)
		if r.err != nil || r.text() == "" {
			t.Fatalf("%q: %q, %v", effort, r.text(), r.err)
		}
		return b.String(), *r.resp.Usage
	}
	for _, effort := range []string{"", msp.EffortNone} {
		if text, u := thought(effort); text != "" || u.ReasoningTokens != 0 {
			t.Errorf("%q: reasoned %q (%d tokens)", effort, text, u.ReasoningTokens)
		}
	}
	low, lu := thought(msp.EffortLow)
	high, hu := thought(msp.EffortHigh)
	if !strings.Contains(low, "design") {
		t.Errorf("low: %q does not mention the prompt", low)
	}
	if !strings.HasPrefix(high, low) || len(high) <= len(low) {
		t.Errorf("high %q does not reason more than low %q", high, low)
	}
	if lu.ReasoningTokens != int64(len(strings.Fields(low))) || hu.ReasoningTokens != int64(len(strings.Fields(high))) {
		t.Errorf("reasoning tokens %d, %d", lu.ReasoningTokens, hu.ReasoningTokens)
	}
	_, plain := thought("")
	if hu.OutputTokens != plain.OutputTokens+hu.ReasoningTokens {
		t.Errorf("output tokens %d, want the answer's %d plus the reasoning's %d", hu.OutputTokens, plain.OutputTokens, hu.ReasoningTokens)
	}
}
