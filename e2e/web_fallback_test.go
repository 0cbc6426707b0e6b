package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"mspd/daemon"
	"mspd/modelretry"
	"mspd/provider/anthropic/anthropictest"
	"mspd/provider/openai/openaitest"
	"mspd/provider/providertest"
)

// TestWebFallback drives fallbacks on the chat page in headless Chromium:
// an OpenAI provider (a fake server answering 429 three times) whose
// chain falls back on Anthropic (a fake server), with a breaker that
// opens after three failures. The status line reads "openai is rate
// limited · answering with claude-test-1" with no countdown, then, the
// next turn, "openai is down (circuit open) · answering with
// claude-test-1"; each footer names the model that answered; the picker
// shows OpenAI down once model/list says its breaker is open (read again
// after the notice); a reload shows the same from the log. Text keeps
// 4.5:1 contrast at 1280×800 and 390×844 in light and dark mode with the
// statuses, images, the composer's tray and note and the dialogs open;
// every new control is reached by Tab with a focus ring.
func TestWebFallback(t *testing.T) {
	oa := openaitest.New(t, "/v1", times(3, openaitest.Error(429, openaitest.RateLimitBody, "Retry-After-Ms", "5"))...)
	an := anthropictest.New(t, anthropictest.Answer("end_turn", 4, "A red", " square."), anthropictest.Answer("end_turn", 2, "Still red."))
	d := startDaemon(t, daemon.Config{ConfigFile: imageChainConfig(t, oa.URL(), an.URL()), Env: chainEnv,
		Retry:   modelretry.Policy{MaxAttempts: 3},
		Breaker: modelretry.BreakerConfig{Failures: 3, Window: time.Minute, Cooldown: time.Hour}})
	base := "http://" + d.Addr() + "/"
	p := openBrowser(t)
	png := providertest.PNG(120, 90)
	fallback := "openai is rate limited · answering with " + anthropictest.Model
	skipped := "openai is down (circuit open) · answering with " + anthropictest.Model
	answered := " · answered by " + anthropictest.Model
	var sid string

	t.Run("fallback and skip", func(t *testing.T) {
		p.use(t)
		p.open(base)
		p.viewport(1280, 800)
		p.expect("the picker before any failure", `document.getElementById('model').selectedOptions[0].textContent === 'gpt-test'`)
		lists := len(p.sent("model/list"))
		sid = p.newChat()
		p.attachFiles(pngFile(t, "red.png", png))
		p.waitFor("the image in the composer", `document.querySelectorAll('#tray .chip').length === 1`)
		p.send("What is in this picture?")
		p.waitFor("the fallback status", fmt.Sprintf(`retryText() === %q &&
			document.querySelector('#transcript .turn:last-of-type .retry').dataset.state === 'rerouted' &&
			document.querySelector('#transcript .turn:last-of-type .retry-icon').textContent === '↪'`, fallback))
		p.waitFor("the answer, its footer naming the model", fmt.Sprintf(`agentTexts('completed').includes('A red square.') &&
			footer().startsWith('✓') && footer().includes('4 attempts') && footer().endsWith(%q)`, answered))
		p.expect("no countdown", fmt.Sprintf(`retryText() === %q`, fallback))
		p.waitFor("OpenAI down in the picker", `[...document.getElementById('model').options].some((o) => o.textContent === 'gpt-test — down')`)
		if n := len(p.sent("model/list")); n <= lists+1 {
			p.fatalf("model/list sent %d times, want it read again after the fallback notice (%d before the chat)", n, lists)
		}
		p.expect("the technical detail", `document.querySelector('#transcript .turn:last-of-type .retry details').textContent.includes(
			'Attempt 3 of 6 failed (system openai, errorKind rateLimited, HTTP 429); the turn left openai (attemptsExhausted): attempt 4 goes to claude · claude-test-1 at once.')`)

		p.send("And now?")
		p.waitFor("the skip status", fmt.Sprintf(`retryText() === %q`, skipped))
		p.waitFor("the answer", fmt.Sprintf(`agentTexts('completed').includes('Still red.') && footer().startsWith('✓ ') && footer().endsWith(%q)`, answered))
		if oa.Count() != 3 || an.Count() != 2 {
			p.fatalf("requests: openai %d, anthropic %d", oa.Count(), an.Count())
		}
	})

	t.Run("the same after a reload", func(t *testing.T) {
		p.use(t)
		live := p.eval(`JSON.stringify([...document.querySelectorAll('#transcript .turn')].map((t) =>
			[t.querySelector('.retry-text').textContent, t.querySelector('.turn-status').textContent]))`)
		p.open(base)
		p.openChat(sid)
		p.waitFor("the chat", `document.querySelectorAll('#transcript .turn-footer').length === 2 &&
			document.querySelector('#transcript .thumb img') !== null && document.querySelector('#transcript .thumb img').naturalWidth === 120`)
		again := p.eval(`JSON.stringify([...document.querySelectorAll('#transcript .turn')].map((t) =>
			[t.querySelector('.retry-text').textContent, t.querySelector('.turn-status').textContent]))`)
		if again != live || !strings.Contains(again, fallback) || !strings.Contains(again, skipped) {
			p.fatalf("after a reload the turns read\n%s\nlive they read\n%s", again, live)
		}
		p.expect("OpenAI down in the picker", `[...document.getElementById('model').options].some((o) => o.textContent === 'gpt-test — down')`)
	})

	t.Run("contrast", func(t *testing.T) {
		p.use(t)
		p.attachFiles(pngFile(t, "red.png", png), pngFile(t, "notes.png", []byte("not an image at all")))
		p.waitFor("an image and a note in the composer", `document.querySelectorAll('#tray .chip').length === 1 && !document.getElementById('attach-note').hidden`)
		for _, size := range [][2]int64{{1280, 800}, {390, 844}} {
			p.viewport(size[0], size[1])
			p.expectFits(size[0])
			for _, scheme := range []string{"light", "dark"} {
				p.colorScheme(scheme)
				p.waitFor(scheme+" mode", fmt.Sprintf(`matchMedia('(prefers-color-scheme: %s)').matches`, scheme))
				where := fmt.Sprintf("%d×%d %s", size[0], size[1], scheme)
				p.expect(where+": the statuses and the note measured", `(() => {
					const r = (sel) => contrastOf(document.querySelector(sel));
					return r('.retry[data-state="rerouted"] .retry-text') >= 4.5 && r('.turn-model') >= 4.5 && r('#attach-note') >= 4.5 &&
						r('#instructions-open') >= 4.5 && r('#tray .chip-remove') >= 4.5;
				})()`)
				p.lowContrast(where)
				p.click("opening Instructions", "#instructions-open")
				p.waitFor("the dialog", `document.getElementById('instructions-dialog').open`)
				p.expect(where+": the dialog measured", `contrastOf(document.getElementById('instructions-note')) >= 4.5 &&
					contrastOf(document.getElementById('instructions')) >= 4.5 && contrastOf(document.getElementById('instructions-count')) >= 4.5`)
				p.lowContrast(where + ", instructions open")
				p.run("closing it", chromedp.KeyEvent(kbEscape))
				p.click("opening the image", "#transcript .thumb")
				p.waitFor("the viewer", `document.getElementById('viewer').open && document.getElementById('viewer-img').naturalWidth === 120`)
				p.expect(where+": the viewer fits", `(() => { const r = document.getElementById('viewer').getBoundingClientRect();
					return r.left >= 0 && r.right <= innerWidth && contrastOf(document.getElementById('viewer-title')) >= 4.5; })()`)
				p.lowContrast(where + ", viewer open")
				p.run("closing it", chromedp.KeyEvent(kbEscape))
				p.waitFor("the viewer closed", `!document.getElementById('viewer').open`)
			}
		}
		p.colorScheme("")
		p.run("resetting the viewport", chromedp.ResetViewport())
	})

	t.Run("keyboard", func(t *testing.T) {
		p.use(t)
		p.viewport(1280, 800)
		seen := p.tabWalk()
		for _, want := range []string{"#attach", "#instructions-open", "button.thumb", "button.chip-remove", "#input", "#send", "#model"} {
			if !seen[want] {
				p.fatalf("Tab never reached %s; it reached %v", want, seen)
			}
		}
	})
}

// lowContrast fails the test if any shown text is below 4.5:1.
func (p *chatPage) lowContrast(where string) {
	p.t.Helper()
	if bad := p.eval(`(() => {` + contrastHelpers + `return JSON.stringify(lowContrast()); })()`); bad != "[]" {
		p.fatalf("%s: text below 4.5:1: %s", where, bad)
	}
}
