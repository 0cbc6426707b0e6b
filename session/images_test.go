package session

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"mspd/provider"
	"mspd/provider/scripted"
	"mspd/schema/msp"
	"mspd/store"
	"mspd/turn"
)

// imageBytes is a PNG's signature and n-8 bytes of noise: an image by its
// magic bytes, which is all mspd checks, and incompressible.
func imageBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	copy(b, "\x89PNG\r\n\x1a\n")
	r := rand.New(rand.NewPCG(seed, seed))
	for i := 8; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func imagePart(mediaType string, data []byte) msp.TurnInputPart {
	return msp.TurnInputPart{Type: msp.InputImage, MediaType: mediaType, Base64Data: base64.StdEncoding.EncodeToString(data)}
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// imageStore counts what commits write: the bytes of image records, and
// the bytes of every record's params and row state.
type imageStore struct {
	store.Store
	mu           sync.Mutex
	imageRecords int
	imageBytes   int
	allBytes     int
}

func (c *imageStore) Commit(ctx context.Context, b store.Batch) error {
	err := c.Store.Commit(ctx, b)
	if err == nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, r := range b.Records {
			c.allBytes += len(r.Params)
			if r.Method == methodImage {
				c.imageRecords++
				c.imageBytes += len(r.Params)
			}
		}
		if b.Session != nil {
			c.allBytes += len(b.Session.State)
		}
	}
	return err
}

func (c *imageStore) counts() (records, images, all int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.imageRecords, c.imageBytes, c.allBytes
}

// fixedModels is a Models whose models all take images or none do.
type fixedModels struct{ images bool }

func (f fixedModels) Info(string, string) provider.ModelInfo {
	return provider.ModelInfo{Capabilities: provider.Capabilities{Images: f.images, Tools: true}}
}

// countingModel counts the requests its model gets.
type countingModel struct {
	provider.Model
	n atomic.Int64
}

func (c *countingModel) Stream(ctx context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	c.n.Add(1)
	return c.Model.Stream(ctx, req, onText)
}

func newImageManager(t *testing.T, st store.Store, model provider.Model, models Models) *Manager {
	t.Helper()
	m, err := New(context.Background(), Config{Store: st, Runner: newTestRunner(model), Models: models, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// echoed runs a turn whose script echoes its request, with parts after
// its text, and returns what the model was told.
func echoed(t *testing.T, m *Manager, sub *recSub, sid string, steps []scripted.Step, parts ...msp.TurnInputPart) []scripted.Echoed {
	t.Helper()
	p := textTurn(sid, scripted.Script(steps...))
	p.Input = append(p.Input, parts...)
	done := runTurn(t, m, sub, p)
	if done.Terminal != msp.TerminalCompleted {
		t.Fatalf("turn %+v %+v", done, done.Error)
	}
	var answer string
	for _, ip := range of[msp.ItemParams](t, sub, msp.NotifyItemCompleted) {
		if ip.Item.Kind == msp.ItemAgentMessage && ip.Item.Status == msp.ItemCompleted && *ip.Item.TurnID == done.TurnID {
			answer = *ip.Item.Text
		}
	}
	var got []scripted.Echoed
	if err := json.Unmarshal([]byte(answer), &got); err != nil {
		t.Fatalf("echo %q: %v", answer, err)
	}
	return got
}

var echo = []scripted.Step{{EchoRequest: true}}

// imagesTold are the images of the echoed messages, by digest.
func imagesTold(msgs []scripted.Echoed) []string {
	var out []string
	for _, m := range msgs {
		for _, im := range m.Images {
			out = append(out, im.MediaType+":"+im.SHA256)
		}
	}
	return out
}

// userItems are the userMessage items sub saw completed.
func userItems(t *testing.T, sub *recSub) []msp.Item {
	var out []msp.Item
	for _, ip := range of[msp.ItemParams](t, sub, msp.NotifyItemCompleted) {
		if ip.Item.Kind == msp.ItemUserMessage {
			out = append(out, ip.Item)
		}
	}
	return out
}

// readStoredImage reads a stored image back whole with item/readOutput, length
// bytes at a time.
func readStoredImage(t *testing.T, m *Manager, sid string, it msp.Item, a msp.MessageAttachment, length int64) []byte {
	t.Helper()
	var out []byte
	for offset := int64(0); ; {
		res, err := readOutput(context.Background(), m, msp.ItemReadOutputParams{SessionID: sid, ItemID: it.ItemID,
			OutputRef: a.OutputRef.ID, OffsetBytes: &offset, LengthBytes: &length})
		if err != nil {
			t.Fatalf("at %d: %v", offset, err)
		}
		b, err := base64.StdEncoding.DecodeString(res.Content)
		if err != nil || res.Encoding != msp.EncodingBase64 || res.MediaType != a.MediaType || res.OffsetBytes != offset ||
			int64(len(b)) != res.ByteLen || res.ByteLen > length {
			t.Fatalf("at %d: %+v (%v)", offset, res, err)
		}
		out = append(out, b...)
		offset += res.ByteLen
		if res.EOF {
			return out
		}
	}
}

// TestImageStoredOnce: a turn's image is written to the log once, at its
// admission — not again for its retried attempt, a replay of its
// turn/start, or the two turns after it, which send it again — and its
// userMessage item carries metadata only; every request carries the image
// (the history's images too). After a reload the fold names it again, and
// item/readOutput reads it back, base64, exactly.
func TestImageStoredOnce(t *testing.T) {
	ctx := context.Background()
	st := &imageStore{Store: openStore(t)}
	m := newImageManager(t, st, scripted.New(), fixedModels{images: true})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	img := imageBytes(300<<10, 1) // two records
	small := []byte("GIF89a tiny")
	retried := []scripted.Step{{Status: 503}, {EchoRequest: true}}

	p := textTurn(sid, scripted.Script(retried...))
	p.Input = append(p.Input, imagePart(provider.MediaPNG, img), imagePart(provider.MediaGIF, small))
	p.CommandID = cmdID()
	ack := startTurn(t, m, p)
	if done := sub.waitTerminal(t, ack.TurnID); done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 2 {
		t.Fatalf("first turn %+v", done)
	}
	records, imageWritten, _ := st.counts()
	if records != 3 || imageWritten < len(img)*4/3 || imageWritten > len(img)*4/3+1024 {
		t.Fatalf("%d image records of %d bytes; want 3 holding the images once", records, imageWritten)
	}
	// A replay of the turn/start writes nothing.
	if _, launch, err := m.StartTurn(ctx, nil, mustJSON(p)); err != nil {
		t.Fatal(err)
	} else {
		launch()
	}
	want := []string{"image/png:" + sha(img), "image/gif:" + sha(small)}
	for i := range 2 {
		told := echoed(t, m, sub, sid, echo)
		if got := imagesTold(told); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("later turn %d told %v", i+1, got)
		}
	}
	records, imagesAfter, all := st.counts()
	if records != 3 || imagesAfter != imageWritten {
		t.Fatalf("image records %d (%d bytes) after the later turns", records, imagesAfter)
	}
	if all-imageWritten > len(img)/4 {
		t.Fatalf("%d bytes written besides the images: the image went into something else", all-imageWritten)
	}

	items := userItems(t, sub)
	first := items[0]
	if len(first.Attachments) != 2 {
		t.Fatalf("attachments %+v", first.Attachments)
	}
	raw, _ := json.Marshal(first)
	if len(raw) > 2048 || bytes.Contains(raw, []byte(p.Input[1].Base64Data[:64])) {
		t.Fatalf("the userMessage item carries the bytes: %d bytes", len(raw))
	}
	a := first.Attachments[0]
	if a.Type != msp.AttachmentImage || a.MediaType != provider.MediaPNG || a.OutputRef.ByteLen != int64(len(img)) ||
		a.OutputRef.Digest != "sha256:"+sha(img) || a.OutputRef.Kind != msp.OutputKindImage {
		t.Fatalf("attachment %+v %+v", a, a.OutputRef)
	}
	if got := readStoredImage(t, m, sid, first, a, 100<<10); !bytes.Equal(got, img) {
		t.Fatal("read back, the image differs")
	}
	if got := readStoredImage(t, m, sid, first, first.Attachments[1], msp.MaxReadOutputBytes); !bytes.Equal(got, small) {
		t.Fatal("read back, the small image differs")
	}

	// What cannot be served is refused, typed.
	_, err := readOutput(ctx, m, msp.ItemReadOutputParams{SessionID: sid, ItemID: first.ItemID, OutputRef: "img-999-1"})
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindNotFound || me.Data.Reason != msp.ReasonUnknownOutputRef {
		t.Fatalf("an attachment the item lacks: %v", err)
	}
	past := int64(len(small) + 1)
	_, err = readOutput(ctx, m, msp.ItemReadOutputParams{SessionID: sid, ItemID: first.ItemID, OutputRef: first.Attachments[1].OutputRef.ID, OffsetBytes: &past})
	if !errors.As(err, &me) || me.Data.Kind != msp.KindInvalidParams || me.Data.Reason != msp.ReasonPastEnd {
		t.Fatalf("past the end: %v", err)
	}
	_, err = readOutput(ctx, m, msp.ItemReadOutputParams{SessionID: sid, ItemID: items[1].ItemID, OutputRef: a.OutputRef.ID})
	if !errors.As(err, &me) || me.Data.Kind != msp.KindOutputUnavailable || me.Data.Availability != msp.OutputUnsupported {
		t.Fatalf("another item's image: %v", err)
	}

	// Reloaded: the fold names the images, which the next request loads.
	m2 := newImageManager(t, st, scripted.New(), fixedModels{images: true})
	sub2 := newRecSub()
	subscribe(t, m2, sub2, sid)
	if got := imagesTold(echoed(t, m2, sub2, sid, echo)); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after a reload told %v", got)
	}
	if records, _, _ := st.counts(); records != 3 {
		t.Fatalf("%d image records after the reload", records)
	}
}

// TestImagesForkedAndErased: a fork copies an image's records byte for
// byte (no re-encoding) and its turns send the image; deleting the
// session erases them with its log.
func TestImagesForkedAndErased(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	m := newImageManager(t, st, scripted.New(), fixedModels{images: true})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	img := imageBytes(200<<10, 2)
	echoed(t, m, sub, sid, echo, imagePart(provider.MediaPNG, img))

	raw, attach, err := m.ForkSession(ctx, sub, mustJSON(msp.SessionForkParams{CommandID: cmdID(), SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	attach(ctx)
	var fork msp.SessionSnapshot
	json.Unmarshal(raw, &fork)
	fid := fork.Session.SessionID
	imageParams := func(key string) [][]byte {
		recs, err := st.Records(ctx, key, 0, store.Limit{Rows: 1000, Bytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		var out [][]byte
		for _, r := range recs {
			if r.Method == methodImage {
				out = append(out, r.Params)
			}
		}
		return out
	}
	src, copied := imageParams(sid), imageParams(fid)
	if len(src) != 2 || len(copied) != 2 || !bytes.Equal(src[0], copied[0]) || !bytes.Equal(src[1], copied[1]) {
		t.Fatalf("source image records %d, fork's %d, not equal byte for byte", len(src), len(copied))
	}
	var item msp.Item
	for _, it := range fork.History.Items {
		if it.Kind == msp.ItemUserMessage {
			item = it
		}
	}
	if got := readStoredImage(t, m, fid, item, item.Attachments[0], msp.MaxReadOutputBytes); !bytes.Equal(got, img) {
		t.Fatal("the fork's image differs")
	}
	if got := imagesTold(echoed(t, m, sub, fid, echo)); len(got) != 1 || got[0] != "image/png:"+sha(img) {
		t.Fatalf("the fork's turn told %v", got)
	}

	_, erase, err := m.DeleteSession(ctx, nil, mustJSON(msp.SessionDeleteParams{CommandID: cmdID(), SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	erase(ctx)
	if left := imageParams(sid); len(left) != 0 {
		t.Fatalf("%d image records outlive the session", len(left))
	}
	if len(imageParams(fid)) != 2 {
		t.Fatal("erasing the source erased the fork's images")
	}
}

// TestImageRefusals: every image a turn/start cannot take is refused with
// a typed error naming the part, before anything is written or any
// provider asked.
func TestImageRefusals(t *testing.T) {
	ctx := context.Background()
	model := &countingModel{Model: scripted.New()}
	st := openStore(t)
	png := imageBytes(64, 3)
	for _, tc := range []struct {
		name        string
		takes       bool
		parts       []msp.TurnInputPart
		code        int
		kind, field string
		reason      string
	}{
		{"too large", true, []msp.TurnInputPart{imagePart(provider.MediaPNG, imageBytes(msp.MaxImageBytes+1, 4))},
			msp.CodeInputTooLarge, msp.KindInputTooLarge, "input.1.base64Data", ""},
		{"too many", true, []msp.TurnInputPart{imagePart(provider.MediaPNG, png), imagePart(provider.MediaPNG, png), imagePart(provider.MediaPNG, png),
			imagePart(provider.MediaPNG, png), imagePart(provider.MediaPNG, png), imagePart(provider.MediaPNG, png), imagePart(provider.MediaPNG, png),
			imagePart(provider.MediaPNG, png), imagePart(provider.MediaPNG, png)},
			msp.CodeInputTooLarge, msp.KindInputTooLarge, "input", ""},
		{"media type", true, []msp.TurnInputPart{imagePart("image/bmp", png)}, msp.CodeInvalidParams, msp.KindInvalidParams, "input.1.mediaType", msp.ReasonBadImage},
		{"magic bytes", true, []msp.TurnInputPart{imagePart(provider.MediaJPEG, png)}, msp.CodeInvalidParams, msp.KindInvalidParams, "input.1.base64Data", msp.ReasonBadImage},
		{"not base64", true, []msp.TurnInputPart{{Type: msp.InputImage, MediaType: provider.MediaPNG, Base64Data: "iVBOR*w0"}},
			msp.CodeInvalidParams, msp.KindInvalidParams, "input.1.base64Data", msp.ReasonBadImage},
		{"empty", true, []msp.TurnInputPart{{Type: msp.InputImage, MediaType: provider.MediaPNG}},
			msp.CodeInvalidParams, msp.KindInvalidParams, "input.1.base64Data", msp.ReasonBadImage},
		{"width alone", true, []msp.TurnInputPart{{Type: msp.InputImage, MediaType: provider.MediaPNG, Base64Data: base64.StdEncoding.EncodeToString(png), Width: new(4)}},
			msp.CodeInvalidParams, msp.KindInvalidParams, "input.1.width", ""},
		{"text-only model", false, []msp.TurnInputPart{{Type: msp.InputText, Text: "more"}, imagePart(provider.MediaPNG, png)},
			msp.CodeInvalidParams, msp.KindInvalidParams, "input.2", msp.ReasonModelCannotTakeImages},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newImageManager(t, st, model, fixedModels{images: tc.takes})
			sid := startSession(t, m, newRecSub())
			head, _ := m.Head(ctx, sid)
			p := textTurn(sid, "look")
			p.Input, p.CommandID = append(p.Input, tc.parts...), cmdID()
			_, _, err := m.StartTurn(ctx, nil, mustJSON(p))
			var me *msp.Error
			if !errors.As(err, &me) || me.Code != tc.code || me.Data.Kind != tc.kind || me.Data.Details["field"] != tc.field || me.Data.Reason != tc.reason {
				t.Fatalf("err %v %+v; want %s naming %s (%s)", err, me, tc.kind, tc.field, tc.reason)
			}
			if h, _ := m.Head(ctx, sid); h != head {
				t.Fatalf("the refusal wrote: head %s → %s", head, h)
			}
			if n := model.n.Load(); n != 0 {
				t.Fatalf("%d provider requests", n)
			}
		})
	}
}

// TestInstructionsKept: session/start's instructions reach every request
// after the operator's, session/read returns them, a fork and a restart
// keep them; too long ones and a resume naming any are refused.
func TestInstructionsKept(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	runner := newTestRunner(scripted.New(), func(c *turn.Config) {
		c.Models = func(string) provider.ModelInfo { return provider.ModelInfo{Instructions: "Operator."} }
	})
	newManager := func() *Manager {
		m, err := New(ctx, Config{Store: st, Runner: runner, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		return m
	}
	m := newManager()
	sub := newRecSub()
	raw, attach, err := m.StartSession(ctx, sub, mustJSON(msp.SessionStartParams{CommandID: cmdID(), Config: &msp.SessionConfig{Instructions: "Answer in French."}}))
	if err != nil {
		t.Fatal(err)
	}
	attach(ctx)
	var started msp.SessionStartResult
	json.Unmarshal(raw, &started)
	sid := started.Session.SessionID
	const both = "Operator.\n\nAnswer in French."
	if told := echoed(t, m, sub, sid, echo); told[0].Role != scripted.RoleSystem || told[0].Text != both {
		t.Fatalf("told %+v", told[0])
	}
	read := func(m *Manager, sid string) *msp.SessionConfig {
		snap, err := m.ReadSession(ctx, mustJSON(msp.SessionReadParams{SessionID: sid}))
		if err != nil {
			t.Fatal(err)
		}
		return snap.Config
	}
	if c := read(m, sid); c == nil || c.Instructions != "Answer in French." || c.MCPServers != nil {
		t.Fatalf("session/read config %+v", c)
	}
	raw, _, err = m.ForkSession(ctx, nil, mustJSON(msp.SessionForkParams{CommandID: cmdID(), SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	var fork msp.SessionSnapshot
	json.Unmarshal(raw, &fork)
	if fork.Config == nil || fork.Config.Instructions != "Answer in French." {
		t.Fatalf("fork config %+v", fork.Config)
	}

	m2 := newManager()
	sub2 := newRecSub()
	subscribe(t, m2, sub2, fork.Session.SessionID)
	if c := read(m2, sid); c == nil || c.Instructions != "Answer in French." {
		t.Fatalf("after a restart, config %+v", c)
	}
	if told := echoed(t, m2, sub2, fork.Session.SessionID, echo); told[0].Text != both {
		t.Fatalf("the fork after a restart told %+v", told[0])
	}

	// A session without instructions gets the operator's alone, and reads
	// back no config.
	plain := startSession(t, m2, sub2)
	if told := echoed(t, m2, sub2, plain, echo); told[0].Text != "Operator." {
		t.Fatalf("told %+v", told[0])
	}
	if c := read(m2, plain); c != nil {
		t.Fatalf("config %+v without instructions", c)
	}

	_, _, err = m2.StartSession(ctx, nil, mustJSON(msp.SessionStartParams{CommandID: cmdID(),
		Config: &msp.SessionConfig{Instructions: strings.Repeat("é", msp.MaxInstructionsBytes/2+1)}}))
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindInputTooLarge || me.Data.Details["field"] != "config.instructions" || me.Data.LimitBytes != msp.MaxInstructionsBytes {
		t.Fatalf("too long: %v", err)
	}
	_, _, err = m2.ResumeSession(ctx, nil, mustJSON(msp.SessionResumeParams{CommandID: cmdID(), SessionID: sid,
		Config: &msp.SessionConfig{Instructions: "Other."}}))
	if !errors.As(err, &me) || me.Data.Kind != msp.KindInvalidParams || me.Data.Details["field"] != "config.instructions" {
		t.Fatalf("resume naming instructions: %v", err)
	}
}

// TestQueuedImageTurnSurvivesRestart: a turn queued behind a running one
// has its image stored at its admission; after a restart its pending
// record still names it, and when it launches its item and its request
// carry it.
func TestQueuedImageTurnSurvivesRestart(t *testing.T) {
	st := &imageStore{Store: openStore(t)}
	m := newImageManager(t, st, scripted.New(), fixedModels{images: true})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	slow := startTurn(t, m, textTurn(sid, scripted.Script(scripted.Step{Text: "slow", DelayMs: 400})))
	img := imageBytes(1000, 5)
	p := textTurn(sid, scripted.Script(echo...))
	p.Input = append(p.Input, imagePart(provider.MediaPNG, img))
	queued := startTurn(t, m, p)
	if queued.Disposition != msp.DispositionQueued {
		t.Fatalf("disposition %s", queued.Disposition)
	}
	if records, _, _ := st.counts(); records != 1 {
		t.Fatalf("%d image records at the queued admission", records)
	}
	m.Close()

	m2 := newImageManager(t, st, scripted.New(), fixedModels{images: true})
	sub2 := newRecSub()
	subscribe(t, m2, sub2, sid)
	sub2.waitTerminal(t, slow.TurnID)
	if done := sub2.waitTerminal(t, queued.TurnID); done.Terminal != msp.TerminalCompleted {
		t.Fatalf("queued turn %+v", done)
	}
	items := userItems(t, sub2)
	it := items[len(items)-1]
	if len(it.Attachments) != 1 || !bytes.Equal(readStoredImage(t, m2, sid, it, it.Attachments[0], 512), img) {
		t.Fatalf("the queued turn's item %+v", it)
	}
	var answer string
	for _, ip := range of[msp.ItemParams](t, sub2, msp.NotifyItemCompleted) {
		if ip.Item.Kind == msp.ItemAgentMessage && *ip.Item.TurnID == queued.TurnID && ip.Item.Status == msp.ItemCompleted {
			answer = *ip.Item.Text
		}
	}
	var told []scripted.Echoed
	json.Unmarshal([]byte(answer), &told)
	if got := imagesTold(told); len(got) != 1 || got[0] != "image/png:"+sha(img) {
		t.Fatalf("told %v", got)
	}
	if records, _, _ := st.counts(); records != 1 {
		t.Fatalf("%d image records", records)
	}
}
