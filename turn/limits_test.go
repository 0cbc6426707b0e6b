package turn_test

import (
	"context"
	"testing"
	"time"

	"mspd/modelretry"
	"mspd/provider"
	"mspd/turn"
	"mspd/turn/turntest"
)

// TestProviderKindsAreClassified: every errorKind a provider hints is
// classified as itself, with the retryability the background notes give
// it (retry-background §4.1).
func TestProviderKindsAreClassified(t *testing.T) {
	retryable := map[string]bool{
		modelretry.KindRateLimited:           true,
		modelretry.KindQuotaExhausted:        false,
		modelretry.KindOverloaded:            true,
		modelretry.KindServerError:           true,
		modelretry.KindTimeout:               true,
		modelretry.KindConnectionError:       true,
		modelretry.KindStreamInterrupted:     true,
		modelretry.KindConflict:              true,
		modelretry.KindContextLengthExceeded: false,
		modelretry.KindContentFilter:         false,
		modelretry.KindInvalidRequest:        false,
		modelretry.KindAuth:                  false,
		modelretry.KindNotFound:              false,
	}
	for kind, want := range retryable {
		f := modelretry.Classify(modelretry.Signal{Kind: kind}, time.Now())
		if f.Kind != kind || f.Retryable != want {
			t.Errorf("%s classified as %s retryable=%v, want retryable=%v", kind, f.Kind, f.Retryable, want)
		}
		if modelretry.Retryable(kind) != want {
			t.Errorf("modelretry.Retryable(%s) = %v", kind, !want)
		}
	}
}

// maxTokensModel records the MaxTokens of each request and answers "ok".
type maxTokensModel struct{ got []int }

func (m *maxTokensModel) System() string { return "test" }

func (m *maxTokensModel) Stream(_ context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	m.got = append(m.got, req.MaxTokens)
	onText("ok")
	return provider.Response{FinishReason: provider.FinishStop}, nil
}

// TestRequestsNeverExceedTheModelLimit: a turn asking for more output than
// the model gives is clamped to the model's limit, not refused by the
// provider.
func TestRequestsNeverExceedTheModelLimit(t *testing.T) {
	m := &maxTokensModel{}
	r := turn.NewRunner(turn.Config{Model: m, Engine: &modelretry.Engine{}, Policy: modelretry.DefaultPolicy(), ModelMaxTokens: 16384})
	out := r.Run(context.Background(), turn.Spec{TurnID: "t", MaxTokens: 100000,
		History: []provider.Message{{Role: provider.RoleUser, Text: "hi"}}}, &turntest.Sink{})
	if out.Completed.Terminal != "completed" || len(m.got) != 1 || m.got[0] != 16384 {
		t.Fatalf("terminal %s, requests asked for %v tokens; want one request for 16384", out.Completed.Terminal, m.got)
	}
}
