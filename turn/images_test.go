package turn_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/turn"
	"mspd/turn/turntest"
)

// fakeImages is a turn.Images of base64 data by ref that counts loads.
type fakeImages struct {
	data map[string]string
	err  error

	mu    sync.Mutex
	loads map[string]int
}

func (f *fakeImages) Load(_ context.Context, ref string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loads == nil {
		f.loads = map[string]int{}
	}
	f.loads[ref]++
	if f.err != nil {
		return "", f.err
	}
	d, ok := f.data[ref]
	if !ok {
		return "", fmt.Errorf("no image %s", ref)
	}
	return d, nil
}

// stored is an image of the history, named by ref, of size bytes.
func stored(ref string, size int64) provider.Image {
	return provider.Image{MediaType: provider.MediaPNG, Ref: ref, Size: size}
}

// newModelRunner is a harness whose runner knows its model by info.
func newModelRunner(t *testing.T, info provider.ModelInfo, replies ...reply) *harness {
	h := newHarness(t, nil, replies...)
	h.runner = turn.NewRunner(turn.Config{Model: h.model, Engine: h.engine(), Policy: h.policy(), DefaultMaxTokens: 1000,
		ModelMaxTokens: 4000, Models: func(model string) provider.ModelInfo { return info }})
	return h
}

// TestRequestCarriesImagesAndInstructions: each request loads the
// history's images (every attempt its own load: none is kept through a
// backoff), carries the operator's instructions then the session's, and
// offers no tools to a model that takes none; the session's history keeps
// its refs.
func TestRequestCarriesImagesAndInstructions(t *testing.T) {
	info := provider.ModelInfo{Capabilities: provider.Capabilities{Images: true}, Instructions: "Operator says."}
	h := newModelRunner(t, info, fail(status(503), nil), ok("A red square."))
	images := &fakeImages{data: map[string]string{"a": "QUFB", "b": "QkJC"}}
	sp := spec()
	sp.History = []provider.Message{
		{Role: provider.RoleUser, Text: "Look.", Images: []provider.Image{stored("a", 3)}},
		{Role: provider.RoleAssistant, Text: "Seen."},
		{Role: provider.RoleUser, Text: "And this?", Images: []provider.Image{stored("b", 3)}},
	}
	sp.Instructions, sp.Images = "Session says.", images
	sp.Tools = newToolbox(h.sink, echoTool("s", "echo", true))
	o := h.run(t, context.Background(), sp, nil)
	if o.Completed.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %+v", o.Completed)
	}
	reqs := h.model.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	for _, req := range reqs {
		if req.Instructions != "Operator says.\n\nSession says." || req.Tools != nil {
			t.Errorf("instructions %q, tools %v", req.Instructions, req.Tools)
		}
		got := [][]provider.Image{req.Messages[0].Images, req.Messages[2].Images}
		want := [][]provider.Image{{{MediaType: provider.MediaPNG, Ref: "a", Size: 3, Data: "QUFB"}}, {{MediaType: provider.MediaPNG, Ref: "b", Size: 3, Data: "QkJC"}}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("images %+v", got)
		}
	}
	if images.loads["a"] != 2 || images.loads["b"] != 2 {
		t.Errorf("loads %v; want each image loaded for each of the 2 attempts", images.loads)
	}
	if sp.History[0].Images[0].Data != "" {
		t.Error("the session's history was given the loaded bytes")
	}
}

// TestImagesBeyondTheRequestBound: the newest images go while
// MaxRequestImages and MaxRequestImageBytes allow; older ones are named
// as omitted in their message's text, and never loaded.
func TestImagesBeyondTheRequestBound(t *testing.T) {
	h := newModelRunner(t, provider.ModelInfo{Capabilities: provider.Capabilities{Images: true}}, ok("ok"))
	images := &fakeImages{data: map[string]string{}}
	var hist []provider.Message
	for i := range turn.MaxRequestImages + 1 {
		ref := fmt.Sprint("i", i)
		images.data[ref] = "QUFB"
		hist = append(hist, provider.Message{Role: provider.RoleUser, Text: ref, Images: []provider.Image{stored(ref, 3)}},
			provider.Message{Role: provider.RoleAssistant, Text: "ok"})
	}
	// The newest is large: with it only MaxRequestImageBytes-3 is left.
	images.data["big"] = "QUFB"
	hist = append(hist, provider.Message{Role: provider.RoleUser, Text: "big", Images: []provider.Image{stored("big", turn.MaxRequestImageBytes-3)}})
	sp := spec()
	sp.History, sp.Images = hist, images
	if o := h.run(t, context.Background(), sp, nil); o.Completed.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %+v", o.Completed)
	}
	msgs := h.model.requests()[0].Messages
	sent := 0
	for _, m := range msgs {
		sent += len(m.Images)
	}
	if sent != 2 || len(msgs[len(msgs)-1].Images) != 1 || len(msgs[len(msgs)-3].Images) != 1 {
		t.Fatalf("%d images sent; want the big one and the one before it", sent)
	}
	if msgs[0].Text != "i0\n[image omitted: an older image, beyond what one request carries]" {
		t.Errorf("the oldest message reads %q", msgs[0].Text)
	}
	if images.loads["i0"] != 0 || images.loads["big"] != 1 {
		t.Errorf("loads %v", images.loads)
	}
}

// TestModelWithoutImages: a model that takes none is refused a turn whose
// own message has images, before any request (configError); a turn whose
// earlier messages had them runs, each image a line of text saying so.
func TestModelWithoutImages(t *testing.T) {
	text := provider.ModelInfo{Capabilities: provider.Capabilities{Tools: true}}
	h := newModelRunner(t, text, ok("never"))
	sp := spec()
	sp.History = []provider.Message{{Role: provider.RoleUser, Text: "Look.", Images: []provider.Image{stored("a", 3), stored("b", 3)}}}
	sp.Images = &fakeImages{}
	o := h.run(t, context.Background(), sp, nil)
	if e := o.Completed.Error; e == nil || e.Kind != msp.TurnErrorConfig || !strings.Contains(e.Message, "takes no images") ||
		o.Completed.Attempts.Count != 0 || len(h.model.requests()) != 0 {
		t.Fatalf("terminal %+v, error %+v; %d requests", o.Completed, e, len(h.model.requests()))
	}

	h = newModelRunner(t, text, ok("ok"))
	images := &fakeImages{}
	sp.History = append(sp.History, provider.Message{Role: provider.RoleAssistant, Text: "Seen."},
		provider.Message{Role: provider.RoleUser, Text: "And now?"})
	sp.Images = images
	if o := h.run(t, context.Background(), sp, nil); o.Completed.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %+v", o.Completed)
	}
	first := h.model.requests()[0].Messages[0]
	want := "Look.\n[image omitted: the model takes no images]\n[image omitted: the model takes no images]"
	if first.Text != want || first.Images == nil || len(first.Images) != 0 || len(images.loads) != 0 {
		t.Errorf("first message %+v; loads %v", first, images.loads)
	}
}

// TestImageLoadFails: an image the session's log cannot give back fails
// the turn as a log error, before its request.
func TestImageLoadFails(t *testing.T) {
	h := newModelRunner(t, provider.ModelInfo{Capabilities: provider.Capabilities{Images: true}}, ok("never"))
	sp := spec()
	sp.History = []provider.Message{{Role: provider.RoleUser, Text: "Look.", Images: []provider.Image{stored("a", 3)}}}
	sp.Images = &fakeImages{err: errors.New("disk on fire")}
	o := h.run(t, context.Background(), sp, nil)
	if e := o.Completed.Error; e == nil || e.Kind != msp.TurnErrorLog || !strings.Contains(e.Message, "disk on fire") || len(h.model.requests()) != 0 {
		t.Fatalf("error %+v; %d requests", e, len(h.model.requests()))
	}
	if got := turntest.Of[*msp.ItemParams](h.sink, msp.NotifyItemStarted); len(got) != 0 {
		t.Errorf("items opened: %d", len(got))
	}
}
