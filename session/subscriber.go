package session

import "context"

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
