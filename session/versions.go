package session

// Versions of an answer (mspd's extension of MSP): turn/start's
// regenerate names the session's latest exchange — its latest turn with
// a user message — and the new turn answers that turn's input again. The
// log keeps both turns; the new turn's turn/started and userMessage say
// which turn it regenerates (regenerates), so a client folds the turns of
// one message into versions of its answer, live and after a reload.
//
// What the model sees: a superseded turn contributes nothing, neither its
// message, its answer, its tool calls nor its reasoning. The history
// keeps where the latest exchange began; the regenerating turn's launch
// cuts the history back there (and the window's compaction cut back to
// what it was then), and its userMessage joins it again as for any turn.
// The fold of the log does the same at the turn/started that names the
// superseded turn, so a restart, a takeover and a fork fold what a live
// session holds. A turn a compaction summarized cannot be regenerated:
// its messages are inside the summary, where nothing can be taken out.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/store"
	"mspd/turn"
)

// exchangeState is where the latest exchange stands.
type exchangeState int

const (
	// exchangeNone: the session has had no turn with a user message.
	exchangeNone exchangeState = iota
	// exchangeRunning: its turn has not ended.
	exchangeRunning
	// exchangeEnded: its turn ended; it may be regenerated.
	exchangeEnded
	// exchangeSummarized: a compaction summarized it; it may no longer be
	// regenerated.
	exchangeSummarized
)

// exchange is the session's latest turn with a user message: what a
// regeneration of it needs.
type exchange struct {
	turnID string
	state  exchangeState
	// from is where its messages begin in the history.
	from int
	// cutBefore is the window's compaction cut when it began: the cut
	// again once it is superseded.
	cutBefore *turn.Cut
	// Its input, which a regeneration answers again.
	text, displayText string
	images            []storedImage
}

// begin notes a turn's userMessage user, about to join a history from
// long, with the window's cut then.
func (x *exchange) begin(user msp.Item, from int, cut *turn.Cut) {
	*x = exchange{turnID: deref(user.TurnID), state: exchangeRunning, from: from, text: deref(user.Text),
		displayText: user.DisplayText, images: storedImages(user.Attachments)}
	if cut != nil {
		c := *cut
		x.cutBefore = &c
	}
}

// ended notes turnID's terminal.
func (x *exchange) ended(turnID string) {
	if x.turnID == turnID && x.state == exchangeRunning {
		x.state = exchangeEnded
	}
}

// compacted notes a completed compaction through turn through that took
// removed messages off the history's start: the exchange's messages
// begin as many earlier, after the summary, with nothing before them to
// compact; the exchange itself may be what it summarized.
func (x *exchange) compacted(through string, removed int) {
	if x.state == exchangeNone {
		return
	}
	if x.turnID == through {
		x.state = exchangeSummarized
	}
	x.from, x.cutBefore = max(x.from-removed, 0), nil
}

// supersede cuts history h back to where the exchange turnID began, the
// window's cut back to what it was then, for the turn that regenerates it.
// A turnID that is not the latest exchange (none should be) leaves both
// whole: sending too much is safe, sending too little is not.
func (w *contextWindow) supersede(h []provider.Message, turnID string) []provider.Message {
	x := &w.latest
	if x.turnID != turnID || x.state == exchangeSummarized || x.from > len(h) {
		return h
	}
	w.cut = x.cutBefore
	clear(h[x.from:]) // what only the superseded turn held goes with it
	// Clipped, so the next append never writes where an earlier turn's
	// spec may still read.
	return h[:x.from:x.from]
}

// storedImages are the images a userMessage's attachments name.
func storedImages(atts []msp.MessageAttachment) []storedImage {
	var out []storedImage
	for _, a := range atts {
		if a.Type != msp.AttachmentImage || a.OutputRef == nil {
			continue
		}
		out = append(out, storedImage{Ref: a.OutputRef.ID, MediaType: a.MediaType, ByteLen: a.OutputRef.ByteLen,
			Digest: a.OutputRef.Digest, Width: a.Width, Height: a.Height})
	}
	return out
}

// regeneratesOf is the turn a turn/started record regenerates, "" for
// any other; most records are not looked into.
func regeneratesOf(r store.Record) (string, error) {
	if !bytes.Contains(r.Params, []byte(`"regenerates"`)) {
		return "", nil
	}
	var p msp.TurnStartedParams
	if err := json.Unmarshal(r.Params, &p); err != nil {
		return "", fmt.Errorf("record %d: %w", r.Seq, err)
	}
	return p.Regenerates, nil
}

// checkRegenerateInput checks a regenerating turn/start's input, which
// MSP requires: its text parts must repeat the prompt it regenerates, and
// it may carry no images (they are the regenerated turn's, from the log).
func checkRegenerateInput(p msp.TurnStartParams) (turnInput, error) {
	var in turnInput
	if len(p.Input) == 0 {
		return in, msp.ErrInvalidParams("input", "input must have at least one part")
	}
	texts := make([]string, 0, len(p.Input))
	for i, part := range p.Input {
		if part.Type != msp.InputText {
			e := msp.ErrInvalidParams(fmt.Sprintf("input.%d.type", i), "a regenerate sends its prompt's text only: the regenerated turn's images are taken from the session")
			e.Data.Reason = msp.ReasonRegenerateInputDiffers
			return in, e
		}
		texts = append(texts, part.Text)
	}
	in.text = strings.Join(texts, "\n") // as readInput joins them
	return in, nil
}

// regenerationLocked builds the pending turn that regenerates p's turn
// from the session's latest exchange, or refuses it: commandRejected
// (recorded by the caller) when the turn is not the latest exchange, has
// not ended or was summarized; invalidParams when the input does not
// repeat its prompt. s.mu must be held.
func (m *Manager) regenerationLocked(ctx context.Context, s *session, a *admission, p msp.TurnStartParams, in turnInput) (pendingTurn, error) {
	x := s.window.latest
	reject := func(reason, format string, args ...any) (pendingTurn, error) {
		// Recorded: a replay must get the same answer whatever ran since.
		e := msp.ErrCommandRejected(p.CommandID, reason, format, args...)
		e.Data.Details = map[string]any{"field": "regenerate", "turnId": p.Regenerate}
		return pendingTurn{}, a.reject(ctx, m.store, e)
	}
	switch {
	case s.st.Active != nil && s.st.Active.TurnID == p.Regenerate:
		return reject(msp.ReasonTurnNotEnded, "turn %s is still running: stop it, then regenerate it", p.Regenerate)
	case s.st.busy() || x.turnID != p.Regenerate || x.state == exchangeNone:
		return reject(msp.ReasonNotLatestTurn, "turn %s is not the latest turn of session %s (or is unknown): only the latest answer can be regenerated", p.Regenerate, s.id)
	case x.state == exchangeSummarized:
		return reject(msp.ReasonTurnCompacted, "turn %s was summarized by a compaction: it can no longer be regenerated", p.Regenerate)
	case x.state != exchangeEnded:
		return reject(msp.ReasonTurnNotEnded, "turn %s has not ended", p.Regenerate)
	}
	if in.text != x.text {
		e := msp.ErrInvalidParams("input", "input does not repeat the prompt of turn %s, which a regenerate answers again", p.Regenerate)
		e.Data.Reason = msp.ReasonRegenerateInputDiffers
		return pendingTurn{}, e
	}
	if p.DisplayText != "" && p.DisplayText != x.displayText {
		e := msp.ErrInvalidParams("displayText", "displayText differs from turn %s's, which a regenerate repeats", p.Regenerate)
		e.Data.Reason = msp.ReasonRegenerateInputDiffers
		return pendingTurn{}, e
	}
	if err := m.checkStoredImagesTaken(&s.st, x.images); err != nil {
		return pendingTurn{}, err
	}
	return pendingTurn{TurnID: p.CommandID, CommandID: p.CommandID, Text: x.text, UserItemID: newID(), DisplayText: x.displayText,
		Images: slices.Clone(x.images), Regenerates: p.Regenerate}, nil
}

// checkStoredImagesTaken refuses a regeneration with images when the
// session's model (changed since, perhaps) takes none.
func (m *Manager) checkStoredImagesTaken(st *state, images []storedImage) error {
	if len(images) == 0 || m.cfg.Models == nil {
		return nil
	}
	providerID, modelID := deref(st.ProviderID), deref(st.ModelID)
	if m.cfg.Models.Info(providerID, modelID).Images {
		return nil
	}
	e := msp.ErrInvalidParams("regenerate", "the turn to regenerate has images, and the session's model %s takes none", modelID)
	e.Data.Reason = msp.ReasonModelCannotTakeImages
	e.Data.Details["providerId"], e.Data.Details["modelId"] = providerID, modelID
	return e
}
