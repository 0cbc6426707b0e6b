package store

import (
	"sync/atomic"
	"time"
)

// HealthMemory is how long a failed write keeps a store unhealthy when
// nothing is written after it. A node out of rotation may get no writes
// to tell it that its store writes again; past this it takes clients,
// and their first write tells again.
const HealthMemory = 30 * time.Second

// WriteHealth remembers why a store's writes fail, for its Healthy: the
// last failure counts until a write lands or HealthMemory passes. Its
// zero value is healthy; it is safe for concurrent use.
type WriteHealth struct {
	last atomic.Pointer[writeFailure]
	now  func() time.Time // nil: time.Now
}

type writeFailure struct {
	reason error
	at     time.Time
}

// Failed records reason as why writes fail. It is shown on /readyz,
// which anyone may ask: it must name no session or command.
func (h *WriteHealth) Failed(reason error) {
	h.last.Store(&writeFailure{reason: reason, at: h.clock()})
}

// Wrote records that a write landed: the store writes.
func (h *WriteHealth) Wrote() {
	if h.last.Load() != nil {
		h.last.Store(nil)
	}
}

// Err returns why writes fail, when nothing has landed since and the
// failure is recent; else nil.
func (h *WriteHealth) Err() error {
	if f := h.last.Load(); f != nil && h.clock().Sub(f.at) < HealthMemory {
		return f.reason
	}
	return nil
}

func (h *WriteHealth) clock() time.Time {
	if h.now != nil {
		return h.now()
	}
	return time.Now()
}
