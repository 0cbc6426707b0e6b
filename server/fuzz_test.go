package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"unicode/utf8"

	"mspd/schema/msp"
	"mspd/session"
	"mspd/store/sqlite"
)

// The fuzz targets drive the inbound frame path of a real connection —
// transport, gate (envelope and schema), handler, session manager, SQLite
// store — with one fuzzed input between a handshake and a follow-up
// request, and check on every input that:
//
//   - nothing panics;
//   - every frame the server writes validates against the MSP schema
//     (results against their method's), and every error is typed: a code
//     of the registry and data.kind set;
//   - every well-formed request gets exactly one answer, with its id, and
//     nothing is answered twice;
//   - the connection stays usable: the follow-up request is answered with
//     a result;
//   - the outbox stays within its budget, and no frame written is over
//     the frame cap.
//
// One manager and store serve every iteration; each input gets its own
// connection. Inputs can name fuzzSession, which exists with a turn in it.

const (
	fuzzSession   = "0198f0aa-0000-7000-8000-00000000f022"
	fuzzFrameMax  = 16 << 10
	fuzzBudget    = 256 << 10
	fuzzInit      = `{"jsonrpc":"2.0","id":"fz-init","method":"initialize","params":{"clientInfo":{"name":"fuzz","version":"1"}}}`
	fuzzReady     = `{"jsonrpc":"2.0","method":"initialized"}`
	fuzzFollowUp  = `{"jsonrpc":"2.0","id":"fz-follow","method":"session/list","params":{"limit":1}}`
	fuzzFollowKey = `"fz-follow"`
)

// fuzzFixture is the server every iteration of a fuzz target shares.
type fuzzFixture struct {
	srv   *Server
	codes map[int]bool // the error registry
}

func newFuzzFixture(f *testing.F) *fuzzFixture {
	st, err := sqlite.Open(filepath.Join(f.TempDir(), "mspd.db"))
	if err != nil {
		f.Fatal(err)
	}
	m, err := session.New(context.Background(), session.Config{Store: st, Runner: instantRunner{},
		LogPath: "x.db", MaxFrameBytes: fuzzFrameMax, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Close(); st.Close() })
	ctx := context.Background()
	if _, attach, err := m.StartSession(ctx, nopSub{}, mustMarshal(msp.SessionStartParams{CommandID: newCommandID(), SessionID: fuzzSession})); err != nil {
		f.Fatal(err)
	} else {
		attach(ctx)
	}
	if _, launch, err := m.StartTurn(ctx, nil, mustMarshal(msp.TurnStartParams{CommandID: newCommandID(), SessionID: fuzzSession,
		Input: []msp.TurnInputPart{{Type: "text", Text: "hi"}}})); err != nil {
		f.Fatal(err)
	} else {
		launch()
	}
	srv, err := New(m, Config{MaxFrameBytes: fuzzFrameMax, QueueFrames: 64, QueueBytes: fuzzBudget, PingInterval: -1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	codes := make(map[int]bool)
	for _, c := range []int{msp.CodeParseError, msp.CodeInvalidRequest, msp.CodeMethodNotFound, msp.CodeInvalidParams,
		msp.CodeInternal, msp.CodeOverloaded, msp.CodeInputTooLarge, msp.CodeNotFound, msp.CodeSessionNotFound,
		msp.CodeSessionNotLoaded, msp.CodeCommandRejected, msp.CodeBackpressured, msp.CodeBoundaryPruned} {
		codes[c] = true
	}
	return &fuzzFixture{srv: srv, codes: codes}
}

// run serves one connection over t until its input ends and checks what
// it wrote. inbound lists the frames t carries, for the expectations.
func (fx *fuzzFixture) run(t *testing.T, tr transport, out func() []byte, inbound [][]byte) {
	c := newConn(fx.srv, tr, slog.New(slog.DiscardHandler))
	c.serve(context.Background())
	fx.check(t, out(), inbound)
	if _, peak := c.out.queuedBytes(); peak > fuzzBudget {
		t.Fatalf("the outbox held %d bytes, over its budget %d", peak, fuzzBudget)
	}
}

// check applies the invariants to the frames written (one per line).
func (fx *fuzzFixture) check(t *testing.T, written []byte, inbound [][]byte) {
	checker := fx.srv.val.NewFrameChecker()
	want := make(map[string]int) // answers owed, by canonical id
	others := 0                  // frames owed an answer at most
	for _, f := range inbound {
		checker.Check(f) // remembers each request's method, for its result
		if id, ok := wellFormedRequest(f); ok {
			want[id]++
		} else if !unanswered(f) {
			others++
		}
	}
	got, followed := fx.answers(t, checker, written)
	extra := 0
	for id, n := range got {
		if n < want[id] {
			t.Fatalf("request id %s answered %d times, want %d\nwritten:\n%s", id, n, want[id], written)
		}
		extra += n - want[id]
	}
	for id, n := range want {
		if got[id] == 0 {
			t.Fatalf("request id %s answered 0 times, want %d\nwritten:\n%s", id, n, written)
		}
	}
	// Other frames get one answer at most.
	if extra > others {
		t.Fatalf("%d answers to requests that were not sent\nwritten:\n%s", extra, written)
	}
	if !followed {
		t.Fatalf("the follow-up request got no result: the connection did not stay usable\nwritten:\n%s", written)
	}
}

// answers checks every frame written against the schema and the error
// registry, and counts the answers by canonical id; followed tells whether
// the follow-up request got a result.
func (fx *fuzzFixture) answers(t *testing.T, checker *msp.FrameChecker, written []byte) (got map[string]int, followed bool) {
	got = make(map[string]int)
	for line := range bytes.Lines(written) {
		frame := bytes.TrimSuffix(line, []byte("\n"))
		if len(frame) > fuzzFrameMax {
			t.Fatalf("the server wrote a %d-byte frame, over the %d-byte cap: %.300s", len(frame), fuzzFrameMax, frame)
		}
		if errs := checker.Check(frame); len(errs) > 0 {
			t.Fatalf("the server wrote a frame that is not valid MSP: %v\n%s", errs, frame)
		}
		var resp struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Error  *msp.Error      `json:"error"`
		}
		if err := json.Unmarshal(frame, &resp); err != nil {
			t.Fatalf("unreadable frame %s: %v", frame, err)
		}
		if resp.Method != "" {
			continue // a notification
		}
		if e := resp.Error; e != nil && (!fx.codes[e.Code] || e.Data.Kind == "") {
			t.Fatalf("untyped error (code %d, kind %q): %s", e.Code, e.Data.Kind, frame)
		}
		id := canonicalID(resp.ID)
		got[id]++
		if id == fuzzFollowKey && resp.Error == nil {
			followed = true
		}
	}
	return got, followed
}

// wellFormedRequest reports whether a frame is a request the server owes
// an answer carrying its id: a UTF-8 JSON object with "jsonrpc":"2.0", a
// string method and an id MSP accepts.
func wellFormedRequest(frame []byte) (string, bool) {
	if len(frame) > fuzzFrameMax || !utf8.Valid(frame) {
		return "", false
	}
	var env map[string]json.RawMessage
	if json.Unmarshal(frame, &env) != nil || string(env["jsonrpc"]) != `"2.0"` {
		return "", false
	}
	var method string
	if raw, ok := env["method"]; !ok || json.Unmarshal(raw, &method) != nil {
		return "", false
	}
	if _, ok := validID(env["id"]); !ok {
		return "", false
	}
	return canonicalID(env["id"]), true
}

// unanswered reports whether a frame is one the server must not answer: a
// UTF-8 notification, or a response (mspd sends no requests).
func unanswered(frame []byte) bool {
	if len(frame) > fuzzFrameMax || !utf8.Valid(frame) {
		return false
	}
	var env map[string]json.RawMessage
	if json.Unmarshal(frame, &env) != nil || string(env["jsonrpc"]) != `"2.0"` {
		return false
	}
	rawID, hasID := env["id"]
	rawMethod, hasMethod := env["method"]
	var method string
	switch {
	case hasMethod && !hasID:
		return json.Unmarshal(rawMethod, &method) == nil
	case hasID && !hasMethod:
		_, ok := validID(rawID)
		return ok && isResponse(env)
	}
	return false
}

// canonicalID renders an id so that the same id compares equal however it
// was spelled (escapes in a string).
func canonicalID(raw json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// frameTransport hands a list of frames to the connection as whole
// messages (as WebSocket does), then ends; it collects what is written.
type frameTransport struct {
	in    [][]byte
	limit int64
	mu    sync.Mutex
	out   bytes.Buffer
}

func (t *frameTransport) ReadFrame(ctx context.Context, in admitter) ([]byte, error) {
	if len(t.in) == 0 {
		return nil, io.EOF
	}
	f := t.in[0]
	t.in = t.in[1:]
	return readBounded(ctx, bytes.NewReader(f), t.limit, in)
}

func (t *frameTransport) WriteFrame(_ context.Context, frame []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.out.Write(frame)
	t.out.WriteByte('\n')
	return nil
}

func (t *frameTransport) Close(string, bool) error { return nil }

func (t *frameTransport) written() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.out.Bytes())
}

// FuzzFrame sends one fuzzed frame, as a whole message, between a
// handshake and a follow-up request.
// Its seed corpus (testdata/fuzz/FuzzFrame) holds a valid frame of every
// served method and the bad inputs the end-to-end tests send.
func FuzzFrame(f *testing.F) {
	fx := newFuzzFixture(f)
	f.Fuzz(func(t *testing.T, frame []byte) {
		inbound := [][]byte{[]byte(fuzzInit), []byte(fuzzReady), frame, []byte(fuzzFollowUp)}
		tr := &frameTransport{in: slices.Clone(inbound), limit: fuzzFrameMax}
		fx.run(t, tr, tr.written, inbound)
	})
}

// FuzzStdio sends fuzzed bytes on a stdio connection between a handshake
// and a follow-up request: any number of lines, CRs, empty and oversized
// lines.
// Its seed corpus (testdata/fuzz/FuzzStdio) is FuzzFrame's and a few
// multi-line inputs.
func FuzzStdio(f *testing.F) {
	fx := newFuzzFixture(f)
	f.Fuzz(func(t *testing.T, input []byte) {
		var in bytes.Buffer
		fmt.Fprintf(&in, "%s\n%s\n", fuzzInit, fuzzReady)
		in.Write(input)
		fmt.Fprintf(&in, "\n%s\n", fuzzFollowUp)
		var out bytes.Buffer
		tr := newLineTransport(bytes.NewReader(in.Bytes()), &out, nil, fuzzFrameMax)
		fx.run(t, tr, out.Bytes, stdioLines(in.Bytes()))
	})
}

// stdioLines splits input as the line transport does: LF-terminated lines
// (the last may lack its LF), blank ones skipped unless over the limit. A
// CR before the LF is kept: it counts towards the limit, and JSON takes it
// for whitespace.
func stdioLines(input []byte) [][]byte {
	var lines [][]byte
	for line := range bytes.Lines(input) {
		line = bytes.TrimSuffix(line, []byte("\n"))
		if len(line) <= fuzzFrameMax && len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		lines = append(lines, line)
	}
	return lines
}
