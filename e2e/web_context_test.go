package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"mspd/daemon"
	"mspd/provider/openai/openaitest"
	"mspd/provider/providertest"
)

// contextHelpers read the context meter and the compaction dividers.
const contextHelpers = `
const meter = () => {
	const m = document.getElementById('context');
	return {
		shown: !m.hidden, text: document.getElementById('context-text').textContent, pressure: m.dataset.pressure,
		now: m.getAttribute('aria-valuenow'), max: m.getAttribute('aria-valuemax'), valuetext: m.getAttribute('aria-valuetext'),
		fill: document.getElementById('context-fill').style.width, role: m.getAttribute('role'),
	};
};
const dividers = () => [...document.querySelectorAll('#transcript .compaction')].map((c) => {
	// The turn it follows: the last turn before it that does not hold it.
	let after = null;
	for (const t of document.querySelectorAll('#transcript .turn')) {
		if (t.contains(c)) continue;
		if (t.compareDocumentPosition(c) & Node.DOCUMENT_POSITION_FOLLOWING) after = t.dataset.turnId;
	}
	const turn = c.closest('.turn');
	return {
		label: c.querySelector('.compaction-label').textContent, status: c.dataset.status, outcome: c.dataset.outcome,
		live: c.querySelector('.compaction-live') !== null, foldable: !c.querySelector('details').hidden,
		open: c.querySelector('details').open, summary: ((c.querySelector('.compaction-text') || {}).textContent || '').trim(),
		after, inTurn: turn ? turn.dataset.turnId : null, first: !!turn && turn.firstElementChild === c,
		alone: !!turn && turn.classList.contains('compaction-turn') && turn.children.length === 1,
	};
});
const lastDivider = () => dividers().pop() || {};
const turnIds = () => [...document.querySelectorAll('#transcript .turn')].map((t) => t.dataset.turnId);
`

// withContext evaluates a page expression with contextHelpers in scope.
func withContext(expr string) string {
	return "(() => {" + contextHelpers + "return (" + expr + "); })()"
}

// gated holds a reply until gate closes (or the request ends), so that a
// test sees what the page shows meanwhile.
func gated(gate <-chan struct{}, r providertest.Reply) providertest.Reply {
	return func(w http.ResponseWriter, req *http.Request) {
		select {
		case <-gate:
			r(w, req)
		case <-req.Context().Done():
		}
	}
}

// compactionItems are the compaction items the page received complete,
// in order.
func (p *chatPage) compactionItems() []map[string]any {
	var out []map[string]any
	for _, params := range p.received("item/completed") {
		if it, _ := params["item"].(map[string]any); it["kind"] == "compaction" {
			out = append(out, it)
		}
	}
	return out
}

// tokenCount is a compaction item's token member as mspd words it.
func tokenCount(it map[string]any, key string) string {
	n, _ := it[key].(float64)
	switch {
	case n < 1000:
		return strconv.Itoa(int(n))
	case n < 10000:
		return strconv.FormatFloat(n/1000, 'f', 1, 64) + "k"
	}
	return strconv.Itoa(int(n+500)/1000) + "k"
}

// TestWebContext drives the context window on the chat page in headless
// Chromium, against mspd's OpenAI provider talking to a fake server whose
// model has a 2000-token window. Compact on a new chat says "Nothing to
// compact yet" in words. The meter beside the composer reads the
// session/contextUsage of each answer — "1.0k / 2.0k tokens", then
// "1.7k / 2.0k tokens · nearly full" (warning), "1.9k / 2.0k tokens ·
// full" (blocked) — a bar and a role=meter with its value and words. The
// third message compacts first: "Compacting the context… · 1.7k tokens ·
// auto" while the summary is asked for (the fake holds it), then a divider
// "Context compacted · 1.7k → N tokens · auto" right after the turn its
// summarizedThrough names, unfolding to the summary; every turn stays.
// Compact runs a compaction turn of its own: "Compacting…", then a
// divider alone — no message, no footer, the last exchange keeps
// Regenerate. A compaction the provider refuses says why. A reload shows
// the same transcript and meter (resume's contextUsage). Contrast at
// 1280×800 and 390×844 in light and dark; Tab reaches Compact and the
// dividers with a focus ring.
func TestWebContext(t *testing.T) {
	first, second := make(chan struct{}), make(chan struct{})
	fake := openaitest.New(t, "/v1",
		openaitest.Stream(openaitest.AnswerUsage(900, 100, "Paris.")...),
		openaitest.Stream(openaitest.AnswerUsage(1500, 200, "Lyon.")...),
		gated(first, openaitest.Stream(openaitest.AnswerUsage(1650, 40, "They asked about **Paris**, then Lyon.")...)),
		openaitest.Stream(openaitest.AnswerUsage(1800, 120, "Marseille.")...),
		gated(second, openaitest.Stream(openaitest.AnswerUsage(100, 20, "Paris, Lyon and Marseille: France's largest cities.")...)),
		openaitest.Stream(openaitest.AnswerUsage(300, 20, "Toulouse.")...),
		openaitest.Error(http.StatusBadRequest, openaitest.ErrorBody("the summary was refused", "invalid_request_error", "")),
	)
	d := startDaemon(t, daemon.Config{ConfigFile: smallWindowConfig(t, fake.URL()), Env: mapEnv(map[string]string{"TEST_KEY": "sk-e2e"})})
	base := "http://" + d.Addr() + "/"
	p := openBrowser(t)
	p.open(base)
	p.viewport(1280, 800)
	var sid string
	var live string

	t.Run("nothing to compact on a new chat", func(t *testing.T) {
		p.use(t)
		sid = p.newChat()
		p.expect("Compact shown, no meter yet", withContext(`!document.getElementById('compact').hidden && !meter().shown`))
		p.click("clicking Compact", "#compact")
		p.waitFor("noop in words", `document.getElementById('compact-note').textContent ===
			'Nothing to compact yet: no exchange has finished since the chat began or was last compacted.' &&
			document.getElementById('announcer').textContent.startsWith('Nothing to compact yet')`)
		p.expect("no turn shown", `document.querySelectorAll('#transcript .turn').length === 0 && !document.getElementById('compact').disabled`)
		if sent := p.sent("session/compact"); len(sent) != 1 || sent[0]["sessionId"] != sid {
			p.fatalf("session/compact sent %v", sent)
		}
	})

	t.Run("the meter, then an automatic compaction", func(t *testing.T) {
		p.use(t)
		p.send("What is the capital of France?")
		p.waitFor("the answer", `agentTexts('completed').includes('Paris.') && footer().startsWith('✓')`)
		p.waitFor("the meter, normal", withContext(`(() => { const m = meter();
			return m.shown && m.role === 'meter' && m.text === '1.0k / 2.0k tokens' && m.pressure === 'normal' && m.now === '1000' &&
				m.max === '2000' && parseFloat(m.fill) === 50 && m.valuetext === "1,000 of 2,000 (50%) tokens of the model's context used"; })()`))
		p.expect("the note gone", `document.getElementById('compact-note').textContent === ''`)
		p.send("And its second city?")
		p.waitFor("the answer", `agentTexts('completed').includes('Lyon.') && footer().startsWith('✓')`)
		p.waitFor("the meter, nearly full", withContext(`(() => { const m = meter();
			return m.text === '1.7k / 2.0k tokens · nearly full' && m.pressure === 'warning' && parseFloat(m.fill) === 85 &&
				m.valuetext.endsWith(': nearly full; the older conversation will be compacted before the next message'); })()`))
		p.schemes("warning", func(where string) { p.measured(where, "#context-text", "#compact") })

		p.send("And the third?")
		p.waitFor("compacting, before the third message", withContext(`(() => { const d = lastDivider(), ids = turnIds();
			return d.label === 'Compacting the context… · 1.7k tokens · auto' && d.status === 'inProgress' && d.live && !d.foldable &&
				d.inTurn === ids[2] && d.first && d.after === ids[1] && document.getElementById('compact').disabled; })()`))
		close(first)
		p.waitFor("the answer", `agentTexts('completed').includes('Marseille.') && footer().startsWith('✓')`)
		items := p.compactionItems()
		if len(items) != 1 || items[0]["outcome"] != "compacted" || items[0]["trigger"] != "auto" {
			p.fatalf("compaction items %v", items)
		}
		it := items[0]
		want := fmt.Sprintf("Context compacted · %s → %s tokens · auto", tokenCount(it, "tokensBefore"), tokenCount(it, "tokensAfter"))
		p.waitFor("the divider after the turn summarised", withContext(fmt.Sprintf(`(() => { const d = lastDivider(), ids = turnIds();
			return d.label === %q && d.outcome === 'compacted' && !d.live && d.foldable && !d.open && d.after === %q && d.after === ids[1] &&
				d.first && !document.getElementById('compact').disabled; })()`, want, it["summarizedThrough"])))
		p.waitFor("the meter, full", withContext(`(() => { const m = meter();
			return m.text === '1.9k / 2.0k tokens · full' && m.pressure === 'blocked' && parseFloat(m.fill) === 96; })()`))
		p.schemes("blocked", func(where string) { p.measured(where, "#context-text") })
		p.expect("every turn still shown", `document.querySelectorAll('#transcript .msg.user').length === 3 &&
			JSON.stringify(agentTexts('completed')) === JSON.stringify(['Paris.', 'Lyon.', 'Marseille.'])`)
		p.click("unfolding the divider", "#transcript .compaction summary")
		p.waitFor("the summary, as Markdown", withContext(`(() => { const d = lastDivider();
			return d.open && d.summary === 'They asked about Paris, then Lyon.' &&
				document.querySelector('#transcript .compaction-text strong').textContent === 'Paris'; })()`))
	})

	t.Run("Compact", func(t *testing.T) {
		p.use(t)
		p.click("clicking Compact", "#compact")
		p.waitFor("compacting, in a turn of its own", withContext(`(() => { const d = lastDivider(), ids = turnIds();
			return d.label === 'Compacting the context… · 1.9k tokens · manual' && d.live && d.alone && d.inTurn === ids[3] &&
				d.after === ids[2] && !document.getElementById('stop').hidden && document.getElementById('compact').disabled; })()`))
		close(second)
		p.waitFor("the divider", withContext(`lastDivider().outcome === 'compacted'`))
		items := p.compactionItems()
		it := items[len(items)-1]
		want := fmt.Sprintf("Context compacted · %s → %s tokens · manual", tokenCount(it, "tokensBefore"), tokenCount(it, "tokensAfter"))
		p.waitFor("a divider alone, after the last exchange", withContext(fmt.Sprintf(`(() => { const d = lastDivider(), ids = turnIds();
			const turn = document.querySelector('#transcript .turn.compaction-turn');
			const again = document.querySelector('#transcript .turn:nth-of-type(3) .again');
			return d.label === %q && d.alone && d.after === %q && d.after === ids[2] && turn.querySelector('.msg, .turn-footer') === null &&
				document.getElementById('stop').hidden && again && getComputedStyle(again).display !== 'none' &&
				document.querySelectorAll('#transcript .msg.user').length === 3 && document.getElementById('compact-note').textContent === ''; })()`,
			want, it["summarizedThrough"])))
		p.waitFor("the meter after it", withContext(fmt.Sprintf(`meter().text === '%s / 2.0k tokens' && meter().pressure === 'normal'`, tokenCount(it, "tokensAfter"))))
		if sent := p.sent("session/compact"); len(sent) != 2 {
			p.fatalf("session/compact sent %d times", len(sent))
		}
	})

	t.Run("a failed compaction says why", func(t *testing.T) {
		p.use(t)
		p.send("And the fourth?")
		p.waitFor("the answer", `agentTexts('completed').includes('Toulouse.') && footer().startsWith('✓')`)
		p.click("clicking Compact", "#compact")
		p.waitFor("the failure", withContext(`lastDivider().outcome === 'failed'`))
		items := p.compactionItems()
		it := items[len(items)-1]
		if it["outcome"] != "failed" || it["failureReason"] == nil {
			p.fatalf("the failed compaction item %v", it)
		}
		want := fmt.Sprintf("Compaction failed: %s · manual · the model still gets the whole conversation", it["failureReason"])
		p.waitFor("it says why", withContext(fmt.Sprintf(`(() => { const d = lastDivider();
			return d.label === %q && d.alone && !d.foldable && document.getElementById('stop').hidden; })()`, want)))
		live = p.shape()
	})

	t.Run("the same after a reload", func(t *testing.T) {
		p.use(t)
		meterBefore := p.eval(withContext(`JSON.stringify(meter())`))
		p.open(base)
		p.openChat(sid)
		p.waitFor("the chat", withContext(`dividers().length === 3 && agentTexts('completed').includes('Toulouse.')`))
		if again := p.shape(); again != live {
			p.fatalf("after a reload the transcript reads\n%s\nlive it read\n%s", again, live)
		}
		if after := p.eval(withContext(`JSON.stringify(meter())`)); after != meterBefore {
			p.fatalf("after a reload the meter reads %s, live %s", after, meterBefore)
		}
		var resumed bool
		for _, r := range p.received("session/contextUsage") {
			resumed = resumed || r["sessionId"] == sid
		}
		if !resumed {
			p.fatalf("no session/contextUsage received")
		}
	})

	t.Run("contrast", func(t *testing.T) {
		p.use(t)
		p.click("unfolding the divider", "#transcript .compaction summary")
		for _, size := range [][2]int64{{1280, 800}, {390, 844}} {
			p.viewport(size[0], size[1])
			p.expectFits(size[0])
			p.schemes(fmt.Sprintf("%d×%d", size[0], size[1]), func(where string) {
				p.measured(where, ".compaction-label", `.compaction[data-outcome="failed"] .compaction-label`, ".compaction-text",
					".compaction-note", "#context-text", "#compact", "#effort")
				p.lowContrast(where)
			})
		}
		p.viewport(1280, 800)
	})

	t.Run("keyboard", func(t *testing.T) {
		p.use(t)
		seen := p.tabWalk()
		for _, want := range []string{"summary.compaction-summary", "#compact", "#effort", "#input"} {
			if !seen[want] {
				p.fatalf("Tab never reached %s; it reached %v", want, seen)
			}
		}
	})
}

// schemes runs check in light and then dark mode, and leaves the
// system's scheme.
func (p *chatPage) schemes(where string, check func(where string)) {
	p.t.Helper()
	for _, scheme := range []string{"light", "dark"} {
		p.colorScheme(scheme)
		p.waitFor(scheme+" mode", fmt.Sprintf(`matchMedia('(prefers-color-scheme: %s)').matches`, scheme))
		check(where + " " + scheme)
	}
	p.colorScheme("")
}
