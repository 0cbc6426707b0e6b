package turn_test

import (
	"testing"
	"time"

	"mspd/modelretry"
	"mspd/provider"
)

// TestProviderKindsAreClassified: every errorKind a provider may hint is
// one the retry layer knows, with the retryability the background notes
// give it (retry-background §4.1).
func TestProviderKindsAreClassified(t *testing.T) {
	retryable := map[string]bool{
		provider.KindRateLimited:           true,
		provider.KindQuotaExhausted:        false,
		provider.KindOverloaded:            true,
		provider.KindServerError:           true,
		provider.KindTimeout:               true,
		provider.KindConnectionError:       true,
		provider.KindStreamInterrupted:     true,
		provider.KindConflict:              true,
		provider.KindContextLengthExceeded: false,
		provider.KindContentFilter:         false,
		provider.KindInvalidRequest:        false,
		provider.KindAuth:                  false,
		provider.KindNotFound:              false,
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
