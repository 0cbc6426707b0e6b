package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/openai/openaitest"
	"mspd/provider/providertest"
	"mspd/schema/msp"
)

// longAnswer is a Markdown answer taller than any window: sections of
// prose, a code block and lists, the shapes whose height changes most as
// they are rendered again while streaming. Its sections are numbered
// from first, and it ends with a line naming last.
func longAnswer(first, sections int, last string) string {
	var b strings.Builder
	for i := first; i < first+sections; i++ {
		fmt.Fprintf(&b, "### Step %d\n\nRead the file line by line and keep what matters:\n\n", i)
		fmt.Fprintf(&b, "```go\nfunc step%d(sc *bufio.Scanner) error {\n\tfor sc.Scan() {\n\t\tfmt.Println(sc.Text())\n\t}\n\treturn sc.Err()\n}\n```\n\n", i)
		b.WriteString("- check the error\n- close the file\n  1. with defer\n  2. or at once\n\n")
	}
	b.WriteString(last + "\n")
	return b.String()
}

// streamed is a Chat Completions reply streaming text in deltas of size
// bytes (the text is ASCII), pause apart. Before delta i it holds until
// holds[i] is closed, first closing held[i] (when given) to say it is
// holding.
func streamed(text string, size int, pause time.Duration, holds map[int]<-chan struct{}, held map[int]chan struct{}) providertest.Reply {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		sse := providertest.StartSSE(w)
		sse.Frames(openaitest.Role())
		n := 0
		for i := 0; i < len(text); i += size {
			wait := time.After(pause)
			if gate, ok := holds[n]; ok {
				if h, ok := held[n]; ok {
					close(h)
				}
				select {
				case <-gate:
				case <-r.Context().Done():
					return
				}
			}
			select {
			case <-wait:
			case <-r.Context().Done():
				return
			}
			sse.Frames(openaitest.Delta(text[i:min(i+size, len(text))]))
			n++
		}
		sse.Frames(openaitest.Finish("stop"), openaitest.Usage(12, int64(n), 0, 0), openaitest.Done)
	}
}

// followSampler records, in the page, how far the transcript is from its
// end each time its content changes size, as the reader would see it:
// the page's own observer (made first) has run by then, and the frame is
// not painted yet. window.follow.off lists the distances over 2 px.
const followSampler = `(() => {
	const t = document.getElementById('transcript');
	if (window.follow) window.follow.stop();
	const f = window.follow = {samples: 0, off: []};
	const ro = new ResizeObserver(() => {
		f.samples++;
		const gap = t.scrollHeight - t.scrollTop - t.clientHeight;
		if (gap > 2) f.off.push(Math.round(gap));
	});
	for (const c of t.children) ro.observe(c);
	const mo = new MutationObserver((ms) => ms.forEach((m) => m.addedNodes.forEach((n) => n.nodeType === 1 && ro.observe(n))));
	mo.observe(t, {childList: true});
	f.stop = () => { ro.disconnect(); mo.disconnect(); };
	return '';
})()`

// atEnd is true when the transcript shows its end.
const atEnd = `(() => { const t = document.getElementById('transcript');
	return t.scrollTop + t.clientHeight >= t.scrollHeight - 2; })()`

// TestWebFollow streams long Markdown answers (code blocks, lists, in
// deltas of 6 bytes) from a fake OpenAI server into the chat page at
// 1280×800. Untouched, the transcript shows its end every time its
// content changes size while the answer streams, and at the end. A wheel
// up mid-answer leaves the reader where they scrolled while more arrives,
// and "↓ New reply below" shows, said aloud; Tab reaches it and Enter goes
// to the end, and the rest of the answer is followed again.
func TestWebFollow(t *testing.T) {
	gateA, gateB := make(chan struct{}), make(chan struct{})
	heldA, heldB := make(chan struct{}), make(chan struct{})
	second := longAnswer(1, 3, "MARK-A") + longAnswer(4, 3, "MARK-B") + longAnswer(7, 5, "the end of the second answer")
	holdAt := func(mark string) int { return (strings.Index(second, mark) + len(mark) + 5) / 6 }
	replies := []providertest.Reply{
		streamed(longAnswer(1, 8, "the end of the first answer"), 6, 3*time.Millisecond, nil, nil),
		streamed(second, 6, 3*time.Millisecond,
			map[int]<-chan struct{}{holdAt("MARK-A"): gateA, holdAt("MARK-B"): gateB},
			map[int]chan struct{}{holdAt("MARK-A"): heldA, holdAt("MARK-B"): heldB}),
	}
	fake := openaitest.New(t, "/v1", replies...)
	d := startDaemon(t, daemon.Config{Provider: "openai", Model: "gpt-4o-mini",
		Env: mapEnv(map[string]string{"OPENAI_BASE_URL": fake.URL(), "OPENAI_API_KEY": "sk-follow"})})
	p := openBrowser(t)
	p.open("http://" + d.Addr() + "/")
	p.viewport(1280, 800)

	t.Run("untouched, the answer is followed", func(t *testing.T) {
		p.use(t)
		p.newChat()
		p.eval(followSampler)
		p.send("How do I read a file?")
		p.waitFor("the answer taller than the window", `document.getElementById('transcript').scrollHeight > 2 * innerHeight`)
		p.waitFor("the whole answer", `agentTexts('completed').some((t) => t.endsWith('the end of the first answer'))`)
		p.waitFor("the end shown", atEnd)
		// The page paints deltas a frame at a time, so a loaded machine
		// sees fewer changes in size (15–22 beside two busy loops, 16 in CI):
		// what matters is that several were seen, and none off the end.
		if got := p.eval(`JSON.stringify({samples: window.follow.samples, off: window.follow.off})`); p.eval(`String(window.follow.samples > 8 && window.follow.off.length === 0)`) != "true" {
			p.fatalf("the end was not shown at every change while streaming: %s (px short of the end at each miss)", got)
		}
		t.Logf("%s size changes sampled", p.eval(`String(window.follow.samples)`))
	})

	t.Run("scrolled up, the reader stays; the button goes back", func(t *testing.T) {
		p.use(t)
		// A failure here must not hold the fake's stream for the next subtest.
		var openA, openB sync.Once
		releaseA, releaseB := func() { openA.Do(func() { close(gateA) }) }, func() { openB.Do(func() { close(gateB) }) }
		defer releaseA()
		defer releaseB()
		p.send("And with many steps?")
		<-heldA
		p.waitFor("the first part, followed", `agentTexts('inProgress').some((t) => t.includes('MARK-A')) && `+atEnd)
		p.wheel(640, 400, -600)
		p.waitFor("the reader scrolled up", `(() => { const t = document.getElementById('transcript');
			return t.scrollHeight - t.scrollTop - t.clientHeight > 300; })()`)
		p.waitFor("the scroll settled", `(() => {
			const t = document.getElementById('transcript');
			const now = t.scrollTop, was = window.lastTop;
			window.lastTop = now;
			return was === now;
		})()`)
		top := p.eval(`String(document.getElementById('transcript').scrollTop)`)
		releaseA()
		<-heldB
		p.waitFor("more of the answer below", `agentTexts('inProgress').some((t) => t.includes('MARK-B'))`)
		p.waitFor("the button saying so", `(() => { const j = document.getElementById('jump');
			return !j.hidden && j.textContent === '↓ New reply below' &&
				document.getElementById('announcer').textContent === 'New reply below.'; })()`)
		p.expect("the reader left where they were", fmt.Sprintf(`Math.abs(document.getElementById('transcript').scrollTop - %s) <= 1`, top))
		p.expect("the button in the window, on top", `(() => {
			const j = document.getElementById('jump'), r = j.getBoundingClientRect();
			return r.top >= 0 && r.bottom <= innerHeight && document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2) === j &&
				contrastOf(j) >= 4.5;
		})()`)
		// The button comes right after the transcript in Tab order.
		p.eval(`([...document.querySelectorAll('#transcript button.copy')].pop().focus({preventScroll: true}), '')`)
		p.run("pressing Tab", chromedp.KeyEvent("\t"))
		p.expect("the button focused, with a ring", `document.activeElement === document.getElementById('jump') && focusRing()`)
		p.run("pressing Enter", chromedp.KeyEvent("\r"))
		p.waitFor("the end shown, the button gone", atEnd+` && document.getElementById('jump').hidden`)
		p.eval(followSampler)
		releaseB()
		p.waitFor("the whole answer", `agentTexts('completed').some((t) => t.endsWith('the end of the second answer'))`)
		p.waitFor("the end shown", atEnd)
		p.expect("the rest followed", `window.follow.samples > 5 && window.follow.off.length === 0`)
	})
}

// TestWebFollowShortAnswers sends 21 messages in a row to a chat at
// 1280×800, each answered by a short list streamed in small deltas: the
// transcript shows its end at every change in size, and after the last.
func TestWebFollowShortAnswers(t *testing.T) {
	var replies []providertest.Reply
	for i := range 21 {
		replies = append(replies, streamed(fmt.Sprintf("Answer %d:\n\n- one\n- two\n- three\n", i), 4, 10*time.Millisecond, nil, nil))
	}
	fake := openaitest.New(t, "/v1", replies...)
	d := startDaemon(t, daemon.Config{Provider: "openai", Model: "gpt-4o-mini",
		Env: mapEnv(map[string]string{"OPENAI_BASE_URL": fake.URL(), "OPENAI_API_KEY": "sk-follow"})})
	p := openBrowser(t)
	p.use(t)
	p.open("http://" + d.Addr() + "/")
	p.viewport(1280, 800)
	p.newChat()
	p.eval(followSampler)
	for i := range 21 {
		p.send(fmt.Sprintf("List %d", i))
		p.waitFor(fmt.Sprintf("answer %d", i), fmt.Sprintf(`document.querySelectorAll('#transcript .turn-footer').length === %d`, i+1))
	}
	p.waitFor("the end shown", atEnd)
	p.expect("the end shown at every change", `window.follow.off.length === 0`)
}

// wheelEvent is Input.dispatchMouseEvent with every member sent: the typed
// params leave out a zero deltaX, which a wheel event must carry.
var wheelEvent = cdp.Command[map[string]any, cdp.Empty]{Method: input.CommandDispatchMouseEvent}

// wheel turns the mouse wheel over (x, y) by dy CSS pixels (up when
// negative), as a reader's mouse does.
func (p *chatPage) wheel(x, y, dy float64) {
	p.t.Helper()
	p.run("wheeling", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, wheelEvent, map[string]any{"type": "mouseWheel", "x": x, "y": y, "deltaX": 0, "deltaY": dy})
		return err
	}))
}

// offlineShown is true when the offline banner shows inside the window,
// nothing over it, reading "Offline · reconnecting in N s".
const offlineShown = `(() => {
	const b = document.getElementById('offline'), r = b.getBoundingClientRect();
	const top = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
	return !b.hidden && r.width > 0 && r.left >= 0 && r.top >= 0 && r.right <= innerWidth && r.bottom <= innerHeight &&
		top !== null && b.contains(top) && /^Offline · reconnecting in \d+ s$/.test(document.getElementById('offline-text').textContent +
			document.getElementById('offline-when').textContent) &&
		b.closest('[role="status"]') !== null;
})()`

// TestWebOffline stops the daemon under the chat page at 390×844 (the
// chat list a closed drawer) and at 1280×800: a banner at the top of the
// chat says "Offline · reconnecting in N s" inside the window with
// nothing over it, in a polite status, its text at 4.5:1 in light and
// dark; Retry now reconnects at once; with the daemon back on the same
// address the banner goes.
func TestWebOffline(t *testing.T) {
	dataDir := t.TempDir()
	d := startDaemon(t, daemon.Config{DataDir: dataDir})
	addr := d.Addr()
	p := openBrowser(t)
	p.use(t)
	p.open("http://" + addr + "/")
	p.newChat()
	p.send("still here?")
	p.waitFor("the answer", `footer().startsWith('✓')`)
	for _, size := range [][2]int64{{390, 844}, {1280, 800}} {
		p.viewport(size[0], size[1])
		p.expect("no banner while online", `document.getElementById('offline').hidden`)
		stopped, cancel := context.WithCancel(context.Background())
		cancel()
		d.Close(stopped)
		p.waitFor(fmt.Sprintf("the offline banner in view at %d px", size[0]), offlineShown)
		if size[0] == 390 {
			p.expect("the chat list closed", `document.getElementById('app').dataset.drawer === 'closed'`)
			for _, scheme := range []string{"dark", "light"} {
				p.colorScheme(scheme)
				p.waitFor(scheme+" mode", fmt.Sprintf(`matchMedia('(prefers-color-scheme: %s)').matches`, scheme))
				p.lowContrast("the offline banner in " + scheme + " mode")
			}
			p.colorScheme("")
		}
		// Retry now, pressed while the page waits out its backoff, tries
		// at once.
		p.waitFor("Retry now connecting at once", `document.getElementById('conn').dataset.state === 'offline' &&
			(document.getElementById('offline-retry').click(), document.getElementById('conn').dataset.state === 'connecting')`)
		d = startDaemon(t, daemon.Config{DataDir: dataDir, Listen: addr})
		// Retry now again, unless the page's own retry came first.
		p.eval(`(document.getElementById('offline').hidden || document.getElementById('offline-retry').click(), '')`)
		p.waitFor("the banner gone once reconnected", `document.getElementById('conn').dataset.state === 'online' &&
			document.getElementById('offline').hidden`)
	}
}

// chatShown is true when the page shows the i-th chat of ids: its
// address, its row marked current, its answer and its tab title.
func chatShown(ids []string, i int) string {
	return fmt.Sprintf(`location.hash === '#/c/%s' && document.querySelector('#sessions [aria-current="page"]').dataset.sessionId === %[1]q &&
		agentTexts('completed').join() === 'chat %[2]d' && document.title === 'chat %[2]d · mspd' &&
		document.getElementById('chat-title').textContent === 'chat %[2]d'`, ids[i], i)
}

// TestWebChatURL gives each chat its own address: opening one pushes
// #/c/<sessionId>; Back and Forward move between three chats and back to
// the page with none ("New chat · mspd"); a reload restores the chat its
// address names; the tab title is the chat's name and follows a rename,
// here and from another client; an address naming no chat of the reader's
// says "This chat does not exist or is not yours." and falls back to New
// chat.
func TestWebChatURL(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	base := "http://" + d.Addr() + "/"
	p := openBrowser(t)
	p.use(t)
	p.open(base)
	p.expect("the tab named New chat", `document.title === 'New chat · mspd' && location.hash === ''`)
	ids := make([]string, 3)
	for i := range ids {
		ids[i] = p.newChat()
		p.send(fmt.Sprintf("chat %d", i))
		p.waitFor(fmt.Sprintf("chat %d at its address, named", i), chatShown(ids, i))
	}
	back, forward := `(history.back(), '')`, `(history.forward(), '')`
	p.eval(back)
	p.waitFor("Back: chat 1", chatShown(ids, 1))
	p.eval(back)
	p.waitFor("Back: chat 0", chatShown(ids, 0))
	p.eval(back)
	p.waitFor("Back: no chat", `location.hash === '' && document.title === 'New chat · mspd' &&
		!document.getElementById('empty').hidden && document.querySelector('#sessions [aria-current]') === null`)
	p.eval(forward)
	p.waitFor("Forward: chat 0", chatShown(ids, 0))
	p.eval(forward)
	p.waitFor("Forward: chat 1", chatShown(ids, 1))
	p.openChat(ids[2])
	p.waitFor("chat 2 opened from the list", chatShown(ids, 2))
	p.eval(back)
	p.waitFor("Back: chat 1 again", chatShown(ids, 1))

	p.run("reloading", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#input")))
	p.waitFor("chat 1 restored from its address", chatShown(ids, 1))

	p.click("renaming chat 1", fmt.Sprintf(`#sessions [data-row=%q] [data-role="rename"]`, ids[1]))
	p.eval(`(document.querySelector('#sessions .row-form input').value = 'Renamed here', '')`)
	p.run("saving the name", chromedp.KeyEvent("\r"))
	p.waitFor("the tab named after the new name", `document.title === 'Renamed here · mspd'`)
	c := dial(t, d.URL(), client.Options{})
	if err := c.Call(testCtx(t), msp.MethodSessionRename, map[string]any{"commandId": client.NewCommandID(),
		"sessionId": ids[1], "name": "Renamed elsewhere"}, nil); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the tab following a rename elsewhere", `document.title === 'Renamed elsewhere · mspd'`)

	for _, how := range []string{"an edited address", "a new tab"} {
		if how == "a new tab" {
			p.run("leaving the page", chromedp.Navigate("about:blank"))
		}
		p.run("opening "+how, chromedp.Navigate(base+"#/c/no-such-chat"))
		p.waitFor("the chat said missing, New chat shown ("+how+")", `!document.getElementById('banner').hidden &&
			document.getElementById('banner-text').textContent === 'This chat does not exist or is not yours.' &&
			location.hash === '' && document.title === 'New chat · mspd' && !document.getElementById('empty').hidden &&
			document.querySelector('#sessions [aria-current]') === null`)
	}
}
