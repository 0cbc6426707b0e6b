package session

import "sync"

// tally counts goroutines at work and tells when none is. Unlike a
// sync.WaitGroup, a goroutine may join while another waits for the count
// to reach zero — a turn launched while WaitIdle or Close waits — and
// the waiter is then told of the next time it is zero.
type tally struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed while n is zero; nil means closed
}

// add counts one more goroutine at work.
func (t *tally) add() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		t.zero = make(chan struct{})
	}
	t.n++
}

// done counts one goroutine fewer.
func (t *tally) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 {
		close(t.zero)
	}
}

// idle returns a channel closed once no goroutine is at work.
func (t *tally) idle() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		return closed
	}
	return t.zero
}

// wait waits until no goroutine is at work.
func (t *tally) wait() { <-t.idle() }

// closed is a channel that is always closed.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
