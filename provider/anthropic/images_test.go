package anthropic_test

import (
	"encoding/json"
	"testing"

	"mspd/provider"
	"mspd/provider/anthropic"
	"mspd/provider/anthropic/anthropictest"
	"mspd/provider/providertest"
)

// TestImagesAndInstructions: a user message's images are base64 image
// blocks before its text; the instructions are the top-level system, as
// one text block, and a prompt-mode schema follows them in a block of its
// own.
func TestImagesAndInstructions(t *testing.T) {
	t.Parallel()
	png, gif, webp := providertest.PNG(2, 2), providertest.GIF(2, 2), providertest.WebP()
	im := func(mediaType string, b []byte) provider.Image {
		return provider.Image{MediaType: mediaType, Data: providertest.B64(b), Size: int64(len(b))}
	}
	req := provider.Request{
		Instructions: "Be terse.",
		Messages: []provider.Message{
			{Role: provider.RoleUser, Text: "Which is red?", Images: []provider.Image{im(provider.MediaPNG, png), im(provider.MediaGIF, gif)}},
			{Role: provider.RoleAssistant, Text: "Both."},
			{Role: provider.RoleUser, Images: []provider.Image{im(provider.MediaWebP, webp)}},
		},
	}
	f := anthropictest.New(t, anthropictest.Answer("end_turn", 1, "ok"))
	if _, _, err := stream(t, newModel(t, f), req); err != nil {
		t.Fatal(err)
	}
	body := f.Requests()[0].Body
	block := func(mediaType string, b []byte) string {
		return `{"type":"image","source":{"type":"base64","media_type":"` + mediaType + `","data":"` + providertest.B64(b) + `"}}`
	}
	wantJSON(t, "messages", body["messages"], `[
		{"role":"user","content":[`+block("image/png", png)+`,`+block("image/gif", gif)+`,{"type":"text","text":"Which is red?"}]},
		{"role":"assistant","content":[{"type":"text","text":"Both."}]},
		{"role":"user","content":[`+block("image/webp", webp)+`]}]`)
	wantJSON(t, "system", body["system"], `[{"type":"text","text":"Be terse."}]`)

	// Prompt mode: the schema's instruction after the operator's.
	schema := json.RawMessage(`{"type":"array"}`)
	f = anthropictest.New(t, anthropictest.Answer("end_turn", 1, "[]"))
	req = provider.Request{Instructions: "Be terse.", ResponseSchema: schema}
	if _, _, err := stream(t, newModel(t, f, func(c *anthropic.Config) { c.StructuredMode = anthropic.StructuredPromptMode }), req); err != nil {
		t.Fatal(err)
	}
	system, _ := f.Requests()[0].Body["system"].([]any)
	if len(system) != 2 || system[0].(map[string]any)["text"] != "Be terse." {
		t.Errorf("system %v; want the instructions, then the schema's block", system)
	}
}
