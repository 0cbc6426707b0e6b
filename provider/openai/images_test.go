package openai_test

import (
	"testing"

	"mspd/provider"
	"mspd/provider/openai"
	"mspd/provider/openai/openaitest"
	"mspd/provider/providertest"
)

// The images and history the tests send: a question with a PNG, the
// answer, then a JPEG alone.
var (
	pngBytes   = providertest.PNG(2, 2)
	jpegBytes  = providertest.JPEG(2, 2)
	pngImage   = provider.Image{MediaType: provider.MediaPNG, Data: providertest.B64(pngBytes), Size: int64(len(pngBytes))}
	jpegImage  = provider.Image{MediaType: provider.MediaJPEG, Data: providertest.B64(jpegBytes), Size: int64(len(jpegBytes))}
	withImages = provider.Request{
		Instructions: "Be terse.\n\nAnswer in French.",
		Messages: []provider.Message{
			{Role: provider.RoleUser, Text: "What is this?", Images: []provider.Image{pngImage}},
			{Role: provider.RoleAssistant, Text: "A red square."},
			{Role: provider.RoleUser, Images: []provider.Image{jpegImage}},
		},
		MaxTokens: 64, Attempt: 1,
	}
)

// TestChatImagesAndInstructions: the instructions go first as a system
// message; a user message with images is content parts, its text then
// one image_url part per image, a data: URL of the bytes; one without
// text is its images alone; a message without images stays a string.
func TestChatImagesAndInstructions(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Answer("Un carré.")...))
	if _, _, err := stream(t, newModel(t, srv, nil), withImages); err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "messages", srv.Requests()[0].Body["messages"], `[
		{"role": "system", "content": "Be terse.\n\nAnswer in French."},
		{"role": "user", "content": [
			{"type": "text", "text": "What is this?"},
			{"type": "image_url", "image_url": {"url": "data:image/png;base64,`+pngImage.Data+`"}}]},
		{"role": "assistant", "content": "A red square."},
		{"role": "user", "content": [
			{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,`+jpegImage.Data+`"}}]}]`)

	// Without instructions there is no system message.
	srv = openaitest.New(t, "/v1", openaitest.Stream(openaitest.Answer("ok")...))
	if _, _, err := stream(t, newModel(t, srv, nil), hello); err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "messages", srv.Requests()[0].Body["messages"], `[{"role": "user", "content": "Hi"}]`)
}

// TestResponsesImagesAndInstructions: the instructions are the request's
// instructions; a user message with images is a content list of
// input_text and input_image parts (a data: URL, detail auto).
func TestResponsesImagesAndInstructions(t *testing.T) {
	t.Parallel()
	srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.RCreated(), openaitest.RTextDelta(1, "Un carré."),
		openaitest.RCompleted(2, 10, 3, 0, 0)))
	m := newModel(t, srv, func(c *openai.Config) { c.API = openai.APIResponses })
	if _, _, err := stream(t, m, withImages); err != nil {
		t.Fatal(err)
	}
	body := srv.Requests()[0].Body
	sameJSON(t, "instructions", body["instructions"], `"Be terse.\n\nAnswer in French."`)
	sameJSON(t, "input", body["input"], `[
		{"role": "user", "content": [
			{"type": "input_text", "text": "What is this?"},
			{"type": "input_image", "detail": "auto", "image_url": "data:image/png;base64,`+pngImage.Data+`"}]},
		{"role": "assistant", "content": "A red square."},
		{"role": "user", "content": [
			{"type": "input_image", "detail": "auto", "image_url": "data:image/jpeg;base64,`+jpegImage.Data+`"}]}]`)

	srv = openaitest.New(t, "/v1", openaitest.Stream(openaitest.RCreated(), openaitest.RTextDelta(1, "ok"),
		openaitest.RCompleted(2, 10, 3, 0, 0)))
	m = newModel(t, srv, func(c *openai.Config) { c.API = openai.APIResponses })
	if _, _, err := stream(t, m, hello); err != nil {
		t.Fatal(err)
	}
	if v, ok := srv.Requests()[0].Body["instructions"]; ok {
		t.Errorf("instructions %v sent without any; want none", v)
	}
}
