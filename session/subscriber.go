package session

import (
	"context"
	"encoding/json"

	"mspd/schema/msp"
)

// Notification is one server-to-client notification, encoded once and
// shared by every connection it is delivered to.
type Notification struct {
	// SessionID is the session whose view the notification belongs to; empty
	// for broadcasts such as session/started.
	SessionID string
	// Method is the notification method.
	Method string
	// Cursor is the event's viewCursor; empty for broadcasts.
	Cursor string
	// Frame is the complete JSON-RPC frame.
	Frame []byte
	// Durable tells whether view/page can serve the event again.
	Durable bool
}

// Erased names the session a session/deleteCompleted notification says
// is gone; ok is false for other notifications, and for a deletion that
// failed, which leaves the session as it was. (The notification goes the
// broadcast way, without a SessionID, so the frame says.)
func Erased(n Notification) (sessionID string, ok bool) {
	if n.Method != msp.NotifySessionDeleteCompleted {
		return "", false
	}
	var f struct {
		Params msp.SessionDeleteCompletedParams `json:"params"`
	}
	if json.Unmarshal(n.Frame, &f) != nil || f.Params.Outcome != msp.DeleteCompleted || f.Params.SessionID == "" {
		return "", false
	}
	return f.Params.SessionID, true
}

// Subscriber receives notifications for the sessions it is subscribed to.
// It is implemented by a connection.
type Subscriber interface {
	// Deliver queues a live notification. It must not block: a subscriber
	// that cannot keep up drops what it may and reports the hole itself.
	// A view/gap (a hole the session found while replaying) must never be
	// dropped.
	Deliver(n Notification)
	// Replay queues a notification replayed from the log, waiting for room
	// rather than dropping; it returns ctx's error if ctx ends first.
	Replay(ctx context.Context, n Notification) error
	// Subscribed tells the subscriber that delivery for a session starts
	// over strictly after cursor from: called before the replay and the
	// first live Deliver of a (re-)subscription.
	Subscribed(sessionID, from string)
	// Broadcasts tells whether the subscriber takes news of its
	// principal's session list — session/started of sessions it did not
	// start, session/listChanged, session/deleteCompleted: connections past
	// their handshake that were granted sessionListStream.
	Broadcasts() bool
}
