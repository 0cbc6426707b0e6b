package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/openai/openaitest"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// reasoningHelpers read the reasoning blocks of the transcript.
const reasoningHelpers = `
const blocks = () => [...document.querySelectorAll('#transcript .reasoning')].map((b) => {
	const text = (sel) => { const e = b.querySelector(sel); return e && !e.hidden && !(e.closest('[hidden]')) ? e.textContent : null; };
	return {
		status: b.dataset.status, state: b.dataset.state, label: text('.reasoning-label') ?? text('.reasoning-line'),
		preview: text('.reasoning-preview'), live: b.querySelector('.reasoning-live') !== null,
		open: b.querySelector('details').open, foldable: !b.querySelector('details').hidden,
		parts: [...b.querySelectorAll('.reasoning-part')].map((p) => p.textContent.trim()),
		turn: b.closest('.turn').dataset.turnId,
		// The answer of its step follows it in its turn.
		answerBelow: (() => { const a = b.closest('.turn').querySelector('.msg.agent');
			return !!a && !!(b.compareDocumentPosition(a) & Node.DOCUMENT_POSITION_FOLLOWING); })(),
	};
});
const lastBlock = () => blocks().pop() || {};
`

// withBlocks evaluates a page expression with reasoningHelpers in scope.
func withBlocks(expr string) string {
	return "(() => {" + reasoningHelpers + "return (" + expr + "); })()"
}

// thoughtWords is what the page reads for a reasoning that took ms: the
// words of its thoughtTime.
func thoughtWords(ms int64) string {
	switch s := (ms + 500) / 1000; {
	case ms < 1000:
		return "Thought for less than a second"
	case s < 60:
		return fmt.Sprintf("Thought for %d s", s)
	default:
		return fmt.Sprintf("Thought for %d min %d s", s/60, s%60)
	}
}

// reasoningTimes are the recordedAt of the reasoning items the page
// received, opened and ended, by itemId.
func (p *chatPage) reasoningTimes() map[string][2]time.Time {
	p.t.Helper()
	out := map[string][2]time.Time{}
	for i, method := range []string{"item/started", "item/completed"} {
		for _, params := range p.received(method) {
			it, _ := params["item"].(map[string]any)
			if it["kind"] != "reasoning" {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(it["recordedAt"]))
			if err != nil {
				p.fatalf("%s of reasoning item %v: recordedAt %v", method, it["itemId"], it["recordedAt"])
			}
			id := fmt.Sprint(it["itemId"])
			v := out[id]
			v[i] = at
			out[id] = v
		}
	}
	return out
}

// TestWebReasoning drives reasoning on the chat page in headless
// Chromium. A scripted turn that reasons in word-sized deltas shows one
// folded block above its answer reading "Thinking…" with a live mark
// and the words as they stream, then "Thought for N s" — N the time
// between the item's durable records (item/started's and
// item/completed's recordedAt) — and unfolds (by click and by Enter) to
// what it thought, the answer below it; the footer's details count the
// reasoning tokens. After a reload the transcript reads the same. On the
// Responses API (a fake OpenAI server): two summary parts stream as
// summary.0 and summary.1 into two parts, Markdown rendered as answers
// are (markup inert); a reasoning shown only encrypted reads "Reasoned
// (hidden by the provider)". The effort picker, set with no chat open,
// sets the next chat's effort (session/setReasoningEffort before its
// first turn/start) and the model's request carries it; set in a chat,
// the next request carries the new tier; a tier set by another client
// shows at once (session/reasoningEffortChanged); Default is offered no
// more once a chat has a tier (mspd cannot unset it). Contrast at
// 1280×800 and 390×844 in light and dark, and Tab reaches the block and
// the picker with a focus ring.
func TestWebReasoning(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	base := "http://" + d.Addr() + "/"
	p := openBrowser(t)
	p.open(base)
	p.viewport(1280, 800)
	const thought = "First I weigh the question. Then I check the numbers twice, to be sure of them."
	var sid string
	var live string

	t.Run("streams, then folds with its duration", func(t *testing.T) {
		p.use(t)
		sid = p.newChat()
		p.send(scripted.Script(scripted.Step{Reasoning: thought, ChunkDelayMs: 120, Text: "It is **42**.", Chunks: 2}))
		p.waitFor("the block thinking, folded, its words streaming beside the label", withBlocks(`(() => {
			const b = lastBlock();
			return b.status === 'inProgress' && b.state === 'streaming' && b.label === 'Thinking…' && b.live && !b.open &&
				b.foldable && typeof b.preview === 'string' && b.preview.startsWith('First I') && b.preview.length < 40 &&
				document.querySelectorAll('#transcript .msg.agent').length === 0;
		})()`))
		p.expect("the screen reader's name for it", `document.querySelector('.reasoning-summary').textContent.startsWith('Reasoning: Thinking…')`)
		p.waitFor("the answer", `agentTexts('completed').includes('It is 42.') && footer().startsWith('✓')`)
		times := p.reasoningTimes()
		if len(times) != 1 {
			p.fatalf("reasoning items received: %v", times)
		}
		var want string
		for _, at := range times {
			want = thoughtWords(at[1].Sub(at[0]).Milliseconds())
			t.Logf("the reasoning's records: %v to %v: %q", at[0].Format(time.StampMilli), at[1].Format(time.StampMilli), want)
		}
		if want == "Thought for less than a second" {
			p.fatalf("the reasoning streamed for %q: the test wants it longer", want)
		}
		p.waitFor("the block folded, with its duration, above the answer", withBlocks(fmt.Sprintf(`(() => {
			const b = lastBlock();
			return b.status === 'completed' && b.state === 'done' && b.label === %q && !b.live && b.preview === null && !b.open &&
				b.answerBelow && document.querySelectorAll('#transcript .reasoning').length === 1;
		})()`, want)))
		p.click("unfolding it", "#transcript .reasoning summary")
		p.waitFor("what it thought", withBlocks(fmt.Sprintf(`(() => {
			const b = lastBlock();
			return b.open && JSON.stringify(b.parts) === JSON.stringify([%q]);
		})()`, thought)))
		p.expect("the footer counting reasoning tokens in its details", `(() => {
			const d = document.querySelector('#transcript .turn:last-of-type .turn-footer details');
			return d && !d.open && d.textContent.includes('Reasoning tokens16') && d.textContent.includes('Output tokens19 (reasoning included)');
		})()`)
		p.eval(`(document.querySelector('#transcript .reasoning summary').focus(), '')`)
		p.run("pressing Enter on it", chromedp.KeyEvent("\r"))
		p.waitFor("it folded again by keyboard", withBlocks(`!lastBlock().open && document.activeElement.matches('.reasoning-summary')`))
		live = p.shape()
	})

	t.Run("the same after a reload", func(t *testing.T) {
		p.use(t)
		p.open(base)
		p.openChat(sid)
		p.waitFor("the chat", `footer().startsWith('✓')`)
		if again := p.shape(); again != live {
			p.fatalf("after a reload the transcript reads\n%s\nlive it read\n%s", again, live)
		}
		p.click("unfolding it", "#transcript .reasoning summary")
		p.waitFor("what it thought", withBlocks(fmt.Sprintf(`JSON.stringify(lastBlock().parts) === JSON.stringify([%q])`, thought)))
	})

	// The Responses API: the page picks the effort, the fake server sees
	// it; summaries come in parts, or encrypted only.
	parts := []string{"**Weighing the options.** The user wants a short answer.", "Checking `2+2`: four, <b>surely</b>."}
	rs, seq := openaitest.RReasoning(1, 0, 7, "rs_web_1", "gAAAA-1", parts...)
	first := append(append([]string{openaitest.RCreated()}, rs...), openaitest.RTextDelta(seq, "Four."),
		openaitest.RCompleted(seq+1, 40, 30, 0, 22, openaitest.RReasoningItem("rs_web_1", "gAAAA-1", parts, true)))
	hidden, seq2 := openaitest.RReasoning(1, 0, 7, "rs_web_2", "gAAAA-2")
	second := append(append([]string{openaitest.RCreated()}, hidden...), openaitest.RTextDelta(seq2, "Still four."),
		openaitest.RCompleted(seq2+1, 60, 20, 0, 12, openaitest.RReasoningItem("rs_web_2", "gAAAA-2", nil, true)))
	fake := openaitest.New(t, "/v1", openaitest.Stream(first...), openaitest.Stream(second...))
	rd := startDaemon(t, daemon.Config{Provider: "openai", Model: "gpt-test", OpenAIAPI: "responses",
		Env: mapEnv(map[string]string{"OPENAI_BASE_URL": fake.URL(), "OPENAI_API_KEY": "sk-e2e"})})
	rbase := "http://" + rd.Addr() + "/"
	var rsid string

	t.Run("effort for the next chat, parts and hidden reasoning", func(t *testing.T) {
		p.use(t)
		p.open(rbase)
		p.expect("Default with no chat open", `document.getElementById('effort').value === '' && !document.getElementById('effort').options[0].disabled &&
			document.getElementById('compact').hidden`)
		p.pickEffort("High")
		p.waitFor("said", `document.getElementById('announcer').textContent === 'Reasoning for the next chat: High.'`)
		if n := len(p.sent("session/setReasoningEffort")); n != 0 {
			p.fatalf("session/setReasoningEffort sent %d times with no chat open", n)
		}
		p.send("What is 2+2?")
		p.waitFor("the answer", `agentTexts('completed').includes('Four.') && footer().startsWith('✓')`)
		rsid = p.eval(`document.querySelector('#sessions [aria-current="page"]').dataset.sessionId`)
		set := p.sent("session/setReasoningEffort")
		if len(set) != 1 || set[0]["reasoningEffort"] != "high" || set[0]["sessionId"] != rsid {
			p.fatalf("session/setReasoningEffort sent %v, want high for %s", set, rsid)
		}
		if body := fake.Requests()[0].Body; fmt.Sprint(body["reasoning"]) != "map[effort:high summary:auto]" {
			p.fatalf("the request's reasoning %v, want effort high", body["reasoning"])
		}
		p.expect("the chat's effort, Default offered no more", `document.getElementById('effort').value === 'high' &&
			document.getElementById('effort').options[0].disabled`)
		deltas := map[string]int{}
		for _, d := range p.received("item/delta") {
			if f := fmt.Sprint(d["field"]); strings.HasPrefix(f, "summary.") {
				deltas[f]++
			}
		}
		if deltas["summary.0"] == 0 || deltas["summary.1"] == 0 || len(deltas) != 2 {
			p.fatalf("reasoning deltas by field %v, want summary.0 and summary.1", deltas)
		}
		p.click("unfolding the reasoning", "#transcript .reasoning summary")
		p.waitFor("two parts, Markdown rendered, markup inert", withBlocks(`(() => {
			const b = lastBlock();
			const md = document.querySelectorAll('#transcript .reasoning-part');
			return b.open && b.label.startsWith('Thought for ') && document.querySelector('.reasoning-count').textContent === ' · 2 parts' &&
				JSON.stringify(b.parts) === JSON.stringify(['Weighing the options. The user wants a short answer.', 'Checking 2+2: four, <b>surely</b>.']) &&
				md[0].querySelector('strong').textContent === 'Weighing the options.' && md[1].querySelector('code').textContent === '2+2' &&
				md[1].querySelector('b') === null && b.answerBelow;
		})()`))

		p.pickEffort("Low")
		p.waitFor("the chat's effort set", `document.getElementById('effort').value === 'low' &&
			document.getElementById('announcer').textContent === "Reasoning: Low, from this chat's next message."`)
		p.send("And again?")
		p.waitFor("the answer", `agentTexts('completed').includes('Still four.') && footer().startsWith('✓')`)
		if body := fake.Requests()[1].Body; fmt.Sprint(body["reasoning"]) != "map[effort:low summary:auto]" {
			p.fatalf("the second request's reasoning %v, want effort low", body["reasoning"])
		}
		p.expect("the hidden reasoning in words, nothing to unfold", withBlocks(`(() => {
			const b = lastBlock();
			return b.state === 'hidden' && b.label === 'Reasoned (hidden by the provider)' && !b.foldable && b.answerBelow;
		})()`))
		changed := p.received("session/reasoningEffortChanged")
		if len(changed) != 2 || changed[0]["reasoningEffort"] != "high" || changed[1]["reasoningEffort"] != "low" {
			p.fatalf("session/reasoningEffortChanged received %v", changed)
		}

		// Another client sets it: the picker follows.
		c := dial(t, rd.URL(), client.Options{})
		if _, err := c.SetReasoningEffort(testCtx(t), rsid, msp.EffortMedium, client.NewCommandID()); err != nil {
			t.Fatal(err)
		}
		p.waitFor("the picker following", `document.getElementById('effort').value === 'medium'`)
	})

	t.Run("the same after a reload", func(t *testing.T) {
		p.use(t)
		before := p.eval(withBlocks(`JSON.stringify(blocks().map((b) => [b.label, b.state]))`))
		p.open(rbase)
		p.openChat(rsid)
		p.waitFor("the chat", `document.querySelectorAll('#transcript .turn-footer').length === 2`)
		p.expect("the chat's effort", `document.getElementById('effort').value === 'medium'`)
		if after := p.eval(withBlocks(`JSON.stringify(blocks().map((b) => [b.label, b.state]))`)); after != before {
			p.fatalf("after a reload the blocks read %s, live %s", after, before)
		}
	})

	t.Run("contrast", func(t *testing.T) {
		p.use(t)
		p.click("unfolding the reasoning", "#transcript .reasoning summary")
		p.click("opening the footer's details", "#transcript .turn:first-of-type .turn-footer summary")
		for _, size := range [][2]int64{{1280, 800}, {390, 844}} {
			p.viewport(size[0], size[1])
			p.expectFits(size[0])
			for _, scheme := range []string{"light", "dark"} {
				p.colorScheme(scheme)
				p.waitFor(scheme+" mode", fmt.Sprintf(`matchMedia('(prefers-color-scheme: %s)').matches`, scheme))
				where := fmt.Sprintf("%d×%d %s", size[0], size[1], scheme)
				p.measured(where, ".reasoning-label", ".reasoning-line:not([hidden])", ".reasoning-part", ".reasoning-part strong", ".reasoning-count",
					"#effort", ".bar-label", "#compact", ".turn-footer dd")
				p.lowContrast(where)
			}
		}
		p.colorScheme("")
		p.viewport(1280, 800)
	})

	t.Run("keyboard", func(t *testing.T) {
		p.use(t)
		seen := p.tabWalk()
		for _, want := range []string{"summary.reasoning-summary", "#effort", "#compact"} {
			if !seen[want] {
				p.fatalf("Tab never reached %s; it reached %v", want, seen)
			}
		}
	})
}

// measured fails the test unless each selector's first element is shown
// with its text at 4.5:1 or more.
func (p *chatPage) measured(where string, selectors ...string) {
	p.t.Helper()
	sels, _ := json.Marshal(selectors)
	bad := p.eval(`(() => {` + contrastHelpers + `return JSON.stringify(` + string(sels) + `.map((s) => [s, contrastOf(document.querySelector(s))])
		.filter(([, r]) => !(r >= 4.5)).map(([s, r]) => s + ': ' + r.toFixed(2)));
	})()`)
	if bad != "[]" {
		p.fatalf("%s: not shown, or below 4.5:1: %s", where, bad)
	}
}

// pickEffort chooses a reasoning effort by its label, as a user would.
func (p *chatPage) pickEffort(label string) {
	p.t.Helper()
	p.eval(fmt.Sprintf(`(() => {
		const s = document.getElementById('effort');
		s.value = [...s.options].find((o) => o.textContent === %q).value;
		s.dispatchEvent(new Event('change'));
		return '';
	})()`, label))
}

// tabWalk presses Tab round the page from its start until focus comes
// back to New chat, failing on any control focused without a visible
// ring, and returns what it reached ("#id", or tag.classes).
func (p *chatPage) tabWalk() map[string]bool {
	p.t.Helper()
	p.eval(`(document.activeElement.blur(), '')`)
	seen := map[string]bool{}
	for range 300 {
		p.run("pressing Tab", chromedp.KeyEvent("\t"))
		got := p.eval(`(() => {
			const a = document.activeElement;
			if (!a || a === document.body) return 'body';
			const name = a.id ? '#' + a.id : a.tagName.toLowerCase() + '.' + [...a.classList].join('.');
			const s = getComputedStyle(a);
			const ring = a.matches(':focus-visible') && s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2;
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
	return seen
}
