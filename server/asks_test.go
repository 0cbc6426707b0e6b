package server

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"mspd/schema/msp"
)

// TestAsksAreBounded: a connection keeps at most maxOutstandingAsks of its
// requests waiting for an answer: a client that never answers makes the
// oldest be forgotten, an answer takes its request out, and an answer
// that matches none (forgotten, a number, twice) is ignored.
func TestAsksAreBounded(t *testing.T) {
	var a asks
	var ids []string
	for range maxOutstandingAsks + 6 {
		ids = append(ids, a.add(msp.RequestApproval, "s", time.Now()))
	}
	if n := a.outstanding(); n != maxOutstandingAsks {
		t.Fatalf("%d outstanding, want %d", n, maxOutstandingAsks)
	}
	quoted := func(id string) json.RawMessage { return json.RawMessage(strconv.Quote(id)) }
	if _, ok := a.answered(quoted(ids[0])); ok {
		t.Error("the oldest request was not forgotten")
	}
	if r, ok := a.answered(quoted(ids[len(ids)-1])); !ok || r.method != msp.RequestApproval || r.sessionID != "s" {
		t.Errorf("the newest request: %+v, %v", r, ok)
	}
	if _, ok := a.answered(quoted(ids[len(ids)-1])); ok {
		t.Error("a request was answered twice")
	}
	if _, ok := a.answered(json.RawMessage("7")); ok {
		t.Error("a numeric id matched a request")
	}
	if n := a.outstanding(); n != maxOutstandingAsks-1 {
		t.Fatalf("%d outstanding, want %d", n, maxOutstandingAsks-1)
	}
}
