package session

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"mspd/provider"
	"mspd/schema/msp"
	"mspd/store"
	"mspd/turn"
)

// callingModel asks for one call of the tool its turn's text names
// ("call NAME"), then answers "done" once told the result.
type callingModel struct{}

func (callingModel) System() string { return "calling" }

func (callingModel) Stream(_ context.Context, req provider.Request, onText func(string)) (provider.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	usage := &provider.Usage{InputTokens: 1, OutputTokens: 1}
	if name, ok := strings.CutPrefix(last.Text, "call "); ok && last.Role == provider.RoleUser {
		return provider.Response{FinishReason: provider.FinishToolCalls, Usage: usage,
			ToolCalls: []provider.ToolCall{{ID: "c1", Name: name, Args: "{}"}}}, nil
	}
	onText("done")
	return provider.Response{FinishReason: provider.FinishStop, Usage: usage}, nil
}

// outputsToolbox has tools that answer fixed outputs, by model-facing
// name (server "t").
type outputsToolbox map[string]string

func (b outputsToolbox) Specs() []provider.ToolSpec {
	var out []provider.ToolSpec
	for name := range b {
		out = append(out, provider.ToolSpec{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)})
	}
	return out
}

func (b outputsToolbox) Lookup(name string) (turn.ToolInfo, bool) {
	_, ok := b[name]
	tool, _ := strings.CutPrefix(name, "t__")
	return turn.ToolInfo{Server: "t", Tool: tool, ReplaySafe: true}, ok
}

func (b outputsToolbox) Check(string, string) error { return nil }

func (b outputsToolbox) Call(_ context.Context, name, _ string) (turn.ToolOutput, error) {
	return turn.ToolOutput{Text: b[name]}, nil
}

// bigOutput is 100 KiB of text whose characters are one, two and three
// bytes long, so that fixed-size ranges often end inside one.
func bigOutput() string {
	var b strings.Builder
	for i := 0; b.Len() < 100<<10; i++ {
		b.WriteString([]string{"a", "é", "€", "\n", "\""}[i%5])
	}
	return b.String()
}

func newOutputManager(t *testing.T, st store.Store, tools turn.Toolbox, maxFrame int) *Manager {
	t.Helper()
	m, err := New(context.Background(), Config{Store: st, Runner: newTestRunner(callingModel{}), Tools: tools,
		MaxFrameBytes: maxFrame, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// callTurn runs a turn calling tool and returns its toolCall item as
// completed.
func callTurn(t *testing.T, ctx context.Context, m *Manager, sub *recSub, sid, tool string) msp.Item {
	t.Helper()
	p := textTurn(sid, "call "+tool)
	p.CommandID = cmdID()
	raw, launch, err := m.StartTurn(ctx, nil, mustJSON(p))
	if err != nil {
		t.Fatal(err)
	}
	launch()
	var ack msp.TurnStartResult
	json.Unmarshal(raw, &ack)
	if done := sub.waitTerminal(t, ack.TurnID); done.Terminal != msp.TerminalCompleted {
		t.Fatalf("turn %+v", done)
	}
	for _, ip := range of[msp.ItemParams](t, sub, msp.NotifyItemCompleted) {
		if ip.Item.Kind == msp.ItemToolCall && ip.Item.TurnID != nil && *ip.Item.TurnID == ack.TurnID {
			return ip.Item
		}
	}
	t.Fatal("no toolCall item completed")
	return msp.Item{}
}

func readOutput(ctx context.Context, m *Manager, p msp.ItemReadOutputParams) (msp.ItemReadOutputResult, error) {
	return m.ReadOutput(ctx, mustJSON(p))
}

// readAll pages through an item's output lengthBytes at a time.
func readAll(t *testing.T, ctx context.Context, m *Manager, sid string, it msp.Item, length int64) string {
	t.Helper()
	var b strings.Builder
	for offset := int64(0); ; {
		res, err := readOutput(ctx, m, msp.ItemReadOutputParams{SessionID: sid, ItemID: it.ItemID, OutputRef: it.OutputRef.ID,
			OffsetBytes: &offset, LengthBytes: &length})
		if err != nil {
			t.Fatalf("at %d: %v", offset, err)
		}
		if res.OffsetBytes != offset || res.ByteLen != int64(len(res.Content)) || res.Encoding != msp.EncodingUTF8 || res.MediaType != msp.MediaTypeText {
			t.Fatalf("at %d: %+v", offset, res)
		}
		if res.ByteLen > length && res.ByteLen > 4 {
			t.Fatalf("at %d: %d bytes served, %d asked", offset, res.ByteLen, length)
		}
		b.WriteString(res.Content)
		offset += res.ByteLen
		if res.EOF {
			if offset != it.OutputRef.ByteLen {
				t.Fatalf("eof at %d of %d", offset, it.OutputRef.ByteLen)
			}
			return b.String()
		}
		if res.ByteLen == 0 {
			t.Fatalf("no progress at %d", offset)
		}
	}
}

// TestToolOutputIsKeptAndReadBack: a tool call's output past its item's
// visibleOutput is kept in the session's log and item/readOutput serves it
// exactly, in ranges that never split a character; the records that keep
// it are no view events (not delivered, paged or replayed); they survive a
// reload and a fork, and another principal is answered as if the session
// did not exist.
func TestToolOutputIsKeptAndReadBack(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	whole := bigOutput()
	tools := outputsToolbox{"t__big": whole, "t__small": "small"}
	m := newOutputManager(t, st, tools, 0)
	sub := newRecSub()
	sid := startSession(t, m, sub)
	it := callTurn(t, ctx, m, sub, sid, "t__big")
	ref := it.OutputRef
	if ref == nil || !it.Truncated || len(*it.VisibleOutput) > turn.MaxVisibleOutput || !strings.HasPrefix(whole, *it.VisibleOutput) {
		t.Fatalf("item truncated %v, outputRef %+v", it.Truncated, ref)
	}
	if ref.ByteLen != int64(len(whole)) || ref.Availability != msp.OutputAvailable || ref.Kind != msp.OutputKindTool ||
		ref.Truncated || !strings.HasPrefix(ref.Digest, "sha256:") || ref.URI == "" {
		t.Fatalf("outputRef %+v", ref)
	}
	for _, length := range []int64{7<<10 + 1, 32 << 10, msp.MaxReadOutputBytes} {
		if got := readAll(t, ctx, m, sid, it, length); got != whole {
			t.Fatalf("read %d at a time: %d bytes, not the output", length, len(got))
		}
	}
	// A byte at a time: a character longer than that comes whole.
	var start strings.Builder
	for offset, one := int64(0), int64(1); offset < 64; {
		res, err := readOutput(ctx, m, msp.ItemReadOutputParams{SessionID: sid, ItemID: it.ItemID, OutputRef: ref.ID, OffsetBytes: &offset, LengthBytes: &one})
		if err != nil {
			t.Fatalf("at %d: %v", offset, err)
		}
		start.WriteString(res.Content)
		offset += res.ByteLen
	}
	if !strings.HasPrefix(whole, start.String()) {
		t.Fatalf("a byte at a time: %q", start.String())
	}

	// No view event is an output record: live, paged, or replayed.
	for _, n := range sub.all() {
		if hidden(n.Method) {
			t.Fatalf("delivered %s", n.Method)
		}
	}
	var paged []string
	for cursor := (*string)(nil); ; {
		page, err := m.Page(ctx, msp.ViewPageParams{SessionID: sid, Cursor: cursor, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Events {
			paged = append(paged, e.Method)
		}
		if page.NextCursor == nil {
			break
		}
		cursor = page.NextCursor
	}
	replayed := newRecSub()
	subscribe(t, m, replayed, sid)
	var durable []Notification
	for _, n := range sub.all() {
		if n.Durable {
			durable = append(durable, n)
		}
	}
	if got, want := strings.Join(methodsOf(replayed.all()), ","), strings.Join(methodsOf(durable), ","); got != want || strings.Join(paged, ",") != want {
		t.Fatalf("replayed %s\n   paged %s\n    live %s", got, strings.Join(paged, ","), want)
	}

	// After a reload, and in a fork.
	m2 := newOutputManager(t, st, tools, 0)
	if got := readAll(t, ctx, m2, sid, it, 50<<10); got != whole {
		t.Fatal("after a reload the output differs")
	}
	raw, _, err := m2.ForkSession(ctx, nil, mustJSON(msp.SessionForkParams{CommandID: cmdID(), SessionID: sid}))
	if err != nil {
		t.Fatal(err)
	}
	var fork msp.SessionSnapshot
	json.Unmarshal(raw, &fork)
	if got := readAll(t, ctx, m2, fork.Session.SessionID, it, 50<<10); got != whole {
		t.Fatal("the fork's output differs")
	}

	// Another principal's request names nothing.
	bob := WithPrincipal(ctx, "bob")
	_, err = readOutput(bob, m2, msp.ItemReadOutputParams{SessionID: sid, ItemID: it.ItemID, OutputRef: ref.ID})
	if kind := errKind(err); kind != msp.KindSessionNotFound {
		t.Fatalf("bob: %v", err)
	}
}

func errKind(err error) string {
	var me *msp.Error
	if errors.As(err, &me) {
		return me.Data.Kind
	}
	return ""
}

// TestReadOutputRefusals: every request item/readOutput cannot serve gets
// its own typed answer, naming the item and the outputRef.
func TestReadOutputRefusals(t *testing.T) {
	ctx := context.Background()
	whole := strings.Repeat("é", 20<<10)
	m := newOutputManager(t, openStore(t), outputsToolbox{"t__big": whole, "t__small": "small"}, 0)
	sub := newRecSub()
	sid := startSession(t, m, sub)
	big := callTurn(t, ctx, m, sub, sid, "t__big")
	small := callTurn(t, ctx, m, sub, sid, "t__small")
	var userItem string
	for _, ip := range of[msp.ItemParams](t, sub, msp.NotifyItemCompleted) {
		if ip.Item.Kind == msp.ItemUserMessage {
			userItem = ip.Item.ItemID
		}
	}
	at := func(n int64) *int64 { return &n }
	tests := []struct {
		name          string
		p             msp.ItemReadOutputParams
		kind, reason  string
		availability  string
		alignedOffset int64
	}{
		{"unknown item", msp.ItemReadOutputParams{ItemID: "nope", OutputRef: big.OutputRef.ID}, msp.KindNotFound, msp.ReasonUnknownItem, "", 0},
		{"not a tool call", msp.ItemReadOutputParams{ItemID: userItem, OutputRef: big.OutputRef.ID}, msp.KindOutputUnavailable, "", msp.OutputUnsupported, 0},
		{"no stored output", msp.ItemReadOutputParams{ItemID: small.ItemID, OutputRef: big.OutputRef.ID}, msp.KindOutputUnavailable, "", msp.OutputMissing, 0},
		{"another outputRef", msp.ItemReadOutputParams{ItemID: big.ItemID, OutputRef: "out-1-1"}, msp.KindNotFound, msp.ReasonUnknownOutputRef, "", 0},
		{"offset past the end", msp.ItemReadOutputParams{ItemID: big.ItemID, OutputRef: big.OutputRef.ID, OffsetBytes: at(40<<10 + 1)}, msp.KindInvalidParams, msp.ReasonPastEnd, "", 0},
		{"offset inside a character", msp.ItemReadOutputParams{ItemID: big.ItemID, OutputRef: big.OutputRef.ID, OffsetBytes: at(33)}, msp.KindInvalidParams, msp.ReasonMisalignedOffset, "", 34},
		{"negative offset", msp.ItemReadOutputParams{ItemID: big.ItemID, OutputRef: big.OutputRef.ID, OffsetBytes: at(-1)}, msp.KindInvalidParams, "", "", 0},
		{"zero length", msp.ItemReadOutputParams{ItemID: big.ItemID, OutputRef: big.OutputRef.ID, LengthBytes: at(0)}, msp.KindInvalidParams, "", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.p.SessionID = sid
			_, err := readOutput(ctx, m, tt.p)
			var me *msp.Error
			if !errors.As(err, &me) {
				t.Fatalf("%v", err)
			}
			d := me.Data
			if d.Kind != tt.kind || d.Reason != tt.reason || d.Availability != tt.availability || d.ItemID != tt.p.ItemID || d.OutputRef != tt.p.OutputRef {
				t.Fatalf("%d %+v", me.Code, d)
			}
			if tt.alignedOffset != 0 && (d.AlignedNextOffset == nil || *d.AlignedNextOffset != tt.alignedOffset) {
				t.Fatalf("alignedNextOffset %v, want %d", d.AlignedNextOffset, tt.alignedOffset)
			}
		})
	}
	// At the end: empty, eof.
	res, err := readOutput(ctx, m, msp.ItemReadOutputParams{SessionID: sid, ItemID: big.ItemID, OutputRef: big.OutputRef.ID, OffsetBytes: at(40 << 10)})
	if err != nil || !res.EOF || res.ByteLen != 0 || res.Content != "" {
		t.Fatalf("at the end: %+v, %v", res, err)
	}
}

// TestLongOutputIsKeptCut: an output longer than MaxStoredOutput is kept
// cut at a character boundary and says so; a frame smaller than a range
// makes ranges shorter, never broken.
func TestLongOutputIsKeptCut(t *testing.T) {
	ctx := context.Background()
	whole := strings.Repeat("€", MaxStoredOutput/3+100)
	m := newOutputManager(t, openStore(t), outputsToolbox{"t__huge": whole}, 1<<20)
	sub := newRecSub()
	sid := startSession(t, m, sub)
	it := callTurn(t, ctx, m, sub, sid, "t__huge")
	ref := it.OutputRef
	if !ref.Truncated || ref.ByteLen > MaxStoredOutput || ref.ByteLen%3 != 0 {
		t.Fatalf("outputRef %+v", ref)
	}
	res, err := readOutput(ctx, m, msp.ItemReadOutputParams{SessionID: sid, ItemID: it.ItemID, OutputRef: ref.ID})
	if err != nil {
		t.Fatal(err)
	}
	if res.ByteLen == 0 || res.ByteLen > 1<<20 || res.ByteLen%3 != 0 || res.EOF {
		t.Fatalf("first range %d bytes, eof %v", res.ByteLen, res.EOF)
	}
	if got := readAll(t, ctx, m, sid, it, msp.MaxReadOutputBytes); got != whole[:ref.ByteLen] {
		t.Fatal("the kept output is not the output's start")
	}
}

// TestFollowerPassesOutputRecords: a follower's reader gets exactly the
// leader's reader's events around a kept output — no output record, no
// view/gap for the positions they take — and the follower serves
// item/readOutput from the shared store.
func TestFollowerPassesOutputRecords(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	whole := bigOutput()
	h := newMemHub()
	node := func(name string) *Manager {
		m, err := New(ctx, Config{Store: st, Runner: newTestRunner(callingModel{}), Tools: outputsToolbox{"t__big": whole},
			Logger: slog.New(slog.DiscardHandler), Cluster: memNode{h, name}, AdoptInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		h.mu.Lock()
		h.managers[name] = m
		h.mu.Unlock()
		return m
	}
	a, b := node("a"), node("b")
	onA := newRecSub()
	sid := startSession(t, a, onA)
	first := runTurn(t, a, onA, textTurn(sid, "hello")) // a leads now
	onB := newRecSub()
	if err := attachAtHead(ctx, b, onB, sid); err != nil {
		t.Fatal(err)
	}
	it := callTurn(t, ctx, a, onA, sid, "t__big")
	onB.waitTerminal(t, *it.TurnID)
	from := func(r *recSub) []string {
		var out []string
		all := r.all()
		for i, n := range all {
			if n.Cursor == first.ViewCursor {
				all = all[i+1:]
				break
			}
		}
		for _, n := range all {
			if hidden(n.Method) || n.Method == msp.NotifyViewGap {
				t.Errorf("delivered %s %s", n.Method, n.Frame)
			}
			if n.Durable {
				out = append(out, n.Method+"@"+n.Cursor)
			}
		}
		return out
	}
	if got, want := from(onB), from(onA); !slices.Equal(got, want) {
		t.Fatalf("the follower's reader got\n %v\nthe leader's\n %v", got, want)
	}
	if got := readAll(t, ctx, b, sid, it, msp.MaxReadOutputBytes); got != whole {
		t.Fatal("the follower read another output")
	}
}
