package e2e

import (
	"context"
	"fmt"
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
	p := openBrowser(t)
	base := "http://" + proxy.addr() + "/"
	p.open(base)
	p.use(t)
	sid := p.newChat()
	p.send(scripted.Script(
		scripted.Step{Text: strings.Repeat("interrupted ", 200), Chunks: 200, ChunkDelayMs: 20},
		scripted.Step{Text: "the answer after the restart", Chunks: 2}))
	p.waitFor("streaming text", `agentTexts('inProgress').some((t) => t.length > 0)`)

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
