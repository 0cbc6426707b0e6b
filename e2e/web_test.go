package e2e

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"mspd/daemon"
	"mspd/internal/testlane"
	"mspd/provider/scripted"
	"mspd/server"
)

// chromiumPath is the browser the web tests drive: $MSPD_TEST_CHROMIUM,
// or Debian's Chromium.
func chromiumPath() string {
	return cmp.Or(os.Getenv("MSPD_TEST_CHROMIUM"), "/usr/bin/chromium")
}

// browserMissing tells what a browser test does when the browser at path
// cannot run: msg is empty when it can. Otherwise msg says how to get it
// and how to run the tests, and fail is ci: CI (where CI is set, as
// .ci/run sets it) always runs the browser tests, while a newcomer's
// `go test ./...` without Chromium skips them and passes.
func browserMissing(path string, ci bool) (msg string, fail bool) {
	st, err := os.Stat(path)
	if err == nil && (st.IsDir() || st.Mode()&0o111 == 0) {
		err = errors.New("not an executable file")
	}
	if err == nil {
		return "", false
	}
	msg = fmt.Sprintf("the browser tests need Chromium at %s (%v): install it with `apt-get install -y chromium` "+
		"(or set MSPD_TEST_CHROMIUM to a Chromium binary) and run them with `go test -race -run TestWebChat ./e2e`", path, err)
	if ci {
		msg += "; CI is set, so they must run"
	}
	return msg, ci
}

// requireBrowser returns the browser's path, skipping the test without
// one (failing it under CI).
func requireBrowser(t *testing.T) string {
	t.Helper()
	testlane.Slow(t, "drives headless Chromium")
	path := chromiumPath()
	switch msg, fail := browserMissing(path, os.Getenv("CI") != ""); {
	case fail:
		t.Fatal(msg)
	case msg != "":
		t.Skip(msg)
	}
	return path
}

// TestWebChat drives the chat page the daemon serves at / in headless
// Chromium: a model retry with its live countdown, a cut stream with its
// discarded attempt, Stop, restoring a chat after a reload, and a
// reconnect that resumes by cursor. Every WebSocket frame the page sends
// or receives is checked against the MSP schema.
func TestWebChat(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	base := "http://" + d.Addr() + "/"
	checkRoutes(t, base)
	p := openBrowser(t)
	p.open(base)

	var retrySession, stopSession string

	t.Run("model retry countdown", func(t *testing.T) {
		p.use(t)
		retrySession = p.newChat()
		p.send(scripted.Script(
			scripted.Step{Status: 429, RetryAfterMs: new(1500)},
			scripted.Step{Text: "Hello from the script", Chunks: 3}))
		// The countdown shows while the backoff runs (1.5 s).
		p.waitFor("the retry status counting down", `/^retrying in [12] s · attempt 2 of 5 · rate limited$/.test(retryText())`)
		p.expect("the technical detail behind a click", `(() => {
			const d = document.querySelector('.retry details');
			return !d.open && d.textContent.includes('system scripted, errorKind rateLimited, HTTP 429');
		})()`)
		p.waitFor("the answer", `agentTexts('completed').includes('Hello from the script')`)
		p.waitFor("the turn footer", `footer().startsWith('✓') && footer().includes('2 attempts')`)
		p.waitFor("the retry status resolved", `document.querySelector('.retry').dataset.state === 'retried' &&
			retryText() === 'retried · attempt 2 of 5 · rate limited'`)
		p.expect("one user message, one answer", `document.querySelectorAll('.msg.user').length === 1 &&
			document.querySelectorAll('.msg.agent').length === 1`)
	})

	t.Run("stream cut", func(t *testing.T) {
		p.use(t)
		p.newChat()
		p.send(scripted.Script(
			scripted.Step{Text: "partial answer", Chunks: 2, Cut: true},
			scripted.Step{Text: "the whole answer", Chunks: 2}))
		p.waitFor("the answer", `agentTexts('completed').includes('the whole answer')`)
		p.expect("the discarded attempt", `(() => {
			const m = document.querySelector('.msg.agent[data-status="failed"]');
			return m && m.querySelector('.text').textContent.trim() === 'partial answer' &&
				m.querySelector('.tag').textContent === 'discarded attempt';
		})()`)
		p.expect("the turn-layer retry reason", `retryText() === 'retried · attempt 2 of 5 · provider stream disconnected'`)
		p.waitFor("the turn footer", `footer().includes('2 attempts')`)
	})

	t.Run("stop", func(t *testing.T) {
		p.use(t)
		stopSession = p.newChat()
		p.send(scripted.Script(scripted.Step{Text: strings.Repeat("slow words ", 50), Chunks: 50, ChunkDelayMs: 50}))
		p.waitFor("streaming text", `agentTexts('inProgress').some((t) => t.length > 0)`)
		p.click("clicking Stop", "#stop")
		p.waitFor("the stopped turn", `footer() === '■ stopped'`)
		p.expect("the answer stopped, said once (by the footer)", `document.querySelector('.msg.agent').dataset.status === 'cancelled' &&
			document.querySelector('.msg.agent .tag').hidden`)
		p.expect("Stop hidden", `document.getElementById('stop').hidden`)
	})

	t.Run("reload restores a chat", func(t *testing.T) {
		p.use(t)
		p.open(base)
		p.waitFor("the chat list", fmt.Sprintf(`document.querySelector('#sessions [data-session-id=%q]') !== null`, retrySession))
		p.expect("newest chat first", fmt.Sprintf(`document.querySelector('#sessions button').dataset.sessionId === %q`, stopSession))
		p.expect("the script as the chat's title", fmt.Sprintf(`document.querySelector('#sessions [data-session-id=%q]').textContent.includes('Hello from the script')`, retrySession))
		p.expect("an empty transcript", `document.querySelectorAll('#transcript .msg').length === 0`)
		p.openChat(retrySession)
		p.waitFor("the restored answer", `agentTexts('completed').includes('Hello from the script')`)
		p.expect("the restored prompt", `document.querySelector('.msg.user .text').textContent.includes('mspScript')`)
		p.expect("the chat marked current", fmt.Sprintf(`document.querySelector('#sessions [aria-current="page"]').dataset.sessionId === %q`, retrySession))
		// Rebuilt from the log, old turns keep their retry rows and footers.
		p.expect("the restored retry status", `retryText() === 'retried · attempt 2 of 5 · rate limited'`)
		p.expect("the restored footer", `[...document.querySelectorAll('.turn-footer')].some((f) => f.textContent.includes('2 attempts'))`)
	})

	proxy := startProxy(t, d.Addr())

	t.Run("reconnect resumes by cursor", func(t *testing.T) {
		p.use(t)
		p.open("http://" + proxy.addr() + "/")
		sid := p.newChat()
		words := strings.Repeat("resumed ", 40)
		p.send(scripted.Script(scripted.Step{Text: words, Chunks: 40, ChunkDelayMs: 50}))
		p.waitFor("streaming text", `agentTexts('inProgress').some((t) => t.length > 0)`)
		before := proxy.accepted.Load()
		proxy.cut()
		// Sent as the connection drops: it goes (again) once reconnected,
		// and its commandId makes it one turn.
		p.send("sent while offline")
		p.waitFor("the answer after the reconnect", fmt.Sprintf(`agentTexts('completed').includes(%q)`, strings.TrimSpace(words)))
		p.waitFor("the message sent while offline", `agentTexts('completed').includes('sent while offline')`)
		p.waitFor("the turn footers", `document.querySelectorAll('.turn-footer').length === 2 &&
			[...document.querySelectorAll('.turn-footer')].every((f) => f.textContent.includes('✓'))`)
		p.expect("two user messages, two answers", `document.querySelectorAll('.msg.user').length === 2 &&
			document.querySelectorAll('.msg.agent').length === 2 &&
			[...document.querySelectorAll('.msg .tag')].every((t) => t.hidden)`)
		p.waitFor("online again", `document.getElementById('conn').dataset.state === 'online'`)
		if proxy.accepted.Load() == before {
			p.fatalf("the page did not reconnect")
		}
		ids := map[any]int{}
		for _, params := range p.sent("turn/start") {
			if strings.Contains(fmt.Sprint(params["input"]), "sent while offline") {
				ids[params["commandId"]]++
			}
		}
		if len(ids) != 1 {
			p.fatalf("turn/start of the message sent while offline: commandIds %v, want one", ids)
		}
		t.Logf("the message sent while offline went %v time(s)", ids)
		resumed := false
		for _, params := range p.sent("session/resume") {
			resumed = resumed || params["sessionId"] == sid && params["cursor"] != nil
		}
		if !resumed {
			p.fatalf("the page did not resume %s by cursor", sid)
		}
	})

	t.Run("gap filled from the log", func(t *testing.T) {
		p.use(t)
		sid := p.newChat()
		proxy.gapNextTurn.Store(true)
		p.send(scripted.Script(
			scripted.Step{Status: 503, RetryAfterMs: new(100)},
			scripted.Step{Text: "filled from the log", Chunks: 3}))
		p.waitFor("the answer", `agentTexts('completed').includes('filled from the log')`)
		p.waitFor("the turn footer", `footer().includes('2 attempts')`)
		p.expect("the paged retry notice", `retryText() === 'retried · attempt 2 of 5 · overloaded' &&
			document.querySelector('.retry details').textContent.includes('HTTP 503')`)
		if proxy.gapNextTurn.Load() {
			p.fatalf("the proxy made no gap")
		}
		paged := false
		for _, params := range p.sent("view/page") {
			paged = paged || params["sessionId"] == sid && params["cursor"] != nil && params["limit"] == 200.0
		}
		if !paged {
			p.fatalf("the page did not fill the gap with view/page")
		}
	})

	t.Run("token", func(t *testing.T) {
		p.use(t)
		const token = "s3cret-token"
		d := startDaemon(t, daemon.Config{Server: server.Config{AuthToken: token}})
		p.open("http://" + d.Addr() + "/?token=" + token)
		p.newChat()
		p.send("echo me")
		p.waitFor("the echo", `agentTexts('completed').includes('echo me')`)
	})

	t.Run("error banner", func(t *testing.T) {
		p.use(t)
		d := startDaemon(t, daemon.Config{Server: server.Config{MaxFrameBytes: 16 << 10}})
		p.open("http://" + d.Addr() + "/")
		p.newChat()
		p.send(strings.Repeat("too long ", 3000))
		p.waitFor("the error banner", `!document.getElementById('banner').hidden &&
			document.getElementById('banner-text').textContent.endsWith(' (inputTooLarge)')`)
		p.expect("the message marked not sent", `document.querySelector('.msg.user .tag').textContent === 'not sent'`)
		p.click("dismissing the banner", "#banner-close")
		p.expect("the banner gone", `document.getElementById('banner').hidden`)
	})
}

// checkRoutes checks that the page shares the listener with /msp and the
// ops endpoints without shadowing them.
func checkRoutes(t *testing.T, base string) {
	for path, want := range map[string]string{
		"":             "text/html; charset=utf-8",
		"js/main.js":   "text/javascript; charset=utf-8",
		"style.css":    "text/css; charset=utf-8",
		"livez":        "text/plain; charset=utf-8",
		"no-such-page": "",
	} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want == "" {
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("GET /%s: %s, want 404", path, resp.Status)
			}
			continue
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != want {
			t.Errorf("GET /%s: %s %q, want 200 %q", path, resp.Status, resp.Header.Get("Content-Type"), want)
		}
	}
	resp, err := http.Get(base + "msp")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotFound {
		t.Errorf("GET /msp without an upgrade: %s, want the WebSocket endpoint's refusal", resp.Status)
	}
}

// chatPage is one browser tab on the chat page.
type chatPage struct {
	t   *testing.T
	ctx context.Context

	mu         sync.Mutex
	exceptions []string
	frames     map[network.RequestID][]wsFrame
}

type wsFrame struct {
	sent bool
	data []byte
}

// helpers are page functions the assertions use.
const helpers = `
const agentTexts = (status) => [...document.querySelectorAll('.msg.agent')]
	.filter((m) => m.dataset.status === status).map((m) => m.querySelector('.text').textContent.trim());
const footer = () => {
	const f = document.querySelector('#transcript .turn:last-of-type .turn-footer .turn-status');
	return f ? f.textContent : '';
};
const retryText = () => {
	const r = document.querySelector('#transcript .turn:last-of-type .retry .retry-text');
	return r ? r.textContent : '';
};
const tools = () => [...document.querySelectorAll('#transcript .turn:last-of-type .tool')].map((r) => {
	const text = (sel) => { const e = r.querySelector(sel); return e ? e.textContent : null; };
	return {
		status: r.dataset.status, name: text('.tool-name'), server: text('.tool-server'), state: text('.tool-state'),
		time: text('.tool-time'), why: text('.tool-why'), args: text('.tool-args'), output: text('.tool-output'),
		note: text('.tool-note'), open: r.querySelector('details').open, live: r.querySelector('.tool-live') !== null,
		waiting: r.hasAttribute('data-waiting'),
	};
});
// focusRing tells whether the focused element shows a focus ring.
const focusRing = () => {
	const a = document.activeElement, s = getComputedStyle(a);
	return a.matches(':focus-visible') && s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2;
};
// cards are the approval cards of the last turn, as they read.
const cards = () => [...document.querySelectorAll('#transcript .turn:last-of-type .approval')].map((c) => {
	const text = (sel) => { const e = c.querySelector(sel); return e && !e.hidden ? e.textContent : null; };
	return {
		state: c.classList.contains('resolved') ? 'resolved' : 'pending', decision: c.dataset.decision || null,
		title: text('.approval-title'), what: text('.approval-what'), args: text('.approval-args'),
		choices: [...c.querySelectorAll(':scope > .approval-actions > button')].map((b) => b.textContent),
		feedback: c.querySelector('.approval-feedback textarea') !== null, status: text('.approval-status'),
		outcome: text('.approval-outcome'),
	};
});
// shape is what the transcript shows, turn by turn: each part's kind,
// status and text, for comparing a chat rendered live with the same chat
// rebuilt from its log.
const shape = () => JSON.stringify([...document.querySelectorAll('#transcript .turn')].map((t) => [...t.children]
	.filter((c) => !c.hidden).map((c) => [c.className.replace(' streaming', ''), c.dataset.status || '', c.textContent])));
`

// predicate wraps a page expression that may use the helpers.
func predicate(expr string) string {
	return "(() => {" + helpers + contrastHelpers + "try { return !!(" + expr + "); } catch { return false; } })()"
}

// openBrowser starts headless Chromium with a fresh profile (a temporary
// directory chromedp removes once the browser and its helpers are gone).
func openBrowser(t *testing.T) *chatPage {
	t.Helper()
	chromium := requireBrowser(t)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.WindowSize(1100, 800),
	)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc() // waits for the browser to exit and its profile to go
	})
	p := &chatPage{t: t, ctx: ctx, frames: map[network.RequestID][]wsFrame{}}
	start := time.Now()
	// The first action starts the browser; it gets no deadline, which
	// would stop the browser with it.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	t.Logf("Chromium started in %v", time.Since(start).Round(time.Millisecond))
	if err := chromedp.Listen(ctx, p.event); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.checkFrames(t) })
	return p
}

// event records what the page throws and what crosses its WebSockets. It
// runs on chromedp's reading goroutine, so it only appends.
func (p *chatPage) event(ev any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		p.exceptions = append(p.exceptions, fmt.Sprintf("%s:%d: %s", d.URL, d.LineNumber+1, msg))
	case *network.EventWebSocketFrameSent:
		p.frames[ev.RequestID] = append(p.frames[ev.RequestID], wsFrame{true, ev.Response.PayloadData})
	case *network.EventWebSocketFrameReceived:
		p.frames[ev.RequestID] = append(p.frames[ev.RequestID], wsFrame{false, ev.Response.PayloadData})
	}
}

// checkFrames validates every frame of every connection the page opened.
func (p *chatPage) checkFrames(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var sent, received int
	for _, frames := range p.frames {
		checker := validator.NewFrameChecker()
		for _, f := range frames {
			if f.sent {
				sent++
			} else {
				received++
			}
			for _, fe := range checker.Check(f.data) {
				t.Errorf("page frame (sent %v) fails the schema at %q: %s\n%s", f.sent, fe.Field, fe.Message, f.data)
			}
			if f.sent {
				checkCommandID(t, f.data)
			}
		}
	}
	t.Logf("%d connections, %d frames sent and %d received, all schema-valid", len(p.frames), sent, received)
	if sent == 0 {
		t.Error("no WebSocket frames seen")
	}
}

// sent returns the params of the requests of one method the page sent.
func (p *chatPage) sent(method string) []map[string]any {
	return p.frameParams(true, method)
}

// received returns the params of the notifications of one method the
// page received.
func (p *chatPage) received(method string) []map[string]any {
	return p.frameParams(false, method)
}

func (p *chatPage) frameParams(sent bool, method string) []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []map[string]any
	for _, frames := range p.frames {
		for _, f := range frames {
			var msg struct {
				Method string         `json:"method"`
				Params map[string]any `json:"params"`
			}
			if f.sent == sent && json.Unmarshal(f.data, &msg) == nil && msg.Method == method {
				out = append(out, msg.Params)
			}
		}
	}
	return out
}

// checkCommandID checks that a request's commandId is a UUIDv7.
func checkCommandID(t *testing.T, frame []byte) {
	var req struct {
		Method string `json:"method"`
		Params struct {
			CommandID *string `json:"commandId"`
		} `json:"params"`
	}
	if json.Unmarshal(frame, &req) != nil || req.Params.CommandID == nil {
		return
	}
	id := *req.Params.CommandID
	if len(id) != 36 || id[14] != '7' || !strings.ContainsRune("89ab", rune(id[19])) {
		t.Errorf("%s commandId %q is not a UUIDv7", req.Method, id)
	}
}

// use points failures at the running subtest.
func (p *chatPage) use(t *testing.T) {
	p.t = t
	p.mu.Lock()
	p.exceptions = nil
	p.mu.Unlock()
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, e := range p.exceptions {
			t.Errorf("page threw: %s", e)
		}
	})
}

// open loads the page and waits until it is connected.
func (p *chatPage) open(url string) {
	p.t.Helper()
	p.run("loading "+url, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#input")))
	p.waitFor("the connection", `document.getElementById('conn').dataset.state === 'online'`)
}

// newChat starts a chat and returns its session id.
func (p *chatPage) newChat() string {
	p.t.Helper()
	current := `(document.querySelector('#sessions [aria-current="page"]') || {dataset: {}}).dataset.sessionId || ''`
	before := p.eval(current)
	p.openDrawer()
	p.click("clicking New chat", "#new-chat")
	p.waitFor("the new chat in the list", fmt.Sprintf(`![%q, ''].includes(%s) &&
		document.querySelectorAll('#transcript .turn').length === 0`, before, current))
	return p.eval(current)
}

// openDrawer opens the chat list where it is a drawer (a phone-sized
// window); elsewhere the list always shows.
func (p *chatPage) openDrawer() {
	p.t.Helper()
	if p.eval(`(() => { const m = document.getElementById('menu'); return String(!!m && getComputedStyle(m).display !== 'none'); })()`) == "true" {
		p.click("opening the chat list", "#menu")
		// Clicks land where things are once the drawer stops sliding.
		p.waitFor("the open chat list", `getComputedStyle(document.getElementById('drawer')).visibility === 'visible' &&
			document.getElementById('drawer').getBoundingClientRect().left === 0`)
	}
}

// openChat opens a chat from the list.
func (p *chatPage) openChat(sessionID string) {
	p.t.Helper()
	p.openDrawer()
	p.click("opening the chat", fmt.Sprintf(`#sessions button[data-session-id=%q]`, sessionID))
}

// send puts a message in the box, as typing or pasting it would, and
// clicks Send.
func (p *chatPage) send(text string) {
	p.t.Helper()
	quoted, err := json.Marshal(text)
	if err != nil {
		p.t.Fatal(err)
	}
	p.eval(`(() => {
		const input = document.getElementById('input');
		input.value = ` + string(quoted) + `;
		input.dispatchEvent(new Event('input', {bubbles: true}));
		return '';
	})()`)
	p.click("sending", "#send")
}

// click clicks the element sel matches as a person would, once it has
// stopped moving: the page follows the end of a growing answer, and a
// click aimed at where a button was lands on whatever took its place.
// It fails, naming what was hit, if the click reached something else.
func (p *chatPage) click(what, sel string) {
	p.t.Helper()
	quoted, err := json.Marshal(sel)
	if err != nil {
		p.t.Fatal(err)
	}
	// Three equal samples 16 ms apart (timers, not animation frames,
	// which a background tab never runs), then a capturing listener
	// that records what the next click reaches.
	settled := p.awaitEval(`new Promise((resolve) => {
		const sel = ` + string(quoted) + `;
		const deadline = performance.now() + 10000;
		let last = '', same = 0, scrolled = false;
		const tick = () => {
			const e = document.querySelector(sel);
			if (!e) {
				if (performance.now() > deadline) return resolve('nothing matches ' + sel);
				return setTimeout(tick, 16);
			}
			if (!scrolled) {
				e.scrollIntoView({ block: 'nearest', inline: 'nearest' });
				scrolled = true;
			}
			const r = e.getBoundingClientRect();
			const key = [r.x, r.y, r.width, r.height].join();
			same = key === last ? same + 1 : 0;
			last = key;
			if (same < 2 && performance.now() < deadline) return setTimeout(tick, 16);
			window.__mspdClick = null;
			document.addEventListener('click', (ev) => {
				const t = ev.target;
				window.__mspdClick = t.closest && t.closest(sel) ? 'hit' :
					t.tagName.toLowerCase() + (t.id ? '#' + t.id : '') + (t.className ? '.' + String(t.className).trim().replace(/\s+/g, '.') : '');
			}, { capture: true, once: true });
			resolve('');
		};
		tick();
	})`)
	if settled != "" {
		p.fatalf("%s: %s", what, settled)
	}
	p.run(what, chromedp.Click(chromedp.CSS(sel)))
	if reached := p.eval(`String(window.__mspdClick)`); reached != "hit" {
		p.fatalf("%s: the click reached %s, not %s", what, reached, sel)
	}
}

func (p *chatPage) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.fatalf("%s: %v", what, err)
	}
}

func (p *chatPage) eval(expr string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		p.fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitFor polls a page expression until it is true. The bound is only
// for a page that never gets there: a passing wait takes milliseconds,
// but a browser on a loaded two-core machine once took over 15 s.
func (p *chatPage) waitFor(what, expr string) {
	p.t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(p.ctx, 50*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate(expr),
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(45*time.Second)))
	if err != nil {
		p.fatalf("waiting for %s: %v", what, err)
	}
	p.t.Logf("%-32s %v", what, time.Since(start).Round(time.Millisecond))
}

// holdsWithin polls a page expression for up to limit and tells whether
// it came true.
func (p *chatPage) holdsWithin(expr string, limit time.Duration) bool {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, limit+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate(expr),
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(limit)))
	return err == nil
}

// expect checks a page expression now.
func (p *chatPage) expect(what, expr string) {
	p.t.Helper()
	if p.eval("String("+predicate(expr)+")") != "true" {
		p.fatalf("expected %s", what)
	}
}

// fatalf fails the test with what the page shows, and a screenshot kept
// outside the test's temporary directories.
func (p *chatPage) fatalf(format string, args ...any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	if text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`)); err == nil {
		p.t.Logf("the page shows:\n%s", text)
	}
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		if f, err := os.CreateTemp("", "mspd-web-*.png"); err == nil {
			f.Write(png)
			f.Close()
			p.t.Logf("screenshot: %s", f.Name())
		}
	}
	p.t.Fatalf(format, args...)
}

// msProxy forwards TCP connections to a daemon, as a network between the
// browser and mspd would. It can cut every connection (a network drop), and
// it can withhold a turn's events from a WebSocket and send a view/gap in
// their place, as mspd does for a reader that fell behind.
type msProxy struct {
	ln       net.Listener
	target   atomic.Pointer[string] // the server connections go to
	accepted atomic.Int32
	// refuse closes new connections at once, as a network that is down.
	refuse atomic.Bool
	// gapNextTurn withholds the next turn's view events after its user
	// message, up to its turn/completed, which a view/gap precedes.
	gapNextTurn atomic.Bool
	// drop, when set, withholds the whole text frames from the server to
	// the page that it is true of (a frame lost to this client only).
	drop atomic.Pointer[func([]byte) bool]

	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t *testing.T, target string) *msProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &msProxy{ln: ln}
	p.retarget(target)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
	})
	return p
}

func (p *msProxy) addr() string { return p.ln.Addr().String() }

// retarget sends later connections to another server (a restarted one).
func (p *msProxy) retarget(addr string) { p.target.Store(&addr) }

func (p *msProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		if p.refuse.Load() {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", *p.target.Load())
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.forward(c, up)
	}
}

// forward copies both ways; a WebSocket connection to /msp has its server
// frames parsed, so that a gap can be made in them.
func (p *msProxy) forward(c, up net.Conn) {
	defer c.Close()
	defer up.Close()
	in := bufio.NewReader(c)
	first, err := in.Peek(len("GET /msp"))
	if err != nil {
		return
	}
	go func() {
		io.Copy(up, in)
		up.Close()
		c.Close()
	}()
	if string(first) != "GET /msp" {
		io.Copy(c, up)
		return
	}
	out := bufio.NewReader(up)
	for { // the handshake response, up to its blank line
		line, err := out.ReadString('\n')
		if _, werr := io.WriteString(c, line); err != nil || werr != nil {
			return
		}
		if line == "\r\n" {
			break
		}
	}
	g := &gapper{p: p}
	for {
		head, payload, err := readFrame(out)
		if err != nil {
			return
		}
		if head[0] != 0x81 { // anything but a whole text frame passes as is
			c.Write(append(head, payload...))
			continue
		}
		for _, f := range g.frames(payload) {
			if drop := p.drop.Load(); drop != nil && (*drop)(f) {
				continue
			}
			if _, err := c.Write(textFrame(f)); err != nil {
				return
			}
		}
	}
}

// gapper makes one gap in one connection's view events.
type gapper struct {
	p        *msProxy
	dropping bool
	last     string // the last view cursor passed on
}

// frames returns what to send for a server frame: the frame, nothing, or
// a view/gap and the frame.
func (g *gapper) frames(payload []byte) [][]byte {
	var f struct {
		Method string `json:"method"`
		Params struct {
			SessionID  string `json:"sessionId"`
			ViewCursor string `json:"viewCursor"`
			Item       struct {
				Kind string `json:"kind"`
			} `json:"item"`
		} `json:"params"`
	}
	if json.Unmarshal(payload, &f) != nil || f.Params.ViewCursor == "" {
		return [][]byte{payload}
	}
	cursor := f.Params.ViewCursor
	switch {
	case g.dropping && f.Method == "turn/completed":
		g.dropping = false
		gap, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "view/gap",
			"params": map[string]string{"sessionId": f.Params.SessionID, "after": g.last, "next": cursor}})
		g.last = cursor
		return [][]byte{gap, payload}
	case g.dropping:
		return nil
	case f.Method == "item/completed" && f.Params.Item.Kind == "userMessage" && g.p.gapNextTurn.CompareAndSwap(true, false):
		g.dropping = true
	}
	g.last = cursor
	return [][]byte{payload}
}

// readFrame reads one server (unmasked) WebSocket frame.
func readFrame(r *bufio.Reader) (head, payload []byte, err error) {
	head = make([]byte, 2)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, nil, err
	}
	n := uint64(head[1] & 0x7f)
	switch n {
	case 126, 127:
		ext := make([]byte, map[uint64]int{126: 2, 127: 8}[n])
		if _, err := io.ReadFull(r, ext); err != nil {
			return nil, nil, err
		}
		head = append(head, ext...)
		n = 0
		for _, b := range ext {
			n = n<<8 | uint64(b)
		}
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(r, payload)
	return head, payload, err
}

// textFrame encodes a whole, unmasked text frame.
func textFrame(payload []byte) []byte {
	n := len(payload)
	var head []byte
	switch {
	case n < 126:
		head = []byte{0x81, byte(n)}
	case n <= 0xffff:
		head = []byte{0x81, 126, byte(n >> 8), byte(n)}
	default:
		head = []byte{0x81, 127, 0, 0, 0, 0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	return append(head, payload...)
}

// cut closes every connection made so far.
func (p *msProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
