package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"mspd/daemon"
	"mspd/provider/scripted"
	"mspd/tool/tooltest"
)

// approvalTools starts the counting MCP test server over HTTP and a daemon
// whose scripted turns may call it as "notes", configured approval =
// "always" (every call waits for a person). It returns once the server is
// connected, with the server's URL.
func approvalTools(t *testing.T) (*tooltest.Server, string, *daemon.Daemon) {
	t.Helper()
	notes := tooltest.New("")
	hs := httptest.NewServer(notes.HTTPHandler())
	t.Cleanup(hs.Close)
	t.Cleanup(notes.Release)
	return notes, hs.URL, approvalToolsAt(t, hs.URL, 0)
}

// approvalToolsAt starts a daemon calling the MCP server at url as
// "notes", approval = "always", with timeout bounding each approval's
// wait (0: none).
func approvalToolsAt(t *testing.T, url string, timeout time.Duration) *daemon.Daemon {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "mspd.toml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "[[providers]]\ntype = \"scripted\"\n\n[[mcp]]\nname = \"notes\"\nurl = %q\napproval = \"always\"\n", url), 0o600); err != nil {
		t.Fatal(err)
	}
	connected := &logSignal{msg: "mcp server connected", seen: make(chan struct{})}
	d := startDaemon(t, daemon.Config{ConfigFile: cfg, Logger: slog.New(connected),
		Tools: daemon.Tools{NoBuiltin: true, ApprovalTimeout: timeout}})
	select {
	case <-connected.seen:
	case <-testCtx(t).Done():
		t.Fatal("the notes server never connected")
	}
	return d
}

// appendCall is a scripted step calling the notes server's append tool.
func appendCall(text string) scripted.Step {
	return scripted.Step{Calls: []scripted.Call{{Name: "notes__append", Args: `{"text":"` + text + `"}`}}}
}

// The page's clicks on a pending card's choices.
const (
	approveOnce    = "#transcript .turn:last-of-type .approval button[data-choice=approve]"
	approveForChat = "#transcript .turn:last-of-type .approval button[data-choice=approveForSession]"
	denyButton     = "#transcript .turn:last-of-type .approval button[data-choice=deny]"
	denySubmit     = "#transcript .turn:last-of-type .approval-feedback button[type=submit]"
)

// pendingCard is the wait for the last turn's one pending card.
const pendingCard = `cards().length >= 1 && cards().at(-1).state === 'pending' &&
	cards().at(-1).choices.join() === 'Approve once,Approve for this chat,Deny'`

// TestWebApprovals drives approvals through the chat page in headless
// Chromium, against a real daemon whose scripted model calls a tool of a
// test MCP server configured approval = "always": the card (the tool, its
// server and arguments as text, three choices, a labelled group that
// screen readers hear arrive), each decision and its outcome (the tool
// run once, or not at all; the denial's feedback reaching the model; a
// chat-wide grant), the card after a reload, in a second tab, a decision
// refused as already taken, a stop and a timeout, the approval mode
// setting, the keyboard-only path, and the card at phone and desktop
// sizes in light and dark mode. Every frame is checked against the MSP
// schema, and every approval/request the page got was answered with an
// empty receipt.
func TestWebApprovals(t *testing.T) {
	notes, notesURL, d := approvalTools(t)
	base := "http://" + d.Addr() + "/"
	p := openBrowser(t)
	p.open(base)
	t.Cleanup(func() { p.checkReceipts(t) })
	runs := func() int { return notes.Count(tooltest.Append) }
	var sid string

	t.Run("approve once", func(t *testing.T) {
		p.use(t)
		sid = p.newChat()
		p.send(scripted.Script(
			scripted.Step{Text: "I'll add it.", Calls: []scripted.Call{{Name: "notes__append", Args: `{"text":"buy <b>milk</b>"}`}}},
			scripted.Step{Text: "Added."}))
		p.waitFor("the approval card", pendingCard)
		p.expect("what the tool is: its name, server and arguments, as text", `(() => {
			const c = cards()[0];
			return c.title === 'append needs your approval' && c.what === 'Server notes · asked as notes__append · arguments:' &&
				c.args === '{\n  "text": "buy <b>milk</b>"\n}' && document.querySelector('#transcript .approval b') === null;
		})()`)
		p.expect("the row waiting, folded, the card under it", `(() => {
			const r = tools()[0];
			return tools().length === 1 && r.status === 'inProgress' && r.state === 'waiting for approval' && r.waiting && !r.live && !r.open &&
				document.querySelector('#transcript .tool > details + .approval').checkVisibility();
		})()`)
		p.waitFor("the announcement", `document.getElementById('announcer').textContent === 'append needs your approval.'`)
		// Send was clicked, so nobody is typing: focus moves to the card.
		p.expect("the card focused", `document.activeElement === document.querySelector('#transcript .approval')`)
		if role, name := p.accessibleNode("#transcript .approval"); role != "group" || name != "append needs your approval" {
			p.fatalf("the card is a %q named %q, want a group named %q", role, name, "append needs your approval")
		}
		if name := p.accessibleName("#transcript .tool summary"); name != "Tool call: append · notes · waiting for approval" {
			p.fatalf("the row's accessible name is %q", name)
		}
		if n := runs(); n != 0 {
			p.fatalf("the tool ran %d times before anyone approved", n)
		}
		p.click("clicking Approve once", approveOnce)
		p.waitFor("the call run, the card its outcome", `tools()[0].status === 'completed' && tools()[0].output === 'appended 1' &&
			cards()[0].state === 'resolved' && cards()[0].outcome === '✓ Approved once' && cards()[0].choices.length === 0`)
		p.waitFor("the answer", `footer().startsWith('✓') && agentTexts('completed').includes('Added.')`)
		if n := runs(); n != 1 {
			p.fatalf("the tool ran %d times, want once", n)
		}
		asked := p.received("approval/request")
		decided := p.sent("approval/decide")
		if len(asked) != 1 || len(decided) != 1 {
			p.fatalf("%d approval/request received, %d approval/decide sent; want one each", len(asked), len(decided))
		}
		checkDecision(p, asked[0], decided[0], "approve", "")
	})

	t.Run("deny with feedback", func(t *testing.T) {
		p.use(t)
		p.send(scripted.Script(appendCall("sell the car"), scripted.Step{EchoRequest: true}))
		p.waitFor("the approval card", pendingCard)
		p.click("clicking Deny", denyButton)
		p.waitFor("the feedback box, focused", `cards()[0].feedback && document.activeElement.matches('.approval-feedback textarea') &&
			document.querySelector(`+"`"+denyButton+"`"+`).getAttribute('aria-expanded') === 'true'`)
		if name := p.accessibleName(".approval-feedback textarea"); name != "Tell the model why (optional)" {
			p.fatalf("the feedback box is named %q", name)
		}
		p.run("typing why", chromedp.KeyEvent("not <i>this</i> one"))
		p.click("clicking the form's Deny", denySubmit)
		p.waitFor("the call rejected, saying why", `(() => {
			const r = tools()[0];
			return r.status === 'rejected' && r.state === 'rejected' && r.why === 'the user denied it' && r.time === null &&
				cards()[0].outcome === '✗ Denied: not <i>this</i> one';
		})()`)
		p.waitFor("the model's answer", `footer().startsWith('✓')`)
		p.expect("the model told of the denial and why", `(() => {
			const t = agentTexts('completed').at(-1);
			// The echo is JSON, its < escaped.
			return t.includes('the call was denied: the user denied it') && t.includes('The user said: not \\u003ci\\u003ethis\\u003c/i\\u003e one');
		})()`)
		if n := runs(); n != 1 {
			p.fatalf("the tool ran %d times, want once in all (the denied call never)", n)
		}
		asked := p.received("approval/request")
		decided := p.sent("approval/decide")
		checkDecision(p, asked[len(asked)-1], decided[len(decided)-1], "deny", "not <i>this</i> one")
	})

	t.Run("approve for this chat", func(t *testing.T) {
		p.use(t)
		p.newChat()
		p.send(scripted.Script(appendCall("one"), appendCall("two"), scripted.Step{Text: "Both added."}))
		p.waitFor("the approval card", pendingCard)
		p.click("clicking Approve for this chat", approveForChat)
		p.waitFor("the answer", `footer().startsWith('✓') && agentTexts('completed').includes('Both added.')`)
		p.expect("both calls run, only the first asked", `(() => {
			const r = tools();
			return r.length === 2 && r.every((x) => x.status === 'completed') && cards().length === 1 &&
				cards()[0].outcome === '✓ Approved for this chat' &&
				document.querySelectorAll('#transcript .turn:last-of-type .tool')[1].querySelector('.approval') === null;
		})()`)
		p.send(scripted.Script(appendCall("three"), scripted.Step{Text: "Added again."}))
		p.waitFor("a later turn's answer", `footer().startsWith('✓') && agentTexts('completed').includes('Added again.')`)
		p.expect("its call run without a card", `tools().length === 1 && tools()[0].status === 'completed' && cards().length === 0`)
		if n := runs(); n != 4 {
			p.fatalf("the tool ran %d times in all, want 4", n)
		}
	})

	t.Run("a reload while it waits", func(t *testing.T) {
		p.use(t)
		pending := p.newChat()
		p.send(scripted.Script(appendCall("after the reload"), scripted.Step{Text: "Added after all."}))
		p.waitFor("the approval card", pendingCard)
		listed := len(p.sent("approval/listPending"))
		p.open(base)
		p.expect("no card before the chat is open", `document.querySelectorAll('.approval').length === 0`)
		p.openChat(pending)
		p.waitFor("the card back", pendingCard+` && tools()[0].waiting`)
		p.waitFor("the announcement", `document.getElementById('announcer').textContent === 'append needs your approval.'`)
		if n := len(p.sent("approval/listPending")); n <= listed {
			p.fatalf("the page did not list the pending approvals after the reload")
		}
		p.click("clicking Approve once", approveOnce)
		p.waitFor("the call run", `tools()[0].status === 'completed' && cards()[0].outcome === '✓ Approved once'`)
		p.waitFor("the answer", `footer().startsWith('✓') && agentTexts('completed').includes('Added after all.')`)

		// Outcomes are rebuilt from the log.
		p.open(base)
		p.openChat(sid)
		p.waitFor("the first chat", `document.querySelectorAll('#transcript .turn-footer').length === 2 && footer().startsWith('✓')`)
		p.expect("its cards' outcomes", `(() => {
			const all = [...document.querySelectorAll('#transcript .approval-outcome')].map((o) => o.textContent);
			return all.join('|') === '✓ Approved once|✗ Denied' && document.querySelectorAll('#transcript .approval button').length === 0;
		})()`)
	})

	t.Run("two tabs", func(t *testing.T) {
		p.use(t)
		// The second tab reaches the daemon through a proxy that can lose
		// approval/resolved on the way.
		proxy := startProxy(t, d.Addr())
		q := p.newTab(t)
		t.Cleanup(func() { q.checkReceipts(t) })
		shared := p.newChat()
		q.open("http://" + proxy.addr() + "/")
		q.openChat(shared)
		q.waitFor("the chat open", fmt.Sprintf(`document.querySelector('#sessions [aria-current="page"]').dataset.sessionId === %q`, shared))
		p.send(scripted.Script(appendCall("from two tabs"), scripted.Step{Text: "Not added."}))
		p.waitFor("the card in the first tab", pendingCard)
		q.waitFor("the card in the second tab", pendingCard)
		q.click("clicking Deny in the second tab", denyButton)
		q.waitFor("the feedback box", `document.activeElement.matches('.approval-feedback textarea')`)
		q.click("denying without a word", denySubmit)
		p.waitFor("the first tab's card its outcome", `cards()[0].outcome === '✗ Denied' && tools()[0].status === 'rejected'`)
		q.waitFor("the second tab's too", `cards()[0].outcome === '✗ Denied' && tools()[0].status === 'rejected'`)
		p.waitFor("the answer", `footer().startsWith('✓')`)

		// The second tab loses the next resolution, and decides too late.
		drop := func(f []byte) bool { return bytes.Contains(f, []byte(`"method":"approval/resolved"`)) }
		proxy.drop.Store(&drop)
		p.send(scripted.Script(appendCall("decided twice"), scripted.Step{Text: "Added once."}))
		p.waitFor("the card in the first tab", pendingCard)
		q.waitFor("the card in the second tab", pendingCard)
		before := runs()
		p.click("clicking Approve once in the first tab", approveOnce)
		p.waitFor("the call run", `tools()[0].status === 'completed' && cards()[0].outcome === '✓ Approved once'`)
		q.waitFor("the call run, seen in the second tab", `tools()[0].status === 'completed'`)
		q.expect("its card still asking (it lost the resolution)", pendingCard)
		q.click("clicking Approve once in the second tab", approveOnce)
		q.waitFor("the refusal in words", `cards()[0].outcome === '✓ Already decided elsewhere: Approved once'`)
		q.expect("no error banner, the page alive", `document.getElementById('banner').hidden && document.getElementById('conn').dataset.state === 'online'`)
		if n := runs() - before; n != 1 {
			p.fatalf("decided in two tabs, the tool ran %d times, want once", n)
		}
	})

	t.Run("stopped while it waits", func(t *testing.T) {
		p.use(t)
		p.newChat()
		p.send(scripted.Script(appendCall("never"), scripted.Step{Text: "never"}))
		p.waitFor("the approval card", pendingCard)
		p.click("clicking Stop", "#stop")
		p.waitFor("the stopped turn", `footer() === '■ stopped'`)
		p.waitFor("the card's outcome", `cards()[0].outcome === '■ Stopped: the answer was stopped before anyone decided' &&
			tools()[0].status === 'cancelled'`)
	})

	t.Run("approval mode", func(t *testing.T) {
		p.use(t)
		mode := p.newChat()
		p.expect("the default mode", `document.getElementById('approval-mode').value === 'promptUnmatched' &&
			document.getElementById('approval-mode').selectedOptions[0].textContent === 'Ask for marked tools'`)
		if name := p.accessibleName("#approval-mode"); name != "Approvals" {
			p.fatalf("the setting is named %q", name)
		}
		p.pickApprovalMode("Never ask")
		p.waitFor("the change sent", `document.getElementById('announcer').textContent === 'Tool approvals: Never ask.'`)
		set := p.sent("session/setApprovalMode")
		if len(set) != 1 || set[0]["mode"] != "allowAll" || set[0]["sessionId"] != mode {
			p.fatalf("session/setApprovalMode sent %v", set)
		}
		before := runs()
		p.send(scripted.Script(appendCall("unasked"), scripted.Step{Text: "Added unasked."}))
		p.waitFor("the answer", `footer().startsWith('✓') && agentTexts('completed').includes('Added unasked.')`)
		p.expect("the call run without a card", `tools()[0].status === 'completed' && cards().length === 0`)
		if n := runs() - before; n != 1 {
			p.fatalf("the tool ran %d times, want once", n)
		}
		p.pickApprovalMode("Deny marked tools")
		p.waitFor("the change sent", `document.getElementById('announcer').textContent === 'Tool approvals: Deny marked tools.'`)
		p.send(scripted.Script(appendCall("refused"), scripted.Step{Text: "Refused."}))
		p.waitFor("the answer", `footer().startsWith('✓') && agentTexts('completed').includes('Refused.')`)
		p.expect("the call denied without asking", `tools()[0].status === 'rejected' &&
			cards()[0].outcome === "✗ Denied: this chat's approval setting denies the tool"`)
		if n := runs() - before; n != 1 {
			p.fatalf("the denied call ran")
		}
		p.open(base)
		p.openChat(mode)
		p.waitFor("the chat's mode after a reload", `document.getElementById('approval-mode').value === 'denyUnmatched' && cards().length === 1`)
		p.openChat(sid)
		p.waitFor("another chat's mode", `document.getElementById('approval-mode').value === 'promptUnmatched'`)

		// Picked with no chat open, it is the next new chat's.
		p.open(base)
		p.pickApprovalMode("Ask for every tool")
		p.waitFor("the pick", `document.getElementById('announcer').textContent === 'Tool approvals for the next chat: Ask for every tool.'`)
		next := p.newChat()
		p.expect("the new chat's mode", `document.getElementById('approval-mode').value === 'onRequest'`)
		started := false
		for _, s := range p.sent("session/start") {
			started = started || s["approvalMode"] == "onRequest"
		}
		if !started {
			p.fatalf("session/start of %s did not carry the mode picked", next)
		}
	})

	t.Run("keyboard only", func(t *testing.T) {
		p.use(t)
		p.newChat()
		script, _ := json.Marshal(scripted.Script(appendCall("by keyboard"), scripted.Step{Text: "Added by keyboard."}))
		p.eval(`(() => {
			const input = document.getElementById('input');
			input.focus();
			input.value = ` + string(script) + `;
			input.dispatchEvent(new Event('input', {bubbles: true}));
			return '';
		})()`)
		p.run("pressing Enter", chromedp.KeyEvent("\r"))
		p.waitFor("the approval card", pendingCard)
		p.expect("focus left in the message box", `document.activeElement === document.getElementById('input')`)
		p.run("pressing Shift+Tab", chromedp.KeyEvent("\t", chromedp.KeyModifiers(chromedp.ModifierShift)))
		p.expect("Deny focused, with a ring", `document.activeElement.matches('.approval button[data-choice=deny]') && focusRing()`)
		p.run("pressing Enter", chromedp.KeyEvent("\r"))
		p.waitFor("the feedback box, focused", `document.activeElement.matches('.approval-feedback textarea')`)
		p.run("pressing Esc", chromedp.KeyEvent(kbEscape))
		p.waitFor("the box closed, focus back on Deny", `!cards()[0].feedback && document.activeElement.matches('.approval button[data-choice=deny]')`)
		p.expect("the answer not stopped by that Esc", `!document.getElementById('stop').hidden && document.getElementById('stop').textContent === 'Stop'`)
		p.run("pressing Shift+Tab", chromedp.KeyEvent("\t", chromedp.KeyModifiers(chromedp.ModifierShift)))
		p.expect("Approve for this chat focused", `document.activeElement.matches('.approval button[data-choice=approveForSession]') && focusRing()`)
		p.run("pressing Shift+Tab", chromedp.KeyEvent("\t", chromedp.KeyModifiers(chromedp.ModifierShift)))
		p.expect("Approve once focused", `document.activeElement.matches('.approval button[data-choice=approve]') && focusRing()`)
		p.run("pressing Space", chromedp.KeyEvent(" "))
		p.waitFor("approved, focus on the outcome", `cards()[0].outcome === '✓ Approved once' && document.activeElement.matches('.approval-outcome')`)
		p.waitFor("the answer", `footer().startsWith('✓') && agentTexts('completed').includes('Added by keyboard.')`)
		p.waitFor("the outcome said", `document.getElementById('announcer').textContent === 'append: Approved once.' ||
			document.getElementById('announcer').textContent === 'Answer complete.'`)
	})

	t.Run("timed out", func(t *testing.T) {
		p.use(t)
		timed := approvalToolsAt(t, notesURL, 1500*time.Millisecond)
		p.open("http://" + timed.Addr() + "/")
		p.newChat()
		p.send(scripted.Script(appendCall("too late"), scripted.Step{Text: "Nobody answered."}))
		p.waitFor("the approval card", pendingCard)
		p.waitFor("the card's outcome", `cards()[0].outcome === '✗ Timed out: nobody decided in time' && tools()[0].status === 'rejected' &&
			tools()[0].why === 'nobody approved it within 1.5s'`)
		p.waitFor("the answer", `footer().startsWith('✓') && agentTexts('completed').includes('Nobody answered.')`)
		p.open(base)
	})

	t.Run("phone and desktop, light and dark", func(t *testing.T) {
		p.use(t)
		p.newChat()
		p.send(scripted.Script(appendCall("first"), scripted.Step{Text: "Added."}))
		p.waitFor("the approval card", pendingCard)
		p.click("clicking Approve once", approveOnce)
		p.waitFor("the answer", `footer().startsWith('✓')`)
		p.send(scripted.Script(appendCall("second"), scripted.Step{Text: "Not added."}))
		p.waitFor("the approval card", pendingCard)
		p.click("clicking Deny", denyButton)
		p.run("typing why", chromedp.KeyEvent("no"))
		p.click("denying", denySubmit)
		p.waitFor("the answer", `footer().startsWith('✓')`)
		p.send(scripted.Script(appendCall(strings.Repeat("a long line of text ", 30)), scripted.Step{Text: "Added."}))
		p.waitFor("the approval card", pendingCard)
		p.click("clicking Deny", denyButton)
		p.waitFor("the feedback box", `cards()[0].feedback`)
		for _, size := range [][2]int64{{390, 844}, {1280, 800}} {
			p.viewport(size[0], size[1])
			p.expectFits(size[0])
			p.eval(`(document.querySelector('#transcript .turn:last-of-type .approval').scrollIntoView({block: 'nearest'}), '')`)
			p.waitFor(fmt.Sprintf("the card whole on screen at %d px", size[0]), `(() => {
				const t = document.getElementById('transcript').getBoundingClientRect();
				const c = document.querySelector('#transcript .turn:last-of-type .approval');
				const b = c.getBoundingClientRect();
				return b.left >= t.left && b.right <= t.right && b.top >= t.top - 1 && b.bottom <= t.bottom + 1 &&
					c.scrollWidth <= c.clientWidth + 1 && [...c.querySelectorAll('button')].every((x) => {
						const r = x.getBoundingClientRect();
						return r.width >= 24 && r.height >= 24 && r.right <= b.right;
					});
			})()`)
			for _, scheme := range []string{"light", "dark"} {
				p.colorScheme(scheme)
				p.waitFor(scheme+" mode", fmt.Sprintf(`matchMedia('(prefers-color-scheme: %s)').matches`, scheme))
				if bad := p.eval(`(() => {` + contrastHelpers + `return JSON.stringify(lowContrast()); })()`); bad != "[]" {
					p.fatalf("%d px, %s mode: text below 4.5:1: %s", size[0], scheme, bad)
				}
				low := p.eval(`(() => {` + contrastHelpers + `
					const low = [];
					for (const sel of ['.approval-title', '.approval-what', '.approval-args', '.approval-feedback label',
						'.approval button[data-choice=approve]', '.approval button[data-choice=approveForSession]', '.approval button[data-choice=deny]',
						'.approval[data-decision=approved] .approval-outcome', '.approval[data-decision=denied] .approval-outcome',
						'.tool[data-waiting] .tool-state']) {
						const e = document.querySelector('#transcript ' + sel);
						const r = contrastOf(e);
						if (r < 4.5) low.push(sel + ': ' + r.toFixed(2));
					}
					return JSON.stringify(low);
				})()`)
				if low != "[]" {
					p.fatalf("%d px, %s mode: approval parts below 4.5:1 (0: not shown): %s", size[0], scheme, low)
				}
			}
			p.colorScheme("")
		}
		p.run("resetting the viewport", chromedp.ResetViewport())
		p.click("denying", denySubmit)
		p.waitFor("the answer", `footer().startsWith('✓')`)
	})
}

// checkDecision checks an approval/decide the page sent against the
// approval/request it answers: the same session and approval, the
// request's currentRequirementId, the choice and feedback (none: "").
func checkDecision(p *chatPage, asked, decided map[string]any, choice, feedback string) {
	p.t.Helper()
	want, _ := json.Marshal(asked["currentRequirementId"])
	got, _ := json.Marshal(decided["requirementId"])
	fb, hasFeedback := decided["feedback"]
	switch {
	case decided["approvalId"] != asked["approvalId"] || decided["sessionId"] != asked["sessionId"]:
		p.fatalf("decided %v for the request %v", decided, asked)
	case string(got) != string(want):
		p.fatalf("requirementId %s, want the request's currentRequirementId %s", got, want)
	case decided["choiceId"] != choice:
		p.fatalf("choiceId %v, want %s", decided["choiceId"], choice)
	case feedback == "" && hasFeedback, feedback != "" && fb != feedback:
		p.fatalf("feedback %v, want %q", fb, feedback)
	}
}

// checkReceipts checks that the page answered every server request it got
// with an empty result, on the connection the request came on.
func (p *chatPage) checkReceipts(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	asked := 0
	for _, frames := range p.frames {
		answers := map[string]string{} // request id → the answer's result
		for _, f := range frames {
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Result json.RawMessage `json:"result"`
			}
			if json.Unmarshal(f.data, &msg) == nil && f.sent && msg.Method == "" && msg.ID != nil {
				answers[string(msg.ID)] = string(msg.Result)
			}
		}
		for _, f := range frames {
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if f.sent || json.Unmarshal(f.data, &msg) != nil || msg.Method == "" || msg.ID == nil {
				continue
			}
			asked++
			if got, ok := answers[string(msg.ID)]; !ok || got != "{}" {
				t.Errorf("the page answered %s %s with %q, want the receipt {}", msg.Method, msg.ID, got)
			}
		}
	}
	t.Logf("%d server requests, each answered with a receipt", asked)
}

// newTab opens a second tab of the browser, its frames checked like the
// first's.
func (p *chatPage) newTab(t *testing.T) *chatPage {
	t.Helper()
	ctx, cancel := chromedp.NewContext(p.ctx)
	t.Cleanup(cancel)
	q := &chatPage{t: t, ctx: ctx, frames: map[network.RequestID][]wsFrame{}}
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	if err := chromedp.Listen(ctx, q.event); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.checkFrames(t) })
	q.use(t)
	return q
}

// pickApprovalMode chooses an approval mode by its label, as a user would.
func (p *chatPage) pickApprovalMode(label string) {
	p.t.Helper()
	p.eval(fmt.Sprintf(`(() => {
		const s = document.getElementById('approval-mode');
		s.value = [...s.options].find((o) => o.textContent === %q).value;
		s.dispatchEvent(new Event('change'));
		return '';
	})()`, label))
}

// accessibleNode is the role and name Chromium's accessibility tree gives
// the first element matching sel.
func (p *chatPage) accessibleNode(sel string) (role, name string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	obj, err := chromedp.Call(ctx, runtime.Evaluate, runtime.EvaluateParams{Expression: fmt.Sprintf(`document.querySelector(%q)`, sel)})
	if err != nil || obj.Result == nil || obj.Result.ObjectID == "" {
		p.fatalf("finding %s: %v", sel, err)
	}
	tree, err := chromedp.Call(ctx, accessibility.GetPartialAXTree, accessibility.GetPartialAXTreeParams{
		ObjectID: obj.Result.ObjectID, FetchRelatives: new(false)})
	if err != nil || len(tree.Nodes) == 0 || tree.Nodes[0].Name == nil || tree.Nodes[0].Role == nil {
		p.fatalf("the accessibility node of %s: %v", sel, err)
	}
	json.Unmarshal(tree.Nodes[0].Role.Value, &role)
	json.Unmarshal(tree.Nodes[0].Name.Value, &name)
	return role, strings.Join(strings.Fields(name), " ")
}
