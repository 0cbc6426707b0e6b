package e2e

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/anthropic/anthropictest"
	"mspd/provider/openai/openaitest"
	"mspd/schema/msp"
)

// TestReasoningOverTheWire: on each of the three reasoning wires —
// Anthropic's extended thinking, OpenAI's Responses summaries and a
// compatible server's reasoning_content — a session whose default effort
// session/setReasoningEffort set (exactly once, announced, in the Session
// object) asks the provider for it, and its turn streams the reasoning as
// a reasoning item (deltas on summary.0) completed before the answer's
// item opens; reasoning tokens reach session/tokenUsage and turn/completed.
// Every frame is schema-valid (dial checks them). The reasoning item's
// durable events read back byte for byte as they were sent (view/page),
// and a fork copies them as recorded.
func TestReasoningOverTheWire(t *testing.T) {
	for _, w := range []struct {
		name string
		// serve starts the fake, answering one turn that reasons
		// "Let me think." then answers "Done.", and returns the daemon's
		// config for it.
		serve func(t *testing.T) (daemon.Config, func() map[string]any)
		// effort checks the request asked for high.
		effort func(t *testing.T, body map[string]any)
	}{
		{"anthropic", func(t *testing.T) (daemon.Config, func() map[string]any) {
			frames := append([]string{anthropictest.MsgStart(25)}, anthropictest.ThinkingBlock(0, "sig-e2e", "Let me", " think.")...)
			frames = append(frames, anthropictest.TextStartAt(1), anthropictest.TextDeltaAt(1, "Done."), anthropictest.BlockStopAt(1),
				anthropictest.MsgDeltaThinking("end_turn", 9, 4), anthropictest.MsgStop)
			f := anthropictest.New(t, anthropictest.Frames(frames...))
			return daemon.Config{Provider: "anthropic", Model: anthropictest.Model,
				Env: mapEnv(map[string]string{"ANTHROPIC_BASE_URL": f.URL(), "ANTHROPIC_API_KEY": anthropictest.Key})}, func() map[string]any { return f.Requests()[0].Body }
		}, func(t *testing.T, body map[string]any) {
			if th, _ := body["thinking"].(map[string]any); th["type"] != "enabled" || th["budget_tokens"] != float64(16384) {
				t.Errorf("thinking %v", body["thinking"])
			}
		}},
		{"responses", func(t *testing.T) (daemon.Config, func() map[string]any) {
			rs, seq := openaitest.RReasoning(1, 0, 6, "rs_e2e", "gAAAA-e2e", "Let me think.")
			events := append(append([]string{openaitest.RCreated()}, rs...), openaitest.RTextDelta(seq, "Done."),
				openaitest.RCompleted(seq+1, 12, 9, 0, 4, openaitest.RReasoningItem("rs_e2e", "gAAAA-e2e", []string{"Let me think."}, true)))
			f := openaitest.New(t, "/v1", openaitest.Stream(events...))
			return daemon.Config{Provider: "openai", Model: "gpt-test", OpenAIAPI: "responses",
				Env: mapEnv(map[string]string{"OPENAI_BASE_URL": f.URL(), "OPENAI_API_KEY": "sk-e2e"})}, func() map[string]any { return f.Requests()[0].Body }
		}, func(t *testing.T, body map[string]any) {
			if r, _ := body["reasoning"].(map[string]any); r["effort"] != "high" || r["summary"] != "auto" {
				t.Errorf("reasoning %v", body["reasoning"])
			}
		}},
		{"chat", func(t *testing.T) (daemon.Config, func() map[string]any) {
			f := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Role(), openaitest.ReasoningContent("Let me"),
				openaitest.ReasoningContent(" think."), openaitest.Delta("Done."), openaitest.Finish("stop"),
				openaitest.Usage(12, 9, 0, 4), openaitest.Done))
			return daemon.Config{Provider: "openai", Model: "deepseek-test",
				Env: mapEnv(map[string]string{"OPENAI_BASE_URL": f.URL(), "OPENAI_API_KEY": "sk-e2e"})}, func() map[string]any { return f.Requests()[0].Body }
		}, func(t *testing.T, body map[string]any) {
			if body["reasoning_effort"] != "high" {
				t.Errorf("reasoning_effort %v", body["reasoning_effort"])
			}
		}},
	} {
		t.Run(w.name, func(t *testing.T) {
			cfg, firstBody := w.serve(t)
			d := startDaemon(t, cfg)
			ctx := testCtx(t)
			c := dial(t, d.URL(), client.Options{})
			sid := newSession(t, c)

			cmd := client.NewCommandID()
			ack, err := c.SetReasoningEffort(ctx, sid, msp.EffortHigh, cmd)
			if err != nil || ack.Status != msp.StatusAccepted {
				t.Fatalf("setReasoningEffort: %+v, %v", ack, err)
			}
			if again, err := c.SetReasoningEffort(ctx, sid, msp.EffortHigh, cmd); err != nil || again != ack {
				t.Fatalf("replayed setReasoningEffort: %+v, %v", again, err)
			}
			var changed client.Notification
			for changed.Method != msp.NotifySessionReasoningEffortChanged {
				if changed, err = c.Next(ctx); err != nil {
					t.Fatalf("waiting for session/reasoningEffortChanged: %v", err)
				}
			}
			if p := decode[msp.SessionReasoningEffortChangedParams](t, changed); p.ReasoningEffort != msp.EffortHigh || p.Source != msp.ReasoningSourceUser {
				t.Errorf("session/reasoningEffortChanged %+v", p)
			}

			events, done := answerTurn(t, c, sid, "Go")
			w.effort(t, firstBody())
			if done.Terminal != msp.TerminalCompleted || done.Usage == nil || done.Usage.ReasoningTokens != 4 {
				t.Fatalf("terminal %+v; events %s", done, compact(methods(events)))
			}
			var seq []string
			var reasoningID, summary string
			live := map[string]json.RawMessage{} // the reasoning item's durable events, by cursor
			for _, n := range events {
				switch n.Method {
				case msp.NotifyItemStarted, msp.NotifyItemCompleted:
					it := decode[msp.ItemParams](t, n).Item
					seq = append(seq, n.Method+" "+it.Kind)
					if it.Kind == msp.ItemReasoning {
						reasoningID = it.ItemID
						live[n.Cursor()] = n.Params
						if n.Method == msp.NotifyItemCompleted && (len(it.Summary) != 1 || it.Summary[0] != "Let me think." || it.Status != msp.ItemCompleted) {
							t.Errorf("completed reasoning item %+v", it)
						}
					}
				case msp.NotifyItemDelta:
					p := decode[msp.ItemDeltaParams](t, n)
					if p.ItemID == reasoningID {
						if p.Field != "summary.0" {
							t.Errorf("reasoning delta on field %q", p.Field)
						}
						summary += p.Delta
					} else if p.Field != "" {
						t.Errorf("answer delta on field %q", p.Field)
					}
				case msp.NotifySessionTokenUsage:
					if u := decode[msp.SessionTokenUsageParams](t, n).Usage; u.ReasoningTokens != 4 {
						t.Errorf("session/tokenUsage %+v", u)
					}
				}
			}
			want := []string{"item/completed userMessage", "item/started reasoning", "item/completed reasoning",
				"item/started agentMessage", "item/completed agentMessage"}
			if !slices.Equal(seq, want) {
				t.Errorf("items\n got %q\nwant %q", seq, want)
			}
			if summary != "Let me think." || streamedTextOf(t, events, reasoningID) != "Done." {
				t.Errorf("reasoning deltas %q; answer %q", summary, streamedTextOf(t, events, reasoningID))
			}

			// Read back as recorded, byte for byte.
			page := pageAll(t, ctx, c, sid)
			found := 0
			for _, e := range page {
				var h struct {
					ViewCursor string `json:"viewCursor"`
				}
				json.Unmarshal(e.Params, &h)
				if raw, ok := live[h.ViewCursor]; ok {
					found++
					if string(raw) != string(e.Params) {
						t.Errorf("view/page's %s differs from the live frame:\n%s\n%s", e.Method, e.Params, raw)
					}
				}
			}
			if found != 2 {
				t.Errorf("view/page holds %d of the reasoning item's 2 durable events", found)
			}

			// A fork copies them as recorded.
			var fork msp.SessionSnapshot
			if err := c.Call(ctx, msp.MethodSessionFork, msp.SessionForkParams{CommandID: client.NewCommandID(), SessionID: sid}, &fork); err != nil {
				t.Fatal(err)
			}
			if fork.Session.ReasoningEffort == nil || fork.Session.ReasoningEffort.ReasoningEffort != msp.EffortHigh {
				t.Errorf("fork's reasoning effort %+v", fork.Session.ReasoningEffort)
			}
			copied := pageAll(t, ctx, c, fork.Session.SessionID)
			if len(copied) != len(page) {
				t.Fatalf("the fork holds %d events, the source %d", len(copied), len(page))
			}
			for i, e := range copied {
				if strings.Contains(string(page[i].Params), `"kind":"reasoning"`) &&
					sansIdentities(t, e.Params)["item"] != sansIdentities(t, page[i].Params)["item"] {
					t.Errorf("copied reasoning event %d:\n fork   %s\n source %s", i, e.Params, page[i].Params)
				}
			}
			var inline int
			for _, it := range fork.History.Items {
				if it.Kind == msp.ItemReasoning && slices.Equal(it.Summary, []string{"Let me think."}) {
					inline++
				}
			}
			if inline != 1 {
				t.Errorf("the fork's inline history holds %d reasoning items, want 1", inline)
			}
			snap, err := c.Resume(ctx, sid, nil)
			if err != nil || snap.Session.ReasoningEffort == nil || *snap.Session.ReasoningEffort != (msp.ReasoningEffortState{ReasoningEffort: msp.EffortHigh, Source: msp.ReasoningSourceUser}) {
				t.Errorf("session/resume's session: %+v, %v", snap.Session.ReasoningEffort, err)
			}
		})
	}
}

// streamedTextOf concatenates the text deltas of every item but skip.
func streamedTextOf(t *testing.T, events []client.Notification, skip string) string {
	var b strings.Builder
	for _, n := range only(events, msp.NotifyItemDelta) {
		if p := decode[msp.ItemDeltaParams](t, n); p.ItemID != skip {
			b.WriteString(p.Delta)
		}
	}
	return b.String()
}

// TestThinkingSurvivesARestart: a turn on Anthropic with thinking calls a
// tool (the built-in calculator); its next request is in flight when the
// daemon stops. The next daemon, over the same data directory, resumes
// the turn from the log alone: its request sends the step back with the
// thinking block and its signature before the tool_use block, exactly as
// the first daemon's in-flight request did.
func TestThinkingSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	step := append([]string{anthropictest.MsgStart(25)}, anthropictest.ThinkingBlock(0, "EqQB-restart-sig", "Let me ", "compute.")...)
	step = append(step, anthropictest.ToolUseStart(1, "toolu_01", "builtin__calculator"),
		anthropictest.JSONDeltaAt(1, `{"expression":"2+2"}`), anthropictest.BlockStopAt(1),
		anthropictest.MsgDeltaThinking("tool_use", 30, 10), anthropictest.MsgStop)
	first := anthropictest.New(t, anthropictest.Frames(step...), anthropictest.StallHeaders())
	cfg := func(f *anthropictest.Server) daemon.Config {
		return daemon.Config{DataDir: dir, Provider: "anthropic", Model: anthropictest.Model,
			Env: mapEnv(map[string]string{"ANTHROPIC_BASE_URL": f.URL(), "ANTHROPIC_API_KEY": anthropictest.Key})}
	}
	d := startDaemon(t, cfg(first))
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})
	sid := newSession(t, c)
	ack, err := c.StartTurnWith(ctx, msp.TurnStartParams{SessionID: sid, ReasoningEffort: msp.EffortMinimal,
		Input: []msp.TurnInputPart{{Type: "text", Text: "What is 2+2?"}}})
	if err != nil {
		t.Fatal(err)
	}
	for first.Count() < 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("the step's second request never came: %d requests", first.Count())
		case <-time.After(5 * time.Millisecond):
		}
	}
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	d.Close(stopped)

	second := anthropictest.New(t, anthropictest.Frames(append(append([]string{anthropictest.MsgStart(40)},
		anthropictest.ThinkingBlock(0, "sig-2", "It is four.")...), anthropictest.TextStartAt(1), anthropictest.TextDeltaAt(1, "4."),
		anthropictest.BlockStopAt(1), anthropictest.MsgDeltaThinking("end_turn", 5, 3), anthropictest.MsgStop)...))
	d = startDaemon(t, cfg(second))
	c2 := dial(t, d.URL(), client.Options{})
	if _, err := c2.Resume(ctx, sid, nil); err != nil {
		t.Fatal(err)
	}
	events, err := c2.WaitTurn(ctx, ack.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	if done := decode[msp.TurnCompletedParams](t, events[len(events)-1]); done.Terminal != msp.TerminalCompleted {
		t.Fatalf("terminal %s", events[len(events)-1].Params)
	}
	const want = `[
		{"role":"user","content":[{"type":"text","text":"What is 2+2?"}]},
		{"role":"assistant","content":[
			{"type":"thinking","signature":"EqQB-restart-sig","thinking":"Let me compute."},
			{"type":"tool_use","id":"toolu_01","name":"builtin__calculator","input":{"expression":"2+2"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":[{"type":"text","text":"4"}]}]}]`
	for name, r := range map[string]anthropictest.Request{"in flight": first.Requests()[1], "resumed": second.Requests()[0]} {
		var got, w any
		json.Unmarshal([]byte(want), &w)
		raw, _ := json.Marshal(r.Body["messages"])
		json.Unmarshal(raw, &got)
		if !reflect.DeepEqual(got, w) {
			t.Errorf("the %s request's messages:\n%s", name, raw)
		}
		if th, _ := r.Body["thinking"].(map[string]any); th["budget_tokens"] != float64(1024) {
			t.Errorf("the %s request's thinking %v", name, r.Body["thinking"])
		}
	}
}
