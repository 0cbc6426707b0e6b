package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/anthropic/anthropictest"
	"mspd/provider/openai/openaitest"
	"mspd/provider/providertest"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// imageConfig writes a configuration of the three wires' fakes, each of
// a model the catalog knows takes images, with the operator's
// instructions on the Chat entry, and a text-only model on a fake that
// must never be asked.
func imageConfig(t *testing.T, chat, resp, text *openaitest.Server, an *anthropictest.Server) daemon.Config {
	t.Helper()
	file := filepath.Join(t.TempDir(), "mspd.toml")
	conf := fmt.Sprintf(`default = "chat"
[[providers]]
id = "chat"
type = "openai"
base_url = %q
model = "gpt-4o-mini"
api_key_env = "TEST_KEY"
instructions = "Operator says."
[[providers]]
id = "resp"
type = "openai"
api = "responses"
base_url = %q
model = "gpt-4.1"
api_key_env = "TEST_KEY"
[[providers]]
id = "claude"
type = "anthropic"
base_url = %q
model = "claude-sonnet-4-5"
api_key_env = "TEST_ANTHROPIC_KEY"
[[providers]]
id = "text"
type = "openai"
base_url = %q
model = "gpt-3.5-turbo"
api_key_env = "TEST_KEY"
`, chat.URL(), resp.URL(), an.URL(), text.URL())
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return daemon.Config{ConfigFile: file, Env: mapEnv(map[string]string{"TEST_KEY": "sk-e2e", "TEST_ANTHROPIC_KEY": anthropictest.Key})}
}

// bodyJSON is a member of a recorded request body, re-encoded.
func bodyJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sameShape fails unless got, a decoded body member, is the JSON want.
func sameShape(t *testing.T, what string, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: want does not parse: %v", what, err)
	}
	if !reflect.DeepEqual(got, w) {
		t.Errorf("%s sent\n%s\nwant\n%s", what, bodyJSON(t, got), want)
	}
}

// TestImagesReachEachProvider: over the WebSocket, a turn's image reaches
// Chat Completions as an image_url part, the Responses API as an
// input_image and Anthropic as a base64 image block, each with the
// instructions in its API's place; the next turn sends it again; the
// userMessage item carries metadata only and item/readOutput gives the
// bytes back; a text-only model's session is refused the image, typed,
// with no request made, and a session that moves to that model sends it
// its history's images as words.
func TestImagesReachEachProvider(t *testing.T) {
	png, jpeg := providertest.PNG(4, 3), providertest.JPEG(2, 2)
	pngB64, jpegB64 := providertest.B64(png), providertest.B64(jpeg)
	chat := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Answer("A red square.")...), openaitest.Stream(openaitest.Answer("Still red.")...))
	rOK := func(text string) openaitest.Reply {
		return openaitest.Stream(openaitest.RCreated(), openaitest.RTextDelta(1, text), openaitest.RCompleted(2, 10, 2, 0, 0))
	}
	resp := openaitest.New(t, "/v1", rOK("A red square."), rOK("Still red."))
	an := anthropictest.New(t, anthropictest.Answer("end_turn", 3, "A red square."), anthropictest.Answer("end_turn", 2, "Still red."))
	text := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Answer("I cannot see it.")...))
	d := startDaemon(t, imageConfig(t, chat, resp, text, an))
	c := dial(t, d.URL(), client.Options{})
	ctx := testCtx(t)

	imageTurn := msp.TurnStartParams{Input: []msp.TurnInputPart{{Type: "text", Text: "What is this?"},
		{Type: "image", MediaType: "image/png", Base64Data: pngB64, Width: new(4), Height: new(3)},
		{Type: "image", MediaType: "image/jpeg", Base64Data: jpegB64}}}
	run := func(sid string, p msp.TurnStartParams) []client.Notification {
		t.Helper()
		p.SessionID = sid
		ack, err := c.StartTurnWith(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		events, err := c.WaitTurn(ctx, ack.TurnID)
		if err != nil {
			t.Fatal(err)
		}
		if done := decode[msp.TurnCompletedParams](t, events[len(events)-1]); done.Terminal != msp.TerminalCompleted {
			t.Fatalf("turn %+v %+v", done, done.Error)
		}
		return events
	}
	var startCursor string
	session := func(providerID string) string {
		t.Helper()
		res, err := c.StartSessionWith(ctx, msp.SessionStartParams{ProviderID: &providerID, Config: &msp.SessionConfig{Instructions: "Session says."}})
		if err != nil {
			t.Fatal(err)
		}
		startCursor = res.ViewCursor
		return res.Session.SessionID
	}
	later := msp.TurnStartParams{Input: []msp.TurnInputPart{{Type: "text", Text: "And now?"}}}

	// Chat Completions.
	sid := session("chat")
	chatSession := sid
	events := run(sid, imageTurn)
	run(sid, later)
	chatUser := `{"role":"user","content":[{"type":"text","text":"What is this?"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + pngB64 + `"}},` +
		`{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,` + jpegB64 + `"}}]}`
	sameShape(t, "chat messages", chat.Requests()[0].Body["messages"],
		`[{"role":"system","content":"Operator says.\n\nSession says."},`+chatUser+`]`)
	sameShape(t, "chat messages of the next turn", chat.Requests()[1].Body["messages"],
		`[{"role":"system","content":"Operator says.\n\nSession says."},`+chatUser+
			`,{"role":"assistant","content":"A red square."},{"role":"user","content":"And now?"}]`)

	// The item: metadata only, and the bytes back on request.
	var item msp.Item
	var itemFrame json.RawMessage
	for _, n := range only(events, msp.NotifyItemCompleted) {
		var p struct {
			Item json.RawMessage `json:"item"`
		}
		json.Unmarshal(n.Params, &p)
		if it := decode[msp.ItemParams](t, n).Item; it.Kind == msp.ItemUserMessage {
			item, itemFrame = it, p.Item
		}
	}
	if len(item.Attachments) != 2 || bytes.Contains(itemFrame, []byte(pngB64)) || *item.Attachments[0].Width != 4 ||
		item.Attachments[1].MediaType != "image/jpeg" || item.Attachments[1].Width != nil {
		t.Fatalf("user item %s", itemFrame)
	}
	for i, want := range [][]byte{png, jpeg} {
		res, err := c.ReadOutput(ctx, msp.ItemReadOutputParams{SessionID: sid, ItemID: item.ItemID, OutputRef: item.Attachments[i].OutputRef.ID})
		got, _ := base64.StdEncoding.DecodeString(res.Content)
		if err != nil || !res.EOF || res.Encoding != msp.EncodingBase64 || !bytes.Equal(got, want) {
			t.Fatalf("image %d read back: %+v, %v", i, res, err)
		}
	}
	var read msp.SessionSnapshot
	if err := c.Call(ctx, msp.MethodSessionRead, msp.SessionReadParams{SessionID: sid}, &read); err != nil ||
		read.Config == nil || read.Config.Instructions != "Session says." {
		t.Fatalf("session/read: %+v %v", read.Config, err)
	}

	// The fork's history and a replay hold the item as recorded.
	var fork msp.SessionSnapshot
	if err := c.Call(ctx, msp.MethodSessionFork, msp.SessionForkParams{CommandID: client.NewCommandID(), SessionID: sid}, &fork); err != nil {
		t.Fatal(err)
	}
	if fork.Config == nil || fork.Config.Instructions != "Session says." {
		t.Errorf("the fork's config %+v", fork.Config)
	}
	forked, _ := json.Marshal(fork.History.Items[0])
	if !bytes.Equal(forked, itemFrame) {
		t.Errorf("the fork's user item\n%s\nrecorded\n%s", forked, itemFrame)
	}
	var page msp.ViewPageResult
	if err := c.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Limit: 100}, &page); err != nil {
		t.Fatal(err)
	}
	replayed := 0
	for _, e := range page.Events {
		var p struct {
			Item json.RawMessage `json:"item"`
		}
		if json.Unmarshal(e.Params, &p) == nil && bytes.Contains(p.Item, []byte(`"userMessage"`)) && bytes.Contains(p.Item, []byte(item.ItemID)) {
			replayed++
			if !bytes.Equal(p.Item, itemFrame) {
				t.Errorf("the paged user item\n%s\nrecorded\n%s", p.Item, itemFrame)
			}
		}
	}
	if replayed != 1 {
		t.Errorf("the user item paged %d times", replayed)
	}
	// A client that resumes from the session's start is replayed it too.
	c2 := dial(t, d.URL(), client.Options{})
	if _, err := c2.Resume(ctx, sid, &startCursor); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := c2.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Item json.RawMessage `json:"item"`
		}
		if n.Method == msp.NotifyItemCompleted && json.Unmarshal(n.Params, &p) == nil && bytes.Contains(p.Item, []byte(item.ItemID)) {
			if !bytes.Equal(p.Item, itemFrame) {
				t.Errorf("the replayed user item\n%s\nrecorded\n%s", p.Item, itemFrame)
			}
			break
		}
	}

	// The Responses API.
	sid = session("resp")
	run(sid, imageTurn)
	run(sid, later)
	respUser := `{"role":"user","content":[{"type":"input_text","text":"What is this?"},` +
		`{"type":"input_image","detail":"auto","image_url":"data:image/png;base64,` + pngB64 + `"},` +
		`{"type":"input_image","detail":"auto","image_url":"data:image/jpeg;base64,` + jpegB64 + `"}]}`
	for i, r := range resp.Requests() {
		sameShape(t, "responses instructions", r.Body["instructions"], `"Session says."`)
		input, _ := r.Body["input"].([]any)
		if len(input) != 1+2*i {
			t.Fatalf("responses input %d: %s", i, bodyJSON(t, input))
		}
		sameShape(t, fmt.Sprint("responses input ", i), input[0], respUser)
	}

	// Anthropic.
	sid = session("claude")
	run(sid, imageTurn)
	run(sid, later)
	anUser := `{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + pngB64 + `"}},` +
		`{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"` + jpegB64 + `"}},` +
		`{"type":"text","text":"What is this?"}]}`
	for i, r := range an.Requests() {
		sameShape(t, "anthropic system", r.Body["system"], `[{"type":"text","text":"Session says."}]`)
		msgs, _ := r.Body["messages"].([]any)
		if len(msgs) != 1+2*i {
			t.Fatalf("anthropic messages %d: %s", i, bodyJSON(t, msgs))
		}
		sameShape(t, fmt.Sprint("anthropic messages ", i), msgs[0], anUser)
	}

	// model/list says which models read images, so a client offers an
	// attach button only where it is of use.
	var list msp.ModelListResult
	if err := c.Call(ctx, msp.MethodModelList, map[string]any{}, &list); err != nil {
		t.Fatal(err)
	}
	var takes []string
	for _, m := range list.Models {
		takes = append(takes, fmt.Sprintf("%s=%v", m.ModelID, m.Images))
	}
	if got := strings.Join(takes, " "); got != "gpt-4o-mini=true gpt-4.1=true claude-sonnet-4-5=true gpt-3.5-turbo=false" {
		t.Errorf("model/list images: %s", got)
	}

	// A text-only model: refused, typed, naming the part; never asked.
	sid = session("text")
	p := imageTurn
	p.SessionID = sid
	_, err := c.StartTurnWith(ctx, p)
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindInvalidParams || me.Data.Reason != msp.ReasonModelCannotTakeImages ||
		me.Data.Details["field"] != "input.1" {
		t.Fatalf("an image to gpt-3.5-turbo: %v", err)
	}
	if n := len(text.Requests()); n != 0 {
		t.Fatalf("the text-only model got %d requests", n)
	}
	// The connection lives on.
	if err := c.Call(ctx, msp.MethodSessionRead, msp.SessionReadParams{SessionID: sid}, nil); err != nil {
		t.Fatal(err)
	}

	// The chat session moves to the text-only model: its history's images
	// reach it as words.
	if err := c.Call(ctx, msp.MethodSessionSetModel, msp.SessionSetModelParams{CommandID: client.NewCommandID(), SessionID: chatSession,
		Model: msp.ModelSelection{ProviderID: "text", ModelID: "gpt-3.5-turbo"}}, nil); err != nil {
		t.Fatal(err)
	}
	run(chatSession, msp.TurnStartParams{Input: []msp.TurnInputPart{{Type: "text", Text: "Describe it."}}})
	omitted := "[image omitted: the model takes no images]"
	sameShape(t, "the text-only model's messages", text.Requests()[0].Body["messages"],
		`[{"role":"system","content":"Session says."},{"role":"user","content":"What is this?\n`+omitted+`\n`+omitted+`"},`+
			`{"role":"assistant","content":"A red square."},{"role":"user","content":"And now?"},`+
			`{"role":"assistant","content":"Still red."},{"role":"user","content":"Describe it."}]`)
}

// TestImageTooLargeOverTheWire: an image over the bound is refused
// inputTooLarge naming the part; a frame over --max-frame-bytes is
// refused by the gate; neither closes the connection.
func TestImageTooLargeOverTheWire(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	c := dial(t, d.URL(), client.Options{})
	ctx := testCtx(t)
	sid := newSession(t, c)
	big := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, msp.MaxImageBytes)...)
	_, err := c.StartTurnWith(ctx, msp.TurnStartParams{SessionID: sid, Input: []msp.TurnInputPart{{Type: "text", Text: "hi"},
		{Type: "image", MediaType: "image/png", Base64Data: base64.StdEncoding.EncodeToString(big)}}})
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindInputTooLarge || me.Data.Details["field"] != "input.1.base64Data" ||
		me.Data.LimitBytes != msp.MaxImageBytes {
		t.Fatalf("a 5 MiB + 8 byte image: %v", err)
	}
	_, err = c.StartTurnWith(ctx, msp.TurnStartParams{SessionID: sid, Input: []msp.TurnInputPart{{Type: "text", Text: "hi"},
		{Type: "image", MediaType: "image/gif", Base64Data: providertest.B64(providertest.PNG(1, 1))}}})
	if !errors.As(err, &me) || me.Data.Kind != msp.KindInvalidParams || me.Data.Reason != msp.ReasonBadImage ||
		me.Data.Details["field"] != "input.1.base64Data" {
		t.Fatalf("a PNG said to be a GIF: %v", err)
	}
	if _, done := answerTurn(t, c, sid, "still here?"); done.Terminal != msp.TerminalCompleted {
		t.Fatalf("after the refusals: %+v", done)
	}
}

// TestImagesAndInstructionsAcrossRestart: with the scripted model, whose
// echo shows what a request carried, a session's instructions and the
// image of its first turn reach a turn of the next daemon process, folded
// from the log, and session/read still returns the instructions.
func TestImagesAndInstructionsAcrossRestart(t *testing.T) {
	cfg := daemon.Config{DataDir: t.TempDir()}
	d := startDaemon(t, cfg)
	c := dial(t, d.URL(), client.Options{})
	ctx := testCtx(t)
	res, err := c.StartSessionWith(ctx, msp.SessionStartParams{Config: &msp.SessionConfig{Instructions: "Be brief."}})
	if err != nil {
		t.Fatal(err)
	}
	sid := res.Session.SessionID
	gif := providertest.GIF(3, 3)
	echoTurn := func(c *checkedClient, parts ...msp.TurnInputPart) []scripted.Echoed {
		t.Helper()
		ack, err := c.StartTurnWith(ctx, msp.TurnStartParams{SessionID: sid,
			Input: append([]msp.TurnInputPart{{Type: "text", Text: scripted.Script(scripted.Step{EchoRequest: true})}}, parts...)})
		if err != nil {
			t.Fatal(err)
		}
		events, err := c.WaitTurn(ctx, ack.TurnID)
		if err != nil {
			t.Fatal(err)
		}
		var told []scripted.Echoed
		for _, n := range only(events, msp.NotifyItemCompleted) {
			if it := decode[msp.ItemParams](t, n).Item; it.Kind == msp.ItemAgentMessage && it.Status == msp.ItemCompleted {
				if err := json.Unmarshal([]byte(*it.Text), &told); err != nil {
					t.Fatal(err)
				}
			}
		}
		return told
	}
	first := echoTurn(c, msp.TurnInputPart{Type: "image", MediaType: "image/gif", Base64Data: providertest.B64(gif)})
	if len(first) != 2 || first[0].Text != "Be brief." || len(first[1].Images) != 1 || first[1].Images[0].Bytes != len(gif) {
		t.Fatalf("first turn told %+v", first)
	}
	d.Close(context.Background())

	d2 := startDaemon(t, cfg)
	c2 := dial(t, d2.URL(), client.Options{})
	snap, err := c2.Resume(ctx, sid, nil)
	if err != nil || snap.Config == nil || snap.Config.Instructions != "Be brief." {
		t.Fatalf("resume: %+v %v", snap.Config, err)
	}
	again := echoTurn(c2)
	if len(again) != 4 || again[0].Role != scripted.RoleSystem || again[0].Text != "Be brief." ||
		!reflect.DeepEqual(again[1].Images, first[1].Images) {
		t.Fatalf("after the restart told %+v", again)
	}
}
