package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/scripted"
)

// withFind gives a page expression found(), the search results as the
// page shows them, and searchStatus(), what the search says.
func withFind(expr string) string {
	return `((found, searchStatus) => (` + expr + `))(
	() => [...document.querySelectorAll('#search-results button.session')].map((b) => ({
		id: b.dataset.sessionId, title: b.querySelector('.session-title').textContent,
		snippet: b.querySelector('.result-snippet').textContent,
		marks: [...b.querySelectorAll('mark')].map((m) => m.textContent),
	})),
	() => document.getElementById('search-status').textContent)`
}

// TestWebSearch drives the chat list's search in headless Chromium over
// 52 chats made on the wire, more than the list loads: a word of one
// chat's answer finds it alone, with its snippet's word marked (built
// from text nodes); a name prefix finds a renamed chat; a word in every
// chat pages on scroll; nothing found and a refused query are said in
// words; Esc restores the list; `/`, Ctrl+K, arrows, Tab and Enter work;
// and the phone's drawer searches and opens a result. Both requests
// (name and content) are checked on the wire.
func TestWebSearch(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	c := dial(t, d.URL(), client.Options{})
	// The answer's word is escaped in the script, so that only the
	// answer, not the user's message holding the script, has it.
	airship := newSession(t, c)
	answerTurn(t, c, airship, strings.Replace(scripted.Script(scripted.Step{Text: "The zeppelin leaves at noon from the old town."}),
		"zeppelin", `zepp\u0065lin`, 1))
	rename(t, c, airship, "Airship timetable")
	holiday := newSession(t, c)
	answerTurn(t, c, holiday, "Trip planning")
	rename(t, c, holiday, "Holiday in Kraków")
	for i := range 50 {
		answerTurn(t, c, newSession(t, c), fmt.Sprintf("Question %d about gardening", i))
	}

	base := "http://" + d.Addr() + "/"
	p := openBrowser(t)
	p.open(base)
	p.viewport(1280, 800)
	p.waitFor("the chat list", `document.querySelectorAll('#sessions button.session').length === 50`)
	p.expect("the oldest chats not loaded by the list", fmt.Sprintf(`!document.querySelector('#sessions [data-row=%q]') &&
		!document.querySelector('#sessions [data-row=%q]')`, airship, holiday))
	typeQuery := func(q string) {
		t.Helper()
		p.run("typing "+q, chromedp.Focus(chromedp.CSS("#search")), chromedp.KeyEvent(q))
	}
	clearQuery := func() {
		t.Helper()
		p.run("pressing Esc in the search box", chromedp.Focus(chromedp.CSS("#search")), chromedp.KeyEvent(kbEscape))
		p.waitFor("the list back", `document.getElementById('search').value === '' && document.getElementById('search-results').hidden &&
			!document.getElementById('sessions').hidden && document.querySelectorAll('#sessions button.session').length >= 50 &&
			document.activeElement.id === 'search'`)
	}

	t.Run("a word of an answer", func(t *testing.T) {
		p.use(t)
		p.eval(`(document.activeElement.blur(), '')`)
		p.pressSlash()
		p.waitFor("the search box focused", `document.activeElement.id === 'search' && document.getElementById('search').value === ''`)
		p.run("typing zeppel", chromedp.KeyEvent("zeppel"))
		p.waitFor("the one chat found", withFind(fmt.Sprintf(`JSON.stringify(found()) === JSON.stringify([{id: %q, title: 'Airship timetable',
			snippet: 'The zeppelin leaves at noon from the old town.', marks: ['zeppelin']}]) && searchStatus() === '1 chat matches' &&
			document.getElementById('sessions').hidden`, airship)))
		p.expect("the snippet's mark made of text", `(() => {
			const s = document.querySelector('#search-results .result-snippet');
			return s.childNodes.length === 3 && s.childNodes[0].nodeType === 3 && s.childNodes[1].tagName === 'MARK' && s.childNodes[2].nodeType === 3;
		})()`)
		var byName, byContent bool
		for _, params := range p.sent("session/list") {
			f := fmt.Sprint(params["filter"])
			byName = byName || f == "map[text:map[allOf:[zeppel] fields:[name]]]"
			byContent = byContent || f == "map[content:map[allOf:[zeppel]]]"
		}
		if !byName || !byContent {
			p.fatalf("session/list not asked by name and by content: %v", p.sent("session/list"))
		}

		p.run("pressing Down", chromedp.KeyEvent(kb.ArrowDown))
		p.waitFor("the result focused, with a ring", `document.activeElement.matches('#search-results button.session') && focusRing()`)
		p.run("pressing Enter", chromedp.KeyEvent("\r"))
		p.waitFor("the chat open", `document.getElementById('chat-title').textContent === 'Airship timetable' &&
			agentTexts('completed').includes('The zeppelin leaves at noon from the old town.') &&
			document.querySelector('#search-results button.session').getAttribute('aria-current') === 'page'`)
		p.expect("the results still shown", `!document.getElementById('search-results').hidden`)
		p.eval(`(document.activeElement.blur(), '')`)
		p.run("pressing Ctrl+K", chromedp.KeyEvent("k", chromedp.KeyModifiers(chromedp.ModifierCtrl)))
		p.waitFor("the search box focused", `document.activeElement.id === 'search'`)
		clearQuery()
	})

	t.Run("a name prefix", func(t *testing.T) {
		p.use(t)
		typeQuery("kra")
		p.waitFor("the chat named so", withFind(fmt.Sprintf(`found().length === 1 && found()[0].id === %q &&
			found()[0].title === 'Holiday in Kraków' && JSON.stringify(found()[0].marks) === '["Kraków"]'`, holiday)))
		p.run("pressing Tab", chromedp.KeyEvent("\t"))
		p.waitFor("Tab on the result", fmt.Sprintf(`document.activeElement.dataset.sessionId === %q`, holiday))
		clearQuery()
	})

	t.Run("paged on scroll", func(t *testing.T) {
		p.use(t)
		typeQuery("garden")
		p.waitFor("the first page", withFind(`found().length === 20 && searchStatus() === '20+ chats match · scroll for more'`))
		p.waitFor("every page, scrolling", withFind(`(() => {
			const r = document.getElementById('search-results');
			r.scrollTop = r.scrollHeight;
			return found().length === 50 && searchStatus() === '50 chats match';
		})()`))
		p.expect("each chat once, newest first, each with its snippet marked", withFind(`(() => {
			const f = found();
			return new Set(f.map((r) => r.id)).size === 50 && f[0].title === 'Question 49 about gardening' &&
				f[49].title === 'Question 0 about gardening' && f.every((r) => r.marks.includes('gardening') && r.snippet === r.title);
		})()`))
		clearQuery()
	})

	t.Run("nothing found, and a refused search", func(t *testing.T) {
		p.use(t)
		typeQuery("qqqzzz")
		p.waitFor("no chats", withFind(`found().length === 0 && searchStatus() === 'No chats match'`))
		clearQuery()
		typeQuery(strings.Repeat("word ", 17))
		p.waitFor("the refusal in words", withFind(`found().length === 0 &&
			searchStatus() === 'That search is too long: use at most 16 words, each under 128 letters.'`))
		p.expect("still online", `document.getElementById('conn').dataset.state === 'online'`)
		clearQuery()
	})

	t.Run("contrast", func(t *testing.T) {
		p.use(t)
		typeQuery("zeppel")
		p.waitFor("the result", withFind(`found().length === 1`))
		for _, scheme := range []string{"light", "dark"} {
			p.colorScheme(scheme)
			p.waitFor(scheme+" mode", fmt.Sprintf(`matchMedia('(prefers-color-scheme: %s)').matches`, scheme))
			if bad := p.eval(`(() => {` + contrastHelpers + `return JSON.stringify(lowContrast()); })()`); bad != "[]" {
				p.fatalf("%s mode: text below 4.5:1: %s", scheme, bad)
			}
			p.expect(scheme+" mode: the mark and the snippet measured", `contrastOf(document.querySelector('#search-results mark')) >= 4.5 &&
				contrastOf(document.querySelector('#search-results .result-snippet')) >= 4.5 && contrastOf(document.getElementById('search-status')) >= 4.5`)
		}
		p.colorScheme("")
		clearQuery()
	})

	t.Run("phone", func(t *testing.T) {
		p.use(t)
		p.viewport(390, 844)
		p.open(base)
		p.expect("the drawer closed", `getComputedStyle(document.getElementById('drawer')).visibility === 'hidden'`)
		p.eval(`(document.activeElement.blur(), '')`)
		p.pressSlash()
		p.waitFor("the drawer open, the search box focused", `document.getElementById('app').dataset.drawer === 'open' &&
			document.activeElement.id === 'search' && document.getElementById('drawer').getBoundingClientRect().left === 0`)
		p.run("typing zeppel", chromedp.KeyEvent("zeppel"))
		p.waitFor("the result", withFind(fmt.Sprintf(`found().length === 1 && found()[0].id === %q`, airship)))
		p.expectFits(390)
		p.expect("the result inside the drawer", `(() => {
			const r = document.querySelector('#search-results button.session').getBoundingClientRect();
			const d = document.getElementById('drawer').getBoundingClientRect();
			return r.left >= d.left && r.right <= d.right && r.width > 200;
		})()`)
		p.click("tapping it", "#search-results button.session")
		p.waitFor("the chat open, the drawer closed", `document.getElementById('app').dataset.drawer === 'closed' &&
			document.getElementById('chat-title').textContent === 'Airship timetable' &&
			agentTexts('completed').includes('The zeppelin leaves at noon from the old town.')`)
		p.expectFits(390)
	})
}

// TestWebCopyExportTimes drives an answer's Copy, the header's Export
// (Markdown and the log as JSON, saved through the browser's downloads)
// and message times in headless Chromium: Copy hands the clipboard the
// answer's Markdown exactly; the Markdown file holds every message in
// order, the tool call fenced; the JSON file parses to the log, item for
// item as the chat shows; each message's time is its item's recordedAt,
// shown on hover, on keyboard focus and on a tap, the same after a
// reload; and the downloads need no change of the Content Security
// Policy (no violation reported).
func TestWebCopyExportTimes(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	base := "http://" + d.Addr() + "/"
	p := openBrowser(t)
	p.open(base)
	p.viewport(1280, 800)
	p.eval(`(window.violations = [], document.addEventListener('securitypolicyviolation', (e) => window.violations.push(e.violatedDirective)), '')`)
	sid := p.newChat()
	p.send("Plan for the week")
	p.waitFor("the first answer", `footer().startsWith('✓')`)
	answer := "Here is **bold**, a list:\n\n- one\n- two\n\n```go\nfmt.Println(\"hi\")\n```\n"
	p.send(scripted.Script(scripted.Step{Text: answer, Chunks: 4}))
	p.waitFor("the Markdown answer", `document.querySelectorAll('#transcript .turn-footer').length === 2 && footer().startsWith('✓')`)
	p.send(scripted.Script(
		scripted.Step{Text: "Let me compute.", Calls: []scripted.Call{{Name: "builtin__calculator", Args: `{"expression":"6*7"}`}}},
		scripted.Step{Text: "It is 42."}))
	p.waitFor("the answer after the tool", `document.querySelectorAll('#transcript .turn-footer').length === 3 && footer().startsWith('✓')`)

	t.Run("copy an answer", func(t *testing.T) {
		p.use(t)
		p.eval(`(navigator.clipboard.writeText = async (text) => { window.copied = text; }, '')`)
		p.click("clicking Copy under the Markdown answer", "#transcript .turn:nth-of-type(2) .turn-footer button.copy-answer")
		p.waitFor("Copied, said aloud", `document.querySelector('#transcript .turn:nth-of-type(2) button.copy-answer').textContent === 'Copied' &&
			document.getElementById('announcer').textContent === 'Answer copied.'`)
		if got := p.eval(`window.copied`); got != answer {
			p.fatalf("copied %q, want the answer's Markdown %q", got, answer)
		}
		p.click("clicking Copy under the tool call's answer", "#transcript .turn:nth-of-type(3) .turn-footer button.copy-answer")
		p.waitFor("Copied", `window.copied !== `+jsString(answer))
		if got := p.eval(`window.copied`); got != "Let me compute.\n\nIt is 42." {
			p.fatalf("copied %q, want both steps' text", got)
		}
		p.expect("the accessible name", `document.querySelector('button.copy-answer').getAttribute('aria-label') === 'Copy the answer as Markdown'`)
	})

	dir := t.TempDir()
	dl := p.allowDownloads(dir)

	t.Run("export as Markdown", func(t *testing.T) {
		p.use(t)
		p.openExport()
		p.click("clicking Export as Markdown", "#export-md")
		md := string(dl.saved(filepath.Join(dir, "plan-for-the-week.md")))
		p.waitFor("the note", `document.getElementById('export-note').textContent === 'Saved as Markdown.'`)
		at := `· \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC`
		want := []string{
			`^# Plan for the week\n\n`,
			`\*\*You:\*\* ` + at + `\n\nPlan for the week\n`,
			`\*\*Assistant \([^)]+\):\*\* ` + at + `\n\nPlan for the week\n`,
			`\*\*You:\*\* ` + at + `\n\n\{"mspScript"`,
			`\*\*Assistant \([^)]+\):\*\* ` + at + `\n\n` + regexp.QuoteMeta(answer),
			`\*\*Assistant \([^)]+\):\*\* ` + at + `\n\nLet me compute\.\n`,
			"Tool call: calculator \\(builtin\\) · completed " + at + "\n\n```json\n" + regexp.QuoteMeta(`{"expression":"6*7"}`) + "\n```\n\n```\n42",
			`\*\*Assistant \([^)]+\):\*\* ` + at + `\n\nIt is 42\.\n$`,
		}
		rest := md
		for _, w := range want {
			loc := regexp.MustCompile(w).FindStringIndex(rest)
			if loc == nil {
				p.fatalf("the Markdown lacks %s after what came before; it reads:\n%s", w, md)
			}
			rest = rest[loc[1]:]
		}
		if n := strings.Count(md, "**You:**"); n != 3 {
			p.fatalf("%d user messages in the export, want 3:\n%s", n, md)
		}
		p.expect("no policy violation", `window.violations.length === 0`)
	})

	t.Run("export the log as JSON", func(t *testing.T) {
		// Headless Chromium takes one download a tab (a window would ask
		// the user about more): this one is another browser's.
		p := openBrowser(t)
		p.use(t)
		p.open(base)
		p.eval(`(window.violations = [], document.addEventListener('securitypolicyviolation', (e) => window.violations.push(e.violatedDirective)), '')`)
		p.openChat(sid)
		p.waitFor("the chat", `document.querySelectorAll('#transcript .turn-footer').length === 3`)
		dir := t.TempDir()
		dl := p.allowDownloads(dir)
		p.openExport()
		p.click("clicking Export log as JSON", "#export-json")
		raw := dl.saved(filepath.Join(dir, "plan-for-the-week.log.json"))
		var events []struct {
			Method string `json:"method"`
			Params struct {
				SessionID string `json:"sessionId"`
				Item      *struct {
					ItemID string `json:"itemId"`
					Kind   string `json:"kind"`
				} `json:"item"`
			} `json:"params"`
		}
		if err := json.Unmarshal(raw, &events); err != nil {
			p.fatalf("the export is not a JSON array of events: %v", err)
		}
		items := map[string]bool{}
		for _, ev := range events {
			if ev.Params.SessionID != sid {
				p.fatalf("an event of another session: %+v", ev)
			}
			if ev.Params.Item != nil && ev.Params.Item.Kind != "reasoning" {
				items[ev.Params.Item.ItemID] = true
			}
		}
		shown := p.eval(`String(new Set([...document.querySelectorAll('#transcript [data-item-id]')].map((e) => e.dataset.itemId)).size)`)
		if fmt.Sprint(len(items)) != shown || len(items) != 8 {
			p.fatalf("the log holds %d items, the chat shows %s (want 8: 3 messages, 4 answers, a tool call)", len(items), shown)
		}
		p.waitFor("the note", fmt.Sprintf(`document.getElementById('export-note').textContent === 'Saved the log: %d events.'`, len(events)))
		p.run("pressing Esc", chromedp.Focus(chromedp.CSS("#export-json")), chromedp.KeyEvent(kbEscape))
		p.waitFor("the menu closed, focus on Export", `!document.getElementById('export').open && document.activeElement.matches('#export > summary')`)
		p.expect("no policy violation", `window.violations.length === 0`)
	})

	times := `JSON.stringify([...document.querySelectorAll('#transcript time.msg-time')].map((t) => [t.dateTime, t.textContent, t.title]))`
	var before string
	t.Run("times", func(t *testing.T) {
		p.use(t)
		var userAt, answerAt string
		for _, params := range p.received("item/completed") {
			item, _ := params["item"].(map[string]any)
			if item["turnId"] != p.eval(`document.querySelector('#transcript .turn').dataset.turnId`) {
				continue
			}
			switch item["kind"] {
			case "userMessage":
				userAt, _ = item["recordedAt"].(string)
			case "agentMessage":
				answerAt, _ = item["recordedAt"].(string)
			}
		}
		if userAt == "" || answerAt == "" {
			p.fatalf("no recordedAt seen: user %q, answer %q", userAt, answerAt)
		}
		shows := func(sel string) string {
			return fmt.Sprintf(`getComputedStyle(document.querySelector('#transcript .turn:first-of-type %s')).opacity === '1'`, sel)
		}
		p.run("closing Export", chromedp.KeyEvent(kbEscape))
		p.waitFor("the menu closed", `!document.getElementById('export').open`)
		p.run("moving the mouse away", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, 5, 790))
		p.eval(`(document.activeElement.blur(), '')`)
		p.expect("no time shown untouched", `[...document.querySelectorAll('#transcript time.msg-time')].every((t) => getComputedStyle(t).opacity === '0')`)
		p.hover("#transcript .turn:first-of-type .msg.user")
		p.waitFor("the message's time on hover", shows(".msg-actions time.msg-time"))
		p.expect("the recorded time", fmt.Sprintf(`(() => {
			const t = document.querySelector('#transcript .turn:first-of-type .msg-actions time.msg-time');
			const at = new Date(%q);
			return t.dateTime === %q && t.textContent === new Intl.DateTimeFormat(undefined, {hour: 'numeric', minute: '2-digit'}).format(at) &&
				t.title.includes(String(at.getFullYear())) && contrastOf(t) >= 4.5;
		})()`, userAt, userAt))
		p.hover("#transcript .turn:first-of-type .msg.agent")
		p.waitFor("the answer's time on hover", shows(".turn-footer time.msg-time"))
		p.expect("its recorded time", fmt.Sprintf(`document.querySelector('#transcript .turn:first-of-type .turn-footer time').dateTime === %q`, answerAt))
		p.run("moving the mouse away", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, 5, 790))
		p.waitFor("the time hidden again", `getComputedStyle(document.querySelector('#transcript .turn:first-of-type .turn-footer time')).opacity === '0'`)
		p.run("focusing Copy by keyboard", chromedp.Focus(chromedp.CSS("#transcript .turn:first-of-type .turn-footer button.copy-answer")), chromedp.KeyEvent("\t", chromedp.KeyModifiers(chromedp.ModifierShift)), chromedp.KeyEvent("\t"))
		p.waitFor("the time shown on focus", `document.activeElement.matches('#transcript .turn:first-of-type button.copy-answer') && `+shows(".turn-footer time.msg-time"))
		p.eval(`(document.activeElement.blur(), '')`)
		p.click("tapping the footer", "#transcript .turn:first-of-type .turn-footer .turn-status")
		p.run("moving away", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, 5, 790))
		p.waitFor("the time shown after a tap", shows(".turn-footer time.msg-time"))
		before = p.eval(times)
	})

	t.Run("times after a reload", func(t *testing.T) {
		p.use(t)
		p.open(base)
		p.openChat(sid)
		p.waitFor("the chat", `document.querySelectorAll('#transcript .turn-footer').length === 3`)
		if after := p.eval(times); after != before || strings.Count(after, "Z\"") != 6 {
			p.fatalf("times after a reload %s, before %s (want 6, the same)", after, before)
		}
	})

	t.Run("phone", func(t *testing.T) {
		p.use(t)
		p.viewport(390, 844)
		p.openExport()
		p.expectFits(390)
		p.expect("the menu on screen", `(() => {
			const r = document.querySelector('.export-menu').getBoundingClientRect();
			return r.left >= 0 && r.right <= innerWidth && r.width > 150;
		})()`)
		p.run("pressing Esc", chromedp.KeyEvent(kbEscape))
		p.waitFor("the menu closed", `!document.getElementById('export').open`)
	})
}

// pressSlash presses "/" as a keyboard does: one keyDown carrying its
// text, so that a handled keydown types nothing (chromedp.KeyEvent sends
// the text as a separate char event, which typed even so).
func (p *chatPage) pressSlash() {
	p.t.Helper()
	down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Key: "/", Code: "Slash", Text: "/",
		UnmodifiedText: "/", WindowsVirtualKeyCode: 191, NativeVirtualKeyCode: 191}
	up := down
	up.Type, up.Text, up.UnmodifiedText = input.DispatchKeyEventTypeKeyUp, "", ""
	p.run("pressing /", chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, ev := range []input.DispatchKeyEventParams{down, up} {
			if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, ev); err != nil {
				return err
			}
		}
		return nil
	}))
}

// downloads are the files the browser saves in a directory, as it
// reports them finished.
type downloads struct {
	p    *chatPage
	done chan struct{} // one a download the browser finished
}

// allowDownloads has the browser save downloads in dir, reporting each
// as it finishes.
func (p *chatPage) allowDownloads(dir string) *downloads {
	p.t.Helper()
	d := &downloads{p: p, done: make(chan struct{}, 8)}
	chromedp.ListenBrowser(p.ctx, func(ev any) {
		if e, ok := ev.(*browser.EventDownloadProgress); ok && e.State == browser.DownloadProgressStateCompleted {
			select {
			case d.done <- struct{}{}:
			default:
			}
		}
	})
	if _, err := chromedp.CallBrowser(p.ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir, EventsEnabled: new(true)}); err != nil {
		p.t.Fatal(err)
	}
	return d
}

// saved waits until the browser reports a download finished, and reads
// the file it saved at path.
func (d *downloads) saved(path string) []byte {
	d.p.t.Helper()
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		entries, _ := os.ReadDir(filepath.Dir(path))
		d.p.fatalf("no download finished; %s holds %v", filepath.Dir(path), entries)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		entries, _ := os.ReadDir(filepath.Dir(path))
		d.p.fatalf("reading the download: %v; the directory holds %v", err, entries)
	}
	return b
}

// openExport opens the header's Export menu, unless it is open.
func (p *chatPage) openExport() {
	p.t.Helper()
	if p.eval(`String(document.getElementById('export').open)`) != "true" {
		p.click("opening Export", "#export > summary")
	}
	p.waitFor("the menu", `document.getElementById('export').open && !document.getElementById('export-md').disabled`)
}

// hover moves the mouse over the middle of an element.
func (p *chatPage) hover(sel string) {
	p.t.Helper()
	var xy []float64
	raw := p.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%q);
		e.scrollIntoView({block: 'center'});
		const r = e.getBoundingClientRect();
		return JSON.stringify([r.left + r.width / 2, r.top + r.height / 2]); })()`, sel))
	if err := json.Unmarshal([]byte(raw), &xy); err != nil {
		p.fatalf("locating %s: %v", sel, err)
	}
	p.run("hovering "+sel, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, xy[0], xy[1]))
}

// jsString quotes a Go string as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
