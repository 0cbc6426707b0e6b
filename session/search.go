package session

import (
	"encoding/json"

	"mspd/schema/msp"
	"mspd/store"
)

// Indexer is what a session's search index keeps of a record (a
// store.Indexer): the name session/nameChanged gives it, and the text of
// a user's message or a completed answer (item/completed). The stores
// index each commit's records through it, and sqlite indexes logs written
// before its index with it (sqlite.WithIndexer).
func Indexer(r store.Record) (name *string, message string) {
	switch r.Method {
	case msp.NotifySessionNameChanged:
		var p struct {
			Name *string `json:"name"`
		}
		if json.Unmarshal(r.Params, &p) == nil {
			return p.Name, ""
		}
	case msp.NotifyItemCompleted:
		var p struct {
			Item struct {
				Kind   string  `json:"kind"`
				Status string  `json:"status"`
				Text   *string `json:"text"`
			} `json:"item"`
		}
		if json.Unmarshal(r.Params, &p) != nil || p.Item.Text == nil || p.Item.Status != msp.ItemCompleted {
			return nil, ""
		}
		if p.Item.Kind == msp.ItemUserMessage || p.Item.Kind == msp.ItemAgentMessage {
			return nil, *p.Item.Text
		}
	}
	return nil, ""
}

// textOf is what records add to their session's search index; nil when
// nothing.
func textOf(owner string, recs []store.Record) *store.Text {
	t := store.Text{Owner: owner}
	for _, r := range recs {
		t.Add(Indexer, r)
	}
	if t.Name == nil && len(t.Messages) == 0 {
		return nil
	}
	return &t
}
