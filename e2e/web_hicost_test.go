package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"mspd/daemon"
	"mspd/provider/anthropic/anthropictest"
	"mspd/provider/openai/openaitest"
	"mspd/provider/scripted"
)

// goAnswer is an answer with a Go block whose tokens take most of the
// theme's colours, an HTML block for the rest (tags, attributes), a
// block with no language and one in a language highlight.js lacks.
const goAnswer = "Here:\n\n```go\n// Package main says hi.\npackage main\n\nimport \"fmt\"\n\n" +
	"func main() {\n\tvar n int = 42\n\tfmt.Println(\"hi\", n, true)\n}\n```\n\n" +
	"```html\n<!-- a note -->\n<div class=\"note\">hi</div>\n```\n\n" +
	"```\nfunc plain() {}\n```\n\n```klingon\nfunc strange() {}\n```\n"

// codeHelpers read the last answer's code blocks.
const codeHelpers = `
const lastAnswer = () => [...document.querySelectorAll('.msg.agent')].pop();
const blocks = (m) => [...m.querySelectorAll('.code-block pre code')];
// spanShapes lists every element inside code: its tag and attributes.
const spanShapes = (m) => blocks(m).flatMap((c) => [...c.querySelectorAll('*')]
	.map((e) => e.tagName + ' ' + e.getAttributeNames().join(',')));
const hl = (code, cls) => [...code.querySelectorAll('span.' + cls)].map((s) => s.textContent);
`

// withCode evaluates a page expression with codeHelpers in scope.
func withCode(expr string) string {
	return "(() => {" + codeHelpers + "return (" + expr + "); })()"
}

// TestWebHighlight drives code highlighting in headless Chromium: a
// fenced Go block renders with highlight.js's token spans while the
// answer streams and once it is complete, its text unchanged (and Copy
// copies it); a block with no language, or one highlight.js does not
// know, stays plain; markup inside a block stays text, with nothing but
// class-only spans in code; a block over 64 Ki characters stays plain;
// every token colour holds 4.5:1 on the code background in light and
// dark. The log says how long a 20 KB Go answer takes to render.
func TestWebHighlight(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	p := openBrowser(t)
	p.open("http://" + d.Addr() + "/")
	p.viewport(1280, 800)

	t.Run("a go block", func(t *testing.T) {
		p.use(t)
		p.newChat()
		p.send(scripted.Script(scripted.Step{Text: goAnswer + "\n" + strings.Repeat("More words after the blocks. ", 30),
			Chunks: 60, ChunkDelayMs: 25}))
		p.waitFor("token spans while the answer streams", withCode(`(() => {
			const m = document.querySelector('.msg.agent[data-status="inProgress"]');
			const code = m && m.querySelector('code.language-go');
			return !!code && hl(code, 'hljs-keyword').includes('func') && code.querySelector('span.hljs-comment') !== null;
		})()`))
		p.waitFor("the whole answer", `footer().startsWith('✓')`)
		p.expect("the go block highlighted, its text unchanged", withCode(`(() => {
			const code = lastAnswer().querySelector('.code-block pre code.language-go');
			return code.textContent === '// Package main says hi.\npackage main\n\nimport "fmt"\n\nfunc main() {\n\tvar n int = 42\n\tfmt.Println("hi", n, true)\n}\n' &&
				JSON.stringify(hl(code, 'hljs-keyword')) === JSON.stringify(['package', 'import', 'func', 'var']) &&
				JSON.stringify(hl(code, 'hljs-string')) === JSON.stringify(['"fmt"', '"hi"']) &&
				JSON.stringify(hl(code, 'hljs-number')) === JSON.stringify(['42']) &&
				JSON.stringify(hl(code, 'hljs-comment')) === JSON.stringify(['// Package main says hi.']) &&
				JSON.stringify(hl(code, 'hljs-type')) === JSON.stringify(['int']) &&
				JSON.stringify(hl(code, 'hljs-literal')) === JSON.stringify(['true']) &&
				code.closest('.code-block').querySelector('.code-lang').textContent === 'go';
		})()`))
		p.expect("the html block highlighted", withCode(`(() => {
			const code = lastAnswer().querySelector('code.language-html');
			return JSON.stringify(hl(code, 'hljs-name')) === JSON.stringify(['div', 'div']) &&
				JSON.stringify(hl(code, 'hljs-attr')) === JSON.stringify(['class']);
		})()`))
		p.expect("no guess for a block with no language, or one highlight.js lacks", withCode(`(() => {
			const [, , plain, strange] = blocks(lastAnswer());
			return plain.children.length === 0 && plain.textContent === 'func plain() {}\n' &&
				strange.classList.contains('language-klingon') && strange.children.length === 0 &&
				strange.textContent === 'func strange() {}\n';
		})()`))
		p.expect("only class-only spans in code", withCode(`spanShapes(lastAnswer()).length > 10 &&
			spanShapes(lastAnswer()).every((s) => s === 'SPAN class')`))
		p.eval(`(navigator.clipboard.writeText = async (text) => { window.copied = text; }, '')`)
		p.click("clicking Copy", ".msg.agent .code-block button.copy")
		p.waitFor("the code copied as text", `window.copied === '// Package main says hi.\npackage main\n\nimport "fmt"\n\nfunc main() {\n\tvar n int = 42\n\tfmt.Println("hi", n, true)\n}\n'`)
	})

	t.Run("each token colour's contrast", func(t *testing.T) {
		p.use(t)
		p.schemes("token colours", func(where string) {
			got := p.eval(`(() => {` + contrastHelpers + codeHelpers + `
				const seen = {};
				for (const s of lastAnswer().querySelectorAll('pre code span')) {
					const key = s.className;
					if (!(key in seen)) seen[key] = { ratio: contrastOf(s), color: getComputedStyle(s).color };
				}
				return JSON.stringify(seen);
			})()`)
			var seen map[string]struct {
				Ratio float64
				Color string
			}
			if err := json.Unmarshal([]byte(got), &seen); err != nil {
				p.fatalf("%s: %v", where, err)
			}
			colours := map[string]bool{}
			for class, c := range seen {
				if !(c.Ratio >= 4.5) {
					p.fatalf("%s: %s is %.2f:1 on the code background, want 4.5", where, class, c.Ratio)
				}
				colours[c.Color] = true
			}
			// Keyword, string, number, title, type, meta and comment, and
			// the text's own colour for the function's parameters.
			if len(colours) < 7 {
				p.fatalf("%s: the token classes %v show %d colours, want the theme's 7 or more", where, seen, len(colours))
			}
			t.Logf("%s: %d token classes in %d colours, each ≥ 4.5:1", where, len(seen), len(colours))
			p.lowContrast(where)
		})
	})

	t.Run("markup in a block stays text", func(t *testing.T) {
		p.use(t)
		p.newChat()
		inside := "<script>window.pwned='script'</script>\n<img src=x onerror=\"window.pwned='img'\">\n" +
			"</span><span onclick=\"window.pwned='span'\" style=\"color:red\" class=\"x\">click</span>\n"
		p.send(scripted.Script(scripted.Step{Text: "```html\n" + inside + "```\n\n```js\nconst s = \"</code></pre><script>window.pwned='js'</script>\";\n```\n", Chunks: 4}))
		p.waitFor("the answer", `footer().startsWith('✓')`)
		quoted, _ := json.Marshal(inside)
		p.expect("the markup as text, no element but spans", withCode(fmt.Sprintf(`(() => {
			const m = lastAnswer(), [html, js] = blocks(m);
			return html.textContent === %s && js.textContent.includes("<script>window.pwned='js'</script>") &&
				m.querySelectorAll('script, img, [onclick], [onerror], [style]').length === 0 &&
				spanShapes(m).every((s) => s === 'SPAN class') && html.querySelector('span.hljs-name') !== null &&
				[...m.querySelectorAll('pre span')].every((s) => [...s.classList].every((c) => /^(hljs-|language-)|_$/.test(c))) &&
				window.pwned === undefined;
		})()`, quoted)))
	})

	t.Run("render time of a 20 KB code answer", func(t *testing.T) {
		p.use(t)
		var line strings.Builder
		for i := 0; line.Len() < 20000; i++ {
			fmt.Fprintf(&line, "\tsum += compute(%d, \"item %d\") // step %d\n", i, i, i)
		}
		body := line.String()
		big := "```go\nfunc total() int {\n\tsum := 0\n" + body + "\treturn sum\n}\n```\n"
		huge := "```go\n" + strings.Repeat(body, 4) + "```\n" // over 64 Ki characters
		args, _ := json.Marshal([]string{big, huge})
		got := p.awaitEval(`import('/js/markdown.js').then(({ renderMarkdown }) => {
			const [big, huge] = ` + string(args) + `;
			const time = (src) => { const t0 = performance.now(); const f = renderMarkdown(src); return [performance.now() - t0, f]; };
			const [first, f] = time(big);
			const [again] = time(big);
			const [plain] = time(big.replace('` + "```go" + `', '` + "```" + `'));
			// As it streams: the block rendered at every 1 KB it grew by.
			let streamed = 0;
			for (let n = 1000; n < big.length + 1000; n += 1000) streamed += time(big.slice(0, n))[0];
			const [, h] = time(huge);
			return JSON.stringify({ bytes: big.length, first, again, plain, streamed,
				spans: f.querySelectorAll('code span').length, hugeSpans: h.querySelectorAll('code span').length,
				hugeLength: h.querySelector('code').textContent.length });
		})`)
		var r struct {
			Bytes                         int
			First, Again, Plain, Streamed float64
			Spans, HugeSpans, HugeLength  int
		}
		if err := json.Unmarshal([]byte(got), &r); err != nil {
			p.fatalf("%s: %v", got, err)
		}
		if r.Spans < 1000 {
			p.fatalf("the 20 KB block has %d token spans: not highlighted", r.Spans)
		}
		if r.HugeSpans != 0 || r.HugeLength <= 65536 {
			p.fatalf("a block of %d characters has %d spans, want none over 64 Ki", r.HugeLength, r.HugeSpans)
		}
		t.Logf("a %d-byte Go answer renders in %.1f ms highlighted (%.1f ms again, the block kept; %.1f ms unhighlighted); "+
			"rendered at every 1 KB as it streams, %.0f ms in all", r.Bytes, r.First, r.Again, r.Plain, r.Streamed)
	})
}

// awaitEval evaluates a page expression whose value is a promise of a
// string, and returns the string.
func (p *chatPage) awaitEval(expr string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr, func(e *runtime.EvaluateParams) { e.AwaitPromise = new(true) }))
	if err != nil {
		p.fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// costHelpers read tokens and cost as the page shows them.
const costHelpers = `
const usageLines = () => [...document.querySelectorAll('#transcript .turn-footer')].map((f) => {
	const u = f.querySelector('.turn-usage');
	return u && !u.hidden ? u.textContent : '';
});
const chatCost = () => { const c = document.getElementById('chat-cost'); return c.hidden ? '' : c.textContent; };
`

// withCost evaluates a page expression with costHelpers in scope.
func withCost(expr string) string {
	return "(() => {" + costHelpers + "return (" + expr + "); })()"
}

// TestWebCost drives tokens and cost on the chat page in headless
// Chromium, against mspd's OpenAI provider (priced at $2 in, $8 out per
// million tokens) on a fake server falling back on an unpriced Anthropic
// one. Each answer's footer reads its tokens and cost, summed over the
// turn's completions (a tool call's and the answer's); the chat's total
// sits under the message box; an answer by the unpriced fallback reads
// "not priced" and the total turns partial. A reload rebuilds the same
// from the log. Without prices there is no line and no $ anywhere.
// Contrast in light and dark, and the row fits a phone.
func TestWebCost(t *testing.T) {
	oa := openaitest.New(t, "/v1",
		openaitest.Stream(openaitest.AnswerUsage(1200, 340, "One.")...),
		openaitest.Stream(openaitest.ToolCalls(5, openaitest.Call{ID: "call_1", Name: "builtin__calculator", Args: `{"expression":"6*7"}`})...),
		openaitest.Stream(openaitest.AnswerUsage(15000, 1200, "It is 42.")...),
		openaitest.Error(429, openaitest.QuotaBody))
	an := anthropictest.New(t, anthropictest.AnswerUsage(2000, 50, "from Claude"))
	d := startDaemon(t, daemon.Config{Env: chainEnv,
		ConfigFile: pricedConfig(t, oa.URL(), an.URL(), "price_in = 2\nprice_out = 8\n", "")})
	base := "http://" + d.Addr() + "/"
	p := openBrowser(t)
	p.open(base)
	p.viewport(1280, 800)
	var sid string
	want := []string{
		"1.2k → 340 tokens · $0.0051",   // (1200×2 + 340×8) / 1e6 = 0.00512
		"15k → 1.2k tokens · $0.040",    // the call's 80 → 18 and the answer's 15000 → 1200: 0.039904
		"2.0k → 50 tokens · not priced", // claude has no price
	}
	var shown string

	t.Run("priced turns and the chat's total", func(t *testing.T) {
		p.use(t)
		sid = p.newChat()
		p.expect("no total on a new chat", withCost(`chatCost() === ''`))
		p.send("first")
		p.waitFor("the first footer", withCost(fmt.Sprintf(`footer().startsWith('✓') &&
			JSON.stringify(usageLines()) === %q && chatCost() === '$0.0051 this chat'`, jsonOf(want[:1]))))
		p.send("what is 6*7?")
		p.waitFor("the second footer, both completions summed", withCost(fmt.Sprintf(`footer().startsWith('✓') &&
			agentTexts('completed').includes('It is 42.') && JSON.stringify(usageLines()) === %q &&
			chatCost() === '$0.045 this chat'`, jsonOf(want[:2]))))
		if n := len(p.received("session/tokenUsage")); n != 3 {
			p.fatalf("%d session/tokenUsage events, want 3 (one for the call)", n)
		}
		p.send("third")
		p.waitFor("the fallback's footer, the total partial", withCost(fmt.Sprintf(`footer().startsWith('✓') &&
			agentTexts('completed').includes('from Claude') && JSON.stringify(usageLines()) === %q &&
			chatCost() === '$0.045 this chat (partial)'`, jsonOf(want))))
		shown = p.eval(withCost(`JSON.stringify([usageLines(), chatCost()])`))
		p.schemes("cost", func(where string) {
			p.measured(where, "#transcript .turn-usage", "#chat-cost")
			p.lowContrast(where)
		})
		p.viewport(390, 844)
		p.expectFits(390)
		p.expect("the total on screen on a phone", `(() => {
			const r = document.getElementById('chat-cost').getBoundingClientRect();
			return r.width > 0 && r.left >= 0 && r.right <= innerWidth && r.bottom <= innerHeight;
		})()`)
		p.viewport(1280, 800)
	})

	t.Run("the same after a reload", func(t *testing.T) {
		p.use(t)
		p.open(base)
		p.expect("no total before a chat is open", withCost(`chatCost() === ''`))
		p.openChat(sid)
		p.waitFor("the rebuilt footers", withCost(fmt.Sprintf(`JSON.stringify([usageLines(), chatCost()]) === %q`, shown)))
	})

	t.Run("another chat shows its own", func(t *testing.T) {
		p.use(t)
		p.newChat()
		p.expect("no total for a chat with no answer", withCost(`chatCost() === '' && usageLines().length === 0`))
	})

	t.Run("no prices, no cost", func(t *testing.T) {
		p.use(t)
		oa := openaitest.New(t, "/v1", openaitest.Stream(openaitest.AnswerUsage(1200, 340, "Free.")...))
		an := anthropictest.New(t)
		d := startDaemon(t, daemon.Config{Env: chainEnv, ConfigFile: pricedConfig(t, oa.URL(), an.URL(), "", "")})
		p.open("http://" + d.Addr() + "/")
		p.newChat()
		before := len(p.received("session/tokenUsage"))
		p.send("unpriced")
		p.waitFor("the answer", `footer().startsWith('✓') && agentTexts('completed').includes('Free.')`)
		if n := len(p.received("session/tokenUsage")); n != before+1 {
			p.fatalf("%d session/tokenUsage events for the unpriced answer, want 1", n-before)
		}
		p.expect("no usage line, no total, no $", withCost(`usageLines().every((l) => l === '') && chatCost() === '' &&
			!document.body.innerText.includes('$')`))
	})
}

// jsonOf is v as JSON, for a page expression comparing with it.
func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
