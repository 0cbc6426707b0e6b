package session

// A tool call's whole output, of which its item shows the first
// turn.MaxVisibleOutput bytes, is kept in the session's own log: hidden
// records written in the commit of the call's item/completed, just before
// it, which item/readOutput reads. Being the session's records, they are
// forked, deleted and erased with it. Being hidden, they are never fanned
// out, paged or replayed as view events: a follower is told only their
// position, so that its head keeps step.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"mspd/schema/msp"
	"mspd/store"
	"mspd/turn"
)

// MaxStoredOutput bounds the output of one tool call the session keeps;
// a longer one is kept cut (at a character boundary), and its outputRef
// says so (truncated).
const MaxStoredOutput = 4 << 20

const (
	// outputChunkBytes is the output one hidden record holds: base64 makes
	// it 256 KiB of params, within a JetStream message (1 MB by default)
	// and well within one read of the log (ReadBytes).
	outputChunkBytes = 192 << 10
	// methodOutput is the method of an output record. No MSP notification
	// has it.
	methodOutput = "mspd/toolOutput"
	// maxOutputServed bounds the stored bytes one item/readOutput
	// response serves (it may serve fewer: byteLen says how many).
	maxOutputServed = ReadBytes
)

// hidden tells whether a record of method is the session's own, never a
// view event: it is not fanned out, paged, replayed or copied as one.
func hidden(method string) bool {
	return method == methodOutput || method == methodImage || method == turn.MethodReasoning
}

// outputChunk is the params of an output record: the bytes of the item's
// output from Offset.
type outputChunk struct {
	msp.ViewHeader `json:"-"` // appending fills it; a hidden record carries none
	ItemID         string     `json:"itemId"`
	Offset         int64      `json:"offset"`
	Data           []byte     `json:"data"`
}

// outputID names the output kept in the count records from seq first.
func outputID(first int64, count int) string {
	return "out-" + strconv.FormatInt(first, 10) + "-" + strconv.Itoa(count)
}

// parseOutputID reads an outputID; ok is false for anything else.
func parseOutputID(id string) (first int64, count int, ok bool) {
	rest, found := strings.CutPrefix(id, "out-")
	a, b, found2 := strings.Cut(rest, "-")
	if !found || !found2 {
		return 0, 0, false
	}
	first, err1 := strconv.ParseInt(a, 10, 64)
	count, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || first < 1 || count < 1 || count > MaxStoredOutput/outputChunkBytes+1 {
		return 0, 0, false
	}
	return first, count, true
}

// EmitCall implements turn.OutputSink: the call's item/completed, with
// the outputRef of its whole output, and that output, in one commit.
func (k sink) EmitCall(ctx context.Context, p *msp.ItemParams, out turn.ToolOutput) error {
	return k.s.emitCall(ctx, p, out)
}

var _ turn.OutputSink = sink{}

// emitCall appends a call's whole output as hidden records, then its
// item/completed naming them (OutputRef).
func (s *session) emitCall(ctx context.Context, p *msp.ItemParams, out turn.ToolOutput) error {
	data, cut := out.Text, out.Incomplete
	if len(data) > MaxStoredOutput {
		data, cut = cutText(data, MaxStoredOutput), true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var evs []event
	for off := 0; off < len(data); off += outputChunkBytes {
		end := min(off+outputChunkBytes, len(data))
		evs = append(evs, event{methodOutput, &outputChunk{ItemID: p.Item.ItemID, Offset: int64(off), Data: []byte(data[off:end])}})
	}
	// The records go first in the commit: from the head on.
	id := outputID(s.head+1, len(evs))
	sum := sha256.Sum256([]byte(data))
	p.Item.OutputRef = &msp.OutputRef{
		Availability: msp.OutputAvailable,
		ByteLen:      int64(len(data)),
		Digest:       "sha256:" + hex.EncodeToString(sum[:]),
		ID:           id,
		Kind:         msp.OutputKindTool,
		MediaType:    msp.MediaTypeText,
		Truncated:    cut,
		URI:          "mspd:output/" + id,
	}
	return s.emitLocked(ctx, append(evs, event{msp.NotifyItemCompleted, p}), nil)
}

// cutText is s cut to at most n bytes at a character boundary.
func cutText(s string, n int) string {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// ReadOutput serves item/readOutput: a range of a tool call's stored
// output, read from the log a page at a time (at most ReadBytes of it),
// served as UTF-8 text that starts and ends on a character boundary and
// fits a frame. Another principal's session is answered as one that does
// not exist.
func (m *Manager) ReadOutput(ctx context.Context, raw json.RawMessage) (msp.ItemReadOutputResult, error) {
	var p msp.ItemReadOutputParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return msp.ItemReadOutputResult{}, msp.ErrInvalidParams("", "item/readOutput params: %v", err)
	}
	offset, length := int64(0), int64(msp.MaxReadOutputBytes)
	if p.OffsetBytes != nil {
		offset = *p.OffsetBytes
	}
	if p.LengthBytes != nil {
		length = min(*p.LengthBytes, msp.MaxReadOutputBytes)
	}
	if offset < 0 {
		return msp.ItemReadOutputResult{}, outputParamError(p, "offsetBytes", "", "offsetBytes must not be negative")
	}
	if length < 1 {
		return msp.ItemReadOutputResult{}, outputParamError(p, "lengthBytes", "", "lengthBytes must be at least 1")
	}
	s, release, err := m.acquire(ctx, p.SessionID)
	if err != nil {
		return msp.ItemReadOutputResult{}, err
	}
	defer release()
	ref, first, stored, err := m.outputOf(ctx, s, p)
	if err != nil {
		return msp.ItemReadOutputResult{}, err
	}
	switch {
	case offset > ref.ByteLen:
		e := outputParamError(p, "offsetBytes", msp.ReasonPastEnd, "offsetBytes %d is past the end of the output (%d bytes)", offset, ref.ByteLen)
		return msp.ItemReadOutputResult{}, e
	case offset == ref.ByteLen:
		return msp.ItemReadOutputResult{OffsetBytes: offset, Encoding: encodingOf(ref), EOF: true, MediaType: ref.MediaType}, nil
	}
	if ref.Kind == msp.OutputKindImage {
		return m.imageRange(ctx, s.key, stored, first, ref, offset, length)
	}
	// Up to a character more than wanted is read, to find where the
	// range may end.
	want := min(length, ref.ByteLen-offset, maxOutputServed)
	data, err := m.outputBytes(ctx, s.key, methodOutput, p.ItemID, first, offset, min(want+utf8.UTFMax-1, ref.ByteLen-offset))
	if err != nil {
		return msp.ItemReadOutputResult{}, err
	}
	if len(data) > 0 && !utf8.RuneStart(data[0]) {
		e := outputParamError(p, "offsetBytes", msp.ReasonMisalignedOffset, "offsetBytes %d is inside a UTF-8 character", offset)
		for i := 1; i < len(data) && i < utf8.UTFMax; i++ {
			if utf8.RuneStart(data[i]) {
				next := offset + int64(i)
				e.Data.AlignedNextOffset = &next
				break
			}
		}
		return msp.ItemReadOutputResult{}, e
	}
	data = data[:servable(data, int(want), offset+int64(len(data)) == ref.ByteLen)]
	data = fitFrame(data, m.frameBudget())
	n := int64(len(data))
	return msp.ItemReadOutputResult{
		ByteLen:     n,
		Content:     string(data),
		Encoding:    msp.EncodingUTF8,
		EOF:         offset+n == ref.ByteLen,
		MediaType:   ref.MediaType,
		OffsetBytes: offset,
	}, nil
}

// outputParamError is item/readOutput's invalidParams naming field.
func outputParamError(p msp.ItemReadOutputParams, field, reason, format string, args ...any) *msp.Error {
	e := msp.ErrInvalidParams(field, format, args...)
	e.Data.Reason, e.Data.ItemID, e.Data.OutputRef = reason, p.ItemID, p.OutputRef
	return e
}

// outputOf finds the outputRef p names, the seq of its first record and
// the item those records name (another's for a regeneration's message):
// from the records its id names when they are the item's, else, to say
// precisely what is wrong, from the item as the log last recorded it.
func (m *Manager) outputOf(ctx context.Context, s *session, p msp.ItemReadOutputParams) (ref *msp.OutputRef, first int64, stored string, err error) {
	if ref, first, stored, err := m.imageOf(ctx, s.key, p.ItemID, p); ref != nil || err != nil {
		return ref, first, stored, err
	}
	if first, count, ok := parseOutputID(p.OutputRef); ok {
		recs, err := m.store.Records(ctx, s.key, first+int64(count)-1, store.Limit{Rows: 1, Bytes: ReadBytes})
		if err != nil {
			return nil, 0, "", msp.ErrInternal("reading session log: %v", err)
		}
		if len(recs) == 1 && recs[0].Seq == first+int64(count) && recs[0].Method == msp.NotifyItemCompleted {
			var ip msp.ItemParams
			if err := json.Unmarshal(recs[0].Params, &ip); err == nil && ip.Item.ItemID == p.ItemID &&
				ip.Item.OutputRef != nil && ip.Item.OutputRef.ID == p.OutputRef {
				return ip.Item.OutputRef, first, p.ItemID, nil
			}
		}
	}
	it, found, err := m.lastItem(ctx, s.key, p.ItemID)
	if err != nil {
		return nil, 0, "", err
	}
	unavailable := func(availability, format string, args ...any) *msp.Error {
		e := msp.NewError(msp.CodeOutputUnavailable, msp.KindOutputUnavailable, format, args...)
		e.Data.SessionID, e.Data.ItemID, e.Data.OutputRef, e.Data.Availability = s.id, p.ItemID, p.OutputRef, availability
		return e
	}
	unknownRef := func(format string, args ...any) *msp.Error {
		e := msp.NewError(msp.CodeNotFound, msp.KindNotFound, format, args...)
		e.Data.Reason, e.Data.SessionID, e.Data.ItemID, e.Data.OutputRef = msp.ReasonUnknownOutputRef, s.id, p.ItemID, p.OutputRef
		return e
	}
	switch {
	case !found:
		e := msp.NewError(msp.CodeNotFound, msp.KindNotFound, "session %s has no item %s", s.id, p.ItemID)
		e.Data.Reason, e.Data.SessionID, e.Data.ItemID, e.Data.OutputRef = msp.ReasonUnknownItem, s.id, p.ItemID, p.OutputRef
		return nil, 0, "", e
	case len(it.Attachments) > 0 && !slices.ContainsFunc(it.Attachments, func(a msp.MessageAttachment) bool {
		return a.OutputRef != nil && a.OutputRef.ID == p.OutputRef
	}):
		return nil, 0, "", unknownRef("item %s has no attachment %q", p.ItemID, p.OutputRef)
	case len(it.Attachments) > 0 && it.Regenerates != "":
		// A regeneration's message names the images of the message it
		// repeats, stored once under that message's item.
		if ref, first, stored, err := m.imageOf(ctx, s.key, "", p); ref != nil || err != nil {
			return ref, first, stored, err
		}
	case len(it.Attachments) > 0:
		// The item names the image, yet its records are not where the
		// ref says: accessFailed, below.
	case it.Kind != msp.ItemToolCall:
		return nil, 0, "", unavailable(msp.OutputUnsupported, "item %s is a %s item: only tool calls and images keep an output", p.ItemID, it.Kind)
	case it.OutputRef == nil:
		return nil, 0, "", unavailable(msp.OutputMissing, "item %s kept no output beyond its visibleOutput", p.ItemID)
	case it.OutputRef.ID != p.OutputRef:
		return nil, 0, "", unknownRef("item %s has no output %q; its outputRef is %q", p.ItemID, p.OutputRef, it.OutputRef.ID)
	}
	// The item names this output, and its records are not where the id
	// says: the log is not what this build wrote.
	return nil, 0, "", unavailable(msp.OutputAccessFailed, "the output of item %s cannot be read", p.ItemID)
}

// lastItem reads the log for the last recorded state of an item, a page
// at a time, decoding only the records that name it.
func (m *Manager) lastItem(ctx context.Context, key, itemID string) (msp.Item, bool, error) {
	var it msp.Item
	found := false
	needle := []byte(`"itemId":` + strconv.Quote(itemID))
	for after := int64(0); ; {
		recs, err := m.store.Records(ctx, key, after, logPage(1000))
		if err != nil {
			return it, false, msp.ErrInternal("reading session log: %v", err)
		}
		if len(recs) == 0 {
			return it, found, nil
		}
		for _, r := range recs {
			after = r.Seq
			switch r.Method {
			case msp.NotifyItemStarted, msp.NotifyItemUpdated, msp.NotifyItemCompleted:
			default:
				continue
			}
			if !bytes.Contains(r.Params, needle) {
				continue
			}
			var ip msp.ItemParams
			if err := json.Unmarshal(r.Params, &ip); err == nil && ip.Item.ItemID == itemID {
				it, found = ip.Item, true
			}
		}
	}
}

// outputBytes reads want bytes of an item's output (or image) from
// offset, from its records of method from seq first on: one read of the
// log, so fewer when the records holding them outgrow ReadBytes.
func (m *Manager) outputBytes(ctx context.Context, key, method, itemID string, first, offset, want int64) ([]byte, error) {
	from := first + offset/outputChunkBytes
	rows := int((offset+want-1)/outputChunkBytes - offset/outputChunkBytes + 1)
	recs, err := m.store.Records(ctx, key, from-1, store.Limit{Rows: rows, Bytes: ReadBytes})
	if err != nil {
		return nil, msp.ErrInternal("reading session log: %v", err)
	}
	out := make([]byte, 0, want)
	next := offset
	for _, r := range recs {
		var c outputChunk
		if r.Method != method || json.Unmarshal(r.Params, &c) != nil || c.ItemID != itemID ||
			c.Offset > next || c.Offset+int64(len(c.Data)) <= next {
			return nil, msp.ErrInternal("the output of item %s is damaged at record %d", itemID, r.Seq)
		}
		piece := c.Data[next-c.Offset:]
		piece = piece[:min(int64(len(piece)), want-int64(len(out)))]
		out = append(out, piece...)
		next += int64(len(piece))
		if int64(len(out)) == want {
			break
		}
	}
	if len(out) == 0 {
		return nil, msp.ErrInternal("the output of item %s is missing from the log", itemID)
	}
	return out, nil
}

// servable is how much of data, which starts on a character boundary, a
// range serves: at most want bytes, ending on a boundary, so that the next
// range starts on one. data holds the bytes after want that show where a
// character ends, or ends the output (atEnd), or ends where a read of the
// log stopped. A first character longer than want is served whole: a
// range always moves on.
func servable(data []byte, want int, atEnd bool) int {
	n := min(want, len(data))
	switch {
	case n == len(data) && atEnd:
		return n
	case n == len(data):
		// Cut short by the read: the last character must be whole.
		for i := n - 1; i >= 0 && i >= n-utf8.UTFMax; i-- {
			if utf8.RuneStart(data[i]) {
				if utf8.FullRune(data[i:n]) {
					return n
				}
				n = i
				break
			}
		}
	default:
		for n > 0 && !utf8.RuneStart(data[n]) {
			n--
		}
	}
	if n == 0 {
		_, size := utf8.DecodeRune(data)
		return size
	}
	return n
}

// fitFrame cuts text at a character boundary so that it encodes, as a
// JSON string, within budget bytes (escapes can make it six times its
// size); it keeps at least one character.
func fitFrame(b []byte, budget int) []byte {
	size := 0
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		size += escapedLen(r, n)
		if size > budget && i > 0 {
			return b[:i]
		}
		i += n
	}
	return b
}

// escapedLen is the size of a character of n bytes in a JSON string as
// msp.Marshal writes it.
func escapedLen(r rune, n int) int {
	switch {
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20 || r == utf8.RuneError && n == 1 || r == '\u2028' || r == '\u2029':
		return 6
	}
	return n
}
