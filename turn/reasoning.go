package turn

import (
	"context"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"mspd/provider"
	"mspd/schema/msp"
)

// A model's reasoning streams into reasoning items, apart from its
// answer: an attempt's first reasoning delta opens one (durably, so that
// a restart finds it open and closes it), its parts stream as item/delta
// fields summary.n, and it completes as soon as the answer begins or, with
// none, when the response ends (before the tool calls it asked for are
// recorded). Reasoning that resumes after that opens the attempt's next
// reasoning item. A response that reasoned without showing any of it
// (Anthropic's redacted_thinking, encrypted reasoning alone) still gets
// an item, empty, so that the transcript says the model reasoned.
//
// What the provider needs back of a tool step's reasoning (signatures,
// encrypted content) is written in the commit that records the step's
// tool calls, as a hidden MethodReasoning record, so that a turn resumed
// by another process sends it back as the first would have.

// MethodReasoning is the method of the hidden record holding the
// reasoning a tool step's next request sends back. No MSP notification
// has it: a session never fans it out or replays it as a view event.
const MethodReasoning = "mspd/reasoning"

// ReasoningRecord is the params of a MethodReasoning record.
type ReasoningRecord struct {
	msp.ViewHeader `json:"-"` // appending fills it; a hidden record carries none
	// ItemID is the reasoning item the blocks belong to ("" when the
	// provider showed none of it and the sink keeps no empty item).
	ItemID string `json:"itemId,omitempty"`
	// Blocks are the response's reasoning as its provider needs it back.
	Blocks []provider.Reasoning `json:"blocks"`
}

// FieldSink is a Sink that streams deltas into an item's fields other
// than its text: a reasoning item's summary parts. A Sink that is not one
// gets a reasoning item's text only with its item/completed.
type FieldSink interface {
	Sink
	// DeltaField streams ephemeral text appended to field (an item/delta
	// field, e.g. msp.SummaryField(0)) of an open item.
	DeltaField(itemID, field, text string)
}

// reasoningSpace is the UUID namespace of reasoning item ids.
var reasoningSpace = uuid.MustParse("3e8a41d2-7c05-4b9f-a6e3-5d1f0c2b8a77")

// ReasoningItemID is the id of the k-th (0-based) reasoning item of
// attempt n of turn turnID.
func ReasoningItemID(turnID string, attempt, k int) string {
	return uuid.NewSHA1(reasoningSpace, []byte(turnID+"/"+strconv.Itoa(attempt)+"/"+strconv.Itoa(k))).String()
}

// reasoningStream is one attempt's reasoning on its way into items.
type reasoningStream struct {
	t       *run
	attempt int
	stop    func()    // cancels the attempt when the log refuses an event
	sinkErr *error    // the attempt's: the first refusal of the log
	item    *msp.Item // the reasoning item open now; nil between items
	k       int       // items opened so far
	base    int       // the provider's part number the open item's summary starts at
	parts   []strings.Builder
}

// streamReasoning sets req's effort and routes its reasoning into
// reasoning items; sinkErr and stop are the attempt's.
func (t *run) streamReasoning(n int, req *provider.Request, sinkErr *error, stop func()) *reasoningStream {
	rs := &reasoningStream{t: t, attempt: n, stop: stop, sinkErr: sinkErr}
	req.ReasoningEffort = t.spec.ReasoningEffort
	req.OnReasoning = rs.delta
	return rs
}

// delta streams a piece of the response's reasoning; part -1 without
// text opens an item for reasoning that shows none (yet).
func (rs *reasoningStream) delta(d provider.ReasoningDelta) {
	part, text := d.Part, d.Text
	if *rs.sinkErr != nil || text == "" && part >= 0 {
		return
	}
	if rs.item == nil && !rs.open(d.ItemID) {
		return
	}
	if rs.item.ProviderItemID == "" {
		rs.item.ProviderItemID = d.ItemID
	}
	if text == "" {
		return
	}
	if len(rs.parts) == 0 {
		rs.base = part // the item's summary starts at the provider's part
	}
	i := max(part-rs.base, 0) // a part begun before this item: its text goes on in the item's first
	for len(rs.parts) <= i {
		rs.parts = append(rs.parts, strings.Builder{})
	}
	rs.parts[i].WriteString(text)
	if fs, ok := rs.t.sink.(FieldSink); ok {
		fs.DeltaField(rs.item.ItemID, msp.SummaryField(i), text)
	}
}

// open opens the attempt's next reasoning item, which the provider names
// providerID ("": none); false when the log refused it.
func (rs *reasoningStream) open(providerID string) bool {
	t := rs.t
	turnID := t.spec.TurnID
	it := msp.Item{ItemID: ReasoningItemID(turnID, rs.attempt, rs.k), Kind: msp.ItemReasoning, Revision: 1,
		Status: msp.ItemInProgress, TurnID: &turnID, RecordedAt: t.stamp(), ProviderItemID: providerID}
	if err := t.sink.Emit(t.emitCtx, msp.NotifyItemStarted, &msp.ItemParams{Item: it}); err != nil {
		*rs.sinkErr = err
		rs.stop()
		return false
	}
	rs.item, rs.k, rs.parts = &it, rs.k+1, nil
	if t.firstToken.IsZero() {
		t.firstToken = t.r.clock.Now()
	}
	return true
}

// done builds the open item's closing state, and forgets it.
func (rs *reasoningStream) done(status string) msp.Item {
	it := *rs.item
	it.Revision++
	it.Status = status
	it.Summary = make([]string, len(rs.parts))
	for i := range rs.parts {
		it.Summary[i] = rs.parts[i].String()
	}
	it.RecordedAt = rs.t.stamp()
	rs.item, rs.parts = nil, nil
	return it
}

// answerBegins completes the open reasoning item, durably, as the answer
// begins; false when the log refused it (and the attempt stops).
func (rs *reasoningStream) answerBegins() bool {
	if rs.item == nil || *rs.sinkErr != nil {
		return *rs.sinkErr == nil
	}
	t := rs.t
	it := rs.done(msp.ItemCompleted)
	if err := t.sink.Emit(t.emitCtx, msp.NotifyItemCompleted, &msp.ItemParams{Item: it}); err != nil {
		*rs.sinkErr = err
		rs.stop()
		return false
	}
	return true
}

// reasoned is what an attempt's response reasoned, for its step.
type reasoned struct {
	// itemID is the attempt's last reasoning item, "" when it has none.
	itemID string
	// blocks are the reasoning its provider needs back
	// (provider.SentBack).
	blocks []provider.Reasoning
}

// record is the hidden record of a tool step's reasoning, none when its
// provider needs nothing back.
func (r reasoned) record() []Event {
	if len(r.blocks) == 0 {
		return nil
	}
	return []Event{{Method: MethodReasoning, Params: &ReasoningRecord{ItemID: r.itemID, Blocks: r.blocks}}}
}

// ended holds the reasoning item's closing state as the response ends
// (completed unless the attempt failed or was stopped, as status says),
// and gives a response that reasoned unseen its empty item.
func (rs *reasoningStream) ended(status string, resp provider.Response) reasoned {
	t := rs.t
	if rs.item == nil && rs.k == 0 && len(resp.Reasoning) > 0 && status == msp.ItemCompleted {
		rs.open(resp.Reasoning[0].ID)
	}
	if rs.item != nil {
		t.hold(msp.NotifyItemCompleted, &msp.ItemParams{Item: rs.done(status)})
	}
	r := reasoned{blocks: provider.SentBack(resp.Reasoning)}
	if rs.k > 0 {
		r.itemID = ReasoningItemID(t.spec.TurnID, rs.attempt, rs.k-1)
	}
	return r
}

// attemptStatus is the status an attempt's item closes with when its
// stream has ended: cancelled by the user's stop, failed when it failed
// or a stopping host cut it (to be retried), completed otherwise.
func attemptStatus(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil && !stopping(ctx):
		return msp.ItemCancelled
	case err != nil || ctx.Err() != nil:
		return msp.ItemFailed
	}
	return msp.ItemCompleted
}
