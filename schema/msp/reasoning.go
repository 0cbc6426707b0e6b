package msp

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Reasoning: a model's reasoning streams as a reasoning item, apart from
// its answer; turn/start's reasoningEffort and session/setReasoningEffort
// say how much the model reasons.

// ItemReasoning is the kind of an item holding a model's reasoning.
const ItemReasoning = "reasoning"

// Reasoning effort tiers (ReasoningEffort, closed).
const (
	EffortNone    = "none"
	EffortMinimal = "minimal"
	EffortLow     = "low"
	EffortMedium  = "medium"
	EffortHigh    = "high"
	EffortXHigh   = "xhigh"
	EffortMax     = "max"
	EffortUltra   = "ultra"
)

// ReasoningEfforts lists the tiers, from no reasoning to the most.
var ReasoningEfforts = []string{EffortNone, EffortMinimal, EffortLow, EffortMedium, EffortHigh, EffortXHigh, EffortMax, EffortUltra}

// CheckReasoningEffort refuses a tier outside the closed vocabulary with
// invalidParams naming field.
func CheckReasoningEffort(effort, field string) error {
	if !slices.Contains(ReasoningEfforts, effort) {
		return ErrInvalidParams(field, "reasoning effort %q is not one of %q", effort, ReasoningEfforts)
	}
	return nil
}

// ReasoningSourceUser is the ReasoningEffortChangeSource of a default a
// client set (session/setReasoningEffort).
const ReasoningSourceUser = "user"

// ReasoningEffortState is a session's standing reasoning-effort default
// and what set it.
type ReasoningEffortState struct {
	ReasoningEffort string `json:"reasoningEffort"`
	Source          string `json:"source"`
}

// SessionSetReasoningEffortParams are the params of
// session/setReasoningEffort.
type SessionSetReasoningEffortParams struct {
	CommandID       string `json:"commandId"`
	ReasoningEffort string `json:"reasoningEffort"`
	SessionID       string `json:"sessionId"`
}

// SessionSetReasoningEffortResult is the ack of session/setReasoningEffort.
type SessionSetReasoningEffortResult = CommandAcceptedResult

// SessionReasoningEffortChangedParams are the params of
// session/reasoningEffortChanged.
type SessionReasoningEffortChangedParams struct {
	ViewHeader
	ReasoningEffort string `json:"reasoningEffort"`
	Source          string `json:"source"`
}

// FieldText is an item/delta's field for an item's text (its absence
// means the same).
const FieldText = "text"

// SummaryField is the item/delta field of part n of a reasoning item's
// summary.
func SummaryField(n int) string { return "summary." + strconv.Itoa(n) }

// maxSummaryParts bounds the part index a delta may name, so that a stray
// field cannot make a reader allocate without end.
const maxSummaryParts = 1024

// ParseField reads an item/delta field: "" or "text" is the item's text
// (part -1), "summary.n" part n of its summary.
func ParseField(field string) (part int, err error) {
	if field == "" || field == FieldText {
		return -1, nil
	}
	rest, ok := strings.CutPrefix(field, "summary.")
	n, err := strconv.Atoi(rest)
	if !ok || err != nil || n < 0 || n >= maxSummaryParts || strconv.Itoa(n) != rest {
		return 0, fmt.Errorf("item/delta field %q is neither text nor summary.n", field)
	}
	return n, nil
}

// The reasoning-effort command and its event.
const (
	MethodSessionSetReasoningEffort     = "session/setReasoningEffort"
	NotifySessionReasoningEffortChanged = "session/reasoningEffortChanged"
)
