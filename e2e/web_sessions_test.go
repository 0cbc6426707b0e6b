package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"mspd/client"
	"mspd/daemon"
	"mspd/schema/msp"
)

// TestWebSessions drives the chat page's session controls in headless
// Chromium against a server with two providers: Edit as a fork (the fork
// listed under its origin, the origin unchanged), the model picker
// (model/list, session/start's model, session/setModel), rename and
// delete from the chat list, and the list kept live by session/started
// and session/listChanged from another connection. Every WebSocket frame
// is checked against the MSP schema.
func TestWebSessions(t *testing.T) {
	d := startDaemon(t, daemon.Config{ConfigFile: twoProviders(t)})
	base := "http://" + d.Addr() + "/"
	p := openBrowser(t)
	p.open(base)

	t.Run("edit as a fork", func(t *testing.T) {
		p.use(t)
		origin := p.newChat()
		p.send("first question")
		p.waitFor("the first answer", `footer().startsWith('✓')`)
		p.send("second question")
		p.waitFor("the second answer", `document.querySelectorAll('#transcript .turn-footer').length === 2 && footer().startsWith('✓')`)
		firstTurn := p.eval(`document.querySelector('#transcript .turn').dataset.turnId`)

		p.click("clicking Edit on the second message", "#transcript .turn:last-of-type button.edit")
		p.waitFor("the editor", `document.activeElement.matches('.edit-form textarea') && document.activeElement.value === 'second question'`)
		p.run("editing", chromedp.KeyEvent(", edited"), chromedp.KeyEvent("\r"))
		p.waitFor("the edited answer in the fork", `agentTexts('completed').includes('second question, edited') &&
			footer().startsWith('✓')`)
		p.expect("the fork holds the first turn and the edited one", `(() => {
			const users = [...document.querySelectorAll('.msg.user .text')].map((t) => t.textContent);
			return users.length === 2 && users[0] === 'first question' && users[1] === 'second question, edited' &&
				agentTexts('completed').join('|') === 'first question|second question, edited';
		})()`)
		fork := p.eval(`document.querySelector('#sessions [aria-current="page"]').dataset.sessionId`)
		if fork == origin {
			p.fatalf("the edit was sent in the origin")
		}
		cut := ""
		for _, params := range p.sent("session/fork") {
			if params["sessionId"] == origin {
				cut = fmt.Sprint(params["cutPoint"])
			}
		}
		if cut != fmt.Sprintf("map[lastTurnId:%s]", firstTurn) {
			p.fatalf("session/fork cutPoint %s, want the first turn %s", cut, firstTurn)
		}
		p.expect("the fork listed under its origin", fmt.Sprintf(`(() => {
			const row = document.querySelector('#sessions [data-row=%q]');
			const nested = row.parentElement.querySelector('ul [data-row=%q]');
			return nested !== null && nested.textContent.includes('branch');
		})()`, origin, fork))

		p.openChat(origin)
		p.waitFor("the origin as it was", `agentTexts('completed').join('|') === 'first question|second question'`)

		// The first message has no turn before it to cut at: its edit
		// starts a new chat.
		p.click("clicking Edit on the first message", "#transcript .turn:first-of-type button.edit")
		p.waitFor("the editor", `document.activeElement.matches('.edit-form textarea')`)
		p.run("replacing the text", chromedp.KeyEvent(strings.Repeat("\b", len("first question"))+"a new start"), chromedp.KeyEvent("\r"))
		p.waitFor("the new chat", `agentTexts('completed').join('|') === 'a new start' && footer().startsWith('✓')`)
	})

	t.Run("model picker", func(t *testing.T) {
		p.use(t)
		p.open(base)
		p.waitFor("the models", `[...document.getElementById('model').options].map((o) => o.textContent).join('|') === 'small|large|other'`)
		p.expect("the default model picked", `document.getElementById('model').selectedOptions[0].textContent === 'small'`)
		p.pickModel("large")
		sid := p.newChat()
		started := false
		for _, params := range p.sent("session/start") {
			started = started || params["providerId"] == "a" && params["modelId"] == "large"
		}
		if !started {
			p.fatalf("session/start did not carry the picked model: %v", p.sent("session/start"))
		}
		p.waitFor("the session's model shown", `document.getElementById('model').selectedOptions[0].textContent === 'large'`)
		p.pickModel("other")
		p.waitFor("the model change announced", `document.getElementById('announcer').textContent === 'Model: b · other.'`)
		set := false
		for _, params := range p.sent("session/setModel") {
			set = set || params["sessionId"] == sid && fmt.Sprint(params["model"]) == "map[modelId:other providerId:b]"
		}
		if !set {
			p.fatalf("session/setModel not sent as picked: %v", p.sent("session/setModel"))
		}
		p.open(base)
		p.openChat(sid)
		p.waitFor("the model kept after a reload", `document.getElementById('model').selectedOptions[0].textContent === 'other'`)
	})

	t.Run("rename and delete", func(t *testing.T) {
		p.use(t)
		sid := p.newChat()
		p.send("a chat to rename")
		p.waitFor("the answer", `footer().startsWith('✓')`)
		row := fmt.Sprintf(`#sessions [data-row=%q]`, sid)
		p.click("clicking Rename", row+` button.rename`)
		p.waitFor("the name field", `document.activeElement.matches('.row-form input')`)
		p.run("typing a name", chromedp.KeyEvent("Holiday plans"), chromedp.KeyEvent("\r"))
		p.waitFor("the new name in the list and the title", fmt.Sprintf(`document.querySelector('%s .session-title').textContent === 'Holiday plans' &&
			document.getElementById('chat-title').textContent === 'Holiday plans' &&
			document.activeElement.matches('%s button.rename')`, row, row))
		renamed := false
		for _, params := range p.sent("session/rename") {
			renamed = renamed || params["sessionId"] == sid && params["name"] == "Holiday plans"
		}
		if !renamed {
			p.fatalf("session/rename not sent: %v", p.sent("session/rename"))
		}
		p.click("clicking Rename", row+` button.rename`)
		p.run("then Esc", chromedp.KeyEvent("x"), chromedp.KeyEvent(kbEscape))
		p.waitFor("the name unchanged", fmt.Sprintf(`document.querySelector('%s .session-title').textContent === 'Holiday plans'`, row))

		p.click("clicking Delete", row+` button.delete`)
		p.waitFor("the confirmation", fmt.Sprintf(`document.querySelector('%s .row-form').textContent.startsWith('Delete “Holiday plans”?')`, row))
		p.click("confirming", row+` .row-form button.danger`)
		p.waitFor("the chat gone", fmt.Sprintf(`document.querySelector('%s') === null &&
			document.querySelectorAll('#transcript .turn').length === 0 && document.getElementById('chat-title').textContent === 'New chat'`, row))
		completed := false
		for _, params := range p.received("session/deleteCompleted") {
			completed = completed || params["sessionId"] == sid && params["outcome"] == "completed"
		}
		if !completed {
			p.fatalf("no session/deleteCompleted for the chat: %v", p.received("session/deleteCompleted"))
		}
		p.open(base)
		p.waitFor("the list", `document.querySelectorAll('#sessions button.session').length > 0`)
		p.expect("the chat still gone after a reload", fmt.Sprintf(`document.querySelector('%s') === null`, row))
	})

	t.Run("live list", func(t *testing.T) {
		p.use(t)
		lists := len(p.sent("session/list"))
		c := dial(t, d.URL(), client.Options{})
		ctx := testCtx(t)
		sid := newSession(t, c)
		p.waitFor("a chat started elsewhere", fmt.Sprintf(`document.querySelector('#sessions [data-row=%q]') !== null`, sid))
		if err := c.Call(ctx, msp.MethodSessionRename, msp.SessionRenameParams{CommandID: client.NewCommandID(), SessionID: sid, Name: "Named elsewhere"}, nil); err != nil {
			t.Fatal(err)
		}
		p.waitFor("its name", fmt.Sprintf(`document.querySelector('#sessions [data-row=%q] .session-title').textContent === 'Named elsewhere'`, sid))
		if n := len(p.sent("session/list")); n != lists {
			p.fatalf("the page listed sessions %d more times: the list should follow notifications", n-lists)
		}
	})
}

// pickModel chooses a model in the picker by its label, as a user would.
func (p *chatPage) pickModel(label string) {
	p.t.Helper()
	p.eval(fmt.Sprintf(`(() => {
		const s = document.getElementById('model');
		s.value = [...s.options].find((o) => o.textContent === %q).value;
		s.dispatchEvent(new Event('change'));
		return '';
	})()`, label))
}
