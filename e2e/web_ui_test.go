package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/scripted"
)

// TestWebPage drives the chat page's layout, rendering and controls in
// headless Chromium: the phone layout, Markdown while it streams, inert
// model markup, the message box, the retry status and Stop (by Esc and
// while offline), plain failures with Retry, Regenerate (each a new version
// of the answer: TestWebVersions has them in full), contrast in light
// and dark mode and keyboard focus. Every WebSocket frame is checked
// against the MSP schema.
func TestWebPage(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	proxy := startProxy(t, d.Addr())
	base := "http://" + proxy.addr() + "/"
	p := openBrowser(t)
	p.open(base)

	t.Run("phone", func(t *testing.T) {
		p.use(t)
		// Ten chats with long, unbroken first prompts, as a busy list has.
		c := dial(t, d.URL(), client.Options{})
		ctx := testCtx(t)
		for i := range 10 {
			s, err := c.StartSession(ctx)
			if err != nil {
				t.Fatal(err)
			}
			answerTurn(t, c, s.Session.SessionID, fmt.Sprintf("chat%d-%s", i, strings.Repeat("unbroken", 12)))
		}
		p.viewport(390, 844)
		p.open(base)
		p.waitFor("ten chats in the list", `document.querySelectorAll('#sessions button.session').length >= 10`)
		p.expectFits(390)
		p.expect("the chat list hidden behind the menu button", `getComputedStyle(document.getElementById('drawer')).visibility === 'hidden' &&
			getComputedStyle(document.getElementById('menu')).display !== 'none'`)
		p.openDrawer()
		p.expectFits(390)
		p.expect("the menu button expanded", `document.getElementById('menu').getAttribute('aria-expanded') === 'true'`)
		p.run("pressing Esc", chromedp.KeyEvent(kbEscape))
		p.waitFor("the drawer closed, focus back on the menu button", `getComputedStyle(document.getElementById('drawer')).visibility === 'hidden' &&
			document.activeElement === document.getElementById('menu')`)

		p.newChat()
		p.expect("the drawer closed after New chat", `document.getElementById('app').dataset.drawer === 'closed'`)
		url := "https://example.com/" + strings.Repeat("a-very-long-path-segment/", 12)
		p.send(scripted.Script(scripted.Step{Text: "A wide block:\n\n```text\n" + strings.Repeat("0123456789", 30) +
			"\n```\n\nand a long link " + url + "\n\n| a | b | c | d | e | f |\n|---|---|---|---|---|---|\n| " +
			strings.Repeat("cell content | ", 6) + "\n"}))
		p.waitFor("the wide answer", `document.querySelector('.msg.agent[data-status="completed"] .code-block') !== null`)
		p.expectFits(390)
		// A 200 KB paste folds to a preview and its size.
		p.send(strings.Repeat("pasted line of a long log file, 48 bytes long.\n", 4300))
		p.waitFor("the folded paste", `(() => {
			const m = [...document.querySelectorAll('.msg.user')].pop();
			const s = m.querySelector('details.paste summary');
			return s && /^Show all · 19\d KB · 4,300 lines$/.test(s.textContent) && m.getBoundingClientRect().height < 400;
		})()`)
		p.waitFor("the echo of the paste", `agentTexts('completed').some((t) => t.startsWith('pasted line'))`)
		p.expectFits(390)
		p.click("unfolding the paste", ".msg.user details.paste summary")
		p.expect("the unfolded paste scrolls inside its bubble", `(() => {
			const pre = document.querySelector('details.paste[open] pre');
			return pre.scrollHeight > pre.clientHeight && pre.clientHeight <= innerHeight * 0.5 + 1;
		})()`)
		p.expectFits(390)
		for _, w := range []int64{320, 700, 1024, 1440} {
			p.viewport(w, 800)
			p.expectFits(w)
		}
		p.run("resetting the viewport", chromedp.ResetViewport())
		p.waitFor("the desktop layout", `innerWidth > 1000 && getComputedStyle(document.getElementById('menu')).display === 'none'`)
	})

	t.Run("markdown while streaming", func(t *testing.T) {
		p.use(t)
		p.newChat()
		answer := "Here is **Go**:\n\n```go\nfunc main() {\n\tprintln(\"hi\")\n}\n```\n\nThen `inline code` and a list:\n\n- one\n- two\n\n" +
			strings.Repeat("More words follow the block. ", 40)
		p.send(scripted.Script(scripted.Step{Text: answer, Chunks: 80, ChunkDelayMs: 25}))
		p.waitFor("a code block rendered while the answer streams", `(() => {
			const m = document.querySelector('.msg.agent[data-status="inProgress"]');
			const code = m && m.querySelector('.code-block pre code.language-go');
			return code && code.textContent === 'func main() {\n\tprintln("hi")\n}\n' &&
				m.querySelector('.code-bar').textContent.startsWith('go') && m.querySelector('strong').textContent === 'Go';
		})()`)
		p.waitFor("the whole answer", `document.querySelector('.msg.agent[data-status="completed"] li') !== null`)
		p.expect("the Markdown rendered", `(() => {
			const m = document.querySelector('.msg.agent[data-status="completed"]');
			return m.querySelectorAll('li').length === 2 && m.querySelector('p > code').textContent === 'inline code' &&
				!m.textContent.includes('**') && !m.textContent.includes('`+"```"+`');
		})()`)
		// The clipboard itself belongs to the browser: what the page hands
		// it is recorded.
		p.eval(`(navigator.clipboard.writeText = async (text) => { window.copied = text; }, '')`)
		p.click("clicking Copy", ".code-block button.copy")
		p.waitFor("the button saying Copied", `document.querySelector('.code-block button.copy').textContent === 'Copied'`)
		p.expect("the code copied", `window.copied === 'func main() {\n\tprintln("hi")\n}\n'`)
	})

	t.Run("model markup stays inert", func(t *testing.T) {
		p.use(t)
		p.newChat()
		p.send(scripted.Script(scripted.Step{Text: `Look: <img src=x onerror="window.pwned='img'"> and <script>window.pwned='script'</script>` +
			"\n\n<iframe src=\"javascript:window.pwned='iframe'\"></iframe>\n\n" +
			"[a link](javascript:window.pwned='link') and <a href=\"javascript:window.pwned='a'\">raw</a> " +
			"![an image](https://example.com/x.png) and <b onmouseover=\"window.pwned='b'\">bold</b>", Chunks: 5}))
		p.waitFor("the answer", `agentTexts('completed').some((t) => t.startsWith('Look:'))`)
		p.expect("no markup from the answer in the page", `(() => {
			const m = [...document.querySelectorAll('.msg.agent')].pop();
			return m.querySelectorAll('img, script, iframe, b, [onerror], [onmouseover]').length === 0 &&
				[...m.querySelectorAll('a')].every((a) => !a.href.startsWith('javascript:')) && window.pwned === undefined;
		})()`)
		p.expect("the markup shown as text", `(() => {
			const t = [...document.querySelectorAll('.msg.agent')].pop().textContent;
			return t.includes('<img src=x onerror="window.pwned=\'img\'">') && t.includes('<script>') && t.includes('<iframe src=');
		})()`)
		p.click("hovering what would be bold", "#transcript .turn:last-of-type .msg.agent p:last-child")
		p.expect("nothing ran", `window.pwned === undefined`)
	})

	t.Run("message box", func(t *testing.T) {
		p.use(t)
		p.newChat()
		p.expect("Send disabled while the box is empty", `document.getElementById('send').disabled`)
		p.click("focusing the box", "#input")
		p.run("typing spaces", chromedp.KeyEvent("   "))
		p.expect("Send disabled for blank text", `document.getElementById('send').disabled`)
		p.run("pressing Enter", chromedp.KeyEvent("\r"))
		p.run("typing", chromedp.KeyEvent("hello there"))
		p.expect("Send enabled for text", `!document.getElementById('send').disabled`)
		p.run("pressing Enter", chromedp.KeyEvent("\r"))
		p.waitFor("the echo", `agentTexts('completed').includes('hello there')`)
		p.expect("one message sent", `document.querySelectorAll('.msg.user').length === 1 && document.getElementById('send').disabled`)
		if n := len(p.sent("turn/start")); n == 0 {
			p.fatalf("no turn/start sent")
		}
	})

	t.Run("countdown cancelled by Esc", func(t *testing.T) {
		p.use(t)
		p.newChat()
		p.send(scripted.Script(scripted.Step{Status: 429, RetryAfterMs: new(20000)}, scripted.Step{Text: "never"}))
		p.waitFor("the countdown", `/^retrying in (20|19) s · attempt 2 of 5 · rate limited$/.test(retryText())`)
		p.expect("a screen reader told", `document.getElementById('announcer').textContent.startsWith('Rate limited. Retrying in')`)
		p.waitFor("the countdown going down", `/^retrying in 1[0-8] s/.test(retryText())`)
		p.click("focusing the box", "#input")
		p.run("pressing Esc in the message box", chromedp.KeyEvent(kbEscape))
		p.waitFor("the stopped turn", `footer() === '■ stopped'`)
		p.expect("the wait cancelled, never retried", `retryText() === 'retry cancelled · attempt 2 of 5 · rate limited' &&
			document.querySelector('#transcript .turn:last-of-type .retry').dataset.state === 'cancelled'`)
		p.expect("Stop hidden", `document.getElementById('stop').hidden`)
	})

	t.Run("stop while offline", func(t *testing.T) {
		p.use(t)
		sid := p.newChat()
		p.send(scripted.Script(scripted.Step{Status: 503, RetryAfterMs: new(20000)}, scripted.Step{Text: "never"}))
		p.waitFor("the countdown", `retryText().startsWith('retrying in')`)
		proxy.refuse.Store(true)
		proxy.cut()
		p.waitFor("offline", `document.getElementById('conn').dataset.state !== 'online'`)
		p.click("clicking Stop", "#stop")
		p.waitFor("the stop queued", `document.getElementById('stop').textContent === 'Stop queued…' &&
			document.getElementById('announcer').textContent.startsWith('Offline: the stop goes')`)
		proxy.refuse.Store(false)
		p.waitFor("the stopped turn", `footer() === '■ stopped'`)
		p.expect("the wait cancelled", `retryText() === 'retry cancelled · attempt 2 of 5 · overloaded'`)
		p.waitFor("online", `document.getElementById('conn').dataset.state === 'online'`)
		ids := map[any]int{}
		for _, params := range p.sent("turn/interrupt") {
			if params["sessionId"] == sid {
				ids[params["commandId"]]++
			}
		}
		if len(ids) != 1 {
			p.fatalf("turn/interrupt commandIds %v, want the one queued", ids)
		}
	})

	t.Run("failure in plain words, then Retry", func(t *testing.T) {
		p.use(t)
		p.newChat()
		script := scripted.Script(scripted.Step{Status: 400, ErrorKind: "invalidRequest", Message: "bad things in the request"})
		p.send(script)
		p.waitFor("the failure", `footer().startsWith('✗ ')`)
		p.expect("plain words", `footer() === '✗ The model provider rejected the request. Try a different model, or rephrase the message.'`)
		p.expect("the technical detail one click away", `(() => {
			const d = document.querySelector('#transcript .turn:last-of-type .turn-footer details');
			const t = d.textContent;
			return !d.open && t.includes('invalidRequest') && t.includes('HTTP status400') && t.includes('Attempts1') &&
				t.includes('bad things in the request');
		})()`)
		p.click("clicking Retry", "#transcript .turn:last-of-type button.again")
		p.waitFor("a second version that failed the same way", `document.querySelectorAll('#transcript .turn').length === 2 && footer().startsWith('✗ ') &&
			document.querySelector('#transcript .turn:last-of-type .version-count').textContent === '2 / 2'`)
		n := 0
		for _, params := range p.sent("turn/start") {
			if strings.Contains(fmt.Sprint(params["input"]), "bad things in the request") {
				n++
			}
		}
		if n != 2 {
			p.fatalf("the script went in %d turn/starts, want 2", n)
		}
		p.expect("Retry only on the last turn", `getComputedStyle(document.querySelector('#transcript .turn:first-of-type button.again')).display === 'none'`)
	})

	t.Run("regenerate", func(t *testing.T) {
		p.use(t)
		p.newChat()
		p.send("say it again")
		p.waitFor("the answer", `footer().startsWith('✓')`)
		p.click("clicking Regenerate", "#transcript .turn:last-of-type button.again")
		p.waitFor("a second answer", `document.querySelectorAll('#transcript .turn').length === 2 && footer().startsWith('✓') &&
			agentTexts('completed').filter((t) => t === 'say it again').length === 2`)
		p.expect("the message shown once, the second version", `[...document.querySelectorAll('.msg.user')].filter((m) => m.checkVisibility()).length === 1 &&
			document.querySelector('#transcript .turn:last-of-type .version-count').textContent === '2 / 2'`)
	})

	t.Run("contrast", func(t *testing.T) {
		p.use(t)
		p.newChat()
		p.send(scripted.Script(
			scripted.Step{Text: "partial", Cut: true},
			scripted.Step{Text: "An answer with `code`, a [link](https://example.com) and\n\n> a quote\n\n```sh\necho hi\n```\n"}))
		p.waitFor("the answer", `footer().startsWith('✓')`)
		p.send(scripted.Script(scripted.Step{Status: 400, ErrorKind: "invalidRequest"}))
		p.waitFor("the failure", `footer().startsWith('✗')`)
		p.click("opening its details", "#transcript .turn:last-of-type .turn-footer summary")
		p.send(scripted.Script(scripted.Step{Status: 429, RetryAfterMs: new(30000)}, scripted.Step{Text: "later"}))
		p.waitFor("the countdown", `retryText().startsWith('retrying in')`)
		p.click("opening its details", "#transcript .turn:last-of-type .retry summary")
		p.eval(`(() => { // a banner, as an error shows it
			document.getElementById('banner-text').textContent = 'something failed (internal)';
			document.getElementById('banner').hidden = false;
			return '';
		})()`)
		for _, scheme := range []string{"light", "dark"} {
			p.colorScheme(scheme)
			p.waitFor(scheme+" mode", fmt.Sprintf(`matchMedia('(prefers-color-scheme: %s)').matches`, scheme))
			bad := p.eval(`(() => {` + contrastHelpers + `return JSON.stringify(lowContrast()); })()`)
			if bad != "[]" {
				p.fatalf("%s mode: text below 4.5:1: %s", scheme, bad)
			}
			p.expect(scheme+" mode: the notice and label colours measured", `(() => {
				const r = (sel) => contrastOf(document.querySelector(sel));
				return r('.retry .retry-text') >= 4.5 && r('.turn-footer[data-terminal="failed"] .turn-status') >= 4.5 &&
					r('.msg.agent[data-status="failed"] .tag') >= 4.5 && r('.session-meta') >= 4.5 &&
					r('.code-bar .code-lang') >= 4.5 && r('#input', '::placeholder') >= 4.5;
			})()`)
		}
		p.colorScheme("")
	})

	t.Run("keyboard", func(t *testing.T) {
		p.use(t)
		// The countdown of the last subtest still runs: Stop shows.
		p.eval(`(document.activeElement.blur(), '')`)
		seen := map[string]bool{}
		for range 200 {
			p.run("pressing Tab", chromedp.KeyEvent("\t"))
			got := p.eval(`(() => {
				const a = document.activeElement;
				if (!a || a === document.body) return 'body';
				const s = getComputedStyle(a);
				const ring = a.matches(':focus-visible') && s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2;
				const name = a.id ? '#' + a.id : a.tagName.toLowerCase() + '.' + [...a.classList].join('.') +
					(a.dataset.role ? '[' + a.dataset.role + ']' : '');
				return (ring ? '' : 'NO RING ') + name;
			})()`)
			if strings.HasPrefix(got, "NO RING ") {
				p.fatalf("%s has focus with no visible focus ring", strings.TrimPrefix(got, "NO RING "))
			}
			if seen[got] && got == "#new-chat" {
				break
			}
			seen[got] = true
		}
		for _, want := range []string{"#new-chat", "button.session[open]", "button.row-action.rename[rename]", "button.row-action.delete[delete]",
			"#model", "#input", "#stop", "button.small.edit", "button.small.copy", "summary.", "a."} {
			if !seen[want] {
				p.fatalf("Tab never reached %s; it reached %v", want, seen)
			}
		}
		p.run("stopping", chromedp.KeyEvent(kbEscape))
		p.waitFor("the stopped turn", `footer() === '■ stopped'`)
	})

	t.Run("retry budget used up, in plain words", func(t *testing.T) {
		p.use(t)
		// One token: the first failure leaves less than half.
		d := startDaemon(t, daemon.Config{RetryBudget: daemon.Budget{Tokens: 1}})
		p.open("http://" + d.Addr() + "/")
		p.newChat()
		p.send(scripted.Script(scripted.Step{Status: 503, Message: "service unavailable"}, scripted.Step{Text: "never"}))
		p.waitFor("the failure", `footer().startsWith('✗')`)
		p.expect("plain words", `footer() === '✗ The model is overloaded and the retry budget is used up. Try again in a minute.'`)
		p.expect("the detail", `(() => {
			const t = document.querySelector('#transcript .turn:last-of-type .turn-footer details').textContent;
			return t.includes('errorKindoverloaded') && t.includes('Attempts1') && t.includes('retry budget for this provider is spent');
		})()`)
	})
}

// kbEscape is the Escape key for chromedp.KeyEvent.
const kbEscape = "\u001b"

// contrastHelpers measure WCAG 2.2 contrast as the page renders it: each
// colour read from getComputedStyle (normalized through a canvas, so any
// CSS colour syntax works), text composited over the backgrounds of its
// ancestors, opacity included.
const contrastHelpers = `
const rgba = (() => {
	const c = document.createElement('canvas');
	c.width = c.height = 1;
	const x = c.getContext('2d', {willReadFrequently: true});
	return (color) => {
		x.clearRect(0, 0, 1, 1);
		x.fillStyle = '#000';
		x.fillStyle = color;
		x.fillRect(0, 0, 1, 1);
		const d = x.getImageData(0, 0, 1, 1).data;
		return [d[0], d[1], d[2], d[3] / 255];
	};
})();
const over = (top, a, under) => top.slice(0, 3).map((v, i) => v * a + under[i] * (1 - a));
const luminance = (rgb) => {
	const [r, g, b] = rgb.map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
	return 0.2126 * r + 0.7152 * g + 0.0722 * b;
};
// contrastOf is the ratio of an element's text (or of one of its pseudo
// elements) to what it sits on; 0 for an element not shown.
const contrastOf = (e, pseudo) => {
	if (!e || !e.checkVisibility({opacityProperty: true, visibilityProperty: true})) return 0;
	const chain = [];
	for (let n = e; n; n = n.parentElement) chain.unshift(n);
	let bg = matchMedia('(prefers-color-scheme: dark)').matches ? [18, 18, 18] : [255, 255, 255];
	let opacity = 1;
	for (const n of chain) {
		const s = getComputedStyle(n);
		opacity *= parseFloat(s.opacity);
		const c = rgba(s.backgroundColor);
		bg = over(c, c[3] * opacity, bg);
	}
	const fg = rgba(getComputedStyle(e, pseudo).color);
	const text = over(fg, fg[3] * opacity, bg);
	const [hi, lo] = [luminance(text), luminance(bg)].sort((a, b) => b - a);
	return (hi + 0.05) / (lo + 0.05);
};
// lowContrast lists every shown text below 4.5:1 (disabled controls are
// exempt, as WCAG exempts inactive components).
const lowContrast = () => {
	const out = [];
	for (const e of document.querySelectorAll('body *')) {
		const own = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim() !== '');
		if (!own && !['INPUT', 'SELECT', 'TEXTAREA'].includes(e.tagName)) continue;
		if (e.closest('.visually-hidden, script, noscript, option') || e.disabled) continue;
		const r = contrastOf(e);
		if (r !== 0 && r < 4.5) out.push(e.tagName.toLowerCase() + '.' + [...e.classList].join('.') + ' "' + e.textContent.trim().slice(0, 30) + '": ' + r.toFixed(2));
	}
	const r = contrastOf(document.getElementById('input'), '::placeholder');
	if (r < 4.5) out.push('#input::placeholder: ' + r.toFixed(2));
	return out;
};
`

// viewport sizes the page as a window of w×h CSS pixels.
func (p *chatPage) viewport(w, h int64) {
	p.t.Helper()
	p.run(fmt.Sprintf("sizing the window %d×%d", w, h), chromedp.EmulateViewport(w, h))
	// Crossing 700 px slides the drawer away: clicks wait until it has gone.
	p.waitFor(fmt.Sprintf("a %d px wide page", w), fmt.Sprintf(`innerWidth === %d &&
		document.getAnimations().every((a) => !(a instanceof CSSTransition))`, w))
}

// expectFits checks that nothing scrolls sideways at width w and that the
// message box and Send are on screen.
func (p *chatPage) expectFits(w int64) {
	p.t.Helper()
	p.expect(fmt.Sprintf("no horizontal scroll at %d px", w), `document.documentElement.scrollWidth <= innerWidth &&
		document.body.scrollWidth <= innerWidth`)
	p.expect(fmt.Sprintf("the message box and Send on screen at %d px", w), `['input', 'send'].every((id) => {
		const r = document.getElementById(id).getBoundingClientRect();
		return r.width > 0 && r.left >= 0 && r.right <= innerWidth && r.top >= 0 && r.bottom <= innerHeight;
	}) && document.getElementById('input').getBoundingClientRect().width >= 150`)
}

// colorScheme emulates prefers-color-scheme ("" for the system's).
func (p *chatPage) colorScheme(scheme string) {
	p.t.Helper()
	params := emulation.SetEmulatedMediaParams{}
	if scheme != "" {
		params.Features = []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}
	}
	p.run("emulating "+scheme+" mode", chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, params)
		return err
	}))
}
