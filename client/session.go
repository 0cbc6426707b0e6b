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

// ReadOutput reads a range of a tool call's stored output (item/readOutput).
func (c *Client) ReadOutput(ctx context.Context, p msp.ItemReadOutputParams) (msp.ItemReadOutputResult, error) {
	var res msp.ItemReadOutputResult
	err := c.Call(ctx, msp.MethodItemReadOutput, p, &res)
	return res, err
}
