package store

import (
	"errors"
	"testing"
	"time"
)

// A failure counts until a write lands, or until HealthMemory passes with
// nothing written.
func TestWriteHealth(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	h := WriteHealth{now: func() time.Time { return at }}
	if err := h.Err(); err != nil {
		t.Fatalf("new: %v", err)
	}
	full := errors.New("disk full")
	h.Failed(full)
	if err := h.Err(); err != full {
		t.Fatalf("after a failure: %v, want it", err)
	}
	h.Wrote()
	if err := h.Err(); err != nil {
		t.Fatalf("after a write landed: %v", err)
	}
	h.Failed(full)
	at = at.Add(HealthMemory - time.Nanosecond)
	if err := h.Err(); err != full {
		t.Fatalf("just under HealthMemory later: %v, want the failure", err)
	}
	at = at.Add(time.Nanosecond)
	if err := h.Err(); err != nil {
		t.Fatalf("HealthMemory later, nothing written: %v", err)
	}
}
