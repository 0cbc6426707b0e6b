package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"mspd/daemon"
	"mspd/provider/scripted"
)

// TestWebRestartMidAnswer restarts the server under the chat page while an
// answer streams. The page shows the interrupted attempt's text as a
// discarded attempt (kept, struck through), then the retry notice saying
// the server restarted, then the answer of the attempt that followed —
// live after its reconnect, and again when the chat is rebuilt from the
// log after a reload.
func TestWebRestartMidAnswer(t *testing.T) {
	dataDir := t.TempDir()
	d1 := startDaemon(t, daemon.Config{DataDir: dataDir})
	proxy := startProxy(t, d1.Addr())
	p, base, sid := streamingChat(t, proxy)

	// A deploy with no grace period: the turn stops mid-answer.
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	d1.Close(stopped)
	d2 := startDaemon(t, daemon.Config{DataDir: dataDir})
	proxy.retarget(d2.Addr())
	proxy.cut()

	check := func(when string) {
		p.waitFor("the answer "+when, `agentTexts('completed').includes('the answer after the restart')`)
		p.expect("the interrupted attempt, kept and struck through "+when, `(() => {
			const m = document.querySelector('.msg.agent[data-status="failed"]');
			return m !== null && m.querySelector('.text').textContent.startsWith('interrupted') &&
				m.querySelector('.tag').textContent === 'discarded attempt' &&
				getComputedStyle(m.querySelector('.text')).textDecorationLine === 'line-through';
		})()`)
		p.expect("the restart's retry notice between the attempts "+when, `(() => {
			const nodes = [...document.querySelectorAll('#transcript .msg.agent, #transcript .retry')];
			return nodes.length === 3 && nodes[0].dataset.status === 'failed' &&
				nodes[1].textContent.includes('the server restarted during attempt 1') &&
				nodes[2].dataset.status === 'completed';
		})()`)
		p.waitFor("the turn footer "+when, `footer().startsWith('✓') && footer().includes('2 attempts')`)
	}
	check("after the reconnect")
	p.open(base)
	p.waitFor("the chat list", fmt.Sprintf(`document.querySelector('#sessions [data-session-id=%q]') !== null`, sid))
	p.openChat(sid)
	check("rebuilt from the log")
}

// TestWebKilledMidAnswer kills the server (SIGKILL) under the chat page
// while an answer streams. An answer opens on an ephemeral item/started,
// so if the kill comes before its text was first saved (a second in),
// nothing of it is in the log and no item/completed will ever close it:
// the page ends it itself when the turn moves on (the restart's retry
// notice). Either way the page never leaves an answer streaming: the cut
// attempt shows as discarded, then the notice, then the next attempt's
// answer; rebuilt from the log after a reload, the chat shows the notice
// and the answer, and still nothing streaming.
func TestWebKilledMidAnswer(t *testing.T) {
	dataDir := t.TempDir()
	p1 := startProcess(t, dataDir)
	proxy := startProxy(t, hostOf(t, p1.url))
	p, base, sid := streamingChat(t, proxy)

	p1.kill()
	p2 := startProcess(t, dataDir)
	proxy.retarget(hostOf(t, p2.url))
	proxy.cut()

	p.waitFor("the answer after the reconnect", `agentTexts('completed').includes('the answer after the restart')`)
	// It shows what the log holds of it, as after a reload: the text
	// saved before the kill, if any (TestWebSmallCrash compares the two).
	p.expect("the cut attempt, discarded", `(() => {
		const m = document.querySelector('.msg.agent[data-status="failed"]');
		return m !== null && 'interrupted '.repeat(200).startsWith(m.querySelector('.text').textContent.trim()) &&
			m.querySelector('.tag').textContent.startsWith('discarded attempt');
	})()`)
	p.expect("no answer left streaming", `agentTexts('inProgress').length === 0`)
	p.expect("the restart's retry notice", `[...document.querySelectorAll('#transcript .retry')].some((n) => n.textContent.includes('the server restarted during attempt 1'))`)

	p.open(base)
	p.waitFor("the chat list", fmt.Sprintf(`document.querySelector('#sessions [data-session-id=%q]') !== null`, sid))
	p.openChat(sid)
	p.waitFor("the answer rebuilt from the log", `agentTexts('completed').includes('the answer after the restart')`)
	p.expect("nothing streaming after the reload", `agentTexts('inProgress').length === 0`)
	p.expect("the retry notice after the reload", `[...document.querySelectorAll('#transcript .retry')].some((n) => n.textContent.includes('the server restarted during attempt 1'))`)
}

// hostOf is the host:port of a WebSocket URL.
func hostOf(t *testing.T, wsURL string) string {
	t.Helper()
	u, err := url.Parse(wsURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// streamingChat opens the chat page through proxy in a new chat and sends
// a turn whose first attempt streams "interrupted …" for about 4 s and
// whose next attempt answers "the answer after the restart"; it returns
// once the first attempt's text shows.
func streamingChat(t *testing.T, proxy *msProxy) (p *chatPage, base, sid string) {
	t.Helper()
	p = openBrowser(t)
	base = "http://" + proxy.addr() + "/"
	p.open(base)
	p.use(t)
	sid = p.newChat()
	p.send(scripted.Script(
		scripted.Step{Text: strings.Repeat("interrupted ", 200), Chunks: 200, ChunkDelayMs: 20},
		scripted.Step{Text: "the answer after the restart", Chunks: 2}))
	p.waitFor("streaming text", `agentTexts('inProgress').some((t) => t.length > 0)`)
	return p, base, sid
}
