package store

import (
	"errors"
	"fmt"
	"time"
)

// Validate reports a malformed batch: records without a session id, an
// AtHead beside records or without a session id and row, a session row
// without an id or for another session, a command without an id, or an
// instant UnixNanos cannot store. These are caller bugs, so the error is
// not ErrConflict. Every store checks it before writing.
func (b Batch) Validate() error {
	if len(b.Records) > 0 && b.SessionID == "" {
		return fmt.Errorf("invalid batch: %d records without a session id", len(b.Records))
	}
	if b.Text != nil && b.SessionID == "" {
		return errors.New("invalid batch: search text without a session id")
	}
	if h := b.AtHead; h != nil && (len(b.Records) > 0 || b.SessionID == "" || b.Session == nil || *h < 0) {
		return fmt.Errorf("invalid batch: AtHead %d needs a session id and row, no records, and a head of 0 or more", *h)
	}
	if r := b.Session; r != nil {
		if r.ID == "" {
			return errors.New("invalid batch: session row without an id")
		}
		if b.SessionID != "" && r.ID != b.SessionID {
			return fmt.Errorf("invalid batch: session row %q in a batch for %q", r.ID, b.SessionID)
		}
		if _, err := UnixNanos(r.CreatedAt); err != nil {
			return fmt.Errorf("invalid batch: session %q CreatedAt: %w", r.ID, err)
		}
		if _, err := UnixNanos(r.UpdatedAt); err != nil {
			return fmt.Errorf("invalid batch: session %q UpdatedAt: %w", r.ID, err)
		}
	}
	for _, c := range b.Commands {
		if c.ID == "" {
			return errors.New("invalid batch: command without an id")
		}
		if c.CreatedAt.IsZero() {
			continue // stamped by the store
		}
		if _, err := UnixNanos(c.CreatedAt); err != nil {
			return fmt.Errorf("invalid batch: command %q CreatedAt: %w", c.ID, err)
		}
	}
	return nil
}

// UnixNanos converts t to the form stores keep instants in, refusing
// instants that int64 Unix nanoseconds cannot hold rather than storing a
// wrapped value.
func UnixNanos(t time.Time) (int64, error) {
	n := t.UnixNano()
	if !time.Unix(0, n).Equal(t) {
		return 0, fmt.Errorf("time %v is outside the storable range", t)
	}
	return n, nil
}

// ClampUnixNanos is UnixNanos for keys and cutoffs, where an instant out
// of range still sorts before or after everything stored.
func ClampUnixNanos(t time.Time) int64 {
	if n, err := UnixNanos(t); err == nil {
		return n
	}
	if t.Year() < 1970 {
		return -1 << 63
	}
	return 1<<63 - 1
}
