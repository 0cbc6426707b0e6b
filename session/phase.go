package session

import "fmt"

// A loaded session is in one phase of its lifecycle and plays one role
// on its node; both are guarded by session.mu. The phases and the moves
// between them are this file's: a phase changes only through enter, which
// checks the move against phaseMoves. doc.go draws the machine.

// phase is where a loaded session stands in its lifecycle.
type phase uint8

const (
	// phaseLoading: read from the store (session.read), seen by nobody.
	phaseLoading phase = iota
	// phaseLive: takes commands; its leader writes it.
	phaseLive
	// phaseUnsettled: a follower was told that a deletion of it failed
	// and has not read its row since, so it may be half-erased: its row
	// is read before it serves anything more (acquireAs).
	phaseUnsettled
	// phaseErasing: session/delete is erasing it (Manager.erase); nothing
	// more is written to it.
	phaseErasing
	// phaseHalfErased: an erasure failed and may have got part of the
	// way (or the store cannot tell): nothing is written to it, so no
	// cursor of it is handed out twice, and only a deletion sent again
	// reaches it, to finish the erasure. The store reads it back so
	// (store.Session.Erasing) on every node and after a restart.
	phaseHalfErased
	// phaseErased: its erasure finished (here, or on the leader this node
	// follows); session.farewell holds the news for late subscribers.
	phaseErased
)

// phaseNames are the phases as logs and tests name them.
var phaseNames = [...]string{
	phaseLoading:    "loading",
	phaseLive:       "live",
	phaseUnsettled:  "unsettled",
	phaseErasing:    "erasing",
	phaseHalfErased: "halfErased",
	phaseErased:     "erased",
}

func (p phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// deleted tells whether a session/delete has reached the session: it is
// erasing, half-erased or erased, and nothing more is written to it.
func (p phase) deleted() bool {
	return p == phaseErasing || p == phaseHalfErased || p == phaseErased
}

// phaseMoves are the moves a session's phase may make, each with why it
// happens. A move not listed is a bug (see enter).
var phaseMoves = map[phase]map[phase]string{
	phaseLoading: {
		phaseLive:       "its row and log are read",
		phaseHalfErased: "its row says an erasure was cut short",
	},
	phaseLive: {
		phaseUnsettled:  "a follower hears that a deletion failed",
		phaseErasing:    "a session/delete erases it",
		phaseHalfErased: "a re-read finds its row erasing, or gone with the news missed",
		phaseErased:     "a follower hears it was erased",
	},
	phaseUnsettled: {
		phaseLive:       "its row, read again, is whole",
		phaseUnsettled:  "a follower hears of another failed deletion",
		phaseErasing:    "a session/delete erases it",
		phaseHalfErased: "its row, read again, is erasing or gone",
		phaseErased:     "a follower hears it was erased",
	},
	phaseErasing: {
		phaseLive:       "the erasure failed and the store holds it whole (unmark)",
		phaseHalfErased: "the erasure failed and may have got part of the way (unmark)",
		phaseErased:     "the erasure finished",
	},
	phaseHalfErased: {
		phaseLive:       "a deletion sent again failed and the store holds it whole (unmark)",
		phaseHalfErased: "a re-read, or a deletion sent again that failed, finds it so still",
		phaseErased:     "a deletion sent again finished, here or on the leader",
	},
	phaseErased: {
		phaseHalfErased: "a second deletion acknowledged with the first failed, or a follower told of a failed deletion reads the row gone: not sure it is, so a deletion sent again finishes it",
		phaseErased:     "a second deletion acknowledged with the first erased it again",
	},
}

// may tells whether a session in phase p may enter to.
func (p phase) may(to phase) bool {
	_, ok := phaseMoves[p][to]
	return ok
}

// strictPhases makes enter panic on a move phaseMoves does not list; the
// package's tests set it, so that the suite fails on one. A daemon logs
// it instead and makes the move: the phases name what the code does, and
// one session's bookkeeping bug must not end every other session's
// connections.
var strictPhases = false

// enter moves s to phase to, the one way its phase changes. s.mu must be
// held.
func (s *session) enter(to phase) {
	if from := s.phase; !from.may(to) {
		if strictPhases {
			panic(fmt.Sprintf("session %s: phase %s cannot become %s", s.id, from, to))
		}
		s.m.log.Error("a session made a phase move it should not", "session", s.id, "from", from, "to", to)
	}
	s.phase = to
}

// erasedLocked marks s erased; n, its session/deleteCompleted, is told to
// subscriptions that register after it. s.mu must be held.
func (s *session) erasedLocked(n *Notification) {
	s.enter(phaseErased)
	s.farewell = n
}

// role is what a node does for a session it has loaded: lead it (write
// its log, run its turns) or follow the leader's events. Without a
// cluster a node leads every session. It changes in lead (follower to
// leader) and when a takeover fails or the session is unloaded (leader to
// follower); any role may become the other.
type role uint8

const (
	roleFollower role = iota
	roleLeader
)

func (r role) String() string {
	if r == roleLeader {
		return "leader"
	}
	return "follower"
}
