package session

import (
	"sync"

	"mspd/schema/msp"
)

// listeners are the connections that take a principal's session-list
// news (session/started of sessions they did not start, session/listChanged,
// session/deleteCompleted), indexed by principal so that a broadcast costs
// the owner's connections only. Its lock is a leaf: it may be taken with a
// session's lock held.
type listeners struct {
	mu sync.Mutex
	by map[string]map[Subscriber]struct{} // principal → its connections
	of map[Subscriber]string              // connection → its principal
}

func newListeners() *listeners {
	return &listeners{by: make(map[string]map[Subscriber]struct{}), of: make(map[Subscriber]string)}
}

func (l *listeners) add(sub Subscriber, principal string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.removeLocked(sub)
	if l.by[principal] == nil {
		l.by[principal] = make(map[Subscriber]struct{})
	}
	l.by[principal][sub] = struct{}{}
	l.of[sub] = principal
}

func (l *listeners) remove(sub Subscriber) {
	l.mu.Lock()
	l.removeLocked(sub)
	l.mu.Unlock()
}

func (l *listeners) removeLocked(sub Subscriber) {
	p, ok := l.of[sub]
	if !ok {
		return
	}
	delete(l.of, sub)
	delete(l.by[p], sub)
	if len(l.by[p]) == 0 {
		delete(l.by, p)
	}
}

// has tells whether owner has a connection that takes list news.
func (l *listeners) has(owner string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.by[owner]) > 0
}

// takes tells whether sub takes owner's list news, and so hears a
// deletion of one of owner's sessions that way.
func (l *listeners) takes(sub Subscriber, owner string) bool {
	l.mu.Lock()
	p, ok := l.of[sub]
	l.mu.Unlock()
	return ok && p == owner && sub.Broadcasts()
}

// deliver sends n to owner's connections that take list news, but those
// told already.
func (l *listeners) deliver(owner string, told func(Subscriber) bool, n Notification) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for sub := range l.by[owner] {
		if sub.Broadcasts() && !told(sub) {
			sub.Deliver(n)
		}
	}
}

// broadcast tells owner's list-taking connections about one of its
// sessions; creator, when set, gets it whatever it asked for (it made the
// session).
func (m *Manager) broadcast(owner string, creator Subscriber, method string, params any) {
	raw, err := msp.Marshal(params)
	if err != nil {
		m.log.Error("encoding broadcast", "method", method, "err", err)
		return
	}
	n := Notification{Method: method, Frame: msp.EncodeNotification(method, raw, m.now().UnixMilli())}
	if creator != nil {
		creator.Deliver(n)
	}
	m.listeners.deliver(owner, func(sub Subscriber) bool { return sub == creator }, n)
	if c := m.cfg.Cluster; c != nil {
		c.PublishList(owner, n)
	}
}

// listChangedLocked tells the owner's list-taking connections that the
// session's list row changed; with none (and no other node to tell),
// nothing is encoded. s.mu must be held.
func (s *session) listChangedLocked() {
	if s.m.cfg.Cluster == nil && !s.m.listeners.has(s.owner) {
		return
	}
	s.m.broadcast(s.owner, nil, msp.NotifySessionListChanged, msp.SessionListChangedParams{Session: s.st.wire(s.id, s.m.cfg.LogPath)})
}
