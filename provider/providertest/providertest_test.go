package providertest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// failures is a testing.TB that keeps the failures a server reports
// instead of failing the test.
type failures struct {
	testing.TB
	mu   sync.Mutex
	msgs []string
}

func (f *failures) Error(args ...any) { f.Errorf("%s", fmt.Sprint(args...)) }

func (f *failures) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func (f *failures) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.msgs...)
}

func text(body string) Reply {
	return func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, body) }
}

func post(t *testing.T, s *Server, path, body string) (*http.Response, string) {
	t.Helper()
	res, err := s.Client().Post(s.URL()+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// The script answers requests in order, stamps each answer with its
// number, records every request and, past its end, fails the test and
// answers with the wire's unscripted error.
func TestServerAnswersTheScriptInOrder(t *testing.T) {
	f := &failures{TB: t}
	s := New(f, Wire{
		Name:       "fake",
		Stamp:      func(h http.Header, n int) { h.Set("X-Request-Id", fmt.Sprint(n)) },
		Unscripted: func(msg string) Reply { return text("unscripted: " + msg) },
	}, text("one"), text("two"))

	for i, want := range []string{"one", "two"} {
		res, body := post(t, s, "/a", fmt.Sprintf(`{"n":%d}`, i+1))
		if body != want || res.Header.Get("X-Request-Id") != fmt.Sprint(i+1) {
			t.Errorf("request %d: %q, id %q; want %q, id %d", i+1, body, res.Header.Get("X-Request-Id"), want, i+1)
		}
	}
	if got := f.all(); len(got) != 0 {
		t.Fatalf("failures within the script: %q", got)
	}
	_, body := post(t, s, "/a", `{"n":3}`)
	if want := "unscripted: fake: request 3 has no scripted reply (2 scripted)"; body != want {
		t.Errorf("past the script: %q; want %q", body, want)
	}
	if got := f.all(); len(got) != 1 || !strings.Contains(got[0], "request 3") {
		t.Errorf("failures past the script: %q; want one naming request 3", got)
	}
	reqs := s.Requests()
	if len(reqs) != 3 || s.Count() != 3 {
		t.Fatalf("%d requests recorded (Count %d); want 3", len(reqs), s.Count())
	}
	for i, r := range reqs {
		if r.Method != http.MethodPost || r.Path != "/a" || r.Body["n"] != float64(i+1) || string(r.Raw) != fmt.Sprintf(`{"n":%d}`, i+1) {
			t.Errorf("request %d recorded as %+v", i+1, r)
		}
	}
}

// A misrouted request is answered by the wire, outside the script and the
// record; Check sees every recorded request, and a body that is not JSON
// fails the test.
func TestServerRoutesAndChecks(t *testing.T) {
	f := &failures{TB: t}
	var checked []string
	s := New(f, Wire{
		Name: "fake",
		Misrouted: func(r *http.Request) Reply {
			if r.URL.Path == "/a" {
				return nil
			}
			return text("not found")
		},
		Check: func(t testing.TB, r Request) { checked = append(checked, string(r.Raw)) },
	}, text("a"))

	if _, body := post(t, s, "/b", `{}`); body != "not found" {
		t.Errorf("misrouted: %q", body)
	}
	if s.Count() != 0 || len(checked) != 0 {
		t.Errorf("a misrouted request was recorded (%d) or checked (%q)", s.Count(), checked)
	}
	if _, body := post(t, s, "/a", `not json`); body != "a" {
		t.Errorf("routed: %q", body)
	}
	if got := f.all(); len(got) != 1 || !strings.Contains(got[0], "fake: request body is not JSON") {
		t.Errorf("failures %q; want the body that is not JSON", got)
	}
	if len(checked) != 1 || checked[0] != "not json" {
		t.Errorf("checked %q", checked)
	}
}

// Frames names each event after its payload's JSON type, and sends a
// payload without one as a bare data line.
func TestFramesNameEventsByType(t *testing.T) {
	w := httptest.NewRecorder()
	sse := StartSSE(w)
	sse.Frames(`{"type":"message_start","n":1}`, `{"object":"chat.completion.chunk"}`, `[DONE]`)
	sse.Send("ping", `{"type": "ping"}`)
	want := "event: message_start\ndata: {\"type\":\"message_start\",\"n\":1}\n\n" +
		"data: {\"object\":\"chat.completion.chunk\"}\n\n" +
		"data: [DONE]\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n"
	if got := w.Body.String(); got != want {
		t.Errorf("stream\n%s\nwant\n%s", got, want)
	}
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "text/event-stream" || !w.Flushed {
		t.Errorf("status %d, content type %q, flushed %v", w.Code, w.Header().Get("Content-Type"), w.Flushed)
	}
}
