package session

// The images a turn is given are stored once, in the session's own log:
// hidden records (like a tool call's whole output, output.go) written in
// the commit that admits the turn, ahead of its other records. Nothing
// writes them again — not a retried attempt, a replayed turn/start, a later
// turn, nor a fork, which copies them as they are — and, being the
// session's records, they are forked, deleted and erased with it. The
// userMessage item carries metadata only (attachments, each naming its
// records by an outputRef), so items, replays, pages and reads stay small;
// item/readOutput serves an image's bytes to a client that asks.
//
// The session's history (state kept in memory, and a fold of the log)
// names each image by that ref. A turn loads the images of its history
// for each provider request (turn.Images) and drops them after it, so a
// loaded session holds no image bytes, and a running turn at most one
// request's (turn.MaxRequestImageBytes).

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/store"
	"mspd/turn"
)

const (
	// methodImage is the method of an image record. No MSP notification
	// has it.
	methodImage = "mspd/image"
	// imageChunkBytes is the image one record holds, as outputChunkBytes:
	// a multiple of 3, so that the records' base64 concatenates into the
	// image's.
	imageChunkBytes = outputChunkBytes
)

// imageChunk is the params of an image record: the bytes of the image
// from Offset. Every chunk names the item, the image's media type and
// size, so that its first record alone tells item/readOutput what it is.
type imageChunk struct {
	msp.ViewHeader `json:"-"` // appending fills it; a hidden record carries none
	ItemID         string     `json:"itemId"`
	MediaType      string     `json:"mediaType"`
	ByteLen        int64      `json:"byteLen"`
	Offset         int64      `json:"offset"`
	Data           []byte     `json:"data"`
}

// storedImage is an image of an admitted turn: where its records are and
// what its attachment says (pendingTurn.Images).
type storedImage struct {
	Ref       string `json:"ref"`
	MediaType string `json:"mediaType"`
	ByteLen   int64  `json:"byteLen"`
	Digest    string `json:"digest"`
	Width     *int   `json:"width,omitempty"`
	Height    *int   `json:"height,omitempty"`
}

// inputImage is an image part of a turn/start, checked and decoded.
type inputImage struct {
	part          int // its place in the input
	mediaType     string
	width, height *int
	data          []byte
}

// turnInput is what a turn/start's input holds: its text parts joined,
// and its images.
type turnInput struct {
	text   string
	images []inputImage
}

// readInput checks a turn's input parts and returns what they hold. A
// refusal names the part ("input.1.base64Data"): an image over
// msp.MaxImageBytes, or more than msp.MaxTurnImages or
// turn.MaxRequestImageBytes of them, is inputTooLarge; a media type
// providers do not take, or bytes that are not an image of it, invalidParams
// (reason badImage).
func readInput(parts []msp.TurnInputPart) (turnInput, error) {
	var in turnInput
	if len(parts) == 0 {
		return in, msp.ErrInvalidParams("input", "input must have at least one part")
	}
	var texts []string
	var total int64
	for i, part := range parts {
		switch part.Type {
		case msp.InputText:
			texts = append(texts, part.Text)
		case msp.InputImage:
			im, err := readImage(i, part)
			if err != nil {
				return in, err
			}
			if len(in.images) == msp.MaxTurnImages {
				return in, tooLarge("input", 0, "a turn takes at most %d images", msp.MaxTurnImages)
			}
			if total += int64(len(im.data)); total > turn.MaxRequestImageBytes {
				return in, tooLarge("input", turn.MaxRequestImageBytes, "the turn's images are more than %d bytes in all", turn.MaxRequestImageBytes)
			}
			in.images = append(in.images, im)
		default:
			e := msp.ErrInvalidParams(fmt.Sprintf("input.%d.type", i), "input part type %q is not supported by this host (text and image only)", part.Type)
			e.Data.Reason = "unsupported"
			return in, e
		}
	}
	in.text = strings.Join(texts, "\n")
	if strings.TrimSpace(in.text) == "" && len(in.images) == 0 {
		return in, msp.ErrInvalidParams("input.0.text", "input has no text")
	}
	return in, nil
}

// readImage checks and decodes input part i, an image.
func readImage(i int, part msp.TurnInputPart) (inputImage, error) {
	field := func(name string) string { return fmt.Sprintf("input.%d.%s", i, name) }
	bad := func(name, format string, args ...any) error {
		e := msp.ErrInvalidParams(field(name), format, args...)
		e.Data.Reason = msp.ReasonBadImage
		return e
	}
	im := inputImage{part: i, mediaType: part.MediaType, width: part.Width, height: part.Height}
	if !slices.Contains(provider.MediaTypes(), part.MediaType) {
		return im, bad("mediaType", "input %d: media type %q is not one of %s", i, part.MediaType, strings.Join(provider.MediaTypes(), ", "))
	}
	// Refused by its size before it is decoded.
	if n := base64.StdEncoding.DecodedLen(len(part.Base64Data)); n > msp.MaxImageBytes+2 {
		return im, tooLarge(field("base64Data"), msp.MaxImageBytes, "input %d: the image is more than %d bytes", i, msp.MaxImageBytes)
	}
	data, err := base64.StdEncoding.DecodeString(part.Base64Data)
	if err != nil {
		data, err = base64.RawStdEncoding.DecodeString(part.Base64Data)
	}
	switch {
	case err != nil:
		return im, bad("base64Data", "input %d: the image is not base64: %v", i, err)
	case len(data) == 0:
		return im, bad("base64Data", "input %d: the image is empty", i)
	case len(data) > msp.MaxImageBytes:
		return im, tooLarge(field("base64Data"), msp.MaxImageBytes, "input %d: the image is %d bytes; at most %d", i, len(data), msp.MaxImageBytes)
	}
	if err := provider.CheckImage(part.MediaType, data); err != nil {
		return im, bad("base64Data", "input %d: %v", i, err)
	}
	if (part.Width == nil) != (part.Height == nil) || part.Width != nil && (*part.Width < 1 || *part.Height < 1) {
		return im, msp.ErrInvalidParams(field("width"), "input %d: width and height are given together, each at least 1", i)
	}
	im.data = data
	return im, nil
}

// tooLarge is inputTooLarge naming field; limit is the bound in bytes, 0
// when it is not one of bytes.
func tooLarge(field string, limit int, format string, args ...any) *msp.Error {
	e := msp.NewError(msp.CodeInputTooLarge, msp.KindInputTooLarge, format, args...)
	e.Data.Details = map[string]any{"field": field}
	if limit > 0 {
		e.Data.LimitBytes = int64(limit)
	}
	return e
}

// checkImagesTaken refuses images to a session whose model takes none,
// naming the first: the refusal comes before anything is written or
// asked of a provider.
func (m *Manager) checkImagesTaken(st *state, in turnInput) error {
	if len(in.images) == 0 || m.cfg.Models == nil {
		return nil
	}
	providerID, modelID := deref(st.ProviderID), deref(st.ModelID)
	if m.cfg.Models.Info(providerID, modelID).Images {
		return nil
	}
	e := msp.ErrInvalidParams(fmt.Sprintf("input.%d", in.images[0].part), "the session's model %s takes no images", modelID)
	e.Data.Reason = msp.ReasonModelCannotTakeImages
	e.Data.Details["providerId"], e.Data.Details["modelId"] = providerID, modelID
	return e
}

// imageRecords are the hidden records that store in's images, to be
// appended first in a commit at the session's head (s.mu held), and the
// images as pt keeps them, each naming its records.
func (s *session) imageRecords(itemID string, in turnInput) ([]event, []storedImage) {
	var evs []event
	var stored []storedImage
	for _, im := range in.images {
		first := s.head + 1 + int64(len(evs))
		n := int64(len(im.data))
		for off := int64(0); off < n; off += imageChunkBytes {
			end := min(off+imageChunkBytes, n)
			evs = append(evs, event{methodImage, &imageChunk{ItemID: itemID, MediaType: im.mediaType, ByteLen: n, Offset: off, Data: im.data[off:end]}})
		}
		sum := sha256.Sum256(im.data)
		stored = append(stored, storedImage{Ref: imageID(first, int(s.head+1+int64(len(evs))-first)), MediaType: im.mediaType,
			ByteLen: n, Digest: "sha256:" + hex.EncodeToString(sum[:]), Width: im.width, Height: im.height})
	}
	return evs, stored
}

// attachments are the userMessage's attachments of a turn's images.
func attachments(images []storedImage) []msp.MessageAttachment {
	if len(images) == 0 {
		return nil
	}
	out := make([]msp.MessageAttachment, len(images))
	for i, im := range images {
		out[i] = msp.MessageAttachment{Type: msp.AttachmentImage, MediaType: im.MediaType, Width: im.Width, Height: im.Height,
			OutputRef: &msp.OutputRef{Availability: msp.OutputAvailable, ByteLen: im.ByteLen, Digest: im.Digest, ID: im.Ref,
				Kind: msp.OutputKindImage, MediaType: im.MediaType, URI: "mspd:image/" + im.Ref}}
	}
	return out
}

// historyImages are the images of a userMessage item as its history
// names them: by ref, to be loaded for each request.
func historyImages(it msp.Item) []provider.Image {
	var out []provider.Image
	for _, a := range it.Attachments {
		if a.Type == msp.AttachmentImage && a.OutputRef != nil {
			out = append(out, provider.Image{MediaType: a.MediaType, Ref: a.OutputRef.ID, Size: a.OutputRef.ByteLen})
		}
	}
	return out
}

// imageID names the image kept in the count records from seq first.
func imageID(first int64, count int) string {
	return "img-" + strconv.FormatInt(first, 10) + "-" + strconv.Itoa(count)
}

// parseImageID reads an imageID; ok is false for anything else.
func parseImageID(id string) (first int64, count int, ok bool) {
	rest, found := strings.CutPrefix(id, "img-")
	a, b, found2 := strings.Cut(rest, "-")
	if !found || !found2 {
		return 0, 0, false
	}
	first, err1 := strconv.ParseInt(a, 10, 64)
	count, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || first < 1 || count < 1 || count > msp.MaxImageBytes/imageChunkBytes+1 {
		return 0, 0, false
	}
	return first, count, true
}

// imageLoader loads a session's stored images for its turns' requests.
type imageLoader struct {
	st  store.Store
	key string
}

var _ turn.Images = imageLoader{}

// storedChunk is an image record as the loader reads it: its data left
// as the base64 text it is stored as.
type storedChunk struct {
	ItemID    string `json:"itemId"`
	MediaType string `json:"mediaType"`
	ByteLen   int64  `json:"byteLen"`
	Offset    int64  `json:"offset"`
	Data      string `json:"data"`
}

// Load implements turn.Images: the records' base64, joined (each record
// but the last holds a multiple of 3 bytes, so no padding is inside).
func (l imageLoader) Load(ctx context.Context, ref string) (string, error) {
	first, count, ok := parseImageID(ref)
	if !ok {
		return "", fmt.Errorf("%q names no stored image", ref)
	}
	var b strings.Builder
	var want, got int64 = -1, 0
	next := first
	for next < first+int64(count) {
		recs, err := l.st.Records(ctx, l.key, next-1, store.Limit{Rows: int(first + int64(count) - next), Bytes: ReadBytes})
		if err != nil {
			return "", err
		}
		if len(recs) == 0 {
			return "", fmt.Errorf("image %s: the log ends at record %d", ref, next-1)
		}
		for _, r := range recs {
			var c storedChunk
			if r.Seq != next || r.Method != methodImage || json.Unmarshal(r.Params, &c) != nil || c.Offset != got {
				return "", fmt.Errorf("image %s is damaged at record %d", ref, r.Seq)
			}
			if want < 0 {
				want = c.ByteLen
				b.Grow(base64.StdEncoding.EncodedLen(int(want)))
			}
			b.WriteString(c.Data)
			got += int64(provider.DecodedLen(c.Data))
			next++
		}
	}
	if got != want {
		return "", fmt.Errorf("image %s holds %d bytes of %d", ref, got, want)
	}
	return b.String(), nil
}

// imageOf is the stored image p names, with the seq of its first record,
// when its outputRef is an image's id whose first record is the image of
// item owner ("": of any item), and the item its records name (stored);
// nil otherwise, for outputOf to say what is wrong.
func (m *Manager) imageOf(ctx context.Context, key, owner string, p msp.ItemReadOutputParams) (ref *msp.OutputRef, first int64, stored string, err error) {
	first, count, ok := parseImageID(p.OutputRef)
	if !ok {
		return nil, 0, "", nil
	}
	recs, err := m.store.Records(ctx, key, first-1, store.Limit{Rows: 1, Bytes: ReadBytes})
	if err != nil {
		return nil, 0, "", msp.ErrInternal("reading session log: %v", err)
	}
	var c storedChunk
	if len(recs) != 1 || recs[0].Seq != first || recs[0].Method != methodImage || json.Unmarshal(recs[0].Params, &c) != nil ||
		(owner != "" && c.ItemID != owner) || c.Offset != 0 || (c.ByteLen+imageChunkBytes-1)/imageChunkBytes != int64(count) {
		return nil, 0, "", nil
	}
	return &msp.OutputRef{Availability: msp.OutputAvailable, ByteLen: c.ByteLen, ID: p.OutputRef,
		Kind: msp.OutputKindImage, MediaType: c.MediaType, URI: "mspd:image/" + p.OutputRef}, first, c.ItemID, nil
}

// imageRange serves up to length bytes of a stored image from offset
// (within it), base64: at most what one read of the log holds and, so
// encoded, fits a frame.
func (m *Manager) imageRange(ctx context.Context, key, itemID string, first int64, ref *msp.OutputRef, offset, length int64) (msp.ItemReadOutputResult, error) {
	want := min(length, ref.ByteLen-offset, maxOutputServed, int64(m.frameBudget()/4*3))
	data, err := m.outputBytes(ctx, key, methodImage, itemID, first, offset, want)
	if err != nil {
		return msp.ItemReadOutputResult{}, err
	}
	n := int64(len(data))
	return msp.ItemReadOutputResult{
		ByteLen:     n,
		Content:     base64.StdEncoding.EncodeToString(data),
		Encoding:    msp.EncodingBase64,
		EOF:         offset+n == ref.ByteLen,
		MediaType:   ref.MediaType,
		OffsetBytes: offset,
	}, nil
}

// encodingOf is how item/readOutput serves an output: an image base64,
// text as UTF-8.
func encodingOf(ref *msp.OutputRef) string {
	if ref.Kind == msp.OutputKindImage {
		return msp.EncodingBase64
	}
	return msp.EncodingUTF8
}
