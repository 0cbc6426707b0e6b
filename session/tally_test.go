package session

import (
	"sync"
	"testing"
)

// A goroutine may join while another waits for none to be at work (a turn
// launched while WaitIdle waits): the race detector finds nothing, and the
// waiter is told once the count is zero again.
func TestTallyJoinsWhileWaited(t *testing.T) {
	var tl tally
	select {
	case <-tl.idle():
	default:
		t.Fatal("a new tally is not idle")
	}
	for range 100 {
		tl.add()
		var wg sync.WaitGroup
		wg.Go(tl.wait)
		wg.Go(func() {
			tl.add()
			tl.done()
		})
		select {
		case <-tl.idle():
			t.Fatal("idle with one at work")
		default:
		}
		tl.done()
		wg.Wait()
		select {
		case <-tl.idle():
		default:
			t.Fatal("not idle with none at work")
		}
	}
}
