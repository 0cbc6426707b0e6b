package session

// Folding a session's log: its items, history and totals.

import (
	"context"
	"encoding/json"
	"fmt"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/store"
	"mspd/tool"
	"mspd/turn"
)

// folded is what a pass over a session's log recovers.
type folded struct {
	history    []provider.Message
	items      []msp.Item // kept when the fold's spec asks for them
	itemBytes  []int      // each item's size encoded, as its last record holds it
	encoded    int        // the sum of itemBytes
	over       bool       // the items outgrew the spec's budget: the fold stopped there
	open       map[string]msp.Item
	openAt     map[string]int64 // an open item's last record (its text is saved through it)
	attemptEnd int64            // the last record that ended an attempt (a retry notice, a terminal)
	spend      spend            // the running usage and cost (cost.go)
	approvals  approvals        // every approval opened, and the tools approved for the session
	turnFrom   int              // where the last turn's messages begin in history
	window     contextWindow    // the context window, its latest compaction applied to history
}

// foldSpec says how far a fold goes and what it keeps.
type foldSpec struct {
	through int64 // the last record folded; 0: the log's end
	// items keeps the items (for a resume, a read or a fork); a load
	// needs only the history, the open items and the totals.
	items bool
	// budget, with items, stops the fold once the items encode to more
	// than this many bytes: they are past the history budget, and
	// reading on would hold the log's items only to drop them.
	budget int
	// provider is the provider the log began with (state.StartProviderID):
	// each tool call in the history is tagged with the provider of its
	// turn, followed through session/modelChanged from there.
	provider string
}

// sizedItem decodes an item and keeps the size of its encoding: the
// history budget is counted from the records, not by encoding the items
// again.
type sizedItem struct {
	msp.Item
	size int
}

// UnmarshalJSON implements json.Unmarshaler.
func (s *sizedItem) UnmarshalJSON(b []byte) error {
	s.size = len(b)
	return json.Unmarshal(b, &s.Item)
}

// fold replays a session's log from the start, as spec says, a page of
// at most ReadBytes at a time.
func fold(ctx context.Context, st store.Store, id string, spec foldSpec) (folded, error) {
	f := folded{open: make(map[string]msp.Item), openAt: make(map[string]int64), approvals: newApprovals()}
	index := make(map[string]int) // each item's place in f.items
	var after int64
	current, turnProvider := spec.provider, spec.provider // the session's provider, and its running turn's
	for {
		recs, err := st.Records(ctx, id, after, logPage(1000))
		if err != nil || len(recs) == 0 {
			return f, err
		}
		for _, r := range recs {
			if spec.through > 0 && r.Seq > spec.through {
				return f, nil
			}
			after = r.Seq
			switch r.Method {
			case msp.NotifyItemStarted, msp.NotifyItemUpdated, msp.NotifyItemCompleted:
				var p struct {
					Item sizedItem `json:"item"`
				}
				if err := json.Unmarshal(r.Params, &p); err != nil {
					return f, fmt.Errorf("record %d: %w", r.Seq, err)
				}
				it := p.Item.Item
				i, seen := index[it.ItemID]
				if !seen {
					i = len(index)
					index[it.ItemID] = i
				}
				if spec.items {
					if seen {
						f.items[i] = it
						f.encoded -= f.itemBytes[i]
						f.itemBytes[i] = p.Item.size
					} else {
						f.items = append(f.items, it)
						f.itemBytes = append(f.itemBytes, p.Item.size)
					}
					f.encoded += p.Item.size
					if spec.budget > 0 && f.encoded > spec.budget {
						f.over = true
						return f, nil
					}
				}
				switch r.Method {
				case msp.NotifyItemStarted:
					f.open[it.ItemID], f.openAt[it.ItemID] = it, r.Seq
					if it.Kind == msp.ItemToolCall && !seen {
						call := callMessage(it)
						call.Provider = turnProvider
						f.history = append(f.history, call)
					}
					continue
				case msp.NotifyItemUpdated:
					// An answer that opened on an ephemeral event is
					// first seen here, when its text is saved.
					if _, ok := f.open[it.ItemID]; ok || !seen {
						f.open[it.ItemID], f.openAt[it.ItemID] = it, r.Seq
					}
					continue
				}
				delete(f.open, it.ItemID)
				delete(f.openAt, it.ItemID)
				if it.Kind == msp.ItemUserMessage {
					f.window.latest.begin(it, len(f.history), f.window.cut)
				}
				h := appendHistory(f.history, it)
				f.history = f.window.compacted(h, it)
				// A compaction gives its summary the place of the messages
				// before its cut: the running turn's begin as many earlier.
				f.turnFrom = max(f.turnFrom-(len(h)-len(f.history)), 0)
			case msp.NotifySessionModelChanged:
				var p msp.SessionModelChangedParams
				if err := json.Unmarshal(r.Params, &p); err != nil {
					return f, fmt.Errorf("record %d: %w", r.Seq, err)
				}
				if p.ProviderID != "" {
					current = p.ProviderID
				}
			case msp.NotifyTurnStarted:
				superseded, err := regeneratesOf(r)
				if err != nil {
					return f, err
				}
				if superseded != "" {
					f.history = f.window.supersede(f.history, superseded)
				}
				turnProvider, f.turnFrom = current, len(f.history)
			case turn.MethodReasoning:
				if err := f.addReasoning(r, turnProvider); err != nil {
					return f, err
				}
			case msp.NotifySessionTokenUsage:
				var p msp.SessionTokenUsageParams
				if err := json.Unmarshal(r.Params, &p); err != nil {
					return f, fmt.Errorf("record %d: %w", r.Seq, err)
				}
				f.spend = f.spend.recorded(p)
			default:
				if _, settled := attemptAfter(r.Method); settled && r.Method != msp.NotifyTurnStarted {
					f.attemptEnd = r.Seq // a retry notice or a terminal ends the attempt before it
				}
				if err := f.window.fold(r, len(f.history)); err != nil {
					return f, err
				}
			}
			if next := routedTo(r.Method, r.Params); next != "" {
				turnProvider = next // a fallback: the turn's next steps are another provider's
			}
			if r.Method == msp.NotifyTurnCompleted {
				f.history = dropReasoning(f.history, f.turnFrom)
			}
			if foldsApprovals(r.Method) {
				if _, err := f.approvals.apply(r.Method, r.Params, r.Seq); err != nil {
					return f, err
				}
			}
		}
	}
}

// appendHistory adds what the model sees again of a closed item: the
// user's messages (their images named by ref), the agent's completed, non-empty answers (as a live
// session keeps them), never a rejected attempt; and every tool call's
// result, whatever its fate, since the model must hear how each call it
// made ended (the call itself joined the history at its start).
func appendHistory(h []provider.Message, it msp.Item) []provider.Message {
	if it.Kind == msp.ItemToolCall {
		res := turn.CallResult(it)
		res.Name = tool.ModelName(it.Server, it.Tool)
		return append(h, provider.Message{Role: provider.RoleTool, ToolResults: []provider.ToolResult{res}})
	}
	if it.Kind == msp.ItemUserMessage && len(it.Attachments) > 0 && it.Status == msp.ItemCompleted {
		return append(h, provider.Message{Role: provider.RoleUser, Text: deref(it.Text), Images: historyImages(it)})
	}
	if it.Text == nil || *it.Text == "" || it.Status != msp.ItemCompleted {
		return h
	}
	switch it.Kind {
	case msp.ItemUserMessage:
		return append(h, provider.Message{Role: provider.RoleUser, Text: *it.Text})
	case msp.ItemAgentMessage:
		return append(h, provider.Message{Role: provider.RoleAssistant, Text: *it.Text})
	}
	return h
}

// callMessage is the model's tool call a toolCall item records, as its
// history holds it from the item's start: the call was asked for whether
// or not it ever completed.
func callMessage(it msp.Item) provider.Message {
	call := provider.ToolCall{ID: it.CallID, Name: tool.ModelName(it.Server, it.Tool)}
	if it.Args != nil {
		call.Args = *it.Args
	}
	return provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{call}}
}

// routedTo is the provider a record hands its turn on to: a fallback's
// turn/modelRetryScheduled and a turn/providerSkipped name it; "" for
// any other record.
func routedTo(method string, params []byte) string {
	if method != msp.NotifyTurnModelRetryScheduled && method != msp.NotifyTurnProviderSkipped {
		return ""
	}
	var p struct {
		NextProviderID string `json:"nextProviderId"`
	}
	if json.Unmarshal(params, &p) != nil {
		return ""
	}
	return p.NextProviderID
}
