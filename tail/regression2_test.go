package tail

// Regression tests: each pins a defect a code review found, now fixed.

import (
	"bytes"
	"strings"
	"testing"

	"mspd/schema/msp"
)

// TestCancelWhileReconnectingIsClean: Run documents ctx ending as a clean
// end (nil). While reconnecting, a failed dial leaves c nil (tail.go: `if
// c, err = t.dial(ctx); err == nil`), and the deferred `c.Close()` then
// dereferences it: Ctrl-C on `mspd tail --follow` while the server is down
// panics with a nil pointer dereference instead of exiting.
func TestCancelWhileReconnectingIsClean(t *testing.T) {
	m, hs := serve(t)
	sid := newSession(t, m)
	px := newProxy(t, hs.Listener.Addr().String())
	status := &syncBuf{}
	h := startTail(t, Options{URL: px.url(), SessionID: sid, Follow: true, Status: status}, &syncBuf{})
	h.waitSubscribed(t)
	px.ln.Close() // the server is down: redials fail
	px.cut()
	receive(t, h.slept, "the first backoff")
	receive(t, h.slept, "the backoff after a failed redial")
	status.waitFor(t, "reconnect failed")
	h.cancel() // Ctrl-C
	if err := h.wait(t); err != nil {
		t.Fatalf("Run did not end cleanly when its context ended while reconnecting: %v", err)
	}
}

// TestFollowReconnectMissesNothing: `mspd tail SESSION` (no --from, so
// live only) reconnects and resumes "by cursor" — but only once it has
// shown an event: with t.last empty the re-subscription is live only
// again, and the view/subscribe result (the head it attached after) is
// ignored. Everything the session did while the connection was down is
// silently skipped: here a whole turn.
func TestFollowReconnectMissesNothing(t *testing.T) {
	m, hs := serve(t)
	sid := newSession(t, m)
	px := newProxy(t, hs.Listener.Addr().String())
	out, status := &syncBuf{}, &syncBuf{}
	h := startTail(t, Options{URL: px.url(), SessionID: sid, Follow: true, Format: JSON, Status: status}, out)
	h.waitSubscribed(t) // live only

	px.cut() // the connection drops …
	status.waitFor(t, "connection lost")
	missed := runTurn(t, m, sid, "while you were away") // … and the session moves on
	receive(t, h.slept, "the backoff")                  // then tail redials

	h.waitSubscribed(t)
	later := runTurn(t, m, sid, "after the reconnect")
	out.waitFor(t, later)
	if !strings.Contains(out.String(), missed) {
		t.Fatalf("tail never showed turn %s, which ran while it was reconnecting:\n%s", missed, out.String())
	}
}

// TestStreamedItemCompletesItsText: the renderer prints an agent message's
// text from its deltas and, when it saw any delta of the item, prints
// nothing of its item/completed. Deltas are ephemeral: the ones lost in a
// view/gap hole or while reconnecting are never replayed, and the item's
// authoritative text arrives only in item/completed (§4.3). So an answer
// that streamed partly before a reconnect is shown — in pretty and in raw
// output, which scripts pipe — with its middle missing, silently.
func TestStreamedItemCompletesItsText(t *testing.T) {
	for _, format := range []string{Pretty, Raw} {
		var out bytes.Buffer
		r := newRenderer(&out, format, false)
		r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{SessionID: "s", ViewCursor: "v:s:2.1", ItemID: "a", Delta: "Hello "}))
		// connection lost; deltas "big " and "world" went by; resumed after v:s:2.1
		text := "Hello big world"
		r.event(msp.NotifyItemCompleted, mustJSON(msp.ItemParams{
			Item: msp.Item{ItemID: "a", Kind: msp.ItemAgentMessage, Revision: 2, Status: msp.ItemCompleted, Text: &text}}))
		if !strings.Contains(out.String(), "world") {
			t.Errorf("%s output %q: the answer %q lost the text whose deltas it missed", format, out.String(), text)
		}
	}
}

// TestRawOutputHoldsOnlyTheAnswer: `-o raw` is documented as "the agent's
// streamed text only" and is what scripts pipe. A turn-layer retry (stream
// cut after output began, truncation, schema rejection) streams a first
// attempt that is then discarded (item/completed status failed) and a new
// item with the real answer. raw() writes every delta as it comes and, for
// the failed item, not even a newline: the output is the discarded text
// glued to the answer ("partialHello there").
func TestRawOutputHoldsOnlyTheAnswer(t *testing.T) {
	var out bytes.Buffer
	r := newRenderer(&out, Raw, false)
	failed, answer := "partial", "Hello there"
	r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "a", Delta: "partial"}))
	r.event(msp.NotifyItemCompleted, mustJSON(msp.ItemParams{Item: msp.Item{ItemID: "a", Kind: msp.ItemAgentMessage, Revision: 2, Status: msp.ItemFailed, Text: &failed}}))
	r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "b", Delta: "Hello there"}))
	r.event(msp.NotifyItemCompleted, mustJSON(msp.ItemParams{Item: msp.Item{ItemID: "b", Kind: msp.ItemAgentMessage, Revision: 2, Status: msp.ItemCompleted, Text: &answer}}))
	if out.String() != "Hello there\n" {
		t.Fatalf("raw output %q, want only the kept answer %q", out.String(), answer+"\n")
	}
}

// TestPrettyOutputNeutralisesControlCharacters: model output is untrusted
// (the web page only ever uses textContent). Pretty output is for a
// terminal, and renders deltas, item texts, retry reasons and error
// messages verbatim, so a model (or a prompt-injected document it quotes)
// can emit escape sequences that the operator's terminal executes: set the
// title, rewrite or hide earlier lines, or write the clipboard (OSC 52).
func TestPrettyOutputNeutralisesControlCharacters(t *testing.T) {
	var out bytes.Buffer
	r := newRenderer(&out, Pretty, false)
	evil := "fine\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2K\rall good"
	r.event(msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{ItemID: "a", Delta: evil}))
	r.event(msp.NotifyItemCompleted, mustJSON(msp.ItemParams{Item: msp.Item{ItemID: "b", Kind: msp.ItemAgentMessage, Revision: 2, Status: msp.ItemCompleted, Text: &evil}}))
	if strings.ContainsAny(out.String(), "\x1b\x07\r") {
		t.Fatalf("pretty output passes terminal control characters from model text through: %q", out.String())
	}
}
