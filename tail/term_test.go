package tail

// Test doubles for a terminal: a fake clock whose ticks the test sends,
// and an emulator of the few control sequences the screen writes, so
// tests check what a person would see rather than the bytes.

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a Clock whose time moves only when the test says, and whose
// ticker ticks only when the test sends a tick.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	ticks   chan time.Time
	done    chan struct{} // a tick was handled
	running bool          // a ticker is running
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), ticks: make(chan time.Time), done: make(chan struct{}, 1)}
}

// terminal returns a terminal screen on v driven by c.
func (c *fakeClock) terminal(v *vt) *screen {
	s := newScreen(v, true, c)
	s.tickDone = func() { c.done <- struct{}{} }
	return s
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTicker(time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running = true
	return c.ticks, func() {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
	}
}

func (c *fakeClock) ticking() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}

// advance moves the time on by d, delivers one tick to the running ticker
// and waits until the screen has handled it.
func (c *fakeClock) advance(t *testing.T, d time.Duration) {
	t.Helper()
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	c.mu.Unlock()
	select {
	case c.ticks <- now:
	case <-time.After(waitLimit):
		t.Fatal("no ticker took the tick")
	}
	receive(t, c.done, "the tick's redraw")
}

// vt is a terminal that understands what screen writes: printable text,
// CR, LF (as a tty's output processing turns it into CR LF), ESC[nA (up),
// ESC[K (clear to the end of the line), and SGR colours (ignored).
type vt struct {
	mu       sync.Mutex
	lines    [][]rune
	row, col int
	raw      strings.Builder
}

func (v *vt) Write(p []byte) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.raw.Write(p)
	rs := []rune(string(p))
	for i := 0; i < len(rs); i++ {
		switch r := rs[i]; r {
		case '\r':
			v.col = 0
		case '\n':
			v.row, v.col = v.row+1, 0
		case '\x1b':
			j := i + 2 // past ESC [
			for j < len(rs) && (rs[j] >= '0' && rs[j] <= '9' || rs[j] == ';') {
				j++
			}
			arg := string(rs[i+2 : j])
			switch rs[j] {
			case 'A':
				n, _ := strconv.Atoi(arg)
				v.row -= max(n, 1)
			case 'K':
				v.line()
				if v.col < len(v.lines[v.row]) {
					v.lines[v.row] = v.lines[v.row][:v.col]
				}
			}
			i = j
		default:
			v.line()
			for len(v.lines[v.row]) < v.col {
				v.lines[v.row] = append(v.lines[v.row], ' ')
			}
			if v.col < len(v.lines[v.row]) {
				v.lines[v.row][v.col] = r
			} else {
				v.lines[v.row] = append(v.lines[v.row], r)
			}
			v.col++
		}
	}
	return len(p), nil
}

// line makes the cursor's row exist.
func (v *vt) line() {
	for len(v.lines) <= v.row {
		v.lines = append(v.lines, nil)
	}
}

// screen is the text on the terminal, one string per row, without the
// empty row the cursor may sit on at the end.
func (v *vt) screen() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for _, l := range v.lines {
		out = append(out, string(l))
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// cursor is where the next character lands.
func (v *vt) cursor() (row, col int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.row, v.col
}

func (v *vt) bytes() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.raw.String()
}

// wantScreen fails unless the terminal shows want, row for row.
func wantScreen(t *testing.T, v *vt, want ...string) {
	t.Helper()
	if got := v.screen(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the terminal shows\n%s\nwant\n%s\n(written: %q)", strings.Join(got, "\n"), strings.Join(want, "\n"), v.bytes())
	}
}
