package client

import (
	"context"
	"encoding/json"
	"fmt"

	"mspd/schema/msp"
)

// StartSession starts a new session; the connection is subscribed to it.
func (c *Client) StartSession(ctx context.Context) (msp.SessionStartResult, error) {
	var res msp.SessionStartResult
	err := c.Call(ctx, msp.MethodSessionStart, msp.SessionStartParams{CommandID: NewCommandID()}, &res)
	return res, err
}

// Resume resumes a session, after cursor when it is non-nil.
func (c *Client) Resume(ctx context.Context, sessionID string, cursor *string) (msp.SessionSnapshot, error) {
	var res msp.SessionSnapshot
	err := c.Call(ctx, msp.MethodSessionResume, msp.SessionResumeParams{CommandID: NewCommandID(), SessionID: sessionID, Cursor: cursor}, &res)
	return res, err
}

// StartTurn submits text as a new turn.
func (c *Client) StartTurn(ctx context.Context, sessionID, text string) (msp.TurnStartResult, error) {
	return c.StartTurnWith(ctx, msp.TurnStartParams{
		CommandID: NewCommandID(),
		SessionID: sessionID,
		Input:     []msp.TurnInputPart{{Type: "text", Text: text}},
	})
}

// StartTurnWith submits a turn with every parameter given; a missing
// CommandID is minted.
func (c *Client) StartTurnWith(ctx context.Context, p msp.TurnStartParams) (msp.TurnStartResult, error) {
	if p.CommandID == "" {
		p.CommandID = NewCommandID()
	}
	var res msp.TurnStartResult
	err := c.Call(ctx, msp.MethodTurnStart, p, &res)
	return res, err
}

// WaitTurn consumes notifications until the turn settles (turn/completed
// or turn/unqueued) and returns every notification it consumed, in order.
func (c *Client) WaitTurn(ctx context.Context, turnID string) ([]Notification, error) {
	var seen []Notification
	for {
		n, err := c.Next(ctx)
		if err != nil {
			return seen, fmt.Errorf("client: waiting for turn %s: %w", turnID, err)
		}
		seen = append(seen, n)
		if n.Method != msp.NotifyTurnCompleted && n.Method != msp.NotifyTurnUnqueued {
			continue
		}
		var p struct {
			TurnID string `json:"turnId"`
		}
		if json.Unmarshal(n.Params, &p) == nil && p.TurnID == turnID {
			return seen, nil
		}
	}
}

// Compact sends session/compact; a missing CommandID is minted. The ack is
// admission (or noop): the compaction's turn follows on the view.
func (c *Client) Compact(ctx context.Context, p msp.SessionCompactParams) (msp.SessionCompactResult, error) {
	if p.CommandID == "" {
		p.CommandID = NewCommandID()
	}
	var res msp.SessionCompactResult
	err := c.Call(ctx, msp.MethodSessionCompact, p, &res)
	return res, err
}

// StartSessionWith starts a session with every parameter given; a missing
// CommandID is minted. The connection is subscribed to it.
func (c *Client) StartSessionWith(ctx context.Context, p msp.SessionStartParams) (msp.SessionStartResult, error) {
	if p.CommandID == "" {
		p.CommandID = NewCommandID()
	}
	var res msp.SessionStartResult
	err := c.Call(ctx, msp.MethodSessionStart, p, &res)
	return res, err
}

// Decide decides a pending approval as req presents it, with choiceID
// (and feedback for the model, or "" for none), under a fresh commandId.
func (c *Client) Decide(ctx context.Context, req msp.ApprovalRequestParams, choiceID, feedback string) (msp.ApprovalDecideResult, error) {
	p := msp.ApprovalDecideParams{ApprovalID: req.ApprovalID, ChoiceID: choiceID, CommandID: NewCommandID(),
		RequirementID: req.CurrentRequirementID, SessionID: req.SessionID}
	if feedback != "" {
		p.Feedback = &feedback
	}
	var res msp.ApprovalDecideResult
	err := c.Call(ctx, msp.MethodApprovalDecide, p, &res)
	return res, err
}

// ListPending reads a session's pending approvals.
func (c *Client) ListPending(ctx context.Context, sessionID string) ([]msp.ApprovalRequestParams, error) {
	var res struct {
		Approvals []msp.ApprovalRequestParams `json:"approvals"`
	}
	err := c.Call(ctx, msp.MethodApprovalListPending, msp.ApprovalListPendingParams{SessionID: sessionID}, &res)
	return res.Approvals, err
}

// SetApprovalMode selects a session's approval mode.
func (c *Client) SetApprovalMode(ctx context.Context, sessionID, mode string) (msp.SessionSetApprovalModeResult, error) {
	var res msp.SessionSetApprovalModeResult
	err := c.Call(ctx, msp.MethodSessionSetApprovalMode, msp.SessionSetApprovalModeParams{CommandID: NewCommandID(), Mode: mode, SessionID: sessionID}, &res)
	return res, err
}

// SetReasoningEffort sets a session's reasoning-effort default under
// commandID (a replay of one command takes effect once); "" mints one.
func (c *Client) SetReasoningEffort(ctx context.Context, sessionID, effort, commandID string) (msp.SessionSetReasoningEffortResult, error) {
	if commandID == "" {
		commandID = NewCommandID()
	}
	var res msp.SessionSetReasoningEffortResult
	err := c.Call(ctx, msp.MethodSessionSetReasoningEffort, msp.SessionSetReasoningEffortParams{CommandID: commandID, ReasoningEffort: effort, SessionID: sessionID}, &res)
	return res, err
}

// ReadOutput reads a range of a tool call's stored output (item/readOutput).
func (c *Client) ReadOutput(ctx context.Context, p msp.ItemReadOutputParams) (msp.ItemReadOutputResult, error) {
	var res msp.ItemReadOutputResult
	err := c.Call(ctx, msp.MethodItemReadOutput, p, &res)
	return res, err
}
