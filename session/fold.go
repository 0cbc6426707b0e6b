package session

// Folding a session's log: its items, history and totals.

import (
	"context"
	"encoding/json"
	"fmt"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/store"
)

// folded is what a pass over a session's log recovers.
type folded struct {
	history    []provider.Message
	items      []msp.Item
	open       map[string]msp.Item
	openAt     map[string]int64 // an open item's last record (its text is saved through it)
	attemptEnd int64            // the last record that ended an attempt (a retry notice, a terminal)
	cumulative msp.CumulativeTokenUsage
}

// fold replays a session's log from the start, through record through
// (0: to its end).
func fold(ctx context.Context, st store.Store, id string, through int64) (folded, error) {
	f := folded{open: make(map[string]msp.Item), openAt: make(map[string]int64)}
	index := make(map[string]int)
	var after int64
	for {
		recs, err := st.Records(ctx, id, after, 1000)
		if err != nil {
			return f, err
		}
		for _, r := range recs {
			if through > 0 && r.Seq > through {
				return f, nil
			}
			after = r.Seq
			switch r.Method {
			case msp.NotifyItemStarted, msp.NotifyItemUpdated, msp.NotifyItemCompleted:
				var p msp.ItemParams
				if err := json.Unmarshal(r.Params, &p); err != nil {
					return f, fmt.Errorf("record %d: %w", r.Seq, err)
				}
				i, seen := index[p.Item.ItemID]
				if seen {
					f.items[i] = p.Item
				} else {
					index[p.Item.ItemID] = len(f.items)
					f.items = append(f.items, p.Item)
				}
				switch r.Method {
				case msp.NotifyItemStarted:
					f.open[p.Item.ItemID], f.openAt[p.Item.ItemID] = p.Item, r.Seq
					continue
				case msp.NotifyItemUpdated:
					// An answer that opened on an ephemeral event is
					// first seen here, when its text is saved.
					if _, ok := f.open[p.Item.ItemID]; ok || !seen {
						f.open[p.Item.ItemID], f.openAt[p.Item.ItemID] = p.Item, r.Seq
					}
					continue
				}
				delete(f.open, p.Item.ItemID)
				delete(f.openAt, p.Item.ItemID)
				if m, ok := historyMessage(p.Item); ok {
					f.history = append(f.history, m)
				}
			case msp.NotifySessionTokenUsage:
				var p msp.SessionTokenUsageParams
				if err := json.Unmarshal(r.Params, &p); err != nil {
					return f, fmt.Errorf("record %d: %w", r.Seq, err)
				}
				f.cumulative = p.Cumulative
			default:
				if _, settled := attemptAfter(r.Method); settled && r.Method != msp.NotifyTurnStarted {
					f.attemptEnd = r.Seq // a retry notice or a terminal ends the attempt before it
				}
			}
		}
		if len(recs) < 1000 {
			return f, nil
		}
	}
}

// historyMessage tells which completed items the model sees again: the
// user's messages and the agent's completed, non-empty answers (as a live
// session keeps them), never a rejected attempt.
func historyMessage(it msp.Item) (provider.Message, bool) {
	if it.Text == nil || *it.Text == "" || it.Status != msp.ItemCompleted {
		return provider.Message{}, false
	}
	switch it.Kind {
	case msp.ItemUserMessage:
		return provider.Message{Role: provider.RoleUser, Text: *it.Text}, true
	case msp.ItemAgentMessage:
		return provider.Message{Role: provider.RoleAssistant, Text: *it.Text}, true
	}
	return provider.Message{}, false
}
