package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/scripted"
)

// layoutHelpers installs, once a page load, a watch the layout checks
// wait on: framesQuiet counts the animation frames since anything last
// scrolled (a wheel's scroll animates over several frames), so a test waits
// for the page to come to rest instead of sleeping.
const layoutHelpers = `
if (!window.layoutWatch) {
	window.layoutWatch = true;
	window.framesQuiet = 0;
	document.addEventListener('scroll', () => { window.framesQuiet = 0; }, {capture: true, passive: true});
	const tick = () => { window.framesQuiet++; requestAnimationFrame(tick); };
	requestAnimationFrame(tick);
}
`

// pagePlace is where the page sits in its window: what TestWebLayout
// measures after each wheel and drag.
type pagePlace struct {
	ScrollHeight float64 `json:"scrollHeight"` // the document's
	ScrollTop    float64 `json:"scrollTop"`    // the document's
	// The body's: with overflow hidden it clips what the document would
	// scroll, and a focused element can still scroll it.
	BodyHeight  float64 `json:"bodyHeight"`
	BodyTop     float64 `json:"bodyTop"`
	InnerHeight float64 `json:"innerHeight"`
	Header      float64 `json:"header"` // the top of the chat's header bar
	Menu        float64 `json:"menu"`   // the top of ☰, -1 where it is not shown
	Sidebar     float64 `json:"sidebar"`
	Composer    float64 `json:"composer"` // the bottom of the message box's form
}

// place measures where the page sits, first waiting for whatever a wheel
// or a drag set scrolling to come to rest.
func (p *chatPage) place() pagePlace {
	p.t.Helper()
	p.eval(`(() => {` + layoutHelpers + `return ''; })()`)
	p.waitFor("the page at rest", `window.framesQuiet >= 10`)
	var pl pagePlace
	raw := p.eval(`JSON.stringify((() => {
		const top = (id) => document.getElementById(id).getBoundingClientRect().top;
		const menu = document.getElementById('menu');
		return {
			scrollHeight: document.documentElement.scrollHeight, scrollTop: document.scrollingElement.scrollTop,
			bodyHeight: document.body.scrollHeight, bodyTop: document.body.scrollTop,
			innerHeight: innerHeight, header: document.querySelector('.topbar').getBoundingClientRect().top,
			menu: getComputedStyle(menu).display === 'none' ? -1 : top('menu'), sidebar: top('drawer'),
			composer: document.getElementById('composer').getBoundingClientRect().bottom,
		};
	})())`)
	if err := json.Unmarshal([]byte(raw), &pl); err != nil {
		p.fatalf("reading the page's place %s: %v", raw, err)
	}
	return pl
}

// expectPut checks that the page has not slid in its window: the
// document is no taller than the window and unscrolled, and the header,
// ☰ and the message box are where they belong.
func (p *chatPage) expectPut(after string) {
	p.t.Helper()
	pl := p.place()
	var wrong []string
	if pl.ScrollHeight > pl.InnerHeight {
		wrong = append(wrong, fmt.Sprintf("the document is %.0f px tall in a %.0f px window", pl.ScrollHeight, pl.InnerHeight))
	}
	if pl.ScrollTop != 0 {
		wrong = append(wrong, fmt.Sprintf("the document scrolled by %.0f px", pl.ScrollTop))
	}
	if pl.BodyHeight > pl.InnerHeight {
		wrong = append(wrong, fmt.Sprintf("the body holds %.0f px in a %.0f px window", pl.BodyHeight, pl.InnerHeight))
	}
	if pl.BodyTop != 0 {
		wrong = append(wrong, fmt.Sprintf("the body scrolled by %.0f px", pl.BodyTop))
	}
	if pl.Header < 0 {
		wrong = append(wrong, fmt.Sprintf("the header at %.0f px, off screen", pl.Header))
	}
	if pl.Menu != -1 && pl.Menu < 0 {
		wrong = append(wrong, fmt.Sprintf("☰ at %.0f px, off screen", pl.Menu))
	}
	if pl.Sidebar < 0 {
		wrong = append(wrong, fmt.Sprintf("the chat list at %.0f px", pl.Sidebar))
	}
	if pl.Composer > pl.InnerHeight+0.5 {
		wrong = append(wrong, fmt.Sprintf("the message box ends at %.0f px, below the %.0f px window", pl.Composer, pl.InnerHeight))
	}
	if wrong != nil {
		p.fatalf("after %s: %s", after, strings.Join(wrong, "; "))
	}
}

// center returns the middle of the first element matching sel, in the
// window's CSS pixels.
func (p *chatPage) center(sel string) (x, y float64) {
	p.t.Helper()
	var at [2]float64
	raw := p.eval(fmt.Sprintf(`JSON.stringify((() => {
		const r = document.querySelector(%q).getBoundingClientRect();
		return [r.left + r.width / 2, r.top + r.height / 2];
	})())`, sel))
	if err := json.Unmarshal([]byte(raw), &at); err != nil {
		p.fatalf("the middle of %s: %s: %v", sel, raw, err)
	}
	return at[0], at[1]
}

// wheelOver turns the mouse wheel down over the middle of sel, n notches
// of 120 px.
func (p *chatPage) wheelOver(sel string, n int) {
	p.t.Helper()
	x, y := p.center(sel)
	p.run("moving the mouse over "+sel, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, x, y))
	for range n {
		p.wheel(x, y, 120)
	}
}

// swipe drags a finger up over the middle of sel by dy px and as far
// again past the end: touch events as a touch screen sends them.
func (p *chatPage) swipe(sel string, dy float64) {
	p.t.Helper()
	x, y := p.center(sel)
	p.run("swiping over "+sel, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		// A touch screen for the gesture only: touch emulation also turns
		// the page's (hover: none) rules on.
		enable := func(on bool) error {
			_, err := cdp.Call(ctx, t, emulation.SetTouchEmulationEnabled, emulation.SetTouchEmulationEnabledParams{Enabled: on})
			return err
		}
		if err := enable(true); err != nil {
			return err
		}
		defer enable(false)
		touch := func(typ input.DispatchTouchEventType, at float64) error {
			points := []*input.TouchPoint{}
			if typ != input.DispatchTouchEventTypeTouchEnd {
				points = append(points, &input.TouchPoint{X: x, Y: at})
			}
			_, err := cdp.Call(ctx, t, input.DispatchTouchEvent, input.DispatchTouchEventParams{Type: typ, TouchPoints: points})
			return err
		}
		if err := touch(input.DispatchTouchEventTypeTouchStart, y); err != nil {
			return err
		}
		for step := 1; step <= 20; step++ {
			if err := touch(input.DispatchTouchEventTypeTouchMove, y-2*dy*float64(step)/20); err != nil {
				return err
			}
		}
		return touch(input.DispatchTouchEventTypeTouchEnd, 0)
	}))
}

// selectDown presses the mouse in the middle of sel and drags it below
// the window's bottom edge, as selecting text past the end does: the
// browser scrolls whatever can scroll until the transcript shows its end,
// and the button is released there. Each step waits until the page has
// seen it: a loaded machine's browser, sent the whole gesture at once,
// has let the selection go and focused the message box under the pointer
// instead, and stopped short. A selection lost all the same is dragged
// again, as a hand would.
func (p *chatPage) selectDown(sel string, h int64) {
	p.t.Helper()
	x, y := p.center(sel)
	left := func(e *input.DispatchMouseEventParams) {
		e.Button = input.MouseButtonLeft
		e.Buttons = 1
		e.ClickCount = 1
	}
	move := func(what string, to float64) {
		p.run(what, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, x, to, left))
	}
	release := func() {
		p.run("releasing the mouse", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseReleased, x, float64(h)+200, left))
	}
	for try := 1; ; try++ {
		p.run("pressing the mouse on "+sel, chromedp.MouseEvent(input.DispatchMouseEventTypeMousePressed, x, y, left))
		if !p.holdsWithin(selectionIn("#transcript", false), 5*time.Second) {
			p.fatalf("a press on %s started no selection in the transcript: %s", sel, p.selectionState())
		}
		move("starting a selection", y+20)
		if p.holdsWithin(selectionIn("#transcript", true), 5*time.Second) {
			for _, to := range []float64{float64(h) - 60, float64(h) - 30, float64(h) - 2} {
				move("dragging the selection below the window", to)
			}
			// The browser scrolls a selection on a timer while the pointer
			// stays past the edge; the pointer moves on below the window
			// until the end shows.
			for round := 0; round < 10 && p.eval("String("+predicate(selectionIn("#transcript", true))+")") == "true"; round++ {
				if p.holdsWithin(transcriptAtEnd, time.Second) {
					p.t.Logf("%-32s", "the transcript dragged to its end")
					release()
					return
				}
				move("dragging on", float64(h-1-int64(round%2)))
			}
		}
		state := p.selectionState()
		release()
		if try == 3 {
			p.fatalf("the transcript never reached its end under a selection dragged below the window: %s", state)
		}
		p.t.Logf("the selection was lost or stopped short (%s): dragging again", state)
		p.eval(`(getSelection().removeAllRanges(), document.getElementById('transcript').scrollTop -= 100, '')`)
		x, y = p.center(sel)
	}
}

// selectionIn is true while the page's selection starts in the element
// sel and, when extended, holds some text.
func selectionIn(sel string, extended bool) string {
	return fmt.Sprintf(`(() => {
	const s = getSelection(), box = document.querySelector(%q);
	return s.rangeCount > 0 && box.contains(s.anchorNode) && (!%t || String(s).length > 0);
})()`, sel, extended)
}

// selectionState says where the selection and the transcript are, for a
// failure's message.
func (p *chatPage) selectionState() string {
	return p.eval(`JSON.stringify((() => {
	const t = document.getElementById('transcript'), s = getSelection(), a = document.activeElement;
	return {scrollTop: t.scrollTop, clientHeight: t.clientHeight, scrollHeight: t.scrollHeight,
		selected: String(s).length, anchor: s.anchorNode && s.anchorNode.parentElement && s.anchorNode.parentElement.className,
		focus: a && (a.id || a.className || a.nodeName)};
})())`)
}

// transcriptAtEnd is true once the transcript is scrolled to its end.
const transcriptAtEnd = `(() => {
	const t = document.getElementById('transcript');
	return t.scrollHeight > t.clientHeight * 2 && t.scrollTop + t.clientHeight >= t.scrollHeight - 1;
})()`

// wheelToEnd wheels down over the transcript until it shows its end.
func (p *chatPage) wheelToEnd() {
	p.t.Helper()
	for round := 0; p.eval("String("+transcriptAtEnd+")") != "true"; round++ {
		if round == 50 {
			p.fatalf("the transcript never reached its end")
		}
		p.wheelOver("#transcript", 20)
		p.place() // the wheels scrolled what they could
	}
}

// TestWebLayout drives the chat page's layout in headless Chromium: in a
// chat taller than the window, wheeling and dragging past the end (over
// the transcript, the chat list and the header) never slides the page,
// on a desktop window and a phone's (issue 31, defect 1); and a table
// wider than a phone's answer keeps its columns and scrolls sideways in its
// own box (defect 5).
func TestWebLayout(t *testing.T) {
	p := openBrowser(t) // first: the short lane skips here
	d := startDaemon(t, daemon.Config{})
	base := "http://" + d.Addr() + "/"
	c := dial(t, d.URL(), client.Options{})
	sid := newSession(t, c)
	// A chat of several screens: the scripted model echoes each message.
	for i := range 8 {
		answerTurn(t, c, sid, fmt.Sprintf("Message %d. %s\n\n%s", i, strings.Repeat("A line of a long answer. ", 30),
			strings.Repeat("Another paragraph of it. ", 20)))
	}
	p.open(base)

	for _, size := range []struct {
		w, h  int64
		phone bool
	}{{1280, 800, false}, {390, 844, true}} {
		t.Run(fmt.Sprintf("stays put at %d×%d", size.w, size.h), func(t *testing.T) {
			p.use(t)
			p.viewport(size.w, size.h)
			p.open(base)
			p.openChat(sid)
			p.waitFor("the chat, taller than the window", `document.querySelectorAll('#transcript .msg.agent[data-status="completed"]').length === 8 &&
				document.getElementById('transcript').scrollHeight > innerHeight * 2`)
			p.expectPut("opening the chat")

			p.eval(`(document.getElementById('transcript').scrollTop = 0, '')`)
			p.wheelToEnd()
			p.expectPut("wheeling to the end of the transcript")
			p.wheelOver("#transcript", 20)
			p.expectPut("wheeling on past the end of the transcript")

			p.eval(fmt.Sprintf(`(document.getElementById('transcript').scrollTop -= %d, '')`, size.h/2))
			p.swipe("#transcript", float64(size.h))
			p.waitFor("the transcript swiped to its end", transcriptAtEnd)
			p.expectPut("swiping past the end of the transcript")

			p.eval(`(document.getElementById('transcript').scrollTop -= 100, '')`)
			p.selectDown("#transcript .turn:last-of-type .msg.agent", size.h)
			p.expectPut("dragging a selection below the window")
			p.eval(`(getSelection().removeAllRanges(), '')`)

			p.wheelOver(".topbar", 20)
			p.expectPut("wheeling over the header")
			p.wheelOver("#composer", 20)
			p.expectPut("wheeling over the message box")

			p.openDrawer()
			p.wheelOver("#sessions", 20)
			p.wheelOver("#drawer .brand", 20)
			p.expectPut("wheeling over the chat list")
			p.swipe("#drawer .brand", float64(size.h))
			p.expectPut("swiping over the chat list")
			if size.phone {
				p.run("closing the chat list", chromedp.KeyEvent(kbEscape))
				p.waitFor("the drawer closed", `getComputedStyle(document.getElementById('drawer')).visibility === 'hidden'`)
				p.expectPut("closing the chat list")
			}
		})
	}

	t.Run("a wide table scrolls in its own box", func(t *testing.T) {
		p.use(t)
		p.viewport(390, 844)
		p.open(base)
		p.newChat()
		head := []string{"Region", "Throughput", "Availability", "Latency", "Configuration",
			"Replication", "Maintenance", "Encryption", "Compliance", "Observability"}
		row := []string{"eu-west-1", "1,200 req/s", "99.95%", "42 ms", "three replicas",
			"synchronous", "Sundays", "AES-256", "ISO 27001", "dashboards"}
		table := "| " + strings.Join(head, " | ") + " |\n|" + strings.Repeat("---|", len(head)) + "\n"
		for range 4 {
			table += "| " + strings.Join(row, " | ") + " |\n"
		}
		p.send(scripted.Script(scripted.Step{Text: "The regions compared:\n\n" + table + "\nThat is all."}))
		p.waitFor("the table", `(() => {
			const m = document.querySelector('.msg.agent[data-status="completed"]');
			return m && m.querySelectorAll('table th').length === 10 && m.querySelectorAll('table tbody tr').length === 4;
		})()`)
		p.expectFits(390)
		var got struct {
			Table, Answer, Transcript, Document [2]float64 // scrollWidth, clientWidth
			Narrow                              []string   // cells narrower than a word of theirs
		}
		raw := p.eval(`JSON.stringify((() => {
			const m = document.querySelector('.msg.agent[data-status="completed"]');
			const table = m.querySelector('table');
			const widths = (e) => [e.scrollWidth, e.clientWidth];
			const ctx = document.createElement('canvas').getContext('2d');
			const narrow = [...table.querySelectorAll('th, td')].flatMap((cell) => {
				const s = getComputedStyle(cell);
				ctx.font = s.font;
				const room = cell.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
				// Words as lines break: at spaces, and after a hyphen (eu-west-1 may
				// take two lines, as in any paragraph).
				return cell.textContent.split(/\s+|(?<=-)/).filter((w) => w && ctx.measureText(w).width > room + 0.5)
					.map((w) => w + ' (' + ctx.measureText(w).width.toFixed(1) + ' px) in ' + room.toFixed(1) + ' px');
			});
			return {Table: widths(table), Answer: widths(m), Transcript: widths(document.getElementById('transcript')),
				Document: widths(document.documentElement), Narrow: narrow};
		})())`)
		if err := json.Unmarshal([]byte(raw), &got); err != nil {
			p.fatalf("reading the widths %s: %v", raw, err)
		}
		t.Logf("scrollWidth, clientWidth: table %v, answer %v, transcript %v, document %v", got.Table, got.Answer, got.Transcript, got.Document)
		if len(got.Narrow) > 0 {
			p.fatalf("columns narrower than their words: %s", strings.Join(got.Narrow, "; "))
		}
		if got.Table[0] <= got.Table[1] {
			p.fatalf("the table is %v px wide in a %v px box: it should keep its columns and scroll", got.Table[0], got.Table[1])
		}
		for _, w := range []struct {
			what string
			sw   [2]float64
		}{{"answer", got.Answer}, {"transcript", got.Transcript}, {"document", got.Document}} {
			if w.sw[0] > w.sw[1] {
				p.fatalf("the %s overflows sideways: %v px of content in %v px", w.what, w.sw[0], w.sw[1])
			}
		}
		p.expect("the table scrolls sideways", `(() => {
			const t = document.querySelector('.msg.agent[data-status="completed"] table');
			t.scrollLeft = t.scrollWidth;
			return getComputedStyle(t).overflowX === 'auto' && t.scrollLeft > 0;
		})()`)
	})
}
