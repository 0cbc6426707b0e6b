package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"

	"mspd/client"
	"mspd/provider/providertest"
	"mspd/schema/msp"
)

// userMessages counts the user messages of a recorded Chat Completions
// request that say text, and tells whether any message says answer.
func userMessages(t *testing.T, req providertest.Request, text, answer string) (users int, answered bool) {
	t.Helper()
	msgs, _ := req.Body["messages"].([]any)
	for _, m := range msgs {
		msg, _ := m.(map[string]any)
		content := bodyJSON(t, msg["content"])
		if msg["role"] == "user" && strings.Contains(content, text) {
			users++
		}
		if strings.Contains(content, answer) {
			answered = true
		}
	}
	return users, answered
}

// TestRegenerateOverTheWire: over a real WebSocket, against a fake Chat
// Completions server that records its requests, turn/start regenerate of
// the last turn runs a new turn whose request carries the user's message
// once and not the first answer; turn/started and the new userMessage
// say regenerates; a regenerate of an older turn is refused
// commandRejected (not_latest_turn) and the connection goes on; after a
// reconnect, session/resume shows both turns, the second saying which it
// regenerates; a restarted daemon shows the same and its next request
// still leaves the first answer out.
func TestRegenerateOverTheWire(t *testing.T) {
	dir := t.TempDir()
	wires, cfg := compactFakes(t, dir, func(w compactWire) []providertest.Reply {
		return []providertest.Reply{w.answer("Paris.", 100, 10), w.answer("Lyon, first try.", 150, 10),
			w.answer("Lyon, second try.", 150, 10), w.answer("Marseille.", 160, 10)}
	})
	chat := wires[0].fake
	d := startDaemon(t, cfg)
	c := dial(t, d.URL(), client.Options{})
	ctx := testCtx(t)
	sid := newSession(t, c)

	runTurnOn(t, c, sid, "What is the capital of France?")
	_, second := runTurnOn(t, c, sid, "And its second city?")
	ack, err := c.StartTurnWith(ctx, msp.TurnStartParams{SessionID: sid, Regenerate: second.TurnID,
		Input: []msp.TurnInputPart{{Type: msp.InputText, Text: "And its second city?"}}})
	if err != nil {
		t.Fatal(err)
	}
	events, err := c.WaitTurn(ctx, ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	if done := decode[msp.TurnCompletedParams](t, events[len(events)-1]); done.Terminal != msp.TerminalCompleted {
		t.Fatalf("the regeneration ended %s", bodyJSON(t, done))
	}
	if started := decode[msp.TurnStartedParams](t, only(events, msp.NotifyTurnStarted)[0]); started.Regenerates != second.TurnID {
		t.Fatalf("turn/started %s", bodyJSON(t, started))
	}
	if msgs := itemsOf(t, events, msp.ItemUserMessage); len(msgs) != 1 || msgs[0].Regenerates != second.TurnID ||
		*msgs[0].Text != "And its second city?" {
		t.Fatalf("the regeneration's userMessage %s", bodyJSON(t, msgs))
	}
	reqs := chat.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	if users, answered := userMessages(t, reqs[2], "And its second city?", "Lyon, first try."); users != 1 || answered {
		t.Fatalf("the regeneration's request has the message %d times, the first answer %v: %s", users, answered, bodyJSON(t, reqs[2].Body))
	}

	// Bad input is typed and leaves the connection working.
	var me *msp.Error
	_, err = c.StartTurnWith(ctx, msp.TurnStartParams{SessionID: sid, Regenerate: second.TurnID,
		Input: []msp.TurnInputPart{{Type: msp.InputText, Text: "And its second city?"}}})
	if !errors.As(err, &me) || me.Data.Kind != msp.KindCommandRejected || me.Data.Reason != msp.ReasonNotLatestTurn {
		t.Fatalf("regenerating a superseded turn: %v", err)
	}

	// A reconnect: session/resume shows both turns, the second a version.
	check := func(c *checkedClient) {
		t.Helper()
		snap, err := c.Resume(ctx, sid, nil)
		if err != nil {
			t.Fatal(err)
		}
		var versions []string
		for _, it := range snap.History.Items {
			if it.Kind == msp.ItemUserMessage && *it.Text == "And its second city?" {
				versions = append(versions, *it.TurnID+"←"+it.Regenerates)
			}
		}
		if want := []string{second.TurnID + "←", ack.TurnID + "←" + second.TurnID}; strings.Join(versions, " ") != strings.Join(want, " ") {
			t.Fatalf("session/resume's messages %v, want %v", versions, want)
		}
	}
	c.Close()
	check(dial(t, d.URL(), client.Options{}))

	// A restart keeps the versions and what the model is sent.
	if err := d.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	d2 := startDaemon(t, cfg)
	c2 := dial(t, d2.URL(), client.Options{})
	check(c2)
	runTurnOn(t, c2, sid, "And the third?")
	reqs = chat.Requests()
	if users, answered := userMessages(t, reqs[3], "And its second city?", "Lyon, first try."); users != 1 || answered {
		t.Fatalf("after a restart the request has the message %d times, the first answer %v: %s", users, answered, bodyJSON(t, reqs[3].Body))
	}
	if _, kept := userMessages(t, reqs[3], "And the third?", "Lyon, second try."); !kept {
		t.Fatalf("after a restart the request lost the second version: %s", bodyJSON(t, reqs[3].Body))
	}
}
