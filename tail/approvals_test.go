package tail

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"mspd/schema/msp"
)

// The recorded frames of approvals are what `mspd tail -o json` printed
// of a daemon whose scripted model called the append tool of a test MCP
// server named notes, configured approval = "always" (e2e
// TestTailApprovals, which writes them with -update): a first turn
// without calls, then a call approved once, one denied, one whose turn
// was stopped while it waited, and one the session's denyUnmatched mode
// denied without asking — the session's log read back (--from-start
// --no-follow), and the same turns followed live.
var approvalFiles = []string{"approvals-log.jsonl", "approvals-live.jsonl"}

// TestApprovalsPretty: pretty output shows each approval as it is asked
// for, "? append (notes) needs approval {args}" in place of the call's
// start, and how it was resolved, before the call's own end; the same
// from the log as live.
func TestApprovalsPretty(t *testing.T) {
	want := `── turn 7bed9655 ──
you: {"mspScript":[{"text":"Hello."}]}
agent: Hello.
✓ completed · 0s · 1 attempt · 1 output tokens
── turn e6300a00 ──
you: {"mspScript":[{"text":"On it.","calls":[{"name":"notes__append","args":"{\"text\":\"oat milk\"}"}]},{"text":"Added."}]}
agent: On it.
? append (notes) needs approval {"text":"oat milk"}
✓ append approved once
✓ append 0 ms: appended 1
agent: Added.
✓ completed · 0s · 2 attempts · 3 output tokens
── turn 36898e2d ──
you: {"mspScript":[{"text":"On it.","calls":[{"name":"notes__append","args":"{\"text\":\"the car\"}"}]},{"text":"Not added."}]}
agent: On it.
? append (notes) needs approval {"text":"the car"}
✗ append denied
✗ append rejected: the user denied it
agent: Not added.
✓ completed · 0s · 2 attempts · 4 output tokens
── turn 2fad3f6f ──
you: {"mspScript":[{"text":"On it.","calls":[{"name":"notes__append","args":"{\"text\":\"never\"}"}]},{"text":"never"}]}
agent: On it.
? append (notes) needs approval {"text":"never"}
■ append: not decided, the turn was stopped
■ append cancelled: the turn was stopped while the call waited for approval
■ cancelled
── turn a21dbc38 ──
you: {"mspScript":[{"text":"On it.","calls":[{"name":"notes__append","args":"{\"text\":\"by policy\"}"}]},{"text":"Refused."}]}
agent: On it.
? append (notes) needs approval {"text":"by policy"}
✗ append denied by the session's approval mode
✗ append rejected: the session's approval mode denies this tool without asking
agent: Refused.
✓ completed · 0s · 2 attempts · 3 output tokens
`
	for _, name := range approvalFiles {
		if got := replay(t, name, Pretty, false); got != want {
			t.Errorf("%s: printed\n%s\nwant\n%s", name, got, want)
		}
	}
	colored := replay(t, approvalFiles[1], Pretty, true)
	for _, want := range []string{
		"\x1b[33m? append\x1b[0m (notes)\x1b[33m needs approval\x1b[0m {\"text\":\"oat milk\"}\n",
		"\x1b[32m✓ append approved once\x1b[0m\n",
		"\x1b[31m✗ append denied\x1b[0m\n",
		"\x1b[2m■ append: not decided, the turn was stopped\x1b[0m\n",
	} {
		if !strings.Contains(colored, want) {
			t.Errorf("in colour: %q lacks %q", colored, want)
		}
	}
}

// TestApprovalsJSONLines: JSON-lines output passes every approval event
// through whole, with its cursor, like any other event.
func TestApprovalsJSONLines(t *testing.T) {
	for _, name := range approvalFiles {
		frames := readRecorded(t, name)
		lines := strings.Split(strings.TrimSuffix(replay(t, name, JSON, false), "\n"), "\n")
		if len(lines) != len(frames) {
			t.Fatalf("%s: %d lines for %d frames", name, len(lines), len(frames))
		}
		approvals := 0
		for i, l := range lines {
			var got recorded
			if err := json.Unmarshal([]byte(l), &got); err != nil {
				t.Fatalf("%s line %d: %v", name, i+1, err)
			}
			if !strings.HasPrefix(got.Method, "approval/") {
				continue
			}
			approvals++
			if got.Cursor == "" || got.Cursor != frames[i].Cursor || got.Method != frames[i].Method || !bytes.Equal(got.Params, frames[i].Params) {
				t.Errorf("%s line %d: %s, want the frame as it came: %s %s", name, i+1, l, frames[i].Method, frames[i].Params)
			}
		}
		if approvals != 8 { // four approvals, each requested and resolved
			t.Errorf("%s: %d approval events, want 8", name, approvals)
		}
	}
}

// TestApprovalsLeftOutOfRaw: raw output is the answers' text only.
func TestApprovalsLeftOutOfRaw(t *testing.T) {
	want := "Hello.\nOn it.\nAdded.\nOn it.\nNot added.\nOn it.\nOn it.\nRefused.\n"
	for _, name := range approvalFiles {
		if got := replay(t, name, Raw, false); got != want {
			t.Errorf("%s: raw output %q, want %q", name, got, want)
		}
	}
}

// TestApprovalLines: how each resolution reads, an approval whose call
// this run never saw, and that the model's and the tool server's text
// (names, arguments) never reaches the terminal as control characters.
func TestApprovalLines(t *testing.T) {
	for _, tt := range []struct {
		decision, by, want string
	}{
		{msp.DecisionApproved, msp.ResolvedByUser, "✓ deploy approved once\n"},
		{msp.DecisionApprovedForSession, msp.ResolvedByUser, "✓ deploy approved for this session\n"},
		{msp.DecisionDenied, msp.ResolvedByUser, "✗ deploy denied\n"},
		{msp.DecisionDenied, msp.ResolvedByPolicy, "✗ deploy denied by the session's approval mode\n"},
		{msp.DecisionTimedOut, msp.ResolvedByPolicy, "✗ deploy: nobody approved it in time\n"},
		{msp.DecisionAbort, msp.ResolvedByUser, "■ deploy: not decided, the turn was stopped\n"},
		{"escalated\x1b[2J", msp.ResolvedByUser, "? deploy approval: escalated\uFFFD[2J\n"},
	} {
		var out strings.Builder
		r := newRenderer(&out, Pretty, false)
		args := "{}"
		r.event(msp.NotifyItemStarted, itemEvent(t, msp.Item{ItemID: "c", Kind: msp.ItemToolCall, Revision: 1, Status: msp.ItemInProgress,
			Tool: "deploy", Server: "ops", Args: &args, ApprovalID: "a"}))
		r.event(msp.NotifyApprovalResolved, mustJSON(msp.ApprovalResolvedParams{ApprovalID: "a", ItemID: "c", Decision: tt.decision, ResolvedBy: tt.by}))
		if out.String() != tt.want {
			t.Errorf("%s by %s: printed %q, want %q (no line as the gated call started)", tt.decision, tt.by, out.String(), tt.want)
		}
	}

	t.Run("a call not seen", func(t *testing.T) {
		var out strings.Builder
		r := newRenderer(&out, Pretty, false)
		r.event(msp.NotifyApprovalRequested, mustJSON(msp.ApprovalRequestParams{ApprovalID: "a", ItemID: "c", ToolName: "ops__deploy", RawArgs: `{"env":"prod"}`}))
		r.event(msp.NotifyApprovalResolved, mustJSON(msp.ApprovalResolvedParams{ApprovalID: "a", ItemID: "c", Decision: msp.DecisionApproved}))
		if want := "? deploy (ops) needs approval {\"env\":\"prod\"}\n✓ the call approved once\n"; out.String() != want {
			t.Errorf("printed %q, want %q", out.String(), want)
		}
	})

	t.Run("control characters", func(t *testing.T) {
		var out strings.Builder
		r := newRenderer(&out, Pretty, false)
		args := `{"x":"` + "\x1b]52;c;cm0gLXJmIH4K\x07" + `"}`
		r.event(msp.NotifyItemStarted, itemEvent(t, msp.Item{ItemID: "c", Kind: msp.ItemToolCall, Revision: 1, Status: msp.ItemInProgress,
			Tool: "ev\x1b[2Jil", Server: "no\rtes", Args: &args, ApprovalID: "a"}))
		r.event(msp.NotifyApprovalRequested, mustJSON(msp.ApprovalRequestParams{ApprovalID: "a", ItemID: "c", ToolName: "x__y", RawArgs: args}))
		want := "? ev\uFFFD[2Jil (no\uFFFDtes) needs approval {\"x\":\"\uFFFD]52;c;cm0gLXJmIH4K\uFFFD\"}\n"
		if out.String() != want {
			t.Errorf("printed %q, want %q", out.String(), want)
		}
	})
}

// TestApprovalsDecidedByKey: against a server that speaks MSP (a fake,
// sending the recorded approvals' frames), a run with Keys answers each
// approval/request with the receipt {}, shows a prompt for the oldest
// approval waiting — once, however often the server presents it — and
// decides it by key: a approves once, s approves for the session, d
// denies, with the request's requirementId and a fresh commandId; a key
// while nothing waits does nothing and says so; a key pressed twice
// decides once; a refusal (already resolved) is said, and its prompt
// goes; a request of an approval resolved already prompts nothing.
func TestApprovalsDecidedByKey(t *testing.T) {
	asks := recordedApprovals(t)
	srv := newFakeMSP(t)
	keys, press := io.Pipe()
	t.Cleanup(func() { press.Close() })
	var out, status syncBuf
	h := startTail(t, Options{URL: srv.url(), SessionID: asks[0].sessionID, Follow: true, Format: Pretty, Keys: keys, Status: &status}, &out)
	h.waitSubscribed(t)
	c := srv.conn(t)
	prompt := "⏵ append (notes) waits: a approve once · s approve for this session · d deny\n"
	key := func(k string) {
		t.Helper()
		if _, err := press.Write([]byte(k)); err != nil {
			t.Fatal(err)
		}
	}

	// Approved once.
	c.ask(t, asks[0], "mspd-1")
	c.wantReceipt(t, "mspd-1")
	out.waitFor(t, `? append (notes) needs approval {"text":"oat milk"}`+"\n"+prompt)
	key("a")
	decide := c.wantDecision(t, asks[0], "approve")
	c.ack(t, decide)
	c.notify(t, msp.NotifyApprovalResolved, asks[0].resolved)
	out.waitFor(t, "✓ append approved once\n")

	// Nothing waits.
	key("a")
	status.waitFor(t, "no approval waits: a does nothing now\n")

	// Presented twice (a resubscription), prompted once; decided
	// elsewhere first.
	c.ask(t, asks[1], "mspd-2")
	c.wantReceipt(t, "mspd-2")
	c.request(t, asks[1].requested, "mspd-3")
	c.wantReceipt(t, "mspd-3") // the stray a sent no decision before it
	out.waitFor(t, `? append (notes) needs approval {"text":"the car"}`+"\n"+prompt)
	key("s")
	decide = c.wantDecision(t, asks[1], "approveForSession")
	c.refuse(t, decide, msp.ErrApprovalAlreadyResolved(asks[1].sessionID, asks[1].id,
		msp.ApprovalResolutionSummary{Decision: msp.DecisionDenied, ResolvedBy: msp.ResolvedByUser, ViewCursor: "v:x:1"}))
	status.waitFor(t, "was decided already: denied by user\n")
	c.notify(t, msp.NotifyApprovalResolved, asks[1].resolved)
	out.waitFor(t, "✗ append denied\n")

	// A key pressed twice decides once.
	c.ask(t, asks[2], "mspd-4")
	c.wantReceipt(t, "mspd-4")
	out.waitCount(t, prompt, 3)
	key("d")
	decide = c.wantDecision(t, asks[2], "deny")
	key("d")
	status.waitFor(t, "is on its way: d does nothing\n")
	c.ack(t, decide)
	c.notify(t, msp.NotifyApprovalResolved, asks[2].resolved)
	out.waitFor(t, "■ append: not decided, the turn was stopped\n")

	// Resolved already: presented late, it prompts nothing.
	c.request(t, asks[2].requested, "mspd-5")
	c.wantReceipt(t, "mspd-5") // and no second decision came before it
	c.ask(t, asks[3], "mspd-6")
	c.wantReceipt(t, "mspd-6")
	out.waitCount(t, prompt, 4)
	if n := strings.Count(out.String(), prompt); n != 4 {
		t.Errorf("%d prompts, want one for each of the four approvals:\n%s", n, out.String())
	}
}

// TestApprovalPromptOnATerminal: on a terminal the prompt is a live line
// at the bottom, redrawn below what scrolls above it, and taken away as
// its approval is resolved, before the outcome shows.
func TestApprovalPromptOnATerminal(t *testing.T) {
	asks := recordedApprovals(t)
	srv := newFakeMSP(t)
	keys, press := io.Pipe()
	t.Cleanup(func() { press.Close() })
	var out syncBuf
	h := startTail(t, Options{URL: srv.url(), SessionID: asks[0].sessionID, Follow: true, Format: Pretty, Keys: keys, Terminal: true, Width: 100}, &out)
	h.waitSubscribed(t)
	c := srv.conn(t)
	c.ask(t, asks[0], "mspd-1")
	c.wantReceipt(t, "mspd-1")
	drawn := "⏵ append (notes) waits: a approve once · s approve for this session · d deny" + clearLine
	out.waitFor(t, `? append (notes) needs approval {"text":"oat milk"}`+"\n"+drawn)
	c.notify(t, msp.NotifyItemDelta, mustJSON(msp.ItemDeltaParams{SessionID: asks[0].sessionID, ItemID: "x", Delta: "meanwhile"}))
	// The answer streams on its own line: the prompt is erased first,
	// and drawn again when the line ends.
	out.waitFor(t, drawn+cr+clearLine+"agent: meanwhile")
	if _, err := press.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	c.ack(t, c.wantDecision(t, asks[0], "approve"))
	c.notify(t, msp.NotifyApprovalResolved, asks[0].resolved)
	out.waitFor(t, "✓ append approved once\n")
	if got := out.String(); !strings.HasSuffix(got, "agent: meanwhile\n✓ append approved once\n") {
		t.Errorf("the prompt was not taken away before the outcome; the terminal got %q", got)
	}
}

// TestApprovalRequestsAnswered: without keys every format still answers
// the server's requests: pretty and JSON output show an approval the run
// attached too late to see opened (from the request) and answer {};
// raw output shows none and answers an error, as it does a method it
// does not know; no prompt shows without keys.
func TestApprovalRequestsAnswered(t *testing.T) {
	asks := recordedApprovals(t)
	for _, format := range []string{Pretty, JSON, Raw} {
		t.Run(format, func(t *testing.T) {
			srv := newFakeMSP(t)
			var out syncBuf
			h := startTail(t, Options{URL: srv.url(), SessionID: asks[0].sessionID, Follow: true, Format: format}, &out)
			h.waitSubscribed(t)
			c := srv.conn(t)
			c.request(t, asks[0].requested, "mspd-1")
			if format == Raw {
				if e := c.wantError(t, "mspd-1"); e.Code != msp.CodeInternal || e.Data.Kind != msp.KindInternal {
					t.Errorf("raw answered %+v", e)
				}
			} else {
				c.wantReceipt(t, "mspd-1")
			}
			c.requestMethod(t, "user/input", asks[0].requested, "mspd-2")
			if e := c.wantError(t, "mspd-2"); e.Code != msp.CodeMethodNotFound || e.Data.Kind != msp.KindMethodNotFound {
				t.Errorf("another request answered %+v", e)
			}
			c.notify(t, msp.NotifyApprovalResolved, asks[0].resolved)
			switch format {
			case Pretty:
				out.waitFor(t, "✓ the call approved once\n")
				if want := "? append (notes) needs approval {\"text\":\"oat milk\"}\n✓ the call approved once\n"; out.String() != want {
					t.Errorf("printed %q, want %q", out.String(), want)
				}
			case JSON:
				out.waitCount(t, "\n", 2)
				lines := strings.Split(strings.TrimSpace(out.String()), "\n")
				var first, second recorded
				json.Unmarshal([]byte(lines[0]), &first)
				json.Unmarshal([]byte(lines[1]), &second)
				if first.Method != msp.RequestApproval || !bytes.Equal(first.Params, asks[0].requested) || first.Cursor != asks[0].cursor ||
					second.Method != msp.NotifyApprovalResolved {
					t.Errorf("json lines:\n%s", out.String())
				}
			case Raw:
				c.notify(t, msp.NotifyItemCompleted, asks[0].answer)
				out.waitFor(t, "Added.\n")
				if out.String() != "Added.\n" {
					t.Errorf("raw printed %q", out.String())
				}
			}
		})
	}
}

// recordedApproval is one approval of the recorded live frames: its
// call's item/started, approval/requested, approval/resolved, and the
// turn's answer after it.
type recordedApproval struct {
	id, sessionID, cursor        string
	started, requested, resolved json.RawMessage
	answer                       json.RawMessage
}

// recordedApprovals are the four approvals of the recorded live frames.
func recordedApprovals(t *testing.T) []recordedApproval {
	t.Helper()
	var out []recordedApproval
	var started json.RawMessage
	for _, e := range readRecorded(t, "approvals-live.jsonl") {
		var p struct {
			SessionID  string   `json:"sessionId"`
			ApprovalID string   `json:"approvalId"`
			Item       msp.Item `json:"item"`
		}
		json.Unmarshal(e.Params, &p)
		switch {
		case e.Method == msp.NotifyItemStarted && p.Item.ApprovalID != "":
			started = e.Params
		case e.Method == msp.NotifyApprovalRequested:
			out = append(out, recordedApproval{id: p.ApprovalID, sessionID: p.SessionID, cursor: e.Cursor, started: started, requested: e.Params})
		case e.Method == msp.NotifyApprovalResolved:
			out[len(out)-1].resolved = e.Params
		case e.Method == msp.NotifyItemCompleted && p.Item.Kind == msp.ItemAgentMessage && len(out) > 0 && out[len(out)-1].answer == nil:
			out[len(out)-1].answer = e.Params
		}
	}
	if len(out) != 4 {
		t.Fatalf("%d approvals recorded, want 4", len(out))
	}
	return out
}

// fakeMSP is a WebSocket server that speaks enough MSP for a tail run —
// initialize, view/subscribe — and hands the test each connection, to
// send it frames and read what the run sends.
type fakeMSP struct {
	hs    *httptest.Server
	conns chan *fakeConn
}

// fakeConn is one connection to the fake.
type fakeConn struct {
	ws *websocket.Conn
	in chan clientFrame // what the run sent, past the handshake
}

// clientFrame is a frame from the run: a request or an answer.
type clientFrame struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *msp.Error      `json:"error"`
}

func newFakeMSP(t *testing.T) *fakeMSP {
	f := &fakeMSP{conns: make(chan *fakeConn, 4)}
	f.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		c := &fakeConn{ws: ws, in: make(chan clientFrame, 100)}
		f.conns <- c
		for {
			_, data, err := ws.Read(r.Context())
			if err != nil {
				return
			}
			var m clientFrame
			if json.Unmarshal(data, &m) != nil {
				continue
			}
			switch m.Method {
			case msp.MethodInitialize:
				c.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{}}`, m.ID))
			case msp.NotifyInitialized:
			case msp.MethodViewSubscribe:
				c.write(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"viewCursor":"v:x:0"}}`, m.ID))
			default:
				c.in <- m
			}
		}
	}))
	t.Cleanup(f.hs.Close)
	return f
}

func (f *fakeMSP) url() string { return "ws://" + f.hs.Listener.Addr().String() + "/msp" }

// conn is the run's connection.
func (f *fakeMSP) conn(t *testing.T) *fakeConn {
	t.Helper()
	return receive(t, f.conns, "a connection")
}

func (c *fakeConn) write(frame string) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, []byte(frame))
}

func (c *fakeConn) send(t *testing.T, frame string) {
	t.Helper()
	if err := c.write(frame); err != nil {
		t.Fatal(err)
	}
}

func (c *fakeConn) notify(t *testing.T, method string, params json.RawMessage) {
	t.Helper()
	c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","method":%q,"params":%s}`, method, params))
}

func (c *fakeConn) request(t *testing.T, params json.RawMessage, id string) {
	t.Helper()
	c.requestMethod(t, msp.RequestApproval, params, id)
}

func (c *fakeConn) requestMethod(t *testing.T, method string, params json.RawMessage, id string) {
	t.Helper()
	c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":%q,"params":%s}`, id, method, params))
}

// ask opens a recorded approval as the server does: the call's
// item/started, approval/requested, then approval/request under id.
func (c *fakeConn) ask(t *testing.T, a recordedApproval, id string) {
	t.Helper()
	c.notify(t, msp.NotifyItemStarted, a.started)
	c.notify(t, msp.NotifyApprovalRequested, a.requested)
	c.request(t, a.requested, id)
}

func (c *fakeConn) next(t *testing.T) clientFrame {
	t.Helper()
	select {
	case m := <-c.in:
		return m
	case <-time.After(waitLimit):
		t.Fatal("timed out waiting for a frame from the run")
		return clientFrame{}
	}
}

// wantReceipt checks that the next frame answers request id with {}.
func (c *fakeConn) wantReceipt(t *testing.T, id string) {
	t.Helper()
	m := c.next(t)
	if m.Method != "" || string(m.ID) != `"`+id+`"` || string(m.Result) != "{}" || m.Error != nil {
		t.Fatalf("the run sent %+v, want the receipt {} of %s", m, id)
	}
}

// wantError checks that the next frame answers request id with an error.
func (c *fakeConn) wantError(t *testing.T, id string) *msp.Error {
	t.Helper()
	m := c.next(t)
	if m.Method != "" || string(m.ID) != `"`+id+`"` || m.Error == nil {
		t.Fatalf("the run sent %+v, want an error answering %s", m, id)
	}
	return m.Error
}

// wantDecision checks that the next frame is approval/decide of a with
// choice, as the request presented it.
func (c *fakeConn) wantDecision(t *testing.T, a recordedApproval, choice string) clientFrame {
	t.Helper()
	m := c.next(t)
	var p msp.ApprovalDecideParams
	var req msp.ApprovalRequestParams
	json.Unmarshal(m.Params, &p)
	json.Unmarshal(a.requested, &req)
	if m.Method != msp.MethodApprovalDecide || p.ApprovalID != a.id || p.SessionID != a.sessionID || p.ChoiceID != choice ||
		p.RequirementID != req.CurrentRequirementID || len(p.CommandID) != 36 || p.Feedback != nil {
		t.Fatalf("the run sent %s %s, want approval/decide of %s choosing %s", m.Method, m.Params, a.id, choice)
	}
	return m
}

// ack answers a decision with its ack.
func (c *fakeConn) ack(t *testing.T, m clientFrame) {
	t.Helper()
	var p msp.ApprovalDecideParams
	json.Unmarshal(m.Params, &p)
	res := mustJSON(msp.ApprovalDecideResult{ApprovalID: p.ApprovalID, CommandID: p.CommandID, Status: "accepted", Terminal: true})
	c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, res))
}

// refuse answers a request with an error.
func (c *fakeConn) refuse(t *testing.T, m clientFrame, e *msp.Error) {
	t.Helper()
	c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":%s}`, m.ID, mustJSON(e)))
}
