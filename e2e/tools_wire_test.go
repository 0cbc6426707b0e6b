package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/anthropic/anthropictest"
	"mspd/provider/openai/openaitest"
	"mspd/provider/providertest"
	"mspd/schema/msp"
	"mspd/tool/tooltest"
)

// toolWire is one provider API's tool-call wire, as a fake server speaks
// it: how it answers with calls, with text, with a retryable failure, and
// where a request carries the tool results it sends back.
type toolWire struct {
	name string
	// provider is the [[providers]] table pointing at url.
	provider func(url string) string
	// serve starts the fake server with replies.
	serve func(t *testing.T, replies ...providertest.Reply) (url string, requests func() []providertest.Request)
	// calls answers with tool calls (id, model-facing name, args), its
	// output tokens counted in outputTokens.
	calls func(calls ...[3]string) providertest.Reply
	// answer answers text, outputTokens output tokens.
	answer func(text string) providertest.Reply
	// busy is a retryable failure: a 429 or an overload.
	busy providertest.Reply
	// results are the tool results a request body sends back, in order,
	// as "callId=text".
	results func(body map[string]any) []string
	// callTokens and answerTokens are the output tokens calls and answer
	// report.
	callTokens, answerTokens int64
}

var toolWires = []toolWire{
	{
		name: "openai chat",
		provider: func(url string) string {
			return "id = \"p\"\ntype = \"openai\"\nbase_url = \"" + url + "\"\nmodel = \"gpt-test\"\napi_key_env = \"TEST_KEY\"\n"
		},
		serve: func(t *testing.T, replies ...providertest.Reply) (string, func() []providertest.Request) {
			s := openaitest.New(t, "/v1", replies...)
			return s.URL(), s.Requests
		},
		calls: func(calls ...[3]string) providertest.Reply {
			return openaitest.Stream(openaitest.ToolCalls(3, oaiCalls(calls)...)...)
		},
		answer: func(text string) providertest.Reply { return openaitest.Stream(openaitest.Answer(text)...) },
		busy:   openaitest.Error(429, openaitest.RateLimitBody, "Retry-After-Ms", "20"),
		results: func(body map[string]any) []string {
			var out []string
			for _, m := range list(body["messages"]) {
				if m["role"] == "tool" {
					out = append(out, fmt.Sprint(m["tool_call_id"], "=", m["content"]))
				}
			}
			return out
		},
		callTokens: openaitest.ToolCallCompletionTokens, answerTokens: 1,
	},
	{
		name: "openai responses",
		provider: func(url string) string {
			return "id = \"p\"\ntype = \"openai\"\napi = \"responses\"\nbase_url = \"" + url + "\"\nmodel = \"gpt-test\"\napi_key_env = \"TEST_KEY\"\n"
		},
		serve: func(t *testing.T, replies ...providertest.Reply) (string, func() []providertest.Request) {
			s := openaitest.New(t, "/v1", replies...)
			return s.URL(), s.Requests
		},
		calls: func(calls ...[3]string) providertest.Reply {
			return openaitest.Stream(openaitest.RToolCalls(4, oaiCalls(calls)...)...)
		},
		answer: func(text string) providertest.Reply {
			return openaitest.Stream(openaitest.RCreated(), openaitest.RTextDelta(1, text), openaitest.RCompleted(2, 10, 1, 0, 0))
		},
		busy: openaitest.Error(429, openaitest.RateLimitBody, "Retry-After-Ms", "20"),
		results: func(body map[string]any) []string {
			var out []string
			for _, m := range list(body["input"]) {
				if m["type"] == "function_call_output" {
					out = append(out, fmt.Sprint(m["call_id"], "=", m["output"]))
				}
			}
			return out
		},
		callTokens: openaitest.ToolCallCompletionTokens, answerTokens: 1,
	},
	{
		name: "anthropic",
		provider: func(url string) string {
			return "id = \"p\"\ntype = \"anthropic\"\nbase_url = \"" + url + "\"\nmodel = \"" + anthropictest.Model + "\"\napi_key_env = \"TEST_ANTHROPIC_KEY\"\n"
		},
		serve: func(t *testing.T, replies ...providertest.Reply) (string, func() []providertest.Request) {
			s := anthropictest.New(t, replies...)
			return s.URL(), s.Requests
		},
		calls: func(calls ...[3]string) providertest.Reply {
			var cs []anthropictest.Call
			for _, c := range calls {
				cs = append(cs, anthropictest.Call{ID: c[0], Name: c[1], Fragments: anthropictest.Split(c[2], 3)})
			}
			return anthropictest.ToolUse(7, "", cs...)
		},
		answer: func(text string) providertest.Reply { return anthropictest.Answer("end_turn", 2, text) },
		busy:   anthropictest.APIError(529, "overloaded_error", "Overloaded"),
		results: func(body map[string]any) []string {
			var out []string
			for _, m := range list(body["messages"]) {
				blocks, _ := m["content"].([]any)
				for _, b := range blocks {
					if b, _ := b.(map[string]any); b["type"] == "tool_result" {
						var text []string
						for _, c := range list(b["content"]) {
							text = append(text, fmt.Sprint(c["text"]))
						}
						out = append(out, fmt.Sprint(b["tool_use_id"], "=", strings.Join(text, "")))
					}
				}
			}
			return out
		},
		callTokens: 7, answerTokens: 2,
	},
}

func oaiCalls(calls [][3]string) []openaitest.Call {
	var out []openaitest.Call
	for _, c := range calls {
		out = append(out, openaitest.Call{ID: c[0], Name: c[1], Args: c[2]})
	}
	return out
}

// list is a JSON array of objects, decoded loosely.
func list(v any) []map[string]any {
	arr, _ := v.([]any)
	out := make([]map[string]any, 0, len(arr))
	for _, e := range arr {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// toolDaemon runs a daemon whose one provider speaks w against url, with
// the counting MCP server ts configured as server "t": over streamable
// HTTP, or as a stdio child (this test binary) when stdio is set.
func toolDaemon(t *testing.T, w toolWire, url string, ts *tooltest.Server, journal string, stdio bool) *daemon.Daemon {
	t.Helper()
	var mcp string
	if stdio {
		mcp = stdioMCP(journal, "never")
	} else {
		srv := httptest.NewServer(ts.HTTPHandler())
		t.Cleanup(srv.Close)
		mcp = fmt.Sprintf("[[mcp]]\nname = \"t\"\nurl = %q\napproval = \"never\"\n", srv.URL)
	}
	file := filepath.Join(t.TempDir(), "mspd.toml")
	conf := "default = \"p\"\n[[providers]]\n" + w.provider(url) + mcp
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return startDaemon(t, daemon.Config{ConfigFile: file, Env: mapEnv(map[string]string{
		"TEST_KEY": "sk-e2e", "TEST_ANTHROPIC_KEY": anthropictest.Key})})
}

// stdioMCP is the [[mcp]] table of the counting server as a stdio child
// (this test binary) named toolServerName, journaling to journal, its
// calls waiting for approval as approval ("never", "always") says.
func stdioMCP(journal, approval string) string {
	command, args, env := tooltest.Command(journal)
	return fmt.Sprintf("[[mcp]]\nname = %q\ncommand = %q\nargs = [%q]\napproval = %q\nenv = { %s = %q }\n",
		toolServerName, command, args[0], approval, tooltest.ChildEnv, env[tooltest.ChildEnv])
}

// TestToolTurnOnEveryWire: a three-step agent turn against fake OpenAI
// (Chat and Responses) and Anthropic servers speaking their exact
// tool-call wires, with a real go-sdk MCP server (streamable HTTP; stdio
// for Anthropic): step one calls a tool; step two's first request is
// refused (a retry notice, then the retry) and calls two tools at once;
// step three answers. Each tool ran once, each result went back to the
// model in the wire's own shape, in the order the calls were made, and
// attempts count all four requests and sum their output tokens.
func TestToolTurnOnEveryWire(t *testing.T) {
	for _, w := range toolWires {
		t.Run(w.name, func(t *testing.T) {
			journal := filepath.Join(t.TempDir(), "journal")
			ts := tooltest.New(journal)
			url, requests := w.serve(t,
				w.calls([3]string{"call_1", "t__append", `{"text":"first"}`}),
				w.busy,
				w.calls([3]string{"call_2", "t__lookup", `{"key":"k"}`}, [3]string{"call_3", "t__append", `{"text":"second"}`}),
				w.answer("all done"))
			d := toolDaemon(t, w, url, ts, journal, w.name == "anthropic")
			c := dial(t, d.URL(), client.Options{})
			sid := newSession(t, c)
			events, done := answerTurn(t, c, sid, "do the thing")

			if done.Terminal != msp.TerminalCompleted || done.Attempts == nil || done.Attempts.Count != 4 ||
				done.Attempts.OutputTokens != 2*w.callTokens+w.answerTokens || !done.Attempts.UsageComplete {
				t.Fatalf("terminal %s; events %s", only(events, msp.NotifyTurnCompleted)[0].Params, compact(methods(events)))
			}
			if n := len(only(events, msp.NotifyTurnModelRetryScheduled)); n != 1 {
				t.Errorf("%d model retry notices, want 1", n)
			}
			for tool, want := range map[string]int{tooltest.Append: 2, tooltest.Lookup: 1} {
				if n, err := tooltest.Count(journal, tool); err != nil || n != want {
					t.Errorf("%s ran %d times (%v), want %d", tool, n, err, want)
				}
			}
			var calls []string
			for _, n := range only(events, msp.NotifyItemCompleted) {
				it := decode[msp.ItemParams](t, n).Item
				if it.Kind == msp.ItemToolCall {
					calls = append(calls, it.CallID+":"+it.Server+"/"+it.Tool+":"+string(it.Status)+":"+deref(it.VisibleOutput))
				}
			}
			if got := strings.Join(calls, " "); got != "call_1:t/append:completed:appended 1 call_2:t/lookup:completed:value of k call_3:t/append:completed:appended 2" &&
				got != "call_1:t/append:completed:appended 1 call_3:t/append:completed:appended 2 call_2:t/lookup:completed:value of k" {
				t.Errorf("toolCall items: %s", got)
			}
			if got := streamedText(t, events); got != "all done" {
				t.Errorf("answer %q", got)
			}

			reqs := requests()
			if len(reqs) != 4 {
				t.Fatalf("%d provider requests, want 4", len(reqs))
			}
			for i, want := range []string{"", "call_1=appended 1", "call_1=appended 1",
				"call_1=appended 1 call_2=value of k call_3=appended 2"} {
				if got := strings.Join(w.results(reqs[i].Body), " "); got != want {
					t.Errorf("request %d sends results %q, want %q", i+1, got, want)
				}
			}
			for i, r := range reqs {
				if !strings.Contains(string(r.Raw), "t__append") || !strings.Contains(string(r.Raw), "t__lookup") {
					t.Errorf("request %d does not offer the MCP server's tools: %s", i+1, r.Raw)
				}
			}
		})
	}
}

// TestInvalidToolArgumentsRetryTheStep: arguments that are not JSON, or
// that the tool's input schema refuses, are never passed to the tool: the
// step runs again after a turn/retryScheduled naming the tool and what
// was wrong, and the corrected call runs once.
func TestInvalidToolArgumentsRetryTheStep(t *testing.T) {
	for _, w := range toolWires {
		t.Run(w.name, func(t *testing.T) {
			journal := filepath.Join(t.TempDir(), "journal")
			ts := tooltest.New(journal)
			url, requests := w.serve(t,
				w.calls([3]string{"call_1", "t__append", `{"txt":"no"}`}),
				w.calls([3]string{"call_2", "t__append", `{"text": oops`}),
				w.calls([3]string{"call_3", "t__append", `{"text":"yes"}`}),
				w.answer("fixed"))
			d := toolDaemon(t, w, url, ts, journal, false)
			c := dial(t, d.URL(), client.Options{})
			events, done := answerTurn(t, c, newSession(t, c), "append yes")
			if done.Terminal != msp.TerminalCompleted || done.Attempts.Count != 4 {
				t.Fatalf("terminal %+v; events %s", done, compact(methods(events)))
			}
			var reasons []string
			for _, n := range only(events, msp.NotifyTurnRetryScheduled) {
				reasons = append(reasons, decode[msp.TurnRetryScheduledParams](t, n).Reason)
			}
			if len(reasons) != 2 || !strings.Contains(reasons[0], "append") || !strings.Contains(reasons[0], "txt") ||
				!strings.Contains(reasons[1], "append") || !strings.Contains(reasons[1], "JSON") {
				t.Errorf("turn retry reasons %q: want the tool and the field, then not JSON", reasons)
			}
			if n, _ := tooltest.Count(journal, tooltest.Append); n != 1 {
				t.Errorf("append ran %d times, want once (the valid call)", n)
			}
			if got := strings.Join(w.results(requests()[3].Body), " "); got != "call_3=appended 1" {
				t.Errorf("the answering request sends results %q", got)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestToolHistoryAcrossFamilies: a session whose model called tools keeps
// what they returned when it switches models. Within one family (two
// OpenAI-compatible entries) the calls go on as calls; to another family
// (Anthropic) they go as text, since one API's call ids and shapes mean
// nothing to the other — the same after a restart, when the history is
// folded from the log.
func TestToolHistoryAcrossFamilies(t *testing.T) {
	journal := filepath.Join(t.TempDir(), "journal")
	ts := tooltest.New(journal)
	mcp := httptest.NewServer(ts.HTTPHandler())
	t.Cleanup(mcp.Close)
	oa := openaitest.New(t, "/v1",
		openaitest.Stream(openaitest.ToolCalls(5, openaitest.Call{ID: "call_1", Name: "t__lookup", Args: `{"key":"k"}`})...),
		openaitest.Stream(openaitest.Answer("found it")...))
	compat := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Answer("same family")...))
	an := anthropictest.New(t, anthropictest.Answer("end_turn", 2, "other family"), anthropictest.Answer("end_turn", 2, "again"))
	file := filepath.Join(t.TempDir(), "mspd.toml")
	conf := fmt.Sprintf(`default = "oa"
[[providers]]
id = "oa"
type = "openai"
base_url = %q
model = "gpt-test"
api_key_env = "TEST_KEY"
[[providers]]
id = "compat"
type = "openai"
base_url = %q
model = "llama"
api_key_env = "TEST_KEY"
[[providers]]
id = "claude"
type = "anthropic"
base_url = %q
model = %q
api_key_env = "TEST_ANTHROPIC_KEY"
[[mcp]]
name = "t"
url = %q
approval = "never"
`, oa.URL(), compat.URL(), an.URL(), anthropictest.Model, mcp.URL)
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := daemon.Config{ConfigFile: file, DataDir: t.TempDir(), Env: mapEnv(map[string]string{
		"TEST_KEY": "sk-e2e", "TEST_ANTHROPIC_KEY": anthropictest.Key})}
	d := startDaemon(t, cfg)
	c := dial(t, d.URL(), client.Options{})
	ctx := testCtx(t)
	sid := newSession(t, c)
	if _, done := answerTurn(t, c, sid, "look up k"); done.Terminal != msp.TerminalCompleted {
		t.Fatalf("the tool turn: %+v", done)
	}
	setModel := func(c *checkedClient, provider, model string) {
		t.Helper()
		err := c.Call(ctx, msp.MethodSessionSetModel, msp.SessionSetModelParams{CommandID: client.NewCommandID(), SessionID: sid,
			Model: msp.ModelSelection{ProviderID: provider, ModelID: model}}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}

	setModel(c, "compat", "llama")
	answerTurn(t, c, sid, "and now?")
	body := compat.Requests()[0].Body
	if got := strings.Join(toolWires[0].results(body), " "); got != "call_1=value of k" || !strings.Contains(string(compat.Requests()[0].Raw), `"tool_calls"`) {
		t.Errorf("same family: results %q, body %s", got, compat.Requests()[0].Raw)
	}

	setModel(c, "claude", anthropictest.Model)
	answerTurn(t, c, sid, "and you?")
	text := `[I called the tool t__lookup with the arguments {\"key\":\"k\"}; it returned: value of k]`
	for i, check := range []func() providertest.Request{
		func() providertest.Request { return an.Requests()[0] },
		func() providertest.Request {
			// The same history folded from the log by the next process.
			d.Close(context.Background())
			d2 := startDaemon(t, cfg)
			c2 := dial(t, d2.URL(), client.Options{})
			if _, err := c2.Resume(ctx, sid, nil); err != nil {
				t.Fatal(err)
			}
			answerTurn(t, c2, sid, "once more")
			return an.Requests()[1]
		},
	} {
		r := check()
		if strings.Contains(string(r.Raw), "tool_use") || strings.Contains(string(r.Raw), "tool_result") || !strings.Contains(string(r.Raw), text) {
			t.Errorf("request %d to the other family: want the call as text, no tool blocks: %s", i+1, r.Raw)
		}
	}
	if n, _ := tooltest.Count(journal, tooltest.Lookup); n != 1 {
		t.Errorf("lookup ran %d times, want 1", n)
	}
}
