package e2e

import (
	"fmt"
	"testing"

	"mspd/daemon"
	"mspd/provider/openai/openaitest"
)

// versionHelpers read the versions of the last message on the page.
const versionHelpers = `
const shown = (e) => !!e && e.checkVisibility();
// slot is the last message on screen (a compaction's own turn is none):
// how many user messages show in the whole transcript, its pager, and
// the version shown.
const slot = () => {
	const turns = [...document.querySelectorAll('#transcript .turn:not(.compaction-turn)')].filter((t) => !t.hidden);
	const t = turns[turns.length - 1];
	const v = t && t.querySelector(':scope > .versions');
	const text = (sel) => { const e = t && t.querySelector(sel); return e ? e.textContent.trim() : ''; };
	return {
		users: [...document.querySelectorAll('#transcript .msg.user')].filter(shown).length,
		pager: shown(v) ? v.querySelector('.version-count').textContent : '',
		prev: shown(v) && !v.querySelector('.version-prev').disabled,
		next: shown(v) && !v.querySelector('.version-next').disabled,
		answer: text('.msg.agent .text'), tag: text('.msg.agent .tag'), answerStatus: (t.querySelector('.msg.agent') || {dataset: {}}).dataset.status,
		footer: text('.turn-footer .turn-status'), again: shown(t.querySelector('.again')) ? text('.again') : '',
		note: shown(t.querySelector('.again-note')) ? text('.again-note') : '',
	};
};
const is = (want) => { const s = slot(); return Object.entries(want).every(([k, v]) => s[k] === v); };
`

// withVersions evaluates a page expression with versionHelpers in scope.
func withVersions(expr string) string {
	return "(() => {" + versionHelpers + "return (" + expr + "); })()"
}

// expectSlot waits until the last message on the page reads as want
// (a JSON object of slot()'s members).
func (p *chatPage) expectSlot(what, want string) {
	p.t.Helper()
	p.waitFor(what, withVersions(`is(`+want+`)`))
}

// clickVersion clicks a button of the shown pager ("prev" or "next").
func (p *chatPage) clickVersion(which string) {
	p.t.Helper()
	p.click("clicking "+which, `#transcript .turn:not([hidden]) .versions:not([hidden]) .version-`+which)
}

// TestWebVersions drives Regenerate and Retry on the chat page in headless
// Chromium, against mspd's OpenAI provider talking to a fake server that
// records its requests. Both send turn/start regenerate (mspd's
// extension) naming the turn, never the message again: the message shows
// once and its answers as versions under a pager "‹ 2 / 2 ›"; ‹ shows
// the first version's answer and footer in place. A Stop mid-answer,
// Retry and Regenerate make one slot of three versions, the first marked
// stopped. A reload builds the same versions from the log, and a second
// tab sees a new version arrive live, its pager jumping to it; the
// provider's request for it carries the prompt once. A regenerate the
// server refuses (the answer was compacted) is said in words beside the
// button. Contrast in light and dark at 1280×800 and 390×844; the pager's
// buttons are named and reached by Tab with a focus ring.
func TestWebVersions(t *testing.T) {
	fake := openaitest.New(t, "/v1",
		openaitest.Stream(openaitest.AnswerUsage(20, 5, "Paris, the first version.")...),
		openaitest.Stream(openaitest.AnswerUsage(20, 5, "Paris, the second version.")...),
		openaitest.Stream(openaitest.AnswerUsage(30, 5, "The Loire.")...),
		openaitest.StreamStall(openaitest.Role(), openaitest.Delta("Half of an answer")),
		openaitest.Stream(openaitest.AnswerUsage(30, 5, "Lyon, after the retry.")...),
		openaitest.Stream(openaitest.AnswerUsage(30, 5, "Lyon, the third version.")...),
		openaitest.Stream(openaitest.AnswerUsage(30, 5, "Lyon, the fourth version.")...),
		openaitest.Stream(openaitest.AnswerUsage(40, 10, "They asked about France's second city: Lyon.")...),
	)
	d := startDaemon(t, daemon.Config{ConfigFile: smallWindowConfig(t, fake.URL()), Env: mapEnv(map[string]string{"TEST_KEY": "sk-e2e"})})
	base := "http://" + d.Addr() + "/"
	p := openBrowser(t)
	p.open(base)
	p.viewport(1280, 800)
	const second = "And its second city?"
	var sid string

	t.Run("regenerate makes a second version", func(t *testing.T) {
		p.use(t)
		p.newChat()
		p.send("What is the capital of France?")
		p.expectSlot("the first answer", `{users: 1, pager: '', answer: 'Paris, the first version.', again: 'Regenerate'}`)
		p.click("clicking Regenerate", "#transcript .turn:last-of-type .again")
		p.expectSlot("one message, the second version", `{users: 1, pager: '2 / 2', prev: true, next: false,
			answer: 'Paris, the second version.', again: 'Regenerate'}`)
		p.waitFor("the footer", withVersions(`slot().footer.startsWith('✓')`))
		starts := p.sent("turn/start")
		last := starts[len(starts)-1]
		if last["regenerate"] != starts[0]["commandId"] || fmt.Sprint(last["input"]) != "[map[text:What is the capital of France? type:text]]" {
			p.fatalf("the regenerate sent %v, want regenerate %v and the prompt's text", last, starts[0]["commandId"])
		}
		p.clickVersion("prev")
		p.expectSlot("the first version in place", `{users: 1, pager: '1 / 2', prev: false, next: true, answer: 'Paris, the first version.'}`)
		p.expect("its own footer, no Regenerate on an older version", withVersions(`slot().footer.startsWith('✓') && slot().again === ''`))
		p.expect("the focus kept on the pager, and the version said", `document.activeElement.classList.contains('version-next') &&
			document.getElementById('announcer').textContent === 'Version 1 of 2'`)
		p.clickVersion("next")
		p.expectSlot("back to the second", `{users: 1, pager: '2 / 2', answer: 'Paris, the second version.', again: 'Regenerate'}`)
		if got := p.accessibleName(".turn:not([hidden]) .version-prev"); got != "Previous version" {
			p.fatalf("‹ is named %q", got)
		}
		if got := p.accessibleName(".turn:not([hidden]) .version-next"); got != "Next version" {
			p.fatalf("› is named %q", got)
		}
	})

	t.Run("an older message keeps its versions", func(t *testing.T) {
		p.use(t)
		p.send("And its longest river?")
		p.expectSlot("the next exchange", `{users: 2, pager: '', answer: 'The Loire.', again: 'Regenerate'}`)
		older := `[...document.querySelectorAll('#transcript .turn')].filter((t) => !t.hidden)[0]`
		p.expect("the first message's pager, and no Regenerate there", withVersions(`(() => {
			const t = `+older+`;
			return t.querySelector('.version-count').textContent === '2 / 2' && !shown(t.querySelector('.again'));
		})()`))
		p.click("clicking its ‹", `#transcript .turn:not([hidden]) .versions:not([hidden]) .version-prev`)
		p.waitFor("its first version in place", withVersions(`(() => {
			const t = `+older+`;
			return t.querySelector('.version-count').textContent === '1 / 2' &&
				t.querySelector('.msg.agent .text').textContent.trim() === 'Paris, the first version.' &&
				slot().users === 2 && slot().answer === 'The Loire.';
		})()`))
	})

	t.Run("stop, retry, regenerate: one slot of three", func(t *testing.T) {
		p.use(t)
		sid = p.newChat()
		p.send(second)
		p.waitFor("streaming text", `agentTexts('inProgress').includes('Half of an answer')`)
		p.click("clicking Stop", "#stop")
		p.expectSlot("the stopped answer", `{users: 1, footer: '■ stopped', again: 'Retry', pager: ''}`)
		p.click("clicking Retry", "#transcript .turn:last-of-type .again")
		p.expectSlot("the retry as version 2", `{users: 1, pager: '2 / 2', answer: 'Lyon, after the retry.', again: 'Regenerate'}`)
		p.click("clicking Regenerate", "#transcript .turn:last-of-type .again")
		p.expectSlot("version 3", `{users: 1, pager: '3 / 3', prev: true, next: false, answer: 'Lyon, the third version.', again: 'Regenerate'}`)
		p.waitFor("the footer", withVersions(`slot().footer.startsWith('✓')`))
		p.clickVersion("prev")
		p.clickVersion("prev")
		p.expectSlot("version 1, stopped", `{users: 1, pager: '1 / 3', answer: 'Half of an answer', tag: '', footer: '■ stopped', again: ''}`)
		p.clickVersion("next")
		p.clickVersion("next")
		p.expectSlot("version 3 again", `{pager: '3 / 3', answer: 'Lyon, the third version.'}`)
	})

	t.Run("a reload shows the same versions", func(t *testing.T) {
		p.use(t)
		before := p.shape()
		p.open(base)
		p.openChat(sid)
		p.expectSlot("the versions from the log", `{users: 1, pager: '3 / 3', answer: 'Lyon, the third version.', again: 'Regenerate'}`)
		p.waitFor("the footers", withVersions(`slot().footer.startsWith('✓')`))
		if after := p.shape(); after != before {
			p.fatalf("after a reload the transcript reads\n%s\nwhere live it read\n%s", after, before)
		}
		p.clickVersion("prev")
		p.clickVersion("prev")
		p.expectSlot("version 1, stopped", `{users: 1, pager: '1 / 3', answer: 'Half of an answer', footer: '■ stopped'}`)
		p.clickVersion("next")
		p.clickVersion("next")
	})

	t.Run("a second tab sees a new version live", func(t *testing.T) {
		p.use(t)
		q := p.newTab(t)
		q.open(base)
		q.openChat(sid)
		q.expectSlot("the versions", `{users: 1, pager: '3 / 3', answer: 'Lyon, the third version.'}`)
		q.clickVersion("prev")
		q.expectSlot("version 2 in the second tab", `{pager: '2 / 3', answer: 'Lyon, after the retry.'}`)
		p.click("clicking Regenerate", "#transcript .turn:last-of-type .again")
		q.expectSlot("the new version, the pager jumped to it", `{users: 1, pager: '4 / 4', answer: 'Lyon, the fourth version.', again: 'Regenerate'}`)
		p.expectSlot("the first tab too", `{users: 1, pager: '4 / 4', answer: 'Lyon, the fourth version.'}`)
		reqs := fake.Requests()
		users, answered := userMessages(t, reqs[len(reqs)-1], second, "Lyon, the third version.")
		if users != 1 || answered {
			p.fatalf("the fourth version's request has the prompt %d times, the third version %v: %s", users, answered, bodyJSON(t, reqs[len(reqs)-1].Body))
		}
	})

	t.Run("contrast and keys", func(t *testing.T) {
		p.use(t)
		for _, size := range [][2]int64{{1280, 800}, {390, 844}} {
			p.viewport(size[0], size[1])
			p.expectFits(size[0])
			p.schemes(fmt.Sprintf("the pager at %d×%d", size[0], size[1]), func(where string) {
				p.clickVersion("prev")
				p.lowContrast(where + ", an older version")
				p.clickVersion("next")
				p.lowContrast(where + ", the newest")
			})
		}
		p.viewport(1280, 800)
		seen := p.tabWalk()
		for _, want := range []string{"button.small.version-prev", "button.small.again"} {
			if !seen[want] {
				p.fatalf("Tab never reached %s; it reached %v", want, seen)
			}
		}
	})

	t.Run("a refusal in words", func(t *testing.T) {
		p.use(t)
		p.click("clicking Compact", "#compact")
		p.waitFor("the compaction", `[...document.querySelectorAll('#transcript .compaction')].some((c) => c.dataset.status === 'completed')`)
		p.click("clicking Regenerate", "#transcript .turn:not(.compaction-turn):not([hidden]) .again")
		p.expectSlot("why, beside the button", `{users: 1, pager: '4 / 4', answer: 'Lyon, the fourth version.', again: 'Regenerate',
			note: 'This answer is now part of the summary of the chat (it was compacted), so it can no longer be regenerated. Send the message again instead.'}`)
		p.expect("no error banner, the focus on the button, said aloud", `document.getElementById('banner').hidden &&
			document.activeElement.classList.contains('again') && document.getElementById('announcer').textContent.startsWith('This answer is now part')`)
		p.lowContrast("the refusal")
	})
}
