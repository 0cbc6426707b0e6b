package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"mspd/client"
	"mspd/daemon"
	"mspd/modelretry"
	"mspd/provider/anthropic/anthropictest"
	"mspd/provider/demo"
	"mspd/provider/openai/openaitest"
	"mspd/provider/providertest"
	"mspd/schema/msp"
	"mspd/tool/tooltest"
)

// update makes TestScreenshots rewrite the README's screenshots, and
// TestTailApprovals and TestTailFallback the tail package's recorded
// frames:
//
//	go test ./e2e -run 'TestScreenshots|TestTailApprovals|TestTailFallback' -update
var update = flag.Bool("update", false, "rewrite docs/screenshots/*.png (TestScreenshots) and tail/testdata/approvals-*.jsonl and fallback-*.jsonl (TestTailApprovals, TestTailFallback)")

// screenshotDir is where the README's screenshots live, from this package.
const screenshotDir = "../docs/screenshots"

// TestScreenshots renders the chat page the README shows — desktop, phone,
// dark mode, a retry counting down and tool calls — in the headless
// Chromium the browser tests drive, against mspd's OpenAI provider talking
// to a fake OpenAI server (the tool calls: the offline demo model and the
// built-in calculator), so every pixel comes from the real page and wire. With
// -update it writes docs/screenshots/*.png; without, it renders them to a
// temporary directory, so the command keeps working.
func TestScreenshots(t *testing.T) {
	fake := openaitest.New(t, "/v1",
		openaitest.Stream(openaitest.Answer("Three days is enough for the centre:\n\n",
			"1. **Alfama** and the castle in the morning, before the heat.\n",
			"2. **Belém** for the tower, the monastery and *pastéis de nata*.\n",
			"3. A day trip to **Sintra** by train from Rossio (40 min).\n")...),
		openaitest.Stream(openaitest.Answer("Two incidents this week, both resolved:\n\n",
			"- **Tuesday**: the queue backed up for 12 min after a deploy.\n",
			"- **Thursday**: a provider returned 529s; retries absorbed them.\n")...),
		openaitest.Stream(openaitest.Answer("Use a `bufio.Scanner`: each call to `Scan` reads one line.\n\n",
			"```go\nf, err := os.Open(\"notes.txt\")\nif err != nil {\n\treturn err\n}\ndefer f.Close()\n\n",
			"sc := bufio.NewScanner(f)\nfor sc.Scan() {\n\tfmt.Println(sc.Text())\n}\nreturn sc.Err()\n```\n\n",
			"Two things to know:\n\n- Lines over 64 KiB need a bigger buffer: `sc.Buffer(make([]byte, 1<<20), 1<<20)`.\n",
			"- `Scan` drops the line ending, `\\r\\n` included.\n")...),
		openaitest.Error(429, openaitest.RateLimitBody, "Retry-After-Ms", "600"),
		openaitest.Stream(openaitest.Answer("Skip them inside the loop:\n\n",
			"```go\nfor sc.Scan() {\n\tif strings.TrimSpace(sc.Text()) == \"\" {\n\t\tcontinue\n\t}\n\tfmt.Println(sc.Text())\n}\n```\n")...),
		openaitest.Error(429, openaitest.RateLimitBody, "Retry-After-Ms", "30000"),
	)
	d := startDaemon(t, daemon.Config{Provider: "openai", Model: "gpt-4o-mini",
		Env: mapEnv(map[string]string{"OPENAI_BASE_URL": fake.URL(), "OPENAI_API_KEY": "sk-screenshots"})})

	// The chats, made over the wire as any client would.
	c := dial(t, d.URL(), client.Options{})
	ctx := testCtx(t)
	chat := func(texts ...string) string {
		s, err := c.StartSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range texts {
			answerTurn(t, c, s.Session.SessionID, text)
		}
		return s.Session.SessionID
	}
	chat("Plan a long weekend in Lisbon")
	report := chat("Summarise this week's incidents")
	hero := chat("How do I read a file line by line in Go?", "And skip the blank lines?")
	var first msp.TurnCompletedParams
	page := struct {
		Events []struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		} `json:"events"`
	}{}
	if err := c.Call(ctx, msp.MethodViewPage, map[string]any{"sessionId": hero, "limit": 1000}, &page); err != nil {
		t.Fatal(err)
	}
	for _, ev := range page.Events {
		if ev.Method == msp.NotifyTurnCompleted && first.TurnID == "" {
			if err := json.Unmarshal(ev.Params, &first); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A branch, as Edit makes one, so the list shows a fork.
	if err := c.Call(ctx, msp.MethodSessionFork, map[string]any{"commandId": client.NewCommandID(), "sessionId": hero,
		"cutPoint": map[string]string{"lastTurnId": first.TurnID}, "excludeItems": true}, nil); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	if *update {
		dir = screenshotDir
	}
	p := openBrowser(t)
	p.use(t)
	shot := func(name string, w, h int64) {
		p.t.Helper()
		p.eval(`(document.activeElement.blur(), '')`)
		p.run("moving the mouse away", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, float64(w-1), float64(h-1)))
		writeScreenshot(p, filepath.Join(dir, name))
	}
	open := func(w, h int64, sid string) {
		p.t.Helper()
		p.open("http://" + d.Addr() + "/")
		p.media("light")
		p.viewport(w, h)
		p.openChat(sid)
		p.waitFor("the chat", `document.querySelectorAll('#transcript .turn-footer').length === 2 && footer().startsWith('✓') &&
			document.querySelectorAll('.code-block').length === 2`)
	}

	open(1280, 800, hero)
	p.expect("the resolved retry", `document.querySelector('.retry').dataset.state === 'retried'`)
	shot("desktop.png", 1280, 800)
	p.media("dark")
	shot("dark.png", 1280, 800)
	open(390, 844, hero)
	shot("phone.png", 390, 844)

	p.viewport(1024, 640)
	p.openChat(report)
	p.waitFor("the chat", `footer().startsWith('✓')`)
	p.send("Translate the summary into Portuguese")
	p.waitFor("the countdown", `/^retrying in (30|29|28) s · attempt 2 of 5 · rate limited$/.test(retryText())`)
	shot("retry.png", 1024, 640)
	p.run("stopping", chromedp.KeyEvent(kbEscape))
	p.waitFor("the stopped turn", `footer() === '■ stopped'`)

	// Tool calls, as the offline demo model makes them: one unfolded, one
	// that failed.
	tools := startDaemon(t, daemon.Config{Provider: "demo", Demo: demo.Config{WordDelay: demo.NoDelay, Seed: 3}})
	tc := dial(t, tools.URL(), client.Options{})
	ts, err := tc.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	answerTurn(t, tc, ts.Session.SessionID, "What is (2+3)*4?")
	answerTurn(t, tc, ts.Session.SessionID, "And 1/0?")
	p.open("http://" + tools.Addr() + "/")
	p.media("light")
	p.viewport(1024, 760)
	p.openChat(ts.Session.SessionID)
	p.waitFor("the chat", `document.querySelectorAll('#transcript .turn-footer').length === 2 && document.querySelectorAll('#transcript .tool').length === 2`)
	p.click("unfolding the first call", "#transcript .tool summary")
	p.waitFor("the call unfolded", `document.querySelector('#transcript .tool details').open`)
	p.eval(`(() => { // from the first step's text
		const t = document.getElementById('transcript');
		t.scrollTop += document.querySelector('.msg.agent').getBoundingClientRect().top - t.getBoundingClientRect().top - 16;
		return '';
	})()`)
	shot("tools.png", 1024, 760)

	// A call waiting for approval: the model (the fake OpenAI server)
	// calls the append tool of a test MCP server marked approval =
	// "always".
	notes := tooltest.New("")
	hs := httptest.NewServer(notes.HTTPHandler())
	t.Cleanup(hs.Close)
	asking := openaitest.New(t, "/v1",
		openaitest.Stream(append([]string{openaitest.Delta("I'll add it to your list.")},
			openaitest.ToolCalls(8, openaitest.Call{ID: "call_1", Name: "notes__append", Args: `{"text":"oat milk, 2 l"}`})...)...),
		openaitest.Stream(openaitest.Answer("Added.")...))
	cfg := filepath.Join(t.TempDir(), "mspd.toml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "[[providers]]\ntype = \"openai\"\nmodel = \"gpt-4o-mini\"\nbase_url = %q\n\n"+
		"[[mcp]]\nname = \"notes\"\nurl = %q\napproval = \"always\"\n", asking.URL(), hs.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	ad := startDaemon(t, daemon.Config{ConfigFile: cfg, Tools: daemon.Tools{NoBuiltin: true}})
	p.open("http://" + ad.Addr() + "/")
	p.media("light")
	p.viewport(1024, 640)
	p.newChat()
	p.send("Add oat milk to my shopping list")
	p.waitFor("the approval card", pendingCard)
	shot("approval.png", 1024, 640)
	p.media("dark")
	p.viewport(390, 844)
	shot("approval-phone-dark.png", 390, 844)
	p.click("approving", approveOnce)
	p.waitFor("the answer", `footer().startsWith('✓')`)

	// An image in a message, and a fallback: OpenAI (a fake server)
	// answers 429 until the turn moves to Claude (another), which
	// answers as a dated snapshot of its model.
	limited := openaitest.New(t, "/v1", times(3, openaitest.Error(429, openaitest.RateLimitBody, "Retry-After-Ms", "5"))...)
	claude := anthropictest.New(t, anthropictest.Frames(
		`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5-20250929","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1210,"output_tokens":1}}}`,
		anthropictest.TextStart,
		anthropictest.TextDelta("A **sunset over the sea**: the sun sits just above the horizon, "),
		anthropictest.TextDelta("laying a path of light across the water, and the sky fades from deep blue to orange."),
		anthropictest.BlockStop, anthropictest.MsgDelta("end_turn", 38), anthropictest.MsgStop))
	chainFile := filepath.Join(t.TempDir(), "mspd.toml")
	if err := os.WriteFile(chainFile, fmt.Appendf(nil, `default = "openai"
[[providers]]
id = "openai"
type = "openai"
base_url = %q
model = "gpt-4o-mini"
api_key_env = "TEST_KEY"
fallback = ["claude"]
[[providers]]
id = "claude"
type = "anthropic"
base_url = %q
model = "claude-sonnet-4-5"
api_key_env = "TEST_ANTHROPIC_KEY"
`, limited.URL(), claude.URL()), 0o600); err != nil {
		t.Fatal(err)
	}
	id := startDaemon(t, daemon.Config{ConfigFile: chainFile, Env: chainEnv, Retry: modelretry.Policy{MaxAttempts: 3},
		Breaker: modelretry.BreakerConfig{Failures: 3, Window: time.Minute, Cooldown: time.Hour}})
	ic := dial(t, id.URL(), client.Options{})
	is, err := ic.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	picture := sunset(480, 320)
	ack, err := ic.StartTurnWith(ctx, msp.TurnStartParams{SessionID: is.Session.SessionID, Input: []msp.TurnInputPart{
		{Type: "text", Text: "What is in this picture?"},
		{Type: "image", MediaType: "image/png", Base64Data: providertest.B64(picture), Width: new(480), Height: new(320)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ic.WaitTurn(ctx, ack.TurnID); err != nil {
		t.Fatal(err)
	}
	p.open("http://" + id.Addr() + "/")
	p.media("light")
	p.viewport(1024, 720)
	p.openChat(is.Session.SessionID)
	p.waitFor("the chat", `footer().includes('answered by claude-sonnet-4-5') && document.querySelector('#transcript .thumb img') !== null &&
		document.querySelector('#transcript .thumb img').naturalWidth === 480 &&
		document.getElementById('model').selectedOptions[0].textContent === 'gpt-4o-mini — down'`)
	p.attachFiles(pngFile(t, "harbour.png", sunset(320, 240)))
	p.waitFor("an image in the composer", `document.querySelectorAll('#tray .chip').length === 1`)
	p.click("focusing the box", "#input")
	p.run("typing", chromedp.KeyEvent("And this one?"))
	shot("images.png", 1024, 720)
	p.click("removing the image", "#tray .chip-remove")
	p.media("dark")
	p.viewport(390, 844)
	p.click("opening the image", "#transcript .thumb")
	p.waitFor("the viewer", `document.getElementById('viewer').open && document.getElementById('viewer-img').naturalWidth === 480`)
	writeScreenshot(p, filepath.Join(dir, "image-viewer-phone-dark.png"))
	p.run("closing the viewer", chromedp.KeyEvent(kbEscape))

	// Reasoning and the context window: a Responses model (a fake OpenAI
	// server) that reasons, its window 200k tokens; a long paste fills
	// it, and the next message compacts first.
	plan := []string{"**Timing the leaves.** Late November is peak maple season, so the gardens go early, before the crowds.",
		"**Balancing the days.** Temples in the east on day 1, Arashiyama on day 2, Nara as a day trip on day 3."}
	diary := []string{"**Reading the notes.** Last year Eikan-dō peaked late and Kiyomizu was packed by 10:00; the Sagano train sold out.",
		"**Reworking day 2.** Arashiyama at opening time, the bamboo grove first, and the train booked a week ahead."}
	reasoned := func(pause time.Duration, parts []string, answer string, input, output, reasoning int64) providertest.Reply {
		rs, seq := openaitest.RReasoning(1, 0, 24, "rs_"+strconv.Itoa(len(answer)), "gAAAA", parts...)
		frames := append(append([]string{openaitest.RCreated()}, rs...), openaitest.RTextDelta(seq, answer),
			openaitest.RCompleted(seq+1, input, output, 0, reasoning, openaitest.RReasoningItem("rs_"+strconv.Itoa(len(answer)), "gAAAA", parts, true)))
		return paced(pause, frames)
	}
	thinker := openaitest.New(t, "/v1",
		reasoned(0, plan, "Three days, one side of the city each:\n\n1. **Higashiyama**: Kiyomizu-dera at opening, then Eikan-dō.\n"+
			"2. **Arashiyama**: the bamboo grove, Tenryū-ji and the Sagano train.\n3. **Nara**: Tōdai-ji and the deer park, 45 min by train.\n", 1400, 900, 300),
		reasoned(300*time.Millisecond, diary, "Going by your notes, day 2 changes:\n\n- **07:30** the bamboo grove, before the tour buses.\n"+
			"- **09:00** Tenryū-ji's garden opens; the maples are at their best in the morning light.\n"+
			"- **11:00** the Sagano train: book it now, it sold out last year.\n- **Afternoon** Kiyomizu after 16:00, when the crowds thin.\n", 161200, 6800, 2900),
		paced(0, openaitest.RAnswer("Three autumn days in Kyoto, late November. Day 1 Higashiyama (Eikan-dō early), day 2 Arashiyama from 07:30 "+
			"with the Sagano train booked ahead and Kiyomizu after 16:00, day 3 Nara. From last year's notes: crowds peak by 10:00.", 166000, 700)),
		paced(0, openaitest.RAnswer("- **Day 1** Higashiyama: Kiyomizu-dera, Eikan-dō.\n- **Day 2** Arashiyama from 07:30; Kiyomizu after 16:00.\n"+
			"- **Day 3** Nara: Tōdai-ji and the deer park.\n", 1900, 300)),
	)
	windowFile := filepath.Join(t.TempDir(), "mspd.toml")
	if err := os.WriteFile(windowFile, fmt.Appendf(nil, "[[providers]]\nid = \"openai\"\ntype = \"openai\"\napi = \"responses\"\n"+
		"base_url = %q\nmodel = \"o4-mini\"\napi_key_env = \"TEST_KEY\"\ncontext_window = 200000\n", thinker.URL()), 0o600); err != nil {
		t.Fatal(err)
	}
	rd := startDaemon(t, daemon.Config{ConfigFile: windowFile, Env: chainEnv})
	rc := dial(t, rd.URL(), client.Options{})
	rs, err := rc.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rsid := rs.Session.SessionID
	if _, err := rc.SetReasoningEffort(ctx, rsid, msp.EffortHigh, client.NewCommandID()); err != nil {
		t.Fatal(err)
	}
	answerTurn(t, rc, rsid, "Plan three days in Kyoto in late November.")
	var pasted strings.Builder
	pasted.WriteString("Here are my notes from last year's trip — what should change on day 2?\n\n")
	for i := range 90 {
		fmt.Fprintf(&pasted, "%02d:%02d  queue at the Arashiyama bamboo grove: about %d people, the light flat until the sun cleared the ridge\n", 7+i/12, (i%12)*5, 40+i*7)
	}
	answerTurn(t, rc, rsid, pasted.String())
	p.open("http://" + rd.Addr() + "/")
	p.media("light")
	p.viewport(1024, 760)
	p.openChat(rsid)
	p.waitFor("the chat", `document.querySelectorAll('#transcript .turn-footer').length === 2 &&
		document.getElementById('context-text').textContent === '168k / 200k tokens · nearly full' &&
		document.getElementById('effort').value === 'high' && /^Thought for \d+ s$/.test(document.querySelectorAll('.reasoning-label')[1].textContent)`)
	p.click("unfolding the reasoning", "#transcript .turn:nth-of-type(2) .reasoning summary")
	p.eval(`(() => { // from the pasted notes
		const t = document.getElementById('transcript');
		t.scrollTop += document.querySelector('.turn:nth-of-type(2) .msg.user').getBoundingClientRect().top - t.getBoundingClientRect().top - 16;
		return '';
	})()`)
	shot("reasoning.png", 1024, 760)

	p.media("dark")
	p.viewport(390, 844)
	answerTurn(t, rc, rsid, "Now one line per day, please.")
	p.waitFor("the compacted chat", `document.querySelector('#transcript .compaction[data-outcome="compacted"]') !== null &&
		document.querySelectorAll('#transcript .turn-footer').length === 3 && document.getElementById('context-text').textContent.endsWith(' / 200k tokens')`)
	p.click("unfolding the summary", "#transcript .compaction summary")
	p.eval(`(() => {
		const t = document.getElementById('transcript');
		t.scrollTop += document.querySelector('.compaction').getBoundingClientRect().top - t.getBoundingClientRect().top - 12;
		return '';
	})()`)
	shot("compaction-phone-dark.png", 390, 844)
	if *update {
		t.Logf("wrote %s", strings.Join([]string{"desktop.png", "dark.png", "phone.png", "retry.png", "tools.png", "approval.png",
			"approval-phone-dark.png", "images.png", "image-viewer-phone-dark.png", "reasoning.png", "compaction-phone-dark.png"}, ", "))
	}
}

// paced is a streamed reply whose reasoning summary deltas come pause
// apart, as a model thinking a while sends them, from o4-mini.
func paced(pause time.Duration, frames []string) providertest.Reply {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		sse := providertest.StartSSE(w)
		for _, f := range frames {
			if pause > 0 && strings.Contains(f, `"type":"response.reasoning_summary_text.delta"`) {
				select {
				case <-time.After(pause):
				case <-r.Context().Done():
					return
				}
			}
			// The model the fake names answering is the one asked.
			sse.Frames(strings.ReplaceAll(f, `"model":"`+openaitest.Model+`"`, `"model":"o4-mini"`))
		}
	}
}

// sunset draws a picture to send: a sky fading to orange, a sun on the
// horizon, the sea below with its light on the water.
func sunset(w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	mix := func(a, b [3]float64, t float64) color.RGBA {
		return color.RGBA{uint8(a[0] + (b[0]-a[0])*t), uint8(a[1] + (b[1]-a[1])*t), uint8(a[2] + (b[2]-a[2])*t), 255}
	}
	horizon := h * 3 / 5
	sunX, sunY, sunR := float64(w)/2, float64(horizon)-float64(h)/14, float64(h)/7
	for y := range h {
		for x := range w {
			var c color.RGBA
			if y < horizon {
				c = mix([3]float64{38, 52, 128}, [3]float64{250, 150, 80}, float64(y)/float64(horizon))
				if dx, dy := float64(x)-sunX, float64(y)-sunY; dx*dx+dy*dy < sunR*sunR {
					c = color.RGBA{255, 214, 120, 255}
				}
			} else {
				t := float64(y-horizon) / float64(h-horizon)
				c = mix([3]float64{44, 70, 120}, [3]float64{16, 30, 62}, t)
				if d := float64(x) - sunX; d*d < (sunR*(1-t*0.8))*(sunR*(1-t*0.8)) && (y/4)%2 == 0 {
					c = mix([3]float64{255, 190, 110}, [3]float64{44, 70, 120}, t*0.7)
				}
			}
			img.SetRGBA(x, y, c)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// media emulates a colour scheme, with reduced motion so that nothing is
// caught mid-animation.
func (p *chatPage) media(scheme string) {
	p.t.Helper()
	params := emulation.SetEmulatedMediaParams{Features: []*emulation.MediaFeature{
		{Name: "prefers-color-scheme", Value: scheme},
		{Name: "prefers-reduced-motion", Value: "reduce"},
	}}
	p.run("emulating "+scheme+" mode", chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, params)
		return err
	}))
	p.waitFor(scheme+" mode", fmt.Sprintf(`matchMedia('(prefers-color-scheme: %s)').matches`, scheme))
}

// writeScreenshot captures the viewport as a PNG, compressed hard to keep
// the repository small.
func writeScreenshot(p *chatPage, path string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.fatalf("screenshot %s: %v", path, err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		p.fatalf("screenshot %s: %v", path, err)
	}
	var out bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&out, img); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("%s: %dx%d, %d KB", path, img.Bounds().Dx(), img.Bounds().Dy(), out.Len()/1024)
}
