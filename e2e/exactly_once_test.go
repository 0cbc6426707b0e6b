package e2e

// The "Exactly once" promise of agent turns (docs/tools.md), held with
// real mspd processes killed with SIGKILL and a real MCP server (the
// go-sdk tooltest server) whose tools count their invocations.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"mspd/client"
	"mspd/internal/testlane"
	"mspd/provider/scripted"
	"mspd/schema/msp"
	"mspd/tool"
	"mspd/tool/tooltest"
	"mspd/turn"
)

// toolServerName is the [[mcp]] name the mspd processes know the counting
// server by.
const toolServerName = "t"

// toolHost is the counting server, served over streamable HTTP from the
// test's process to the mspd processes the test starts: it outlives
// their SIGKILLs, every process of a cluster reaches the same one, and
// its counts (journaled) are exact across them.
type toolHost struct {
	*tooltest.Server
	url string

	mu     sync.Mutex
	onCall func(tool string) // run as a tools/call arrives, before the tool runs
}

// startToolHost serves a counting server on a loopback port until the
// test ends.
func startToolHost(t *testing.T) *toolHost {
	t.Helper()
	h := &toolHost{Server: tooltest.New(filepath.Join(t.TempDir(), "journal"))}
	serve := h.HTTPHandler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct {
				Method string `json:"method"`
				Params struct {
					Name string `json:"name"`
				} `json:"params"`
			}
			if json.Unmarshal(body, &msg) == nil && msg.Method == "tools/call" {
				h.mu.Lock()
				f := h.onCall
				h.mu.Unlock()
				if f != nil {
					f(msg.Params.Name)
				}
			}
		}
		serve.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		h.Release() // held calls end, so that the server closes
		srv.CloseClientConnections()
		srv.Close()
	})
	h.url = srv.URL
	return h
}

// whenCalled sets what runs as a tools/call arrives.
func (h *toolHost) whenCalled(f func(tool string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onCall = f
}

// config writes an mspd configuration file — the scripted provider, and
// the counting server as [[mcp]] toolServerName, its calls never waiting
// for approval — and returns the serve flags that use it, with short
// retry backoffs.
func (h *toolHost) config(t *testing.T) []string {
	t.Helper()
	return h.flags(t, "never")
}

// approvalConfig is config with the counting server's every call waiting
// for a person (approval = "always"), and the extra flags.
func (h *toolHost) approvalConfig(t *testing.T, extra ...string) []string {
	t.Helper()
	return append(h.flags(t, "always"), extra...)
}

// flags are the serve flags of a configuration whose counting server's
// calls wait for approval as approval says, with short retry backoffs.
func (h *toolHost) flags(t *testing.T, approval string) []string {
	t.Helper()
	return []string{"--config", toolConfig(t, h.url, approval), "--retry-initial-backoff", "10ms", "--retry-max-backoff", "50ms"}
}

// toolConfig writes an mspd configuration file — the scripted provider,
// and the MCP server at url as [[mcp]] toolServerName with approval
// ("never", "always") — and returns its path.
func toolConfig(t *testing.T, url, approval string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mspd.toml")
	cfg := fmt.Sprintf(`[[providers]]
id = "scripted"
type = "scripted"

[[mcp]]
name = %q
url = %q
approval = %q
`, toolServerName, url, approval)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// count is how many times the counting server ran tool, from its journal.
func (h *toolHost) count(t *testing.T, tool string) int {
	t.Helper()
	n := h.Count(tool)
	if n < 0 {
		t.Fatalf("reading the journal of %s", tool)
	}
	return n
}

// waitCount waits until tool has been invoked n times.
func (h *toolHost) waitCount(ctx context.Context, t *testing.T, tool string, n int) {
	t.Helper()
	if err := h.WaitCount(ctx, tool, n); err != nil {
		t.Fatal(err)
	}
}

// call is a scripted call of the counting server's tool.
func call(id, name, args string) scripted.Call {
	return scripted.Call{ID: id, Name: tool.ModelName(toolServerName, name), Args: args}
}

// callItems are the toolCall items of a log, each in its last recorded
// state, in the order they started; recorded counts each one's records.
func callItems(t *testing.T, events []msp.ViewEvent) (items []msp.Item, recorded map[string]int) {
	t.Helper()
	recorded = map[string]int{}
	at := map[string]int{}
	for _, e := range events {
		if e.Method != msp.NotifyItemStarted && e.Method != msp.NotifyItemCompleted {
			continue
		}
		var p msp.ItemParams
		if err := json.Unmarshal(e.Params, &p); err != nil {
			t.Fatal(err)
		}
		if p.Item.Kind != msp.ItemToolCall {
			continue
		}
		recorded[p.Item.ItemID+" "+e.Method]++
		if i, ok := at[p.Item.ItemID]; ok {
			items[i] = p.Item
			continue
		}
		at[p.Item.ItemID] = len(items)
		items = append(items, p.Item)
	}
	return items, recorded
}

// callByID is the item of call id among items.
func callByID(t *testing.T, items []msp.Item, id string) msp.Item {
	t.Helper()
	i := slices.IndexFunc(items, func(it msp.Item) bool { return it.CallID == id })
	if i < 0 {
		t.Fatalf("no toolCall item of call %s among %s", id, jsonText(items))
	}
	return items[i]
}

// checkCalls checks that the log records each call once — one
// item/started, one item/completed — and returns their final items.
func checkCalls(t *testing.T, events []msp.ViewEvent, ids ...string) []msp.Item {
	t.Helper()
	items, recorded := callItems(t, events)
	if len(items) != len(ids) {
		t.Fatalf("%d toolCall items in the log, want %d: %s", len(items), len(ids), jsonText(items))
	}
	for _, id := range ids {
		it := callByID(t, items, id)
		for _, m := range []string{msp.NotifyItemStarted, msp.NotifyItemCompleted} {
			if n := recorded[it.ItemID+" "+m]; n != 1 {
				t.Errorf("call %s: %d %s records", id, n, m)
			}
		}
	}
	return items
}

// completedWith checks a call's final item: completed with output.
func completedWith(t *testing.T, it msp.Item, output string) {
	t.Helper()
	if it.Status != msp.ItemCompleted || it.VisibleOutput == nil || *it.VisibleOutput != output {
		t.Errorf("call %s (%s): %s; want completed with %q", it.CallID, it.Tool, jsonText(it), output)
	}
}

// unknownOutcome checks a call's final item: failed, its outcome unknown,
// the reason saying that who stopped during the call.
func unknownOutcome(t *testing.T, it msp.Item, who string) {
	t.Helper()
	if it.Status != msp.ItemFailed || it.FailureKind != turn.FailureUnknownOutcome ||
		!strings.HasPrefix(it.FailureReason, who+" during the call") || !strings.Contains(it.FailureReason, "unknown") {
		t.Errorf("call %s (%s): %s; want failed %s, %q during the call", it.CallID, it.Tool, jsonText(it), turn.FailureUnknownOutcome, who)
	}
}

// toldModel is what the last request of turnID told the model: the
// history its echoRequest answer (the turn's completed answer) reports.
func toldModel(t *testing.T, events []msp.ViewEvent, turnID string) []scripted.Echoed {
	t.Helper()
	var answer *string
	for _, e := range events {
		var p msp.ItemParams
		if e.Method != msp.NotifyItemCompleted || json.Unmarshal(e.Params, &p) != nil {
			continue
		}
		if it := p.Item; it.Kind == msp.ItemAgentMessage && it.Status == msp.ItemCompleted && it.TurnID != nil && *it.TurnID == turnID {
			answer = it.Text
		}
	}
	if answer == nil {
		t.Fatalf("turn %s has no completed answer", turnID)
	}
	var told []scripted.Echoed
	if err := json.Unmarshal([]byte(*answer), &told); err != nil {
		t.Fatalf("the answer is not an echoed request: %v\n%s", err, *answer)
	}
	return told
}

// toolResults are the tool results among a history, by call id, and the
// number of results and of calls each id has.
func toolResults(told []scripted.Echoed) (results map[string]scripted.Result, answered, called map[string]int) {
	results, answered, called = map[string]scripted.Result{}, map[string]int{}, map[string]int{}
	for _, m := range told {
		for _, c := range m.Calls {
			called[c.ID]++
		}
		for _, r := range m.Results {
			results[r.CallID] = r
			answered[r.CallID]++
		}
	}
	return results, answered, called
}

// checkTold checks that the model was told each call once, and once its
// result, as want says (the result's text, or its failure when isError).
func checkTold(t *testing.T, told []scripted.Echoed, want map[string]scripted.Result) {
	t.Helper()
	results, answered, called := toolResults(told)
	if len(called) != len(want) || len(answered) != len(want) {
		t.Errorf("the model was told of calls %v and results %v, want %d of each", called, answered, len(want))
	}
	for id, w := range want {
		r := results[id]
		if called[id] != 1 || answered[id] != 1 || r.Text != w.Text || r.IsError != w.IsError {
			t.Errorf("call %s: called %d times, answered %d times, last %+v; want once, %+v", id, called[id], answered[id], r, w)
		}
	}
}

// attemptsOf checks a turn's terminal: completed after count provider
// requests.
func attemptsOf(t *testing.T, done msp.TurnCompletedParams, count int) {
	t.Helper()
	if done.Terminal != msp.TerminalCompleted || done.Attempts == nil || done.Attempts.Count != count {
		t.Fatalf("terminal %s; want completed after %d requests", jsonText(done), count)
	}
}

// TestToolCallIsRecordedBeforeItRunsAndRunsOnce: a call's toolCall item,
// with its arguments, is in the durable log when the call reaches the
// MCP server; the next step's model-layer retry (a 429) and turn-layer
// retry (a stream cut after output) resend the recorded result and never
// call the tool again; the model is told the call and its result once;
// attempts counts the four requests.
func TestToolCallIsRecordedBeforeItRunsAndRunsOnce(t *testing.T) {
	h := startToolHost(t)
	p := startProcess(t, t.TempDir(), h.config(t)...)
	ctx := testCtx(t)
	w := watchNewSession(ctx, t, p.url)
	reader := dial(t, p.url, client.Options{})
	type logAtCall struct {
		events []msp.ViewEvent
		err    error
	}
	atCall := make(chan logAtCall, 1)
	h.whenCalled(func(string) {
		// The test's own connection reads the log while mspd waits for
		// the call's answer.
		var page msp.ViewPageResult
		err := reader.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: w.sid, Limit: 1000}, &page)
		select {
		case atCall <- logAtCall{page.Events, err}:
		default: // a second call: the count says so
		}
	})
	turnStart := slowTurn(w.sid, 0,
		scripted.Step{Calls: []scripted.Call{call("c1", tooltest.Append, `{"text":"once"}`)}},
		scripted.Step{Status: 429, RetryAfterMs: new(10)},
		scripted.Step{Text: "cut short", Cut: true},
		scripted.Step{EchoRequest: true})
	if _, err := w.c.StartTurnWith(ctx, turnStart); err != nil {
		t.Fatal(err)
	}
	done := w.terminal(ctx, turnStart.CommandID)

	seen := <-atCall
	if seen.err != nil {
		t.Fatalf("reading the log as the call arrived: %v", seen.err)
	}
	items, recorded := callItems(t, seen.events)
	if len(items) != 1 || recorded[items[0].ItemID+" "+msp.NotifyItemCompleted] != 0 {
		t.Fatalf("as the call arrived, the log held the toolCall items %s", jsonText(items))
	}
	if it := items[0]; it.Status != msp.ItemInProgress || it.Tool != tooltest.Append || it.Server != toolServerName ||
		it.Args == nil || *it.Args != `{"text":"once"}` || it.CallID != "c1" {
		t.Errorf("as the call arrived, its item was %s", jsonText(it))
	}

	if n := h.count(t, tooltest.Append); n != 1 {
		t.Errorf("append ran %d times", n)
	}
	attemptsOf(t, done, 4)
	if m, r := len(only(w.seen, msp.NotifyTurnModelRetryScheduled)), len(only(w.seen, msp.NotifyTurnRetryScheduled)); m != 1 || r != 1 {
		t.Errorf("%d model-layer and %d turn-layer retry notices, want one of each", m, r)
	}
	events := pageAll(t, ctx, w.c, w.sid)
	completedWith(t, checkCalls(t, events, "c1")[0], "appended 1")
	checkTold(t, toldModel(t, events, turnStart.CommandID), map[string]scripted.Result{"c1": {Text: "appended 1"}})
	w.checkLog(ctx)
}

// stream is a step of the model's that answers for seconds, so that the
// process can be killed while the request is in flight.
var stream = scripted.Step{Text: strings.Repeat("thinking ", 200), Chunks: 200, ChunkDelayMs: 20}

// TestKilledDuringTheRequestAfterACall kills mspd (SIGKILL) while the
// request after a call streams its answer, and restarts it: the call's
// result was durable before that request was sent, the resumed step's
// request carries it, the tool is not called again, and attempts counts
// the request lost to the crash.
func TestKilledDuringTheRequestAfterACall(t *testing.T) {
	h := startToolHost(t)
	dataDir := t.TempDir()
	p1 := startProcess(t, dataDir, h.config(t)...)
	ctx := testCtx(t)
	w := watchNewSession(ctx, t, p1.url)
	turnStart := slowTurn(w.sid, 0,
		scripted.Step{Calls: []scripted.Call{call("c1", tooltest.Append, `{"text":"once"}`)}},
		stream,
		scripted.Step{EchoRequest: true})
	if _, err := w.c.StartTurnWith(ctx, turnStart); err != nil {
		t.Fatal(err)
	}
	resulted := false
	for deltas := 0; deltas < 3; {
		switch n := w.next(ctx); n.Method {
		case msp.NotifyItemCompleted:
			resulted = resulted || decode[msp.ItemParams](t, n).Item.Kind == msp.ItemToolCall
		case msp.NotifyItemDelta:
			deltas++
		}
	}
	if !resulted {
		t.Fatal("the next request streamed before the call's result was told")
	}
	p1.kill()

	p2 := startProcess(t, dataDir, h.config(t)...)
	w.attach(ctx, p2.url)
	done := w.terminal(ctx, turnStart.CommandID)
	if n := h.count(t, tooltest.Append); n != 1 {
		t.Errorf("append ran %d times", n)
	}
	attemptsOf(t, done, 3)
	notices := only(w.seen, msp.NotifyTurnRetryScheduled)
	if len(notices) != 1 || decode[msp.TurnRetryScheduledParams](t, notices[0]).Reason != "the server restarted during attempt 2" {
		t.Errorf("retry notices %s", jsonText(notices))
	}
	events := pageAll(t, ctx, w.c, w.sid)
	completedWith(t, checkCalls(t, events, "c1")[0], "appended 1")
	checkTold(t, toldModel(t, events, turnStart.CommandID), map[string]scripted.Result{"c1": {Text: "appended 1"}})
	w.checkLog(ctx)
}

// TestKilledDuringCalls kills mspd (SIGKILL) while three calls of one
// step are in flight, held by the server, and restarts it: the call of
// the tool with no hints is not run again — its item fails with its
// outcome unknown, saying the server restarted during the call, and the
// model is told so — while the idempotent and the read-only tools run
// again. Killed again while those run, and restarted, mspd runs them a
// third time, and the failed call stays failed, recorded once. The
// step's next request carries the three results; attempts counts two
// requests.
func TestKilledDuringCalls(t *testing.T) {
	h := startToolHost(t)
	dataDir := t.TempDir()
	p1 := startProcess(t, dataDir, h.config(t)...)
	ctx := testCtx(t)
	w := watchNewSession(ctx, t, p1.url)
	turnStart := slowTurn(w.sid, 0,
		scripted.Step{Calls: []scripted.Call{
			call("c1", tooltest.Slow, `{}`),
			call("c2", tooltest.SlowIdempotent, `{}`),
			call("c3", tooltest.SlowReadOnly, `{}`),
		}},
		scripted.Step{EchoRequest: true})
	if _, err := w.c.StartTurnWith(ctx, turnStart); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{tooltest.Slow, tooltest.SlowIdempotent, tooltest.SlowReadOnly} {
		h.waitCount(ctx, t, name, 1)
	}
	p1.kill()

	p2 := startProcess(t, dataDir, h.config(t)...)
	h.waitCount(ctx, t, tooltest.SlowIdempotent, 2)
	h.waitCount(ctx, t, tooltest.SlowReadOnly, 2)
	p2.kill()
	h.Release() // the calls made again answer at once

	p3 := startProcess(t, dataDir, h.config(t)...)
	w.attach(ctx, p3.url)
	done := w.terminal(ctx, turnStart.CommandID)
	for name, want := range map[string]int{tooltest.Slow: 1, tooltest.SlowIdempotent: 3, tooltest.SlowReadOnly: 3} {
		if n := h.count(t, name); n != want {
			t.Errorf("%s ran %d times, want %d", name, n, want)
		}
	}
	attemptsOf(t, done, 2)
	events := pageAll(t, ctx, w.c, w.sid)
	items := checkCalls(t, events, "c1", "c2", "c3")
	cut := callByID(t, items, "c1")
	unknownOutcome(t, cut, "the server restarted")
	completedWith(t, callByID(t, items, "c2"), "done")
	completedWith(t, callByID(t, items, "c3"), "done")
	checkTold(t, toldModel(t, events, turnStart.CommandID), map[string]scripted.Result{
		"c1": {Text: cut.FailureReason, IsError: true}, "c2": {Text: "done"}, "c3": {Text: "done"}})
	w.checkLog(ctx)
}

// TestKilledWithAResultRecorded kills mspd (SIGKILL) between a call's
// recorded result and the next request — the step's other call, of a
// read-only tool, held in flight so that the request cannot have been
// sent — and restarts it: the recorded call is not run again, the
// read-only one is, and the next request carries the recorded result as
// recorded.
func TestKilledWithAResultRecorded(t *testing.T) {
	h := startToolHost(t)
	dataDir := t.TempDir()
	p1 := startProcess(t, dataDir, h.config(t)...)
	ctx := testCtx(t)
	w := watchNewSession(ctx, t, p1.url)
	turnStart := slowTurn(w.sid, 0,
		scripted.Step{Calls: []scripted.Call{
			call("c1", tooltest.Append, `{"text":"once"}`),
			call("c2", tooltest.SlowReadOnly, `{}`),
		}},
		scripted.Step{EchoRequest: true})
	if _, err := w.c.StartTurnWith(ctx, turnStart); err != nil {
		t.Fatal(err)
	}
	w.until(ctx, func(n client.Notification) bool {
		return n.Method == msp.NotifyItemCompleted && decode[msp.ItemParams](t, n).Item.CallID == "c1"
	})
	h.waitCount(ctx, t, tooltest.SlowReadOnly, 1)
	p1.kill()
	h.Release()

	p2 := startProcess(t, dataDir, h.config(t)...)
	w.attach(ctx, p2.url)
	done := w.terminal(ctx, turnStart.CommandID)
	if a, r := h.count(t, tooltest.Append), h.count(t, tooltest.SlowReadOnly); a != 1 || r != 2 {
		t.Errorf("append ran %d times, want 1; slow_read_only %d, want 2", a, r)
	}
	attemptsOf(t, done, 2)
	events := pageAll(t, ctx, w.c, w.sid)
	items := checkCalls(t, events, "c1", "c2")
	completedWith(t, callByID(t, items, "c1"), "appended 1")
	completedWith(t, callByID(t, items, "c2"), "done")
	checkTold(t, toldModel(t, events, turnStart.CommandID), map[string]scripted.Result{"c1": {Text: "appended 1"}, "c2": {Text: "done"}})
	w.checkLog(ctx)
}

// journalReaches waits until a journal counts n invocations of tool, or
// ctx ends: the counts of a stdio child server live in the file, outside
// the processes killed.
func journalReaches(ctx context.Context, journal, tool string, n int) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := tooltest.Count(journal, tool)
		if err != nil || got >= n {
			return err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("%s ran %d times, waiting for %d: %w", tool, got, n, ctx.Err())
		}
	}
}

// TestKilledDuringAnApprovedCallOnOpenAIWithStdio: an mspd process whose
// model is the fake OpenAI Chat Completions server (its exact tool-call
// wire) and whose tools come from the counting server as a stdio child,
// every call waiting for a person. The model calls the tool with no
// hints; the client is asked, approves, and the call reaches the tool
// (held: a child's slow tool never answers). mspd is killed (SIGKILL) and
// started again on the same data directory: the client resumes without
// being asked again, the tool is not run again (the child's journal), the
// call's item fails with its outcome unknown, carrying its approval,
// resolved once; the next request the fake receives carries the failure
// as Chat's tool message for the call's id, once, and the turn completes
// after two requests.
func TestKilledDuringAnApprovedCallOnOpenAIWithStdio(t *testing.T) {
	chat := toolWires[0]
	t.Setenv("TEST_KEY", "sk-e2e") // the provider's api_key_env, read by the processes
	journal := filepath.Join(t.TempDir(), "journal")
	url, requests := chat.serve(t,
		chat.calls([3]string{"call_1", tool.ModelName(toolServerName, tooltest.Slow), `{}`}),
		chat.answer("noted"))
	config := filepath.Join(t.TempDir(), "mspd.toml")
	conf := "default = \"p\"\n[[providers]]\n" + chat.provider(url) + stdioMCP(journal, "always")
	if err := os.WriteFile(config, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	p1 := startProcess(t, dataDir, "--config", config)
	ctx := testCtx(t)
	w := watchNewSession(ctx, t, p1.url)
	turnStart := msp.TurnStartParams{CommandID: client.NewCommandID(), SessionID: w.sid,
		Input: []msp.TurnInputPart{{Type: "text", Text: "run the slow tool"}}}
	if _, err := w.c.StartTurnWith(ctx, turnStart); err != nil {
		t.Fatal(err)
	}
	a, _ := w.asked(ctx)
	if a.ToolCallID != "call_1" {
		t.Fatalf("asked for %s; want call_1", jsonText(a))
	}
	ack, err := w.c.Decide(ctx, a, turn.ChoiceApprove, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := journalReaches(ctx, journal, tooltest.Slow, 1); err != nil {
		t.Fatal(err)
	}
	p1.kill()

	before := len(w.seen)
	p2 := startProcess(t, dataDir, "--config", config)
	if snap := w.attach(ctx, p2.url); len(snap.PendingRequests) != 0 {
		t.Errorf("resume's pendingRequests %s; want none", jsonText(snap.PendingRequests))
	}
	// A second run would hold the turn forever (the child's slow tool
	// never answers): it stops the wait, and the count says why.
	ranAgain, stop := context.WithCancel(ctx)
	go func() {
		if journalReaches(ranAgain, journal, tooltest.Slow, 2) == nil {
			stop()
		}
	}()
	defer func() {
		stop()
		if n, err := tooltest.Count(journal, tooltest.Slow); err != nil || n != 1 {
			t.Errorf("slow ran %d times (%v), want once", n, err)
		}
	}()
	attemptsOf(t, w.terminal(ranAgain, turnStart.CommandID), 2)
	if n := asks(w.seen[before:]); n != 0 {
		t.Errorf("asked %d times after the restart; want none", n)
	}
	events := pageAll(t, ctx, w.c, w.sid)
	cut := checkCalls(t, events, "call_1")[0]
	unknownOutcome(t, cut, "the server restarted")
	if cut.ApprovalID != a.ApprovalID {
		t.Errorf("the item's approvalId %q, want %q", cut.ApprovalID, a.ApprovalID)
	}
	resolvedOnce(t, events, a, msp.DecisionApproved, msp.ResolvedByUser, ack.CommandID)

	reqs := requests()
	if len(reqs) != 2 {
		t.Fatalf("%d provider requests, want 2", len(reqs))
	}
	if got, want := strings.Join(chat.results(reqs[1].Body), " "), "call_1="+cut.FailureReason; got != want {
		t.Errorf("the request after the restart sends results %q, want %q", got, want)
	}
	var called []string
	for _, m := range list(reqs[1].Body["messages"]) {
		for _, c := range list(m["tool_calls"]) {
			called = append(called, fmt.Sprint(c["id"]))
		}
	}
	if !slices.Equal(called, []string{"call_1"}) {
		t.Errorf("the request after the restart carries the calls %q, want call_1 once", called)
	}
	// The log's answer: a resume after the answer streamed gets no deltas.
	var answers []string
	for _, e := range events {
		var p msp.ItemParams
		if e.Method == msp.NotifyItemCompleted && json.Unmarshal(e.Params, &p) == nil && p.Item.Kind == msp.ItemAgentMessage {
			answers = append(answers, deref(p.Item.Text))
		}
	}
	if !slices.Equal(answers, []string{"noted"}) {
		t.Errorf("answers %q in the log, want the fake's one", answers)
	}
	noPending(ctx, t, w.c, w.sid)
	w.checkLog(ctx)
}

// TestForkCopiesCallsAndCallsNothing: session/fork, taken while the
// source's next turn has a call in flight, copies the completed turn's
// toolCall items as recorded and nothing of the running one; a turn on
// the fork tells the model the copied call and its recorded result, and
// no tool runs again, in the fork or in the source.
func TestForkCopiesCallsAndCallsNothing(t *testing.T) {
	h := startToolHost(t)
	p := startProcess(t, t.TempDir(), h.config(t)...)
	ctx := testCtx(t)
	w := watchNewSession(ctx, t, p.url)
	first := slowTurn(w.sid, 0, scripted.Step{Calls: []scripted.Call{call("c1", tooltest.Append, `{"text":"once"}`)}},
		scripted.Step{Text: "appended"})
	if _, err := w.c.StartTurnWith(ctx, first); err != nil {
		t.Fatal(err)
	}
	attemptsOf(t, w.terminal(ctx, first.CommandID), 2)
	second := slowTurn(w.sid, 0, scripted.Step{Calls: []scripted.Call{call("c2", tooltest.Slow, `{}`)}},
		scripted.Step{Text: "released"})
	if _, err := w.c.StartTurnWith(ctx, second); err != nil {
		t.Fatal(err)
	}
	h.waitCount(ctx, t, tooltest.Slow, 1)

	forker := dial(t, p.url, client.Options{})
	var fork msp.SessionSnapshot
	if err := forker.Call(ctx, msp.MethodSessionFork, msp.SessionForkParams{CommandID: client.NewCommandID(), SessionID: w.sid}, &fork); err != nil {
		t.Fatal(err)
	}
	fid := fork.Session.SessionID
	src, copied := pageAll(t, ctx, w.c, w.sid), pageAll(t, ctx, forker, fid)
	for i, e := range copied {
		if e.Method != src[i].Method || !maps.Equal(sansIdentities(t, e.Params), sansIdentities(t, src[i].Params)) {
			t.Fatalf("copied event %d:\n fork   %s %s\n source %s %s", i, e.Method, e.Params, src[i].Method, src[i].Params)
		}
	}
	completedWith(t, checkCalls(t, copied, "c1")[0], "appended 1")

	inFork := slowTurn(fid, 0, scripted.Step{EchoRequest: true})
	if _, err := forker.StartTurnWith(ctx, inFork); err != nil {
		t.Fatal(err)
	}
	events, err := forker.WaitTurn(ctx, inFork.CommandID)
	if err != nil {
		t.Fatal(err)
	}
	attemptsOf(t, decode[msp.TurnCompletedParams](t, events[len(events)-1]), 1)
	checkTold(t, toldModel(t, pageAll(t, ctx, forker, fid), inFork.CommandID), map[string]scripted.Result{"c1": {Text: "appended 1"}})

	h.Release()
	attemptsOf(t, w.terminal(ctx, second.CommandID), 2)
	if a, s := h.count(t, tooltest.Append), h.count(t, tooltest.Slow); a != 1 || s != 1 {
		t.Errorf("append ran %d times, slow %d; want once each", a, s)
	}
	w.checkLog(ctx)
}

// TestClusterTakeoverMidToolCall: three mspd nodes on embedded NATS
// JetStream share the counting server. Node 1 leads two sessions: one
// whose step has two calls in flight (a tool with no hints and an
// idempotent one), one whose step after a recorded call streams its
// request. Node 1 is killed (SIGKILL); another node takes both over once
// the lease lapses. The call with no hints is not made again — its item
// fails, saying node n1 stopped during the call, and the model is told —
// the idempotent one is; the recorded call is not made again and the
// resumed request carries its result; attempts count every request, the
// one lost with node 1 included. Node 2's readers see it all in order.
func TestClusterTakeoverMidToolCall(t *testing.T) {
	testlane.Slow(t, "a cluster of three mspd processes and a lease to lapse")
	h := startToolHost(t)
	nodes := startClusterNodes(t, h.config(t)...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader := dial(t, nodes[0].proc.url, client.Options{})
	follow := func(sid string) *watcher {
		w := &watcher{t: t, sid: sid, c: dial(t, nodes[1].proc.url, client.Options{})}
		if _, err := w.c.Resume(ctx, sid, nil); err != nil {
			t.Fatal(err)
		}
		return w
	}
	inFlight, recorded := follow(newSession(t, leader)), follow(newSession(t, leader))

	held := slowTurn(inFlight.sid, 0,
		scripted.Step{Calls: []scripted.Call{call("a1", tooltest.Slow, `{}`), call("a2", tooltest.SlowIdempotent, `{}`)}},
		scripted.Step{EchoRequest: true})
	if _, err := leader.StartTurnWith(ctx, held); err != nil {
		t.Fatal(err)
	}
	h.waitCount(ctx, t, tooltest.Slow, 1)
	h.waitCount(ctx, t, tooltest.SlowIdempotent, 1)
	streamed := slowTurn(recorded.sid, 0,
		scripted.Step{Calls: []scripted.Call{call("b1", tooltest.Append, `{"text":"once"}`)}},
		stream,
		scripted.Step{EchoRequest: true})
	if _, err := leader.StartTurnWith(ctx, streamed); err != nil {
		t.Fatal(err)
	}
	for deltas := 0; deltas < 3; {
		if recorded.next(ctx).Method == msp.NotifyItemDelta {
			deltas++
		}
	}
	nodes[0].proc.kill()
	h.Release()

	attemptsOf(t, inFlight.terminal(ctx, held.CommandID), 2)
	attemptsOf(t, recorded.terminal(ctx, streamed.CommandID), 3)
	for name, want := range map[string]int{tooltest.Slow: 1, tooltest.SlowIdempotent: 2, tooltest.Append: 1} {
		if n := h.count(t, name); n != want {
			t.Errorf("%s ran %d times, want %d", name, n, want)
		}
	}

	events := pageAll(t, ctx, inFlight.c, inFlight.sid)
	items := checkCalls(t, events, "a1", "a2")
	cut := callByID(t, items, "a1")
	unknownOutcome(t, cut, "node n1 stopped")
	completedWith(t, callByID(t, items, "a2"), "done")
	checkTold(t, toldModel(t, events, held.CommandID), map[string]scripted.Result{
		"a1": {Text: cut.FailureReason, IsError: true}, "a2": {Text: "done"}})
	inFlight.checkLog(ctx)

	events = pageAll(t, ctx, recorded.c, recorded.sid)
	completedWith(t, checkCalls(t, events, "b1")[0], "appended 1")
	checkTold(t, toldModel(t, events, streamed.CommandID), map[string]scripted.Result{"b1": {Text: "appended 1"}})
	notices := only(recorded.seen, msp.NotifyTurnRetryScheduled)
	if len(notices) != 1 || decode[msp.TurnRetryScheduledParams](t, notices[0]).Reason != "node n1 stopped during attempt 2" {
		t.Errorf("retry notices %s", jsonText(notices))
	}
	recorded.checkLog(ctx)
}
