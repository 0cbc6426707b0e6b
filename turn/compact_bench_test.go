package turn_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"mspd/modelretry"
	"mspd/provider"
	"mspd/schema/msp"
	"mspd/turn"
	"mspd/turn/turntest"
)

// delayedModel answers every request after a fixed delay, as a provider
// whose time to an answer does not depend on the prompt's size.
type delayedModel struct{ delay time.Duration }

func (delayedModel) System() string { return "delayed" }

func (m delayedModel) Stream(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	select {
	case <-time.After(m.delay):
	case <-ctx.Done():
		return provider.Response{}, ctx.Err()
	}
	onText("An answer of a few words.")
	return provider.Response{FinishReason: provider.FinishStop, Usage: &provider.Usage{InputTokens: 100, OutputTokens: 7}}, nil
}

// BenchmarkCompaction measures what compaction adds to a turn: the same
// turn after 50 earlier turns (100 messages of 400 bytes), on a model of
// a 16k window answering each request after a fixed delay, run once
// below the warning level (one request) and once at it (the summarising
// request, then the turn's). With no delay it is mspd's own cost:
// quoting the conversation, the compaction item, the history swapped.
// go test ./turn -run '^$' -bench Compaction
func BenchmarkCompaction(b *testing.B) {
	var history []provider.Message
	for i := range 50 {
		history = append(history,
			provider.Message{Role: provider.RoleUser, Text: fmt.Sprintf("question %d: %s", i, strings.Repeat("words ", 64))},
			provider.Message{Role: provider.RoleAssistant, Text: fmt.Sprintf("answer %d: %s", i, strings.Repeat("reply ", 64))})
	}
	history = append(history, provider.Message{Role: provider.RoleUser, Text: "and now?"})
	const window = 16000
	for _, delay := range []time.Duration{0, 20 * time.Millisecond} {
		for _, c := range []struct {
			name string
			used int64
		}{{"below-warning", 2000}, {"compacting", 14000}} {
			b.Run(fmt.Sprintf("delay=%s/%s", delay, c.name), func(b *testing.B) {
				r := turn.NewRunner(turn.Config{Model: delayedModel{delay}, Engine: &modelretry.Engine{}, Policy: modelretry.DefaultPolicy(),
					Models: func(string) provider.ModelInfo {
						return provider.ModelInfo{Capabilities: provider.Capabilities{ContextWindow: window}}
					}})
				w := int64(window)
				sp := turn.Spec{SessionID: "s", TurnID: "t", History: history, Context: turn.Context{
					Usage: &msp.ContextUsage{UsedTokens: c.used, WindowTokens: &w, Pressure: turn.Pressure(c.used, window)},
					Cut:   &turn.Cut{At: len(history) - 1, Through: "t49"}}}
				b.ResetTimer()
				for b.Loop() {
					o := r.Run(context.Background(), sp, &turntest.Sink{})
					if o.Completed.Terminal != msp.TerminalCompleted {
						b.Fatalf("turn %+v", o.Completed)
					}
				}
			})
		}
	}
}
