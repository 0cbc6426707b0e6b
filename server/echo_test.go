package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"mspd/schema/msp"
)

// serveLines serves frames (after a handshake) on a stdio connection with
// the given frame cap, and returns the answers to them, handshake's left
// out, each checked to be valid MSP.
func serveLines(t *testing.T, frameCap int64, frames ...string) [][]byte {
	t.Helper()
	m, _ := testManager(t)
	srv, err := New(m, Config{MaxFrameBytes: frameCap, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var in strings.Builder
	in.WriteString(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}` + "\n")
	for _, f := range frames {
		in.WriteString(f + "\n")
	}
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { srv.ServeStdio(context.Background(), strings.NewReader(in.String()), &out); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("ServeStdio did not return at the end of its input")
	}
	checker := srv.val.NewFrameChecker()
	var answers [][]byte
	for line := range bytes.Lines(out.Bytes()) {
		frame := bytes.TrimSuffix(line, []byte("\n"))
		if errs := checker.Check(frame); len(errs) > 0 {
			t.Errorf("the server wrote a frame that is not valid MSP: %v\n%.300s", errs, frame)
		}
		answers = append(answers, frame)
	}
	if len(answers) == 0 {
		t.Fatal("no answer")
	}
	return answers[1:]
}

// answerOf decodes an error answer.
func answerOf(t *testing.T, frame []byte) (id json.RawMessage, e *msp.Error) {
	t.Helper()
	var resp struct {
		ID    json.RawMessage `json:"id"`
		Error *msp.Error      `json:"error"`
	}
	if err := json.Unmarshal(frame, &resp); err != nil {
		t.Fatalf("unreadable answer %.200s: %v", frame, err)
	}
	return resp.ID, resp.Error
}

// An error answer repeats little of the request, so that it stays small
// and under the frame cap whatever the request carried: an error of each
// finding of a long array, a long value or name quoted in a message
// (characters JSON escapes, or invalid UTF-8, grow when quoted). Such
// answers were several times the request, over the cap the server must
// never exceed (one to a 4 MB turn/start held 1.4 GB while it was built).
func TestErrorAnswersStayUnderTheFrameCap(t *testing.T) {
	const frameCap = 8 << 10
	long := strings.Repeat("<", 7000) // JSON escapes '<' as \u003c
	frames := []struct{ name, frame, kind string }{
		{"a finding for each of many items", `{"jsonrpc":"2.0","id":1,"method":"turn/start","params":{"commandId":"` + newCommandID() + `","sessionId":"x","input":[` + strings.TrimSuffix(strings.Repeat("1,", 3500), ",") + `]}}`, msp.KindInvalidParams},
		{"a long commandId", `{"jsonrpc":"2.0","id":2,"method":"session/start","params":{"commandId":"` + long + `"}}`, msp.KindInvalidParams},
		{"a long enum value", `{"jsonrpc":"2.0","id":3,"method":"turn/start","params":{"commandId":"` + newCommandID() + `","sessionId":"x","input":[{"type":"text","text":"x"}],"ifBusy":"` + long + `"}}`, msp.KindInvalidParams},
		{"a long method", `{"jsonrpc":"2.0","id":4,"method":"` + long + `","params":{}}`, msp.KindMethodNotFound},
		{"a long sessionId", `{"jsonrpc":"2.0","id":5,"method":"session/read","params":{"sessionId":"` + long + `"}}`, msp.KindSessionNotFound},
	}
	var in []string
	for _, f := range frames {
		in = append(in, f.frame)
	}
	in = append(in, `{"jsonrpc":"2.0","id":"after","method":"session/list","params":{}}`)
	answers := serveLines(t, frameCap, in...)
	if len(answers) != len(in) {
		t.Fatalf("%d answers to %d requests", len(answers), len(in))
	}
	for i, f := range frames {
		if len(answers[i]) > frameCap {
			t.Errorf("%s: a %d-byte answer to a %d-byte request, over the %d-byte cap", f.name, len(answers[i]), len(f.frame), frameCap)
		}
		if _, e := answerOf(t, answers[i]); e == nil || e.Data.Kind != f.kind {
			t.Errorf("%s: answer %.200s, want kind %s", f.name, answers[i], f.kind)
		}
	}
	if _, e := answerOf(t, answers[len(frames)]); e != nil {
		t.Errorf("the connection did not go on serving: %v", e)
	}
}

// A frame that is not UTF-8 (MSP frames are) is a parse error, answered
// with its id when that is itself UTF-8. The id was echoed as it came, so
// the server wrote a frame that was not UTF-8 either; and bytes decoded
// as U+FFFD grew threefold in every echo.
func TestFrameNotUTF8IsAParseError(t *testing.T) {
	answers := serveLines(t, 1<<20,
		`{"jsonrpc":"2.0","id":"a","method":"session/read","params":{"sessionId":"`+strings.Repeat("\xff", 100)+`"}}`,
		`{"jsonrpc":"2.0","id":"b\xff","method":"session/list","params":{}}`,
		`{"jsonrpc":"2.0","id":"after","method":"session/list","params":{}}`)
	if len(answers) != 3 {
		t.Fatalf("%d answers to 3 requests", len(answers))
	}
	for i, wantID := range []string{`"a"`, `null`} {
		id, e := answerOf(t, answers[i])
		if e == nil || e.Data.Kind != msp.KindParseError || string(id) != wantID {
			t.Errorf("answer %.200s, want a parseError for id %s", answers[i], wantID)
		}
	}
	if _, e := answerOf(t, answers[2]); e != nil {
		t.Errorf("the connection did not go on serving: %v", e)
	}
}

// A request's id is echoed as it was sent. The handler re-encoded it with
// json.Marshal, which escapes '<', '>' and '&' as six bytes each: an id of
// them came back six times its size, over the frame cap.
func TestIDEchoedAsSent(t *testing.T) {
	const frameCap = 4 << 10
	id := `"` + strings.Repeat("<&>", (maxIDBytes-2)/3) + `"`
	answers := serveLines(t, frameCap,
		`{"jsonrpc":"2.0","id":`+id+`,"method":"session/list","params":{}}`,
		`{"jsonrpc":"2.0","id":`+id+`,"method":"session/read","params":{"sessionId":"x"}}`)
	if len(answers) != 2 {
		t.Fatalf("%d answers to 2 requests", len(answers))
	}
	for _, a := range answers {
		if got, _ := answerOf(t, a); string(got) != id || len(a) > frameCap {
			t.Errorf("a %d-byte answer (cap %d) with id %.40s…, want the id as sent", len(a), frameCap, got)
		}
	}
}

// An id is echoed as sent, so the server takes only ids it can echo: a
// string id that is not UTF-8, or longer than maxIDBytes (which the
// budgets of pages and histories leave room for in an answer), is an
// invalidRequest answered with a null id; so is such an id recovered from
// a frame over the cap. The connection goes on serving.
func TestIDsTheServerCannotEchoAreRefused(t *testing.T) {
	const frameCap = 4 << 10
	long := `"` + strings.Repeat("i", maxIDBytes-1) + `"`
	answers := serveLines(t, frameCap,
		`{"jsonrpc":"2.0","id":`+long+`,"method":"session/list","params":{}}`,
		"{\"jsonrpc\":\"2.0\",\"id\":\"u\xff\",\"method\":\"session/list\",\"params\":{\"x\":\""+strings.Repeat("a", 2*frameCap)+"\"}}",
		`{"jsonrpc":"2.0","id":`+long+`,"method":"session/list","params":{"x":"`+strings.Repeat("a", 2*frameCap)+`"}}`,
		`{"jsonrpc":"2.0","id":"after","method":"session/list","params":{}}`)
	if len(answers) != 4 {
		t.Fatalf("%d answers to 4 requests", len(answers))
	}
	// Over the cap with no id it can echo, MSP answers parseError.
	for i, want := range []string{msp.KindInvalidRequest, msp.KindParseError, msp.KindParseError} {
		id, e := answerOf(t, answers[i])
		if e == nil || e.Data.Kind != want || string(id) != "null" {
			t.Errorf("answer %d: %.200s, want %s with a null id", i, answers[i], want)
		}
		if !utf8.Valid(answers[i]) {
			t.Errorf("answer %d is not UTF-8: %q", i, answers[i])
		}
	}
	if id, e := answerOf(t, answers[3]); e != nil || string(id) != `"after"` {
		t.Errorf("the connection did not go on serving: %.200s", answers[3])
	}
}

// A frame with an id but neither a method nor a result or error is no
// request and no response, so JSON-RPC 2.0 wants -32600 with its id. It
// was taken for a response and left unanswered, and its sender waited for
// ever. A response (result or error) still gets no answer.
func TestIdentifiedFrameWithoutMethodIsAnInvalidRequest(t *testing.T) {
	answers := serveLines(t, 1<<20,
		`{"jsonrpc":"2.0","id":"x2"}`,
		`{"jsonrpc":"2.0","id":3,"params":{}}`,
		`{"jsonrpc":"2.0","id":"r","result":{}}`,
		`{"jsonrpc":"2.0","id":"e","error":{"code":1,"message":"m"}}`,
		`{"jsonrpc":"2.0","id":"after","method":"session/list","params":{}}`)
	if len(answers) != 3 {
		t.Fatalf("%d answers, want 3 (two invalid requests, then session/list): %q", len(answers), answers)
	}
	for i, wantID := range []string{`"x2"`, `3`} {
		id, e := answerOf(t, answers[i])
		if e == nil || e.Code != msp.CodeInvalidRequest || e.Data.Kind != msp.KindInvalidRequest || string(id) != wantID {
			t.Errorf("answer %.200s, want -32600 invalidRequest for id %s", answers[i], wantID)
		}
	}
	if id, e := answerOf(t, answers[2]); e != nil || string(id) != `"after"` {
		t.Errorf("the connection did not go on serving: %.200s", answers[2])
	}
}
