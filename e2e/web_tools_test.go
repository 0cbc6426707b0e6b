package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"mspd/daemon"
	"mspd/provider/demo"
	"mspd/provider/scripted"
	"mspd/tool/tooltest"
)

// TestWebToolCallDemo: the chat page shows the demo model's call of the
// built-in calculator as a row inside the answer — after the step's text,
// before the answer made of its result — reading tool, server, status and
// time; unfolded, the arguments pretty-printed and the output. Reloaded,
// the chat rebuilt from the log shows the same.
func TestWebToolCallDemo(t *testing.T) {
	d := startDaemon(t, daemon.Config{Provider: "demo", Demo: demo.Config{WordDelay: 10 * time.Millisecond, Seed: 3}})
	base := "http://" + d.Addr() + "/"
	p := openBrowser(t)
	p.use(t)
	p.open(base)
	sid := p.newChat()
	p.send("What is (2+3)*4?")
	p.waitFor("the tool row, completed", `tools().length === 1 && tools()[0].state === 'completed'`)
	p.expect("its tool, server and time", `(() => {
		const r = tools()[0];
		return r.name === 'calculator' && r.server === 'builtin' && r.status === 'completed' && /^\d+ ms$/.test(r.time) &&
			r.why === null && !r.open && !r.live;
	})()`)
	p.waitFor("the final answer", `footer().startsWith('✓') && agentTexts('completed').includes('The calculator says 20.')`)
	checkDemoTurn(p)
	live := p.shape()

	p.click("unfolding the row", "#transcript .tool summary")
	p.waitFor("the arguments and the output", `tools()[0].open`)
	checkUnfolded(p)
	name := p.accessibleName("#transcript .tool summary")
	if !regexp.MustCompile(`^Tool call: calculator · builtin · completed · \d+ ms$`).MatchString(name) {
		p.fatalf("the row's accessible name is %q", name)
	}

	t.Run("after a reload", func(t *testing.T) {
		p.use(t)
		p.open(base)
		p.openChat(sid)
		p.waitFor("the chat", `footer().startsWith('✓') && tools().length === 1`)
		if again := p.shape(); again != live {
			p.fatalf("rebuilt from the log the chat shows\n%s\nlive it showed\n%s", again, live)
		}
		checkDemoTurn(p)
		p.expect("the row folded", `!tools()[0].open`)
		p.click("unfolding the row", "#transcript .tool summary")
		p.waitFor("the arguments and the output", `tools()[0].open`)
		checkUnfolded(p)
	})
}

// checkDemoTurn checks the order of the demo's turn: the question, the
// step's text, the call, the answer made of its result, the footer.
func checkDemoTurn(p *chatPage) {
	p.t.Helper()
	p.expect("text, call, answer in the order they happened", `(() => {
		const parts = [...document.querySelector('#transcript .turn:last-of-type').children].filter((c) => !c.hidden);
		const kinds = parts.map((c) => c.classList.contains('tool') ? 'tool' : c.classList.contains('agent') ? 'agent:' + c.textContent.replace('Assistant: ', '').trim() : c.className);
		return JSON.stringify(kinds) === JSON.stringify(['msg user', 'msg-actions', 'agent:Let me work that out.', 'tool', 'agent:The calculator says 20.', 'turn-footer']);
	})()`)
}

func checkUnfolded(p *chatPage) {
	p.t.Helper()
	p.expect("the arguments pretty-printed, the output", `(() => {
		const r = tools()[0];
		return r.args === '{\n  "expression": "(2+3)*4"\n}' && r.output === '20' && r.note === null &&
			document.querySelector('#transcript .tool .tool-args').checkVisibility() &&
			document.querySelector('#transcript .tool .tool-output').checkVisibility();
	})()`)
}

// TestWebToolCalls drives tool calls of every kind through the page, made
// by the scripted model on a test MCP server over HTTP: output and
// arguments with markup and Markdown in them shown as literal text with
// nothing run, a tool's error and why, output the server truncated and
// the whole of it read back (item/readOutput), a running call's live
// indicator, a timeout, a call stopped with the turn, a call a person
// denied;
// the chat rebuilt the same from its log; the rows by keyboard and as a
// screen reader names them, at phone width, in light and dark mode.
func TestWebToolCalls(t *testing.T) {
	probe := tooltest.New("")
	hs := httptest.NewServer(probe.HTTPHandler())
	t.Cleanup(hs.Close)
	t.Cleanup(probe.Release) // before the server closes: no call left hanging
	cfg := filepath.Join(t.TempDir(), "mspd.toml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "[[providers]]\ntype = \"scripted\"\n\n[[mcp]]\nname = \"probe\"\nurl = %q\napproval = \"never\"\napproval_tools = [\"append\"]\n", hs.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	connected := &logSignal{msg: "mcp server connected", seen: make(chan struct{})}
	d := startDaemon(t, daemon.Config{ConfigFile: cfg, Logger: slog.New(connected),
		Tools: daemon.Tools{NoBuiltin: true, Timeout: 5 * time.Second}})
	select {
	case <-connected.seen:
	case <-testCtx(t).Done():
		t.Fatal("the probe server never connected")
	}
	base := "http://" + d.Addr() + "/"
	p := openBrowser(t)
	p.open(base)
	var sid string

	markup := `<img src=x onerror="window.pwned='img'"> **not bold** <script>window.pwned='script'</script>`
	// Arguments as a model writes them: markup not escaped.
	args := func(v any) string {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(b.String())
	}

	t.Run("untrusted output is text", func(t *testing.T) {
		p.use(t)
		sid = p.newChat()
		p.send(scripted.Script(
			scripted.Step{Text: "Let me look.", Calls: []scripted.Call{
				{Name: "probe__lookup", Args: args(map[string]string{"key": markup})},
				{Name: "probe__fail", Args: args(map[string]string{"message": markup + " went wrong"})},
				{Name: "probe__big", Args: args(map[string]int{"bytes": 40000})},
			}},
			scripted.Step{Text: "All three ran."}))
		p.waitFor("the answer", `footer().startsWith('✓') && agentTexts('completed').includes('All three ran.')`)
		p.expect("three rows, in the order asked, each with its status", `(() => {
			const r = tools();
			return r.length === 3 && r.map((x) => x.name).join() === 'lookup,fail,big' && r.every((x) => x.server === 'probe') &&
				r.map((x) => x.state).join() === 'completed,failed,completed' && r.map((x) => x.status).join() === 'completed,failed,completed';
		})()`)
		quoted, _ := json.Marshal(markup)
		p.expect("the markup in the output as literal text", fmt.Sprintf(`(() => {
			const r = tools();
			return r[0].output === 'value of ' + %[1]s && r[1].output === %[1]s + ' went wrong' &&
				r[0].args.includes(%[2]q) && document.querySelector('#transcript .tool .tool-output').innerHTML.startsWith('value of &lt;img src=x');
		})()`, quoted, `"key": "<img src=x onerror=\"window.pwned='img'\">`))
		p.expect("the failure says why, folded", fmt.Sprintf(`tools()[1].why === 'the tool reported an error: ' + %s + ' went wrong' &&
			!tools()[1].open && document.querySelectorAll('#transcript .tool-why')[0].checkVisibility()`, quoted))
		p.expect("the truncated output says so", `(() => {
			const r = tools()[2];
			const bytes = new TextEncoder().encode(r.output).length;
			return r.note === 'Output truncated: only its beginning was kept.' && bytes > 32000 && bytes <= 32768 && r.why === null &&
				tools()[0].note === null && tools()[1].note === null;
		})()`)
		for _, row := range []string{".msg.agent + .tool", ".tool + .tool", ".tool + .tool + .tool"} {
			p.click("unfolding a row", "#transcript .turn:last-of-type "+row+" > details > summary")
		}
		p.waitFor("the rows unfolded", `tools().every((r) => r.open)`)
		p.expect("no element from the tools' text, nothing run", `document.querySelectorAll(
			'#transcript .tool img, #transcript .tool script, #transcript .tool strong, #transcript .tool [onerror]').length === 0 &&
			window.pwned === undefined`)
		p.expect("the step's text, the calls, the answer, in order", `(() => {
			const parts = [...document.querySelector('#transcript .turn:last-of-type').children].filter((c) => !c.hidden);
			return JSON.stringify(parts.map((c) => c.className)) ===
				JSON.stringify(['msg user', 'msg-actions', 'msg agent', 'tool', 'tool', 'tool', 'msg agent', 'turn-footer']);
		})()`)
		p.expectFits(1100)
	})

	t.Run("running, then timed out", func(t *testing.T) {
		p.use(t)
		p.send(scripted.Script(
			scripted.Step{Calls: []scripted.Call{{Name: "probe__slow", Args: "{}"}}},
			scripted.Step{Text: "It took too long."}))
		p.waitFor("the running call", `tools().length === 1 && tools()[0].status === 'inProgress' && tools()[0].state === 'running' &&
			tools()[0].live && tools()[0].time === null`)
		p.expect("the spinner turning", `getComputedStyle(document.querySelector('#transcript .tool-live')).animationName === 'spin'`)
		p.click("unfolding the running call", "#transcript .turn:last-of-type .tool summary")
		p.expect("its output to come", `tools()[0].open && [...document.querySelectorAll('#transcript .turn:last-of-type .tool-empty')]
			.some((e) => e.textContent === 'waiting for the result…')`)
		p.waitFor("the timeout", `tools()[0].state === 'timed out'`)
		p.expect("why, and how long it ran", `(() => {
			const r = tools()[0];
			return r.status === 'timedOut' && r.why === 'the call ran past 5s' && /^[5-9]\.\d s$/.test(r.time) && !r.live && r.open;
		})()`)
		p.waitFor("the answer after it", `footer().startsWith('✓') && agentTexts('completed').includes('It took too long.')`)
	})

	t.Run("stopped during the call", func(t *testing.T) {
		p.use(t)
		p.send(scripted.Script(
			scripted.Step{Text: "Waiting on it.", Calls: []scripted.Call{{Name: "probe__slow", Args: "{}"}}},
			scripted.Step{Text: "never"}))
		p.waitFor("the running call", `tools().length === 1 && tools()[0].state === 'running'`)
		for _, scheme := range []string{"dark", "light"} {
			p.colorScheme(scheme)
			p.expect(scheme+" mode: the running call's words at 4.5:1", fmt.Sprintf(`matchMedia('(prefers-color-scheme: %s)').matches &&
				['.tool-name', '.tool-server', '.tool-state'].every((part) =>
					contrastOf(document.querySelector('#transcript .tool[data-status="inProgress"] ' + part)) >= 4.5)`, scheme))
		}
		p.colorScheme("")
		p.click("clicking Stop", "#stop")
		p.waitFor("the stopped turn", `footer() === '■ stopped'`)
		p.expect("the call cancelled, saying why", `(() => {
			const r = tools()[0];
			return r.status === 'cancelled' && r.state === 'cancelled' && r.why === 'the turn was stopped during the call' && !r.live;
		})()`)
	})

	t.Run("rejected", func(t *testing.T) {
		p.use(t)
		// The server marks append as needing a person's consent: the
		// approval card asks, and Deny rejects the call.
		p.send(scripted.Script(
			scripted.Step{Calls: []scripted.Call{{Name: "probe__append", Args: `{"text":"a line"}`}}},
			scripted.Step{Text: "Not allowed, then."}))
		p.waitFor("the approval card", pendingCard)
		p.click("clicking Deny", denyButton)
		p.click("denying without a word", denySubmit)
		p.waitFor("the answer", `footer().startsWith('✓') && agentTexts('completed').includes('Not allowed, then.')`)
		p.expect("the call rejected, saying why", `(() => {
			const r = tools()[0];
			return tools().length === 1 && r.status === 'rejected' && r.state === 'rejected' && r.why === 'the user denied it' &&
				r.time === null && r.output === null && r.args === '{\n  "text": "a line"\n}' && cards()[0].outcome === '✗ Denied';
		})()`)
		if n := probe.Count(tooltest.Append); n != 0 {
			p.fatalf("the denied call ran %d times", n)
		}
	})

	var live string
	t.Run("reload shows the same", func(t *testing.T) {
		p.use(t)
		live = p.shape()
		p.open(base)
		p.openChat(sid)
		p.waitFor("the chat", `document.querySelectorAll('#transcript .turn-footer').length === 4 && footer().startsWith('✓') &&
			tools().length === 1`)
		if again := p.shape(); again != live {
			p.fatalf("rebuilt from the log the chat shows\n%s\nlive it showed\n%s", again, live)
		}
		p.expect("nothing run", `window.pwned === undefined`)
	})

	t.Run("keyboard and screen readers", func(t *testing.T) {
		p.use(t)
		p.eval(`(document.getElementById('input').focus(), '')`)
		p.run("pressing Shift+Tab", chromedp.KeyEvent("\t", chromedp.KeyModifiers(chromedp.ModifierShift)))
		for range 60 {
			if p.eval(`String(document.activeElement.matches('#transcript .tool summary'))`) == "true" {
				break
			}
			p.run("pressing Shift+Tab", chromedp.KeyEvent("\t", chromedp.KeyModifiers(chromedp.ModifierShift)))
		}
		p.expect("a row's summary focused, with a ring", `(() => {
			const a = document.activeElement;
			const s = getComputedStyle(a);
			return a.matches('#transcript .tool summary') && a.matches(':focus-visible') && s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2;
		})()`)
		p.run("pressing Enter", chromedp.KeyEvent("\r"))
		p.waitFor("the row unfolded", `document.activeElement.parentElement.open`)
		p.run("pressing Enter", chromedp.KeyEvent("\r"))
		p.waitFor("the row folded", `!document.activeElement.parentElement.open`)

		names := p.accessibleNames("#transcript .tool summary")
		want := []*regexp.Regexp{
			regexp.MustCompile(`^Tool call: lookup · probe · completed · \d+ ms$`),
			regexp.MustCompile(`^Tool call: fail · probe · failed · \d+ ms ?: the tool reported an error: <img src=x onerror="window.pwned='img'"> \*\*not bold\*\* <script>`),
			regexp.MustCompile(`^Tool call: big · probe · completed · \d+ ms$`),
			regexp.MustCompile(`^Tool call: slow · probe · timed out · \d\.\d s ?: the call ran past 5s$`),
			regexp.MustCompile(`^Tool call: slow · probe · cancelled · \d+(\.\d)? m?s ?: the turn was stopped during the call$`),
			regexp.MustCompile(`^Tool call: append · probe · rejected ?: the user denied it$`),
		}
		if len(names) != len(want) {
			p.fatalf("accessible names %q, want %d", names, len(want))
		}
		for i, re := range want {
			if !re.MatchString(names[i]) {
				p.fatalf("row %d's accessible name %q, want it to match %s", i+1, names[i], re)
			}
		}
	})

	t.Run("phone, light and dark", func(t *testing.T) {
		p.use(t)
		p.eval(`(document.querySelectorAll('#transcript .tool details').forEach((d) => { d.open = true; }), '')`)
		for _, w := range []int64{390, 1280} {
			p.viewport(w, map[int64]int64{390: 844, 1280: 800}[w])
			p.expectFits(w)
			p.expect(fmt.Sprintf("the rows within the transcript at %d px", w), `[...document.querySelectorAll('#transcript .tool')].every((r) => {
				const b = r.getBoundingClientRect(), t = document.getElementById('transcript').getBoundingClientRect();
				return b.left >= t.left && b.right <= t.right && r.scrollWidth <= r.clientWidth + 1;
			})`)
		}
		for _, scheme := range []string{"light", "dark"} {
			p.colorScheme(scheme)
			p.waitFor(scheme+" mode", fmt.Sprintf(`matchMedia('(prefers-color-scheme: %s)').matches`, scheme))
			if bad := p.eval(`(() => {` + contrastHelpers + `return JSON.stringify(lowContrast()); })()`); bad != "[]" {
				p.fatalf("%s mode: text below 4.5:1: %s", scheme, bad)
			}
			// Each status's parts, measured (0: not shown).
			low := p.eval(`(() => {` + contrastHelpers + `
				const low = [];
				const measure = (status, part) => {
					const row = document.querySelector('#transcript .tool[data-status="' + status + '"]');
					if (!row) low.push('no ' + status + ' row');
					const e = row && row.querySelector(part);
					if (!e) return; // a part this row has not (a rejected call's time)
					const r = contrastOf(e);
					if (r < 4.5) low.push(status + ' ' + part + ': ' + r.toFixed(2));
				};
				for (const s of ['completed', 'failed', 'timedOut', 'cancelled', 'rejected']) {
					for (const part of ['.tool-name', '.tool-server', '.tool-state', '.tool-time', '.tool-label', '.tool-args', '.tool-facts']) measure(s, part);
				}
				for (const s of ['failed', 'timedOut', 'cancelled', 'rejected']) measure(s, '.tool-why');
				measure('completed', '.tool-note');
				measure('completed', '.tool-output');
				measure('failed', '.tool-output');
				return JSON.stringify(low);
			})()`)
			if low != "[]" {
				p.fatalf("%s mode: tool rows below 4.5:1 (0: not shown): %s", scheme, low)
			}
		}
		p.colorScheme("")
		p.run("resetting the viewport", chromedp.ResetViewport())
	})

	t.Run("the whole output", func(t *testing.T) {
		p.use(t)
		first := "#transcript .turn:first-of-type "
		p.expect("the whole output offered for the cut one only", `(() => {
			const offers = document.querySelectorAll('#transcript .show-whole');
			return offers.length === 1 && offers[0].closest('.tool') === document.querySelectorAll('`+first+`.tool')[2] &&
				offers[0].textContent === 'Show the whole output' && offers[0].getAttribute('aria-label') === 'Show the whole output, 39 KB';
		})()`)
		p.click("clicking Show the whole output", first+".show-whole")
		p.waitFor("the whole output, as text", `(() => {
			const row = document.querySelectorAll('`+first+`.tool')[2];
			const out = row.querySelector('.tool-output').textContent;
			return new TextEncoder().encode(out).length === 40000 && out.endsWith('éxéxx') &&
				row.querySelector('.tool-note').textContent === 'The whole output: 39 KB.' &&
				row.querySelector('.show-whole') === null && document.activeElement === row.querySelector('.tool-output');
		})()`)
		if reads := p.sent("item/readOutput"); len(reads) != 1 || reads[0]["sessionId"] != sid || reads[0]["offsetBytes"] != 0.0 {
			p.fatalf("item/readOutput sent %v, want one read from 0", reads)
		}

		// A longer one is read in parts.
		const whole = 2_500_000
		p.send(scripted.Script(
			scripted.Step{Calls: []scripted.Call{{Name: "probe__big", Args: fmt.Sprintf(`{"bytes":%d}`, whole)}}},
			scripted.Step{Text: "That was long."}))
		p.waitFor("the answer", `footer().startsWith('✓') && tools().length === 1 && tools()[0].status === 'completed'`)
		p.click("unfolding the row", "#transcript .turn:last-of-type .tool summary")
		reads := len(p.sent("item/readOutput"))
		p.click("clicking Show the whole output", "#transcript .turn:last-of-type .show-whole")
		p.waitFor("the whole output", fmt.Sprintf(`new TextEncoder().encode(tools()[0].output).length === %d && tools()[0].note === 'The whole output: 2.4 MB.'`, whole))
		var offsets []float64
		for _, r := range p.sent("item/readOutput") {
			if r["lengthBytes"] != float64(1<<20) {
				p.fatalf("item/readOutput %v: want parts of 1 MiB", r)
			}
			offsets = append(offsets, r["offsetBytes"].(float64))
		}
		// Parts end on a character boundary, so each is a MiB or a byte or
		// two less.
		slices.Sort(offsets)
		offsets = offsets[reads:]
		if len(offsets) != 3 || offsets[0] != 0 || offsets[1] < 1<<20-3 || offsets[2]-offsets[1] < 1<<20-3 {
			p.fatalf("item/readOutput read from %v, want three parts of a MiB", offsets)
		}
	})
}

// shape is what the transcript shows (the shape helper): each turn's
// parts, their kinds, statuses and text.
func (p *chatPage) shape() string {
	p.t.Helper()
	return p.eval("(() => {" + helpers + "return shape(); })()")
}

// accessibleName is the name Chromium's accessibility tree gives the
// first element matching sel: what a screen reader announces.
func (p *chatPage) accessibleName(sel string) string {
	p.t.Helper()
	names := p.accessibleNames(sel)
	if len(names) == 0 {
		p.fatalf("no element matches %s", sel)
	}
	return names[0]
}

// accessibleNames are the accessible names of the elements matching sel.
func (p *chatPage) accessibleNames(sel string) []string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
	if err != nil {
		p.fatalf("counting %s: %v", sel, err)
	}
	var names []string
	for i := range n {
		obj, err := chromedp.Call(ctx, runtime.Evaluate, runtime.EvaluateParams{
			Expression: fmt.Sprintf(`document.querySelectorAll(%q)[%d]`, sel, i)})
		if err != nil || obj.Result == nil || obj.Result.ObjectID == "" {
			p.fatalf("finding %s #%d: %v", sel, i, err)
		}
		tree, err := chromedp.Call(ctx, accessibility.GetPartialAXTree, accessibility.GetPartialAXTreeParams{
			ObjectID: obj.Result.ObjectID, FetchRelatives: new(false)})
		if err != nil || len(tree.Nodes) == 0 || tree.Nodes[0].Name == nil {
			p.fatalf("the accessibility node of %s #%d: %v", sel, i, err)
		}
		var name string
		if err := json.Unmarshal(tree.Nodes[0].Name.Value, &name); err != nil {
			p.fatalf("the accessible name of %s #%d: %v", sel, i, err)
		}
		names = append(names, strings.Join(strings.Fields(name), " "))
	}
	return names
}

// logSignal is a slog handler that closes seen at the first record whose
// message is msg, and drops every record.
type logSignal struct {
	msg  string
	seen chan struct{}
	once sync.Once
}

func (l *logSignal) Enabled(context.Context, slog.Level) bool { return true }

func (l *logSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == l.msg {
		l.once.Do(func() { close(l.seen) })
	}
	return nil
}

func (l *logSignal) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logSignal) WithGroup(string) slog.Handler      { return l }
