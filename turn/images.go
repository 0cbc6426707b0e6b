package turn

// What a request carries of the model's configuration: its instructions,
// the tools it takes, and the history's images, loaded for each request
// and not held between them.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"mspd/provider"
	"mspd/schema/msp"
)

// Bounds of the images one request carries. A turn's own images always
// fit them (session/start admits at most MaxTurnImages, MaxRequestImageBytes
// in all); older images of the history are sent newest first while both
// bounds allow, and the rest as provider.ImageOmitted text. The byte bound
// keeps a request within what every provider takes (Anthropic: 32 MB of
// request, base64 making 16 MiB about 21 MiB) and bounds what a running
// turn holds of images, since a request's are loaded as it is built and
// dropped after it.
const (
	MaxRequestImages     = 20
	MaxRequestImageBytes = 16 << 20
)

// Reasons an image of the history is not sent.
const (
	omittedNoImages = "the model takes no images"
	omittedBudget   = "an older image, beyond what one request carries"
)

// Images loads the bytes of a session's stored images.
type Images interface {
	// Load returns the image ref names (provider.Image.Ref) as standard
	// padded base64.
	Load(ctx context.Context, ref string) (string, error)
}

// model is what the configuration knows of the model the step is on
// (the session's, or a fallback's); without a catalog every model takes
// images and tools.
func (t *run) model() provider.ModelInfo {
	if m := t.hop.cfg.Models; m != nil {
		return m(t.hop.model)
	}
	return provider.ModelInfo{Capabilities: provider.Capabilities{Images: true, Tools: true}}
}

// instructions is the request's system prompt: the operator's for the
// model, then the session's.
func (t *run) instructions() string {
	return provider.JoinInstructions(t.model().Instructions, t.spec.Instructions)
}

// tools are the tools a request offers: none to a model that takes none.
func (t *run) tools() []provider.ToolSpec {
	if t.spec.Tools == nil || !t.model().Tools {
		return nil
	}
	return t.spec.Tools.Specs()
}

// refuseImages ends, before any request, a turn whose own message has
// images its model cannot take (its model changed since the turn was
// admitted, say): the model would only refuse it, and leaving the images
// out would answer a question the user did not ask. nil lets it run.
func (t *run) refuseImages() *Outcome {
	if t.model().Images {
		return nil
	}
	for i := len(t.spec.History) - 1; i >= 0; i-- {
		if m := t.spec.History[i]; m.Role == provider.RoleUser {
			if len(m.Images) == 0 {
				return nil
			}
			o := t.fail(msp.TurnErrorConfig, fmt.Sprintf("the model %s takes no images, and this turn's message has %d", t.spec.Model, len(m.Images)), false)
			return &o
		}
	}
	return nil
}

// request is the history the next request sends, its images loaded:
// newest first while MaxRequestImages and MaxRequestImageBytes allow,
// the others — all of them for a model that takes none — replaced by a
// line of text saying so. The session's history is not changed: messages
// with images are copied.
func (t *run) request(ctx context.Context) ([]provider.Message, error) {
	msgs := t.history()
	if !slices.ContainsFunc(msgs, func(m provider.Message) bool { return len(m.Images) > 0 }) {
		return msgs, nil
	}
	takes := t.model().Images
	out := slices.Clone(msgs)
	count, bytes := 0, int64(0)
	for i := len(out) - 1; i >= 0; i-- {
		m := &out[i]
		if len(m.Images) == 0 {
			continue
		}
		sent := make([]provider.Image, 0, len(m.Images))
		var omitted []string
		// Newest first: a message's last image is its newest.
		for j := len(m.Images) - 1; j >= 0; j-- {
			im := m.Images[j]
			switch {
			case !takes:
				omitted = append(omitted, omittedNoImages)
				continue
			case count >= MaxRequestImages || bytes+im.Size > MaxRequestImageBytes:
				omitted = append(omitted, omittedBudget)
				continue
			}
			if im.Data == "" {
				if t.spec.Images == nil {
					return nil, fmt.Errorf("image %s: no store to load it from", im.Ref)
				}
				data, err := t.spec.Images.Load(ctx, im.Ref)
				if err != nil {
					return nil, fmt.Errorf("image %s: %w", im.Ref, err)
				}
				im.Data = data
			}
			sent = append(sent, im)
			count, bytes = count+1, bytes+im.Size
		}
		slices.Reverse(sent)
		m.Images = sent
		if len(omitted) > 0 {
			lines := make([]string, 0, 1+len(omitted))
			if m.Text != "" {
				lines = append(lines, m.Text)
			}
			for _, why := range omitted {
				lines = append(lines, provider.ImageOmitted(why))
			}
			m.Text = strings.Join(lines, "\n")
		}
	}
	return out, nil
}
