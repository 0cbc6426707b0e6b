package tail

import (
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// Clock is the time retry countdowns read and the ticks that redraw them;
// tests drive a fake one so that no test waits for real time.
type Clock interface {
	// Now tells the time.
	Now() time.Time
	// NewTicker returns a channel that ticks every d and a function that
	// stops it.
	NewTicker(d time.Duration) (<-chan time.Time, func())
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// defaultWidth is the columns assumed of a terminal whose width is unknown.
const defaultWidth = 80

// tickEvery is how often live countdowns are looked at; a line is
// rewritten only when its text changes, once a second.
const tickEvery = 250 * time.Millisecond

// Terminal control: back to the line's start, one line up, clear to the
// end of the line.
const (
	cr        = "\r"
	lineUp    = "\x1b[1A"
	clearLine = "\x1b[K"
)

// liveLine is a line kept at the bottom of a terminal and redrawn in place:
// a retry wait counting down.
type liveLine interface {
	// text is the line at now and whether it still changes with time.
	text(now time.Time) (line string, changing bool)
}

// screen is the output a run writes through, shared by every session it
// shows. It knows what the current line holds: an answer streaming on it
// (open) or, on a terminal, the live lines kept below everything else and
// redrawn in place while other output scrolls above them. Its lock guards
// the renderers that write through it, since a ticker redraws the live
// lines from a goroutine of its own.
type screen struct {
	mu    sync.Mutex
	w     io.Writer
	term  bool // a terminal: live lines are redrawn in place
	width int  // the terminal's columns: a live line is cut to fit
	clock Clock

	open   string // the item whose deltas are on the current line
	broken string // the item whose line a status line cut short

	live  []liveLine
	drawn []string // the live lines as on the terminal, the cursor after the last

	stopTick func() // stops the ticker while one runs
	tickDone func() // when set, runs after each tick (tests wait for it)
}

func newScreen(w io.Writer, term bool, clock Clock) *screen {
	if clock == nil {
		clock = realClock{}
	}
	return &screen{w: w, term: term, width: defaultWidth, clock: clock}
}

func (s *screen) write(text string) { io.WriteString(s.w, text) }

// println writes a whole line (that may hold newlines) above the live
// lines, ending a streamed answer's line first.
func (s *screen) println(line string) {
	if s.open != "" {
		s.write("\n") // no live lines are drawn below a streaming answer
		s.open = ""
	} else {
		s.eraseLive()
	}
	s.write(line + "\n")
	s.drawLive()
}

// startLine gives the current line to item's streamed deltas: the line of
// another item ends, the live lines are erased until this one ends.
func (s *screen) startLine(item string) {
	if s.open != "" {
		s.write("\n")
	} else {
		s.eraseLive()
	}
	s.open = item
}

// endLine finishes a line of streamed deltas before other output; the live
// lines come back below it.
func (s *screen) endLine() {
	if s.open != "" {
		s.write("\n")
		s.open = ""
		s.drawLive()
	}
}

// interrupt clears the current line for a status line written elsewhere
// (stderr is often the same terminal): a streamed answer's line ends, and
// its item's next delta starts a new line with all it streamed so far, so
// the answer still reads whole; live lines are erased, to be drawn again
// by resume.
func (s *screen) interrupt() {
	if s.open != "" {
		s.broken = s.open
		s.write("\n")
		s.open = ""
	}
	s.eraseLive()
}

// resume draws the live lines again after a status line.
func (s *screen) resume() { s.drawLive() }

// eraseLive clears the live lines from the terminal, leaving the cursor at
// the start of the first one's row.
func (s *screen) eraseLive() {
	if len(s.drawn) == 0 {
		return
	}
	s.write(cr + clearLine + strings.Repeat(lineUp+clearLine, len(s.drawn)-1))
	s.drawn = nil
}

// drawLive draws the live lines at the cursor, which is at a line's start
// and at the bottom of the output: nothing is drawn while an answer
// streams on the current line.
func (s *screen) drawLive() {
	if !s.term || s.open != "" || len(s.live) == 0 || len(s.drawn) > 0 {
		return
	}
	s.drawn = s.texts()
	s.write(strings.Join(s.drawn, clearLine+"\n") + clearLine)
}

func (s *screen) texts() []string {
	now := s.clock.Now()
	texts := make([]string, len(s.live))
	for i, l := range s.live {
		texts[i], _ = l.text(now)
	}
	return texts
}

// redraw rewrites the live lines in place if their text changed: back to
// the first one's start, then each line over the old one, cleared to its
// end.
func (s *screen) redraw() {
	if len(s.drawn) == 0 {
		s.drawLive()
		return
	}
	texts := s.texts()
	if slices.Equal(texts, s.drawn) {
		return
	}
	if len(texts) != len(s.drawn) {
		s.eraseLive()
		s.drawLive()
		return
	}
	s.write(cr + strings.Repeat(lineUp, len(s.drawn)-1) + strings.Join(texts, clearLine+"\n") + clearLine)
	s.drawn = texts
}

// addLive keeps l at the bottom of a terminal, counting down.
func (s *screen) addLive(l liveLine) {
	s.eraseLive()
	s.live = append(s.live, l)
	s.drawLive()
	s.startTicking()
}

// removeLive takes l away from the live lines.
func (s *screen) removeLive(l liveLine) {
	s.eraseLive()
	s.live = slices.DeleteFunc(s.live, func(x liveLine) bool { return x == l })
	s.drawLive()
	if len(s.live) == 0 {
		s.stopTicking()
	}
}

// settleLive ends l's life as a live line: final takes its place as an
// ordinary line, and the other live lines stay below it.
func (s *screen) settleLive(l liveLine, final string) {
	s.eraseLive()
	s.live = slices.DeleteFunc(s.live, func(x liveLine) bool { return x == l })
	s.write(final + "\n")
	s.drawLive()
	if len(s.live) == 0 {
		s.stopTicking()
	}
}

// startTicking runs a ticker that redraws the live lines until none of
// them changes any more.
func (s *screen) startTicking() {
	if s.stopTick != nil {
		return
	}
	ticks, stop := s.clock.NewTicker(tickEvery)
	done := make(chan struct{})
	s.stopTick = func() {
		stop()
		close(done)
	}
	go func() {
		for {
			select {
			case <-ticks:
				s.tick()
			case <-done:
				return
			}
		}
	}()
}

func (s *screen) stopTicking() {
	if s.stopTick != nil {
		s.stopTick()
		s.stopTick = nil
	}
}

// tick redraws the live lines; once none changes with time (each wait is
// due, "retrying now") the ticker stops.
func (s *screen) tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tickDone != nil {
		defer s.tickDone()
	}
	if s.stopTick == nil {
		return // stopped while this tick waited for the lock
	}
	s.redraw()
	now := s.clock.Now()
	for _, l := range s.live {
		if _, changing := l.text(now); changing {
			return
		}
	}
	s.stopTicking()
}

// close ends the output: the ticker stops, and the cursor is left at the
// start of a line after whatever was on screen.
func (s *screen) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopTicking()
	if s.open != "" || len(s.drawn) > 0 {
		s.write("\n")
	}
	s.open, s.live, s.drawn = "", nil, nil
}
