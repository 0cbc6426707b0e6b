package msp

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestReasoningTypesMatchSchema validates the reasoning wire types
// against their definitions: a reasoning item streaming and completed,
// its summary delta, the effort command, its ack and its event, and a
// Session carrying the default.
func TestReasoningTypesMatchSchema(t *testing.T) {
	v := newTestValidator(t)
	sr := &SourceRange{
		First:  RecordPosition{ID: "0198f0aa-1111-7000-8000-0000000000e1", Sequence: 7},
		Last:   RecordPosition{ID: "0198f0aa-1111-7000-8000-0000000000e1", Sequence: 7},
		Stream: StreamRef{ID: testSession, Kind: "session"},
	}
	durable := ViewHeader{SessionID: testSession, SourceRange: sr, ViewCursor: "v:" + testSession + ":7"}
	open := Item{ItemID: "0198f0ac-4242-7000-8000-000000000043", Kind: ItemReasoning, Revision: 1,
		Status: ItemInProgress, TurnID: ptr(testCommand)}
	done := open
	done.Revision, done.Status, done.Summary, done.ProviderItemID = 2, ItemCompleted, []string{"First I", "Then"}, "rs_1"
	session := Session{CreatedAt: "2026-08-07T18:02:11Z", UpdatedAt: "2026-08-07T18:02:11Z", SessionID: testSession,
		Status: SessionIdle, ReasoningEffort: &ReasoningEffortState{ReasoningEffort: EffortHigh, Source: ReasoningSourceUser}}
	for _, tt := range []struct {
		def   string
		value any
	}{
		{"ItemStartedParams", ItemParams{ViewHeader: ViewHeader{SessionID: testSession, ViewCursor: "v:x:8.1"}, Item: open}},
		{"ItemCompletedParams", ItemParams{ViewHeader: durable, Item: done}},
		{"ItemDeltaParams", ItemDeltaParams{SessionID: testSession, ViewCursor: "v:x:8.2", ItemID: open.ItemID, Field: SummaryField(1), Delta: "Then"}},
		{"SessionSetReasoningEffortParams", SessionSetReasoningEffortParams{CommandID: testCommand, ReasoningEffort: EffortUltra, SessionID: testSession}},
		{"SessionSetReasoningEffortResult", SessionSetReasoningEffortResult{CommandID: testCommand, Status: StatusAccepted}},
		{"SessionReasoningEffortChangedParams", SessionReasoningEffortChangedParams{ViewHeader: durable, ReasoningEffort: EffortNone, Source: ReasoningSourceUser}},
		{"Session", session},
		{"ReasoningEffortState", *session.ReasoningEffort},
	} {
		b := mustJSON(t, tt.value)
		if errs := v.Def(tt.def, b); errs != nil {
			t.Errorf("%s from %T: %v\n%s", tt.def, tt.value, errs, b)
		}
	}
	// The tiers are the schema's closed enum, in order.
	var def struct {
		Enum []string `json:"enum"`
	}
	var bundle struct {
		Defs map[string]json.RawMessage `json:"$defs"`
	}
	if err := json.Unmarshal(SchemaJSON(), &bundle); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(bundle.Defs["ReasoningEffort"], &def); err != nil || !slices.Equal(def.Enum, ReasoningEfforts) {
		t.Errorf("ReasoningEffort enum %q, ReasoningEfforts %q (%v)", def.Enum, ReasoningEfforts, err)
	}
	// A tier outside the vocabulary is refused, by the schema and by
	// CheckReasoningEffort, naming the field.
	bad := mustJSON(t, SessionSetReasoningEffortParams{CommandID: testCommand, ReasoningEffort: "extreme", SessionID: testSession})
	if errs := v.Params(MethodSessionSetReasoningEffort, bad); !slices.Contains(fields(errs), "reasoningEffort") {
		t.Errorf("schema errors %v, want one at reasoningEffort", errs)
	}
	err := CheckReasoningEffort("Extreme", "reasoningEffort")
	if e, ok := err.(*Error); !ok || e.Code != CodeInvalidParams || e.Data.Details["field"] != "reasoningEffort" {
		t.Errorf("CheckReasoningEffort: %#v", err)
	}
	for _, tier := range ReasoningEfforts {
		if err := CheckReasoningEffort(tier, "reasoningEffort"); err != nil {
			t.Errorf("%s: %v", tier, err)
		}
	}
}

// TestParseField reads item/delta fields: text, summary parts, and
// nothing else.
func TestParseField(t *testing.T) {
	for field, want := range map[string]int{"": -1, "text": -1, "summary.0": 0, SummaryField(7): 7} {
		if got, err := ParseField(field); err != nil || got != want {
			t.Errorf("ParseField(%q) = %d, %v; want %d", field, got, err, want)
		}
	}
	for _, field := range []string{"summary", "summary.", "summary.-1", "summary.01", "summary.x", "output", "summary.99999"} {
		if _, err := ParseField(field); err == nil {
			t.Errorf("ParseField(%q) accepted", field)
		}
	}
}
