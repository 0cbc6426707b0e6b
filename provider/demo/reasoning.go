package demo

import (
	"context"
	"fmt"
	"strings"

	"mspd/provider"
	"mspd/schema/msp"
)

// reasoningSentences is how many sentences the demo reasons in at each
// effort: asked for an effort other than none, it thinks aloud briefly
// before it answers, so that `mspd serve` shows a reasoning item offline.
var reasoningSentences = map[string]int{
	msp.EffortMinimal: 1, msp.EffortLow: 1, msp.EffortMedium: 2,
	msp.EffortHigh: 3, msp.EffortXHigh: 3, msp.EffortMax: 3, msp.EffortUltra: 3,
}

// reason streams the demo's reasoning about the prompt's keywords at
// req's effort, word by word as its answer streams, and returns how many
// words (tokens) it took.
func (m *Model) reason(ctx context.Context, req provider.Request, keys []string) (int64, error) {
	n := reasoningSentences[req.ReasoningEffort]
	if n == 0 {
		return 0, nil
	}
	if len(keys) == 0 {
		keys = fallbackTopics()
	}
	sentences := []string{
		fmt.Sprintf("The question is about %s.", keys[0]),
		fmt.Sprintf("I should say what matters most about %s first, then the rest.", keys[len(keys)-1]),
		"A few short sentences will do; nothing here needs a tool.",
	}
	parts := provider.NewReasoningParts(req)
	words := provider.SplitWords(strings.Join(sentences[:n], " "))
	for _, w := range words {
		if err := m.wait(ctx, 1); err != nil {
			return 0, err
		}
		parts.Add("0", w)
	}
	return int64(len(words)), nil
}
