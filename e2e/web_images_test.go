package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"image"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"mspd/daemon"
	"mspd/provider/providertest"
	"mspd/provider/scripted"
	"mspd/server"
)

// imageHelpers are page functions the image tests use.
const imageHelpers = `
const thumbs = (turn) => [...document.querySelectorAll('#transcript .turn' + (turn || ':last-of-type') + ' .msg.user .thumb')].map((b) => {
	const img = b.querySelector('img');
	return {state: b.dataset.state, label: b.getAttribute('aria-label'), src: img ? img.src.slice(0, 22) : '',
		w: img ? img.naturalWidth : 0, h: img ? img.naturalHeight : 0, loaded: !!img && img.complete && img.naturalWidth > 0};
});
const chips = () => [...document.querySelectorAll('#tray .chip')].map((c) => c.querySelector('img').alt);
const note = () => { const n = document.getElementById('attach-note'); return n.hidden ? '' : n.textContent; };
`

// imagePredicate is predicate with the image helpers.
func imagePredicate(expr string) string {
	return "(() => {" + imageHelpers + "return (" + expr + "); })()"
}

// pngFile writes an image to a file the file picker can be handed.
func pngFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// attachFiles hands files to the composer's file input, as the picker
// does (CDP DOM.setFileInputFiles, which fires its change event).
func (p *chatPage) attachFiles(paths ...string) {
	p.t.Helper()
	p.run("choosing files", chromedp.SetUploadFiles(chromedp.CSS("#file"), paths))
}

// dataTransfer is page code making a DataTransfer that holds one file of
// the given bytes, as a paste or a drop carries it.
func dataTransfer(name, mediaType string, data []byte) string {
	return fmt.Sprintf(`(() => {
		const bytes = Uint8Array.from(atob(%q), (c) => c.charCodeAt(0));
		const dt = new DataTransfer();
		dt.items.add(new File([bytes], %q, {type: %q}));
		return dt;
	})()`, providertest.B64(data), name, mediaType)
}

// TestWebImages drives images on the chat page in headless Chromium
// against the scripted provider, whose echoRequest answer reports what
// the model received: an image chosen with the file picker shows in the
// composer, goes with the message (the answer names its bytes and
// digest) and shows in the sent message from the bytes read here (no
// item/readOutput); after a reload it is read back with item/readOutput
// and shown, and opened again from the cache; a click opens it larger in
// a dialog Esc closes. Pasted and dropped images join the message, each
// removable; a message of images alone is sent. Too large, too many or
// not an image is refused before sending, in words; a model that takes
// no images is refused by the server, said in words, and the attach
// button turns off for it; so is a message over the server's frame
// limit, given back to the composer. Instructions set for new chats reach the
// model and show, read-only, after a reload; edited, they start a new
// chat; a fork keeps them.
func TestWebImages(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "mspd.toml")
	if err := os.WriteFile(cfg, []byte(`default = "vision"
[[providers]]
id = "vision"
type = "scripted"
model = "seer"
[[providers]]
id = "text"
type = "scripted"
model = "plain"
images = false
`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, daemon.Config{ConfigFile: cfg})
	base := "http://" + d.Addr() + "/"
	p := openBrowser(t)
	p.open(base)
	echo := scripted.Script(scripted.Step{EchoRequest: true})
	png := providertest.PNG(64, 48)
	sum := sha256.Sum256(png)
	digest := hex.EncodeToString(sum[:])

	var sid string
	t.Run("attach, send, reload", func(t *testing.T) {
		p.use(t)
		sid = p.newChat()
		p.attachFiles(pngFile(t, "square.png", png))
		p.waitFor("the image in the composer", imagePredicate(fmt.Sprintf(`chips().length === 1 && chips()[0] === 'Image 1 (square.png): PNG, 64×48, %s' &&
			document.querySelector('#tray img').src.startsWith('data:image/png;base64,') && !document.getElementById('send').disabled`, byteSizeOf(len(png)))))
		p.send(echo)
		p.waitFor("the echoed request", fmt.Sprintf(`agentTexts('completed').some((t) => t.includes('"images":[{"mediaType":"image/png","bytes":%d,"sha256":"%s"}]'))`, len(png), digest))
		p.expect("the composer emptied", imagePredicate(`chips().length === 0 && document.getElementById('tray').hidden`))
		p.waitFor("the thumbnail, live", imagePredicate(`(() => { const t = thumbs(); return t.length === 1 && t[0].loaded && t[0].w === 64 && t[0].h === 48 &&
			t[0].src === 'data:image/png;base64,' && t[0].label.startsWith('Image 1: PNG, 64×48'); })()`))
		var sent map[string]any
		for _, params := range p.sent("turn/start") {
			if params["sessionId"] == sid {
				sent = params
			}
		}
		input, _ := sent["input"].([]any)
		if len(input) != 2 {
			p.fatalf("turn/start input %v, want the text and the image", sent["input"])
		}
		part, _ := input[1].(map[string]any)
		if part["type"] != "image" || part["mediaType"] != "image/png" || part["base64Data"] != providertest.B64(png) ||
			part["width"] != 64.0 || part["height"] != 48.0 {
			p.fatalf("the image part sent: %v", part)
		}
		if n := len(p.sent("item/readOutput")); n != 0 {
			p.fatalf("the page read %d images back while it had their bytes", n)
		}

		p.open(base)
		p.openChat(sid)
		p.waitFor("the thumbnail, read back", imagePredicate(`(() => { const t = thumbs(); return t.length === 1 && t[0].loaded && t[0].w === 64 &&
			t[0].src === 'data:image/png;base64,'; })()`))
		item := p.eval(`document.querySelector('.msg.user').dataset.itemId`)
		reads := p.sent("item/readOutput")
		if len(reads) != 1 || reads[0]["sessionId"] != sid || reads[0]["itemId"] != item || !strings.HasPrefix(fmt.Sprint(reads[0]["outputRef"]), "img-") {
			p.fatalf("item/readOutput sent %v, want one read of the user item %s's image", reads, item)
		}
		// Another chat and back: the image comes from the cache.
		p.newChat()
		p.openChat(sid)
		p.waitFor("the thumbnail again", imagePredicate(`thumbs().length === 1 && thumbs()[0].loaded`))
		if n := len(p.sent("item/readOutput")); n != 1 {
			p.fatalf("reopened, the page read the image again: %d reads", n)
		}

		p.click("opening the image", "#transcript .thumb")
		p.waitFor("the viewer", `document.getElementById('viewer').open && document.getElementById('viewer-img').naturalWidth === 64 &&
			document.activeElement === document.getElementById('viewer-close') &&
			document.getElementById('viewer-title').textContent.startsWith('Image 1: PNG, 64×48')`)
		p.run("pressing Esc", chromedp.KeyEvent(kbEscape))
		p.waitFor("the viewer closed, focus back on the thumbnail", `!document.getElementById('viewer').open &&
			document.activeElement === document.querySelector('#transcript .thumb')`)
	})

	t.Run("paste, drop, remove, images alone", func(t *testing.T) {
		p.use(t)
		p.newChat()
		jpeg := providertest.JPEG(40, 30)
		p.eval(`(document.getElementById('input').dispatchEvent(new ClipboardEvent('paste', {bubbles: true, cancelable: true,
			clipboardData: ` + dataTransfer("pasted.png", "image/png", png) + `})), '')`)
		p.waitFor("the pasted image", imagePredicate(`chips().length === 1 && chips()[0].startsWith('Image 1 (pasted.png): PNG, 64×48')`))
		p.eval(`(() => {
			const dt = ` + dataTransfer("photo.jpg", "image/jpeg", jpeg) + `;
			const t = document.getElementById('transcript');
			t.dispatchEvent(new DragEvent('dragover', {bubbles: true, cancelable: true, dataTransfer: dt}));
			t.dispatchEvent(new DragEvent('drop', {bubbles: true, cancelable: true, dataTransfer: dt}));
			return '';
		})()`)
		p.waitFor("the dropped image", imagePredicate(`chips().length === 2 && chips()[1].startsWith('Image 2 (photo.jpg): JPEG, 40×30')`))
		p.run("removing the first by keyboard", chromedp.Focus(chromedp.CSS("#tray .chip-remove")), chromedp.KeyEvent("\r"))
		p.waitFor("one image left, focus on its remove button", imagePredicate(`chips().length === 1 && chips()[0].startsWith('Image 1 (photo.jpg)') &&
			document.activeElement === document.querySelector('#tray .chip-remove') &&
			document.querySelector('#tray .chip-remove').getAttribute('aria-label') === 'Remove image 1 (photo.jpg)'`))
		p.click("sending the image alone", "#send")
		p.waitFor("the turn's end", `footer().startsWith('✓')`)
		p.waitFor("a message of an image alone", imagePredicate(`thumbs().length === 1 && thumbs()[0].w === 40 &&
			document.querySelector('#transcript .turn:last-of-type .msg.user .text').hidden`))
		alone := 0
		for _, params := range p.sent("turn/start") {
			if input, _ := params["input"].([]any); len(input) == 1 && input[0].(map[string]any)["mediaType"] == "image/jpeg" {
				alone++
			}
		}
		if alone != 1 {
			p.fatalf("%d turn/starts of the JPEG alone, want 1", alone)
		}
	})

	t.Run("refused before sending", func(t *testing.T) {
		p.use(t)
		p.newChat()
		huge := append(append([]byte{}, png[:16]...), make([]byte, 6<<20)...)
		svg := []byte(`<svg xmlns="http://www.w3.org/2000/svg" onload="window.pwned=1"></svg>`)
		p.attachFiles(pngFile(t, "huge.png", huge), pngFile(t, "drawing.png", svg))
		p.waitFor("the refusals in words", imagePredicate(`note() === '“huge.png” is 6.0 MB: an image can be at most 5.0 MB. “drawing.png” is not a PNG, JPEG, GIF or WebP image.' &&
			chips().length === 0 && document.getElementById('send').disabled`))
		var nine []string
		for i := range 9 {
			nine = append(nine, pngFile(t, fmt.Sprintf("n%d.png", i), png))
		}
		p.attachFiles(nine...)
		p.waitFor("eight taken, the ninth refused", imagePredicate(`chips().length === 8 && note() === 'A message can carry at most 8 images.'`))
		p.expect("nothing ran", `window.pwned === undefined`)
		for range 8 {
			p.click("removing an image", "#tray .chip-remove")
		}
		p.waitFor("the composer empty", imagePredicate(`chips().length === 0 && note() === ''`))
	})

	t.Run("a model that takes no images", func(t *testing.T) {
		p.use(t)
		p.newChat()
		p.eval(`(() => { const s = document.getElementById('model');
			s.value = [...s.options].find((o) => o.textContent === 'plain').value;
			s.dispatchEvent(new Event('change')); return ''; })()`)
		p.waitFor("the model switched", `document.getElementById('model').dataset.value === document.getElementById('model').value &&
			document.getElementById('model').selectedOptions[0].textContent === 'plain'`)
		// model/list says plain reads no images: no attach button for it.
		p.waitFor("the attach button off from model/list", `document.getElementById('attach').disabled &&
			document.getElementById('attach').title === 'plain takes no images'`)
		// An image attached under a model that reads them, then sent to
		// one that does not: the server refuses it, in words.
		pick := func(label string) {
			p.eval(fmt.Sprintf(`(() => { const s = document.getElementById('model');
				s.value = [...s.options].find((o) => o.textContent === %q).value;
				s.dispatchEvent(new Event('change')); return ''; })()`, label))
			p.waitFor("the model switched to "+label, fmt.Sprintf(`document.getElementById('model').dataset.value === document.getElementById('model').value &&
				document.getElementById('model').selectedOptions[0].textContent === %q`, label))
		}
		pick("seer")
		p.attachFiles(pngFile(t, "square.png", png))
		p.waitFor("the image in the composer", imagePredicate(`chips().length === 1`))
		pick("plain")
		p.send("What is this?")
		p.waitFor("the refusal in words", `!document.getElementById('banner').hidden &&
			document.getElementById('banner-text').textContent === 'plain takes no images: pick a model that does, or send the message without them. (invalidParams)'`)
		p.expect("the message marked not sent, given back to the composer", imagePredicate(`document.querySelector('#transcript .turn:last-of-type .msg.user .tag').textContent === 'not sent' &&
			document.getElementById('input').value === 'What is this?' && chips().length === 1`))
		p.expect("the attach button off for this model", `document.getElementById('attach').disabled &&
			document.getElementById('attach').title === 'plain takes no images'`)
		p.eval(`(() => { const s = document.getElementById('model');
			s.value = [...s.options].find((o) => o.textContent === 'seer').value;
			s.dispatchEvent(new Event('change')); return ''; })()`)
		p.waitFor("the attach button on again for a model that takes images", `!document.getElementById('attach').disabled`)
		p.click("dismissing the banner", "#banner-close")
		p.click("sending again", "#send")
		p.waitFor("the answer", `agentTexts('completed').includes('What is this?')`)
	})

	t.Run("the server's frame limit, in words", func(t *testing.T) {
		p.use(t)
		small := startDaemon(t, daemon.Config{Server: server.Config{MaxFrameBytes: 64 << 10}})
		p.open("http://" + small.Addr() + "/")
		p.newChat()
		p.attachFiles(pngFile(t, "noise.png", noise(160, 160)))
		p.waitFor("the image in the composer", imagePredicate(`chips().length === 1`))
		p.send("Too big?")
		p.waitFor("the refusal in words", `!document.getElementById('banner').hidden &&
			document.getElementById('banner-text').textContent === 'The message with its images is too large for this server: it takes at most 64 KB a message ' +
			'(images go as base64, a third larger). Send fewer or smaller images. (inputTooLarge)'`)
		p.expect("the message given back", imagePredicate(`chips().length === 1 && document.getElementById('input').value === 'Too big?'`))
		p.click("dismissing the banner", "#banner-close")
	})

	t.Run("instructions", func(t *testing.T) {
		p.use(t)
		p.open(base) // no chat open: the setting is the next chat's
		p.click("opening Instructions", "#instructions-open")
		p.waitFor("the dialog, editable", `document.getElementById('instructions-dialog').open && !document.getElementById('instructions').readOnly &&
			document.activeElement === document.getElementById('instructions') &&
			document.getElementById('instructions-save').textContent === 'Use for new chats'`)
		p.eval(`(() => { const a = document.getElementById('instructions'); a.value = 'x'.repeat(33000);
			a.dispatchEvent(new Event('input')); return ''; })()`)
		p.expect("too long, said and not saved", `document.getElementById('instructions-count').textContent === 'Too long: 33,000 bytes, at most 32,768.' &&
			document.getElementById('instructions-save').disabled`)
		p.run("typing the instructions", chromedp.Evaluate[chromedp.Void](`(() => { const a = document.getElementById('instructions'); a.value = '';
			a.dispatchEvent(new Event('input')); })()`), chromedp.KeyEvent("Answer like a pirate."))
		p.click("saving them", "#instructions-save")
		p.waitFor("the dialog closed, the button marked", `!document.getElementById('instructions-dialog').open &&
			document.getElementById('instructions-open').dataset.set === 'true' &&
			document.activeElement === document.getElementById('instructions-open')`)
		p.send(echo)
		p.waitFor("the instructions reaching the model", `agentTexts('completed').some((t) => t.startsWith('[{"role":"system","text":"Answer like a pirate."}'))`)
		if n := startsWith(p, "Answer like a pirate."); n != 1 {
			p.fatalf("%d session/starts with config.instructions, want 1", n)
		}
		sid := p.eval(`document.querySelector('#sessions [aria-current="page"]').dataset.sessionId`)
		p.send(echo)
		p.waitFor("a second turn", `document.querySelectorAll('#transcript .turn-footer').length === 2`)

		p.open(base)
		p.openChat(sid)
		p.waitFor("the chat", `document.querySelectorAll('#transcript .turn-footer').length === 2 &&
			document.getElementById('instructions-open').dataset.set === 'true'`)
		p.click("opening Instructions", "#instructions-open")
		p.waitFor("the chat's instructions, read-only", `document.getElementById('instructions-dialog').open &&
			document.getElementById('instructions').readOnly && document.getElementById('instructions').value === 'Answer like a pirate.' &&
			document.getElementById('instructions-note').textContent.startsWith('This chat’s instructions are fixed') &&
			document.activeElement === document.getElementById('instructions-edit')`)
		p.run("pressing Esc", chromedp.KeyEvent(kbEscape))
		p.waitFor("the dialog closed", `!document.getElementById('instructions-dialog').open &&
			document.activeElement === document.getElementById('instructions-open')`)

		// A fork (Edit on the second message) keeps them.
		p.click("editing the second message", "#transcript .turn:last-of-type button.edit")
		// Enter in the focused editor, not a click on Send edit: the opened
		// form changes the transcript's height, and the page following the
		// end can move the button between a click's aim and its press.
		p.waitFor("the editor", `document.activeElement.matches('.edit-form textarea')`)
		p.run("sending the edit", chromedp.KeyEvent("\r"))
		p.waitFor("the fork's answer", `document.querySelectorAll('#transcript .turn-footer').length === 2 && footer().startsWith('✓') &&
			document.querySelector('#sessions [aria-current="page"]').dataset.sessionId !== '`+sid+`'`)
		p.expect("the fork keeps the instructions", `agentTexts('completed').pop().startsWith('[{"role":"system","text":"Answer like a pirate."}') &&
			document.getElementById('instructions-open').dataset.set === 'true'`)

		// Edited, they start a new chat.
		p.click("opening Instructions", "#instructions-open")
		p.click("editing them in a new chat", "#instructions-edit")
		p.waitFor("the dialog editable", `!document.getElementById('instructions').readOnly &&
			document.getElementById('instructions-save').textContent === 'Start new chat' && !document.getElementById('instructions-save').hidden`)
		p.run("changing them", chromedp.KeyEvent(" Briefly."))
		p.click("starting the chat", "#instructions-save")
		p.waitFor("a new, empty chat", `!document.getElementById('instructions-dialog').open &&
			document.querySelectorAll('#transcript .turn').length === 0 && document.activeElement === document.getElementById('input')`)
		if n := startsWith(p, "Answer like a pirate. Briefly."); n != 1 {
			p.fatalf("%d session/starts with the edited instructions, want 1", n)
		}
	})
}

// startsWith counts the session/starts the page sent with these
// instructions.
func startsWith(p *chatPage, instructions string) int {
	n := 0
	for _, params := range p.sent("session/start") {
		if cfg, _ := params["config"].(map[string]any); cfg["instructions"] == instructions {
			n++
		}
	}
	return n
}

// noise is a PNG of random pixels, which compress to about their size.
func noise(w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(1, 2))
	for i := range img.Pix {
		img.Pix[i] = byte(r.Uint32())
		if i%4 == 3 {
			img.Pix[i] = 255
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		panic(err)
	}
	return b.Bytes()
}
