// Package turntest records what a turn emits, for tests of the turn runner
// and of providers driven through it.
package turntest

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"mspd/schema/msp"
	"mspd/turn"
)

// Event is one emitted event: a durable one (Params set) or a delta.
type Event struct {
	Method string
	Params msp.ViewParams
	// Checkpoint is set for retry notices (EmitRetry) and for begun
	// retried requests (BeginAttempt).
	Checkpoint *turn.Checkpoint
	// ItemID and Delta are set for item/delta, and Field for one into
	// another field than the item's text (turn.FieldSink).
	ItemID string
	Delta  string
	Field  string
}

// Sink is a turn.Sink that records every event in order. Set Fail to make
// Emit refuse events (a broken session log).
type Sink struct {
	mu     sync.Mutex
	events []Event
	// Fail, when non-nil, is returned by Emit for methods it reports true.
	Fail func(method string) error
}

// Emit implements turn.Sink.
func (s *Sink) Emit(_ context.Context, method string, params msp.ViewParams) error {
	if s.Fail != nil {
		if err := s.Fail(method); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, Event{Method: method, Params: params})
	return nil
}

// EmitRetry implements turn.Sink: the events are recorded in order, the
// notice (the last one) with its checkpoint.
func (s *Sink) EmitRetry(ctx context.Context, next turn.Checkpoint, events []turn.Event) error {
	for i, e := range events {
		if err := s.Emit(ctx, e.Method, e.Params); err != nil {
			return err
		}
		if i == len(events)-1 {
			s.mu.Lock()
			s.events[len(s.events)-1].Checkpoint = &next
			s.mu.Unlock()
		}
	}
	return nil
}

// Settle records what a session writes when a run returns: its held
// events (the last attempt's closing item and usage). The terminal itself
// stays in the Outcome.
func (s *Sink) Settle(o turn.Outcome) {
	for _, e := range o.Held {
		s.mu.Lock()
		s.events = append(s.events, Event{Method: e.Method, Params: e.Params})
		s.mu.Unlock()
	}
}

// BeginAttempt is the Method of the Event that BeginAttempt records (and
// passes to Fail); Methods leaves it out.
const BeginAttempt = "(begin attempt)"

// BeginAttempt implements turn.Sink: cp is recorded as an Event of
// method BeginAttempt, in order with the rest.
func (s *Sink) BeginAttempt(_ context.Context, cp turn.Checkpoint) error {
	if s.Fail != nil {
		if err := s.Fail(BeginAttempt); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, Event{Method: BeginAttempt, Checkpoint: &cp})
	return nil
}

// Delta implements turn.Sink.
func (s *Sink) Delta(itemID, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, Event{Method: msp.NotifyItemDelta, ItemID: itemID, Delta: text})
}

// DeltaField implements turn.FieldSink.
func (s *Sink) DeltaField(itemID, field, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, Event{Method: msp.NotifyItemDelta, ItemID: itemID, Delta: text, Field: field})
}

var _ turn.FieldSink = (*Sink)(nil)

// Events returns a copy of the events so far.
func (s *Sink) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...)
}

// Methods returns the methods emitted so far, with runs of item/delta
// collapsed to one entry and begun requests left out, e.g.
// "turn/modelRetryScheduled, item/started, item/delta, item/completed,
// session/tokenUsage".
func (s *Sink) Methods() string {
	var out []string
	for _, e := range s.Events() {
		if e.Method == BeginAttempt || e.Method == msp.NotifyItemDelta && len(out) > 0 && out[len(out)-1] == msp.NotifyItemDelta {
			continue
		}
		out = append(out, e.Method)
	}
	return strings.Join(out, ", ")
}

// Of returns the params of every durable event of one method, in order.
func Of[T msp.ViewParams](s *Sink, method string) []T {
	var out []T
	for _, e := range s.Events() {
		if e.Method == method && e.Params != nil {
			if p, ok := e.Params.(T); ok {
				out = append(out, p)
			}
		}
	}
	return out
}

// Text concatenates the deltas streamed into one item.
func (s *Sink) Text(itemID string) string {
	var b strings.Builder
	for _, e := range s.Events() {
		if e.Method == msp.NotifyItemDelta && e.ItemID == itemID {
			b.WriteString(e.Delta)
		}
	}
	return b.String()
}

// JSON renders an event's params, for failure messages.
func JSON(p msp.ViewParams) string {
	b, _ := json.Marshal(p)
	return string(b)
}

// ModelRetry is what a test compares of a turn/modelRetryScheduled
// notice.
type ModelRetry struct {
	Attempt, NextAttempt, MaxAttempts int
	RetryDelayMs                      int64
	System, ErrorKind                 string
	HTTPStatus                        int
}

// NewModelRetry is the notice that attempt failed with kind (and status)
// on system and is retried, as attempt+1 of maxAttempts, after delayMs.
func NewModelRetry(attempt, maxAttempts int, delayMs int64, system, kind string, status int) ModelRetry {
	return ModelRetry{attempt, attempt + 1, maxAttempts, delayMs, system, kind, status}
}

// ModelRetries lists the turn/modelRetryScheduled notices emitted so far.
func ModelRetries(s *Sink) []ModelRetry {
	var out []ModelRetry
	for _, p := range Of[*msp.TurnModelRetryScheduledParams](s, msp.NotifyTurnModelRetryScheduled) {
		out = append(out, ModelRetry{p.Attempt, p.NextAttempt, p.MaxAttempts, p.RetryDelayMs, p.System, p.ErrorKind, p.HTTPStatus})
	}
	return out
}

// TurnRetry is what a test compares of a turn/retryScheduled notice.
type TurnRetry struct {
	Attempt, NextAttempt, MaxAttempts int
	RetryDelayMs                      int64
	Reason                            string
}

// NewTurnRetry is the notice that the turn layer re-runs attempt, as
// attempt+1 of maxAttempts, after delayMs, for reason.
func NewTurnRetry(attempt, maxAttempts int, delayMs int64, reason string) TurnRetry {
	return TurnRetry{attempt, attempt + 1, maxAttempts, delayMs, reason}
}

// TurnRetries lists the turn/retryScheduled notices emitted so far.
func TurnRetries(s *Sink) []TurnRetry {
	var out []TurnRetry
	for _, p := range Of[*msp.TurnRetryScheduledParams](s, msp.NotifyTurnRetryScheduled) {
		out = append(out, TurnRetry{p.Attempt, p.NextAttempt, p.MaxAttempts, p.RetryDelayMs, p.Reason})
	}
	return out
}
