package provider

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// The image formats every provider mspd speaks takes (OpenAI's and
// Anthropic's vision APIs agree on these four).
const (
	MediaPNG  = "image/png"
	MediaJPEG = "image/jpeg"
	MediaGIF  = "image/gif"
	MediaWebP = "image/webp"
)

// Image is one image of a user message. Providers send Data; a history
// read back from a session's log names the stored image by Ref instead,
// and the turn loads Data for each request (see turn.Images), so that a
// long chat's images are not all held in memory between requests.
type Image struct {
	// MediaType is one of MediaPNG, MediaJPEG, MediaGIF, MediaWebP.
	MediaType string
	// Data is the image's bytes in standard, padded base64: what every
	// API carries. Empty while only Ref names the image.
	Data string
	// Ref names the stored image within its session ("" for an image
	// given whole).
	Ref string
	// Size is the image's size in bytes (decoded).
	Size int64
}

// DataURL is the image as a data: URL, as OpenAI's APIs take it.
func (im Image) DataURL() string { return "data:" + im.MediaType + ";base64," + im.Data }

// Capabilities are what a model takes beyond text, and its context
// window. The catalog knows them for well-known models and from the
// configuration.
type Capabilities struct {
	// Images says the model reads images.
	Images bool
	// Tools says the model takes tools (function calling).
	Tools bool
	// Reasoning says the model reasons before it answers (and may take a
	// reasoning effort).
	Reasoning bool
	// ContextWindow is the model's context window in tokens; 0 when not
	// known.
	ContextWindow int
}

// ModelInfo is what mspd knows of one configured model.
type ModelInfo struct {
	Capabilities
	// Instructions is the operator's system prompt for the model ("" for
	// none); a session's own instructions follow it (JoinInstructions).
	Instructions string
	// Price is what the operator says the model costs; nil when the
	// configuration names no price for it.
	Price *Price
}

// Price is a model's price in USD per million tokens, as configured.
type Price struct {
	// In is the price of a prompt token the provider did not read from
	// its cache.
	In float64
	// Out is the price of an output token (reasoning tokens included: the
	// providers count them as output).
	Out float64
	// CachedIn is the price of a prompt token read from the provider's
	// cache (In when the configuration names none).
	CachedIn float64
}

// Cost is what one completion's usage costs at p, in USD. InputTokens
// counts every prompt token once, the cached ones among them
// (CachedTokens), under each provider's convention as this package's
// providers report it.
func (p Price) Cost(u Usage) float64 {
	cached := min(max(u.CachedTokens, 0), u.InputTokens)
	fresh := u.InputTokens - cached
	return (float64(fresh)*p.In + float64(cached)*p.CachedIn + float64(u.OutputTokens)*p.Out) / 1e6
}

// JoinInstructions is the system prompt of a request: the operator's
// instructions, then the session's, a blank line between them; either
// may be empty.
func JoinInstructions(operator, session string) string {
	switch {
	case operator == "":
		return session
	case session == "":
		return operator
	}
	return operator + "\n\n" + session
}

// ImageOmitted is the text a model that is not sent an image of its
// history reads in its place, saying why.
func ImageOmitted(why string) string { return "[image omitted: " + why + "]" }

// magic are the first bytes of each format. WebP is a RIFF container
// whose form type, at byte 8, is WEBP.
var magic = []struct{ mediaType, prefix, at8 string }{
	{MediaPNG, "\x89PNG\r\n\x1a\n", ""},
	{MediaJPEG, "\xff\xd8\xff", ""},
	{MediaGIF, "GIF87a", ""},
	{MediaGIF, "GIF89a", ""},
	{MediaWebP, "RIFF", "WEBP"},
}

// MediaTypes are the image media types providers take.
func MediaTypes() []string { return []string{MediaPNG, MediaJPEG, MediaGIF, MediaWebP} }

// Sniff names the image format of data by its first bytes: one of the
// Media constants, or "" for none of them.
func Sniff(data []byte) string {
	for _, m := range magic {
		if bytes.HasPrefix(data, []byte(m.prefix)) && (m.at8 == "" || len(data) >= 12 && string(data[8:12]) == m.at8) {
			return m.mediaType
		}
	}
	return ""
}

// CheckImage tells why data, an image's bytes, cannot be sent as
// mediaType: a media type no provider takes, or bytes of another format.
func CheckImage(mediaType string, data []byte) error {
	if !slices.Contains(MediaTypes(), mediaType) {
		return fmt.Errorf("media type %q is not one of %s", mediaType, strings.Join(MediaTypes(), ", "))
	}
	switch got := Sniff(data); got {
	case mediaType:
		return nil
	case "":
		return fmt.Errorf("the bytes are not %s (nor any image format mspd takes)", mediaType)
	default:
		return fmt.Errorf("the bytes are %s, not %s", got, mediaType)
	}
}

// DecodedLen is the size of the bytes that data, standard padded base64,
// holds, found without decoding it.
func DecodedLen(data string) int {
	n := len(data) / 4 * 3
	return n - (len(data) - len(strings.TrimRight(data, "=")))
}
