package session

// Reasoning: a session's reasoning-effort default (session/setReasoningEffort),
// the effort each turn runs with, and the reasoning a running turn must send
// back to its model (turn.MethodReasoning records).

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/store"
	"mspd/turn"
)

// SetReasoningEffort serves session/setReasoningEffort: the session's
// reasoning-effort default, for the turns launched from now on (a running
// turn keeps the effort it launched with; a turn's own reasoningEffort
// overrides the default). Durable with its session/reasoningEffortChanged,
// and the ack in the ledger for replays: the command takes effect once.
func (m *Manager) SetReasoningEffort(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	var p msp.SessionSetReasoningEffortParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, msp.ErrInvalidParams("", "session/setReasoningEffort params: %v", err)
	}
	if err := msp.CheckReasoningEffort(p.ReasoningEffort, "reasoningEffort"); err != nil {
		return nil, err
	}
	if res, ok, err := m.forward(ctx, p.SessionID, msp.MethodSessionSetReasoningEffort, raw); ok {
		return res, err
	}
	s, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return nil, err
	}
	defer release()
	resp, _, err := m.ledger.run(ctx, p.CommandID, msp.MethodSessionSetReasoningEffort, raw, func(a *admission) (json.RawMessage, error) {
		res, err := msp.Marshal(msp.SessionSetReasoningEffortResult{CommandID: p.CommandID, Status: msp.StatusAccepted})
		if err != nil {
			return nil, msp.ErrInternal("encoding ack: %v", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		st := s.st.clone()
		st.ReasoningEffort = &msp.ReasoningEffortState{ReasoningEffort: p.ReasoningEffort, Source: msp.ReasoningSourceUser}
		ev := event{msp.NotifySessionReasoningEffortChanged, &msp.SessionReasoningEffortChangedParams{
			ReasoningEffort: p.ReasoningEffort, Source: msp.ReasoningSourceUser}}
		if err := s.appendLocked(ctx, []event{ev}, &st, a.entry(res, false)); err != nil {
			return nil, msp.ErrInternal("recording the reasoning effort: %v", err)
		}
		s.listChangedLocked()
		return res, nil
	})
	return resp, err
}

// turnEffort is the effort a turn launched now runs with: its own, else
// the session's default, else "" (the provider's own default).
func (st *state) turnEffort(own string) string {
	if own == "" && st.ReasoningEffort != nil {
		return st.ReasoningEffort.ReasoningEffort
	}
	return own
}

// withoutReasoning drops the reasoning of msgs, copying only when there is
// any: a finished turn's reasoning is never sent to a model again (a
// provider needs only the running turn's, to go on with its tool steps),
// so the session does not keep it.
func withoutReasoning(msgs []provider.Message) []provider.Message {
	var out []provider.Message
	for i, m := range msgs {
		if len(m.Reasoning) == 0 {
			continue
		}
		if out == nil {
			out = append([]provider.Message(nil), msgs...)
		}
		out[i].Reasoning = nil
	}
	if out == nil {
		return msgs
	}
	return out
}

// streamText is what an open item holds of the fields item/delta appends
// to: its text, and a reasoning item's summary parts.
type streamText struct {
	text    strings.Builder
	parts   []strings.Builder
	hasText bool // the item has a text member, even an empty one
	n       int  // bytes in all
}

// seed starts from it as it stands: its text and summary.
func (st *streamText) seed(it msp.Item) {
	st.hasText = st.hasText || it.Text != nil
	st.add("", deref(it.Text))
	for i, p := range it.Summary {
		st.add(msp.SummaryField(i), p)
	}
}

// add appends delta to field; a field mspd never streams is ignored.
func (st *streamText) add(field, delta string) {
	part, err := msp.ParseField(field)
	switch {
	case err != nil:
		return
	case part < 0:
		st.text.WriteString(delta)
	default:
		for len(st.parts) <= part {
			st.parts = append(st.parts, strings.Builder{})
		}
		st.parts[part].WriteString(delta)
	}
	st.n += len(delta)
}

// Len is how many bytes it holds.
func (st *streamText) Len() int { return st.n }

// fill sets it's fields to what st holds.
func (st *streamText) fill(it *msp.Item) {
	if st.hasText || st.text.Len() > 0 {
		t := st.text.String()
		it.Text = &t
	}
	if len(st.parts) > 0 {
		it.Summary = make([]string, len(st.parts))
		for i := range st.parts {
			it.Summary[i] = st.parts[i].String()
		}
	}
}

// appendTo appends what st holds to it's fields, as deltas streamed after
// the record it was read from.
func (st *streamText) appendTo(it *msp.Item) {
	if it.Text != nil || st.text.Len() > 0 {
		t := deref(it.Text) + st.text.String()
		it.Text = &t
	}
	if len(st.parts) > 0 {
		summary := make([]string, max(len(it.Summary), len(st.parts)))
		copy(summary, it.Summary)
		for i := range st.parts {
			summary[i] += st.parts[i].String()
		}
		it.Summary = summary
	}
}

// addReasoning folds a turn.MethodReasoning record: the reasoning its
// tool step sends back joins the history, as an assistant message that
// provider.Steps merges into the step (the step's text comes before it,
// its calls after it).
func (f *folded) addReasoning(r store.Record, providerID string) error {
	var rec turn.ReasoningRecord
	if err := json.Unmarshal(r.Params, &rec); err != nil {
		return fmt.Errorf("record %d: %w", r.Seq, err)
	}
	f.history = append(f.history, provider.Message{Role: provider.RoleAssistant, Reasoning: rec.Blocks, Provider: providerID})
	return nil
}

// dropReasoning drops the reasoning of history's messages from from on
// (a finished turn's, see withoutReasoning), in place, and the messages
// that held nothing else.
func dropReasoning(history []provider.Message, from int) []provider.Message {
	kept := history[:min(from, len(history))]
	for _, m := range history[len(kept):] {
		if len(m.Reasoning) > 0 {
			m.Reasoning = nil
			if m.Text == "" && len(m.ToolCalls) == 0 && len(m.ToolResults) == 0 {
				continue
			}
		}
		kept = append(kept, m)
	}
	clear(history[len(kept):])
	return kept
}
