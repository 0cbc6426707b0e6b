package session

import (
	"context"
	"sync"
	"testing"

	"mspd/store"
)

// heldRead holds the first Session read until release is closed, telling
// entered when it starts.
type heldRead struct {
	store.Store
	once             *sync.Once
	entered, release chan struct{}
}

func (h heldRead) Session(ctx context.Context, id string) (store.Session, error) {
	h.once.Do(func() {
		close(h.entered)
		<-h.release
	})
	return h.Store.Session(ctx, id)
}

// What a load reads is published under the manager's lock: CancelRunning
// (as Close and forget) walks the loaded sessions while another is being
// loaded, with nothing else ordering the two. The race detector (go test
// -race, as CI runs) reports the load's write of the session otherwise.
func TestWalkingSessionsWhileOneLoads(t *testing.T) {
	st := openStore(t)
	m := newManager(t, st, newHistModel(), mgrOpts{})
	w := newRecSub()
	sid := startSession(t, m, w)
	m.Detach(w)
	m.Close()

	held := heldRead{Store: st, once: new(sync.Once), entered: make(chan struct{}), release: make(chan struct{})}
	m = newManager(t, held, newHistModel(), mgrOpts{})
	loaded := make(chan error, 1)
	go func() {
		_, release, err := m.load(context.Background(), sid, sid)
		if err == nil {
			release()
		}
		loaded <- err
	}()
	<-held.entered
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); m.CancelRunning() }()   // reads the entry
	go func() { defer wg.Done(); close(held.release) }() // lets the load write it, unordered with the read
	wg.Wait()
	if err := <-loaded; err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	l := m.sessions[sid]
	m.mu.Unlock()
	if l == nil || l.s == nil {
		t.Fatal("the session was not loaded")
	}
}
