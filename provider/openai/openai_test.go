package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"mspd/modelretry"
	"mspd/modelretry/retrytest"
	"mspd/provider"
	"mspd/provider/openai"
	"mspd/provider/openai/openaitest"
	"mspd/schema/msp"
	"mspd/turn"
	"mspd/turn/turntest"
)

// testKey is shaped like a real project key so redaction is exercised on
// the real pattern too.
const testKey = "sk-proj-TESTKEY0123456789abcdefghijSECRET"

// newModel returns a Model on srv; mod adjusts the config.
func newModel(t *testing.T, srv *openaitest.Server, mod func(*openai.Config)) *openai.Model {
	t.Helper()
	cfg := openai.Config{Endpoint: provider.Endpoint{APIKey: testKey, BaseURL: srv.URL(), Model: "gpt-4o-mini", HTTPClient: srv.Client()}}
	if mod != nil {
		mod(&cfg)
	}
	m, err := openai.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

var hello = provider.Request{Messages: []provider.Message{{Role: provider.RoleUser, Text: "Hi"}}, MaxTokens: 64, Attempt: 1}

// stream runs one request and collects its text.
func stream(t *testing.T, m provider.Model, req provider.Request) (string, provider.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var text strings.Builder
	resp, err := m.Stream(ctx, req, func(s string) { text.WriteString(s) })
	if ctx.Err() != nil {
		t.Fatalf("Stream did not return within the test deadline")
	}
	return text.String(), resp, err
}

func providerError(t *testing.T, err error) *provider.Error {
	t.Helper()
	var pe *provider.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *provider.Error", err, err)
	}
	return pe
}

func TestStreamAnswer(t *testing.T) {
	srv := openaitest.New(t, "/v1", openaitest.Stream(
		openaitest.Role(), openaitest.Delta("Hel"), openaitest.Delta("lo"), openaitest.Delta(" there"),
		openaitest.Finish("stop"), openaitest.Usage(12, 16, 4, 3), openaitest.Done))
	text, resp, err := stream(t, newModel(t, srv, nil), hello)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	want := provider.Response{FinishReason: provider.FinishStop, Model: openaitest.Model,
		Usage: &provider.Usage{InputTokens: 12, OutputTokens: 16, CachedTokens: 4, ReasoningTokens: 3}}
	if text != "Hello there" || !reflect.DeepEqual(resp, want) {
		t.Errorf("got %q %+v (usage %+v), want %q %+v", text, resp, resp.Usage, "Hello there", want)
	}
	if n := srv.Count(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestFinishReasons(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frames []string
		want   string
	}{
		{"stop", []string{openaitest.Finish("stop")}, provider.FinishStop},
		{"length", []string{openaitest.Finish("length")}, provider.FinishLength},
		{"content_filter", []string{openaitest.Finish("content_filter")}, provider.FinishContentFilter},
		{"tool_calls without calls", []string{openaitest.Finish("tool_calls")}, provider.FinishToolCalls},
		{"refusal is a content filter", []string{openaitest.Refusal("I can't help with that."), openaitest.Finish("stop")}, provider.FinishContentFilter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frames := append([]string{openaitest.Role(), openaitest.Delta("x")}, tc.frames...)
			frames = append(frames, openaitest.Usage(1, 1, 0, 0), openaitest.Done)
			srv := openaitest.New(t, "/v1", openaitest.Stream(frames...))
			_, resp, err := stream(t, newModel(t, srv, nil), hello)
			if err != nil || resp.FinishReason != tc.want {
				t.Errorf("got %q, %v; want %q", resp.FinishReason, err, tc.want)
			}
		})
	}
}

// TestStreamEnds covers how a stream may end without an error frame.
func TestStreamEnds(t *testing.T) {
	t.Run("usage chunk missing", func(t *testing.T) {
		srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Role(), openaitest.Delta("Hi"),
			openaitest.Finish("stop"), openaitest.Done))
		text, resp, err := stream(t, newModel(t, srv, nil), hello)
		if err != nil || text != "Hi" || resp.Usage != nil || resp.FinishReason != provider.FinishStop {
			t.Errorf("got %q %+v %v; want Hi, stop, nil usage", text, resp, err)
		}
	})
	t.Run("cut after finish, before usage and DONE", func(t *testing.T) {
		// The answer is whole; only the accounting is lost.
		srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Role(), openaitest.Delta("Hi"),
			openaitest.Finish("stop")))
		_, resp, err := stream(t, newModel(t, srv, nil), hello)
		if err != nil || resp.Usage != nil || resp.FinishReason != provider.FinishStop {
			t.Errorf("got %+v %v; want stop with nil usage", resp, err)
		}
	})
	t.Run("DONE without finish_reason", func(t *testing.T) {
		srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Role(), openaitest.Delta("Hi"),
			openaitest.Done))
		_, resp, err := stream(t, newModel(t, srv, nil), hello)
		if err != nil || resp.FinishReason != "" {
			t.Errorf("got %+v %v; want success with no finish reason", resp, err)
		}
	})
	t.Run("cut before finish and DONE", func(t *testing.T) {
		srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Role(), openaitest.Delta("Hel")))
		text, _, err := stream(t, newModel(t, srv, nil), hello)
		pe := providerError(t, err)
		if text != "Hel" || pe.Kind != "streamInterrupted" || pe.HTTPStatus != 0 {
			t.Errorf("got %q %+v", text, pe)
		}
	})
}

// TestErrorMapping is the error table, one request each, through the SDK.
func TestErrorMapping(t *testing.T) {
	type want struct {
		kind    string
		status  int
		header  http.Header
		message string // a substring
	}
	for _, tc := range []struct {
		name  string
		reply openaitest.Reply
		cfg   func(*openai.Config)
		want  want
	}{
		{"429 rate limit with retry-after-ms",
			openaitest.Error(429, openaitest.RateLimitBody, "Retry-After-Ms", "1500", "Retry-After", "2"),
			nil, want{"rateLimited", 429, http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"2"}}, "try again in 20s"}},
		{"429 insufficient_quota",
			openaitest.Error(429, openaitest.QuotaBody),
			nil, want{"quotaExhausted", 429, nil, "exceeded your current quota"}},
		{"429 quota by type only",
			openaitest.Error(429, `{"error":{"message":"quota","type":"insufficient_quota","param":null,"code":null}}`),
			nil, want{"quotaExhausted", 429, nil, "quota"}},
		{"400 context_length_exceeded",
			openaitest.Error(400, openaitest.ContextLengthBody),
			nil, want{"contextLengthExceeded", 400, nil, "maximum context length"}},
		{"404 model_not_found",
			openaitest.Error(404, `{"error":{"message":"The model 'gpt-9' does not exist","type":"invalid_request_error","param":null,"code":"model_not_found"}}`),
			nil, want{"notFound", 404, nil, "does not exist"}},
		{"500 status decides",
			openaitest.Error(500, openaitest.ServerErrorBody),
			nil, want{"", 500, nil, "The server had an error"}},
		{"503 with x-should-retry and azure delay",
			openaitest.Error(503, openaitest.OverloadedBody, "X-Should-Retry", "true", "X-Ms-Retry-After-Ms", "250"),
			nil, want{"", 503, http.Header{"X-Should-Retry": {"true"}, "X-Ms-Retry-After-Ms": {"250"}}, "overloaded"}},
		{"502 html body",
			openaitest.Error(502, "<html><body><h1>502 Bad Gateway</h1></body></html>"),
			nil, want{"", 502, nil, "Bad Gateway"}},
		{"503 error member not an object",
			openaitest.Error(503, `{"error":"upstream unavailable"}`, "Retry-After", "1"),
			nil, want{"", 503, http.Header{"Retry-After": {"1"}}, "Service Unavailable"}},
		{"400 vLLM top-level error",
			openaitest.Error(400, `{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}`),
			nil, want{"", 400, nil, "max_tokens is too large"}},
		{"connection reset before headers",
			openaitest.Reset(),
			nil, want{"connectionError", 0, nil, "no response"}},
		{"idle before headers",
			openaitest.StallHeaders(),
			func(c *openai.Config) { c.IdleTimeout = 30 * time.Millisecond }, want{"timeout", 0, nil, "no response from the server within 30ms"}},
		{"http client timeout before headers",
			openaitest.StallHeaders(),
			func(c *openai.Config) { c.HTTPClient = &http.Client{Timeout: 30 * time.Millisecond} }, want{"timeout", 0, nil, "timed out"}},
		{"idle mid-stream",
			openaitest.StreamStall(openaitest.Role(), openaitest.Delta("Hel")),
			func(c *openai.Config) { c.IdleTimeout = 30 * time.Millisecond }, want{"timeout", 0, nil, "no data from the server for 30ms"}},
		{"connection dropped mid-body",
			openaitest.StreamAbort(openaitest.Role(), openaitest.Delta("Hel")),
			nil, want{"streamInterrupted", 0, nil, "unexpected EOF"}},
		{"malformed chunk",
			openaitest.Stream(openaitest.Role(), `{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"Hel`),
			nil, want{"streamInterrupted", 0, nil, "the stream broke"}},
		{"frame server_error",
			openaitest.Stream(openaitest.Role(), openaitest.ErrorFrame("The server had an error while processing your request.", "server_error", "")),
			nil, want{"serverError", 500, nil, "The server had an error"}},
		{"frame overloaded",
			openaitest.Stream(openaitest.Role(), openaitest.ErrorFrame("slow down", "overloaded", "slow_down")),
			nil, want{"overloaded", 503, nil, "slow down"}},
		{"frame rate limit",
			openaitest.Stream(openaitest.Role(), openaitest.ErrorFrame("Please try again in 1.2s.", "requests", "rate_limit_exceeded")),
			nil, want{"rateLimited", 429, nil, "try again in 1.2s"}},
		{"frame insufficient_quota",
			openaitest.Stream(openaitest.ErrorFrame("quota", "insufficient_quota", "insufficient_quota")),
			nil, want{"quotaExhausted", 429, nil, "quota"}},
		{"frame vLLM numeric code",
			openaitest.Stream(openaitest.Role(), `{"error":{"object":"error","message":"engine dead","type":"InternalServerError","param":null,"code":500}}`),
			nil, want{"serverError", 500, nil, "engine dead"}},
		{"frame vLLM numeric code, unknown type",
			openaitest.Stream(openaitest.Role(), `{"error":{"object":"error","message":"busy","type":"EngineBusy","param":null,"code":503}}`),
			nil, want{"", 503, nil, "busy"}},
		{"frame unknown",
			openaitest.Stream(openaitest.Role(), openaitest.ErrorFrame("something odd", "weird_error", "")),
			nil, want{"streamInterrupted", 0, nil, "something odd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := openaitest.New(t, "/v1", tc.reply)
			_, _, err := stream(t, newModel(t, srv, tc.cfg), hello)
			pe := providerError(t, err)
			got := want{pe.Kind, pe.HTTPStatus, pe.Header, pe.Message}
			if got.kind != tc.want.kind || got.status != tc.want.status || !reflect.DeepEqual(got.header, tc.want.header) ||
				!strings.Contains(got.message, tc.want.message) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
			if n := srv.Count(); n != 1 {
				t.Errorf("%d requests, want exactly 1 (SDK retries must be off)", n)
			}
		})
	}
}

// TestIdleMeansSilence: the watchdog measures the server's silence, not
// the stream's length or the time onText takes. Each case runs in a
// synctest bubble: the waits below are on the bubble's fake clock, as is
// the watchdog, so the timings are exact and take no time.
func TestIdleMeansSilence(t *testing.T) {
	t.Run("keep-alive comments", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := openaitest.NewInMemory(t, "/v1", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
				f := w.(http.Flusher)
				fmt.Fprintf(w, "data: %s\n\n", openaitest.Role())
				for range 8 {
					f.Flush()
					<-time.After(15 * time.Millisecond)
					fmt.Fprint(w, ": keep-alive\n\n")
				}
				for _, p := range openaitest.Answer("late")[1:] {
					fmt.Fprintf(w, "data: %s\n\n", p)
				}
			})
			text, _, err := stream(t, newModel(t, srv, func(c *openai.Config) { c.IdleTimeout = 60 * time.Millisecond }), hello)
			if err != nil || text != "late" {
				t.Errorf("got %q, %v", text, err)
			}
		})
	})
	t.Run("slow onText", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := openaitest.NewInMemory(t, "/v1", openaitest.Stream(openaitest.Answer("a", "b", "c")...))
			m := newModel(t, srv, func(c *openai.Config) { c.IdleTimeout = 30 * time.Millisecond })
			_, err := m.Stream(context.Background(), hello, func(string) { <-time.After(50 * time.Millisecond) })
			if err != nil {
				t.Errorf("Stream: %v", err)
			}
		})
	})
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	m, err := openai.New(openai.Config{Endpoint: provider.Endpoint{APIKey: testKey, BaseURL: "http://" + addr + "/v1", Model: "m"}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = stream(t, m, hello)
	pe := providerError(t, err)
	if pe.Kind != "connectionError" || pe.HTTPStatus != 0 || !strings.Contains(pe.Message, "refused") {
		t.Errorf("got %+v", pe)
	}
	if strings.Contains(pe.Error(), "http://") {
		t.Errorf("message %q repeats the URL", pe.Error())
	}
}

// TestKeyNeverInErrors: OpenAI's 401 quotes the key back; a proxy may
// echo it whole. Neither reaches the error.
func TestKeyNeverInErrors(t *testing.T) {
	body := fmt.Sprintf(`{"error":{"message":"Incorrect API key provided: %s. Also seen as sk-proj-********************abcd and Bearer %s.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, testKey, testKey)
	for _, tc := range []struct {
		name  string
		reply openaitest.Reply
	}{
		{"401 body", openaitest.Error(401, body, "Www-Authenticate", "Bearer "+testKey)},
		{"error frame", openaitest.Stream(openaitest.Role(), `{"error":{"message":"bad key `+testKey+`","type":"server_error","param":null,"code":null}}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := openaitest.New(t, "/v1", tc.reply)
			_, _, err := stream(t, newModel(t, srv, nil), hello)
			pe := providerError(t, err)
			if tc.name == "401 body" && pe.HTTPStatus != 401 {
				t.Errorf("status %d, want 401", pe.HTTPStatus)
			}
			if got := srv.Requests()[0].Header.Get("Authorization"); got != "Bearer "+testKey {
				t.Errorf("Authorization %q, want the key sent", got)
			}
			var dump strings.Builder
			for e := error(pe); e != nil; e = errors.Unwrap(e) {
				fmt.Fprintf(&dump, "%v|%+v|%#v|", e, e, e)
			}
			fmt.Fprintf(&dump, "%s|%v|%#v", pe.Message, pe.Header, *pe)
			for _, secret := range []string{testKey, "TESTKEY", "abcd"} {
				if strings.Contains(dump.String(), secret) {
					t.Errorf("error text contains %q: %s", secret, dump.String())
				}
			}
			if !strings.Contains(pe.Message, "Incorrect API key") && tc.name == "401 body" {
				t.Errorf("message %q lost its meaning", pe.Message)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	srv := openaitest.New(t, "/v1", openaitest.StreamStall(openaitest.Role(), openaitest.Delta("Hel")))
	m := newModel(t, srv, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := m.Stream(ctx, hello, func(string) { cancel() })
		done <- err
	}()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Errorf("got %v (%T), want context.Canceled unwrapped", err, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stream did not return after cancellation")
	}
}

func TestCancelWhileWaitingForHeaders(t *testing.T) {
	srv := openaitest.New(t, "/v1", openaitest.StallHeaders())
	m := newModel(t, srv, nil)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	_, err := m.Stream(ctx, hello, func(string) {})
	if err != context.Canceled || time.Since(start) > 5*time.Second {
		t.Errorf("got %v after %v, want context.Canceled promptly", err, time.Since(start))
	}
}

func TestRequestBody(t *testing.T) {
	srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Answer("ok")...))
	req := provider.Request{Model: "gpt-4.1", MaxTokens: 300, Attempt: 3, Messages: []provider.Message{
		{Role: provider.RoleUser, Text: "Hi"},
		{Role: provider.RoleAssistant, Text: "Hello! How can I help?"},
		{Role: provider.RoleUser, Text: "Tell me a joke."},
	}}
	if _, _, err := stream(t, newModel(t, srv, func(c *openai.Config) { c.Organization, c.Project = "org-1", "proj-1" }), req); err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	want := map[string]any{
		"model": "gpt-4.1",
		"messages": []any{
			map[string]any{"role": "user", "content": "Hi"},
			map[string]any{"role": "assistant", "content": "Hello! How can I help?"},
			map[string]any{"role": "user", "content": "Tell me a joke."},
		},
		"max_completion_tokens": float64(300),
		"stream":                true,
		"stream_options":        map[string]any{"include_usage": true},
	}
	if !reflect.DeepEqual(r.Body, want) {
		t.Errorf("body %s\nwant %v", r.Raw, want)
	}
	for name, want := range map[string]string{
		"Authorization":           "Bearer " + testKey,
		"Content-Type":            "application/json",
		"X-Stainless-Retry-Count": "2", // mspd's retries so far, not the SDK's
		"Openai-Organization":     "org-1",
		"Openai-Project":          "proj-1",
	} {
		if got := r.Header.Get(name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
}

func TestConfig(t *testing.T) {
	t.Run("max_tokens for older servers", func(t *testing.T) {
		srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Answer("ok")...))
		if _, _, err := stream(t, newModel(t, srv, func(c *openai.Config) { c.MaxTokensField = openai.MaxTokens }), hello); err != nil {
			t.Fatal(err)
		}
		b := srv.Requests()[0].Body
		if b["max_tokens"] != float64(64) || b["max_completion_tokens"] != nil {
			t.Errorf("body %s", srv.Requests()[0].Raw)
		}
	})
	t.Run("request model defaults to config", func(t *testing.T) {
		srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Answer("ok")...))
		if _, _, err := stream(t, newModel(t, srv, nil), hello); err != nil {
			t.Fatal(err)
		}
		if got := srv.Requests()[0].Body["model"]; got != "gpt-4o-mini" {
			t.Errorf("model %v", got)
		}
	})
	t.Run("system", func(t *testing.T) {
		srv := openaitest.New(t, "/v1")
		if s := newModel(t, srv, nil).System(); s != "openai" {
			t.Errorf("default System %q", s)
		}
		if s := newModel(t, srv, func(c *openai.Config) { c.System = "vllm" }).System(); s != "vllm" {
			t.Errorf("configured System %q", s)
		}
	})
	for _, tc := range []struct {
		name string
		cfg  openai.Config
	}{
		{"no model", openai.Config{}},
		{"bad max tokens field", openai.Config{Endpoint: provider.Endpoint{Model: "m"}, MaxTokensField: "max_output_tokens"}},
		{"relative base URL", openai.Config{Endpoint: provider.Endpoint{Model: "m", BaseURL: "localhost:8000/v1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := openai.New(tc.cfg); err == nil {
				t.Error("New accepted it")
			}
		})
	}
	t.Run("unsupported role", func(t *testing.T) {
		srv := openaitest.New(t, "/v1")
		_, _, err := stream(t, newModel(t, srv, nil), provider.Request{Messages: []provider.Message{{Role: "system", Text: "x"}}})
		if pe := providerError(t, err); pe.Kind != "invalidRequest" || srv.Count() != 0 {
			t.Errorf("got %+v after %d requests", pe, srv.Count())
		}
	})
}

// TestEnvironmentIgnored: OPENAI_* variables must not redirect requests or
// swap the key; mspd's configuration is the only source.
func TestEnvironmentIgnored(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_API_KEY", "sk-from-the-environment")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-Leak: yes")
	srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Answer("ok")...))
	if _, _, err := stream(t, newModel(t, srv, nil), hello); err != nil {
		t.Fatal(err)
	}
	h := srv.Requests()[0].Header
	if h.Get("Authorization") != "Bearer "+testKey || h.Get("X-Leak") != "" {
		t.Errorf("headers %v", h)
	}
}

// TestBaseURL: compatible servers mount the API under other prefixes.
func TestBaseURL(t *testing.T) {
	for _, prefix := range []string{"/v1", "/openai/v1", ""} {
		for _, slash := range []string{"", "/"} {
			t.Run(prefix+slash, func(t *testing.T) {
				srv := openaitest.New(t, prefix, openaitest.Stream(openaitest.Answer("ok")...))
				m := newModel(t, srv, func(c *openai.Config) { c.BaseURL = srv.URL() + slash; c.APIKey = "" })
				text, _, err := stream(t, m, hello)
				if err != nil || text != "ok" {
					t.Fatalf("got %q, %v", text, err)
				}
				r := srv.Requests()[0]
				if r.Path != prefix+"/chat/completions" || r.Header.Get("Authorization") != "" {
					t.Errorf("path %q, authorization %q", r.Path, r.Header.Get("Authorization"))
				}
			})
		}
	}
}

func TestStructuredOutputRequest(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`)
	srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.Answer(`{"answer":`, `"42"}`)...))
	req := hello
	req.ResponseSchema = schema
	text, resp, err := stream(t, newModel(t, srv, nil), req)
	if err != nil || text != `{"answer":"42"}` || resp.StructuredOutput != provider.StructuredNative {
		t.Fatalf("got %q %+v %v", text, resp, err)
	}
	var wantSchema any
	_ = json.Unmarshal(schema, &wantSchema)
	want := map[string]any{"type": "json_schema", "json_schema": map[string]any{
		"name": "response", "schema": wantSchema, "strict": false}}
	if got := srv.Requests()[0].Body["response_format"]; !reflect.DeepEqual(got, want) {
		t.Errorf("response_format %v\nwant %v", got, want)
	}
}

// --- through the turn runner ---

// notice and turnNotice are what a scenario checks of the model-layer and
// turn-layer retry notices.
type (
	notice     = turntest.ModelRetry
	turnNotice = turntest.TurnRetry
)

type turnRun struct {
	out   turn.Outcome
	sink  *turntest.Sink
	clock *retrytest.Clock
	start time.Time
}

// runTurn runs one turn through the real runner on a fake clock, advancing
// the clock by each backoff as soon as the runner sleeps in it.
func runTurn(t *testing.T, m provider.Model, spec turn.Spec, start time.Time, mod func(*turn.Config)) turnRun {
	t.Helper()
	clk := retrytest.NewClock(start)
	cfg := turn.Config{Model: m, Engine: &modelretry.Engine{Clock: clk, Rand: retrytest.Fixed(0.5)},
		Policy: modelretry.DefaultPolicy(), DefaultMaxTokens: 256, ModelMaxTokens: 4096}
	if mod != nil {
		mod(&cfg)
	}
	r := turn.NewRunner(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sink := &turntest.Sink{}
	done := make(chan turn.Outcome, 1)
	go func() { o := r.Run(ctx, spec, sink); sink.Settle(o); done <- o }()
	advCtx, stopAdv := context.WithCancel(ctx)
	advDone := make(chan struct{})
	go func() {
		defer close(advDone)
		for clk.WaitForSleepers(advCtx, 1) == nil {
			s := clk.Sleeps()
			clk.Advance(s[len(s)-1])
		}
	}()
	var out turn.Outcome
	select {
	case out = <-done:
	case <-ctx.Done():
		t.Fatalf("turn did not end; events so far: %s", sink.Methods())
	}
	stopAdv()
	<-advDone
	return turnRun{out: out, sink: sink, clock: clk, start: start}
}

// items returns the closing status and text of each agentMessage item.
func items(s *turntest.Sink) [][2]string {
	var out [][2]string
	for _, p := range turntest.Of[*msp.ItemParams](s, msp.NotifyItemCompleted) {
		out = append(out, [2]string{p.Item.Status, *p.Item.Text})
	}
	return out
}

func TestTurnScenarios(t *testing.T) {
	const (
		answer    = "item/started, item/delta, item/completed, session/tokenUsage"
		modelThen = "turn/modelRetryScheduled, " + answer
	)
	ok := openaitest.Stream(openaitest.Answer("Hel", "lo")...) // 2 output tokens
	schema := json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`)

	type scenario struct {
		name     string
		replies  func(start time.Time) []openaitest.Reply
		model    func(*openai.Config)
		spec     func(*turn.Spec)
		methods  string
		model_   []notice
		turn_    []turnNotice
		items    [][2]string
		terminal string
		errText  string // substring of the turn error's message
		attempts msp.Attempts
		check    func(t *testing.T, srv *openaitest.Server, r turnRun)
	}
	fixed := func(r ...openaitest.Reply) func(time.Time) []openaitest.Reply {
		return func(time.Time) []openaitest.Reply { return r }
	}
	oa := func(attempt int, delay int64, kind string, status int) notice {
		return turntest.NewModelRetry(attempt, 5, delay, "openai", kind, status)
	}
	scenarios := []scenario{
		{
			name: "normal answer with usage",
			replies: fixed(openaitest.Stream(openaitest.Role(), openaitest.Delta("Hel"), openaitest.Delta("lo"),
				openaitest.Finish("stop"), openaitest.Usage(12, 16, 4, 3), openaitest.Done)),
			methods: answer, items: [][2]string{{"completed", "Hello"}}, terminal: "completed",
			attempts: msp.Attempts{Count: 1, OutputTokens: 16, UsageComplete: true},
			check: func(t *testing.T, _ *openaitest.Server, r turnRun) {
				if r.out.Answer != "Hello" {
					t.Errorf("answer %q", r.out.Answer)
				}
				want := &msp.TokenUsage{InputTokens: 12, OutputTokens: 16, CachedTokens: 4, ReasoningTokens: 3}
				if !reflect.DeepEqual(r.out.Completed.Usage, want) {
					t.Errorf("usage %+v", r.out.Completed.Usage)
				}
				u := turntest.Of[*msp.SessionTokenUsageParams](r.sink, msp.NotifySessionTokenUsage)
				if len(u) != 1 || u[0].FinishReason != "stop" || u[0].ModelID != openaitest.Model || u[0].TotalTokens != 28 {
					t.Errorf("tokenUsage %s", turntest.JSON(u[0]))
				}
			},
		},
		{
			name:     "429 retry-after-ms",
			replies:  fixed(openaitest.Error(429, openaitest.RateLimitBody, "Retry-After-Ms", "1500"), ok),
			methods:  modelThen,
			model_:   []notice{oa(1, 1500, "rateLimited", 429)},
			terminal: "completed", attempts: msp.Attempts{Count: 2, OutputTokens: 2, UsageComplete: true},
			check: sleeps(1500 * time.Millisecond),
		},
		{
			name: "429 retry-after HTTP date",
			replies: func(start time.Time) []openaitest.Reply {
				date := start.Add(3 * time.Second).UTC().Format(http.TimeFormat)
				return []openaitest.Reply{openaitest.Error(429, openaitest.RateLimitBody, "Retry-After", date), ok}
			},
			methods:  modelThen,
			model_:   []notice{oa(1, 3000, "rateLimited", 429)},
			terminal: "completed", attempts: msp.Attempts{Count: 2, OutputTokens: 2, UsageComplete: true},
			check: sleeps(3 * time.Second),
		},
		{
			name:     "429 retry-after seconds",
			replies:  fixed(openaitest.Error(429, openaitest.RateLimitBody, "Retry-After", "2"), ok),
			methods:  modelThen,
			model_:   []notice{oa(1, 2000, "rateLimited", 429)},
			terminal: "completed", attempts: msp.Attempts{Count: 2, OutputTokens: 2, UsageComplete: true},
		},
		{
			name:     "429 message delay without headers",
			replies:  fixed(openaitest.Error(429, openaitest.RateLimitBody), ok),
			methods:  modelThen,
			model_:   []notice{oa(1, 20000, "rateLimited", 429)}, // "Please try again in 20s."
			terminal: "completed", attempts: msp.Attempts{Count: 2, OutputTokens: 2, UsageComplete: true},
		},
		{
			name:     "429 insufficient_quota is not retried",
			replies:  fixed(openaitest.Error(429, openaitest.QuotaBody, "Retry-After", "1")),
			methods:  "",
			terminal: "failed", errText: "quota exhausted (HTTP 429)",
			attempts: msp.Attempts{Count: 1, UsageComplete: true},
		},
		{
			name: "500 502 503 retried",
			replies: fixed(openaitest.Error(500, openaitest.ServerErrorBody),
				openaitest.Error(502, "<html><body><h1>502 Bad Gateway</h1></body></html>"),
				openaitest.Error(503, openaitest.OverloadedBody), ok),
			methods: "turn/modelRetryScheduled, turn/modelRetryScheduled, " + modelThen,
			model_: []notice{oa(1, 250, "serverError", 500), oa(2, 500, "serverError", 502),
				oa(3, 1000, "overloaded", 503)},
			terminal: "completed", attempts: msp.Attempts{Count: 4, OutputTokens: 2, UsageComplete: true},
			check: sleeps(250*time.Millisecond, 500*time.Millisecond, time.Second),
		},
		{
			name: "529 with x-should-retry true",
			replies: fixed(openaitest.Error(529, `{"error":{"message":"Overloaded","type":"overloaded_error","param":null,"code":null}}`,
				"X-Should-Retry", "true"), ok),
			methods: modelThen, model_: []notice{oa(1, 250, "overloaded", 529)},
			terminal: "completed", attempts: msp.Attempts{Count: 2, OutputTokens: 2, UsageComplete: true},
		},
		{
			name: "400 with x-should-retry true",
			replies: fixed(openaitest.Error(400, `{"error":{"message":"Invalid request, please retry","type":"invalid_request_error","param":null,"code":null}}`,
				"X-Should-Retry", "true"), ok),
			methods: modelThen, model_: []notice{oa(1, 250, "invalidRequest", 400)},
			terminal: "completed", attempts: msp.Attempts{Count: 2, OutputTokens: 2, UsageComplete: true},
		},
		{
			name:     "500 with x-should-retry false",
			replies:  fixed(openaitest.Error(500, openaitest.ServerErrorBody, "X-Should-Retry", "false")),
			terminal: "failed", errText: "server error (HTTP 500)",
			attempts: msp.Attempts{Count: 1, UsageComplete: true},
		},
		{
			name:     "400 context_length_exceeded",
			replies:  fixed(openaitest.Error(400, openaitest.ContextLengthBody)),
			terminal: "failed", errText: "context too long (HTTP 400)",
			attempts: msp.Attempts{Count: 1, UsageComplete: true},
		},
		{
			name: "401 is not retried",
			replies: fixed(openaitest.Error(401, `{"error":{"message":"Incorrect API key provided: `+testKey+`.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
				"Www-Authenticate", `Bearer realm="OpenAI API"`)),
			terminal: "failed", errText: "not authorized (HTTP 401)",
			attempts: msp.Attempts{Count: 1, UsageComplete: true},
			check: func(t *testing.T, _ *openaitest.Server, r turnRun) {
				if m := r.out.Completed.Error.Message; strings.Contains(m, "TESTKEY") {
					t.Errorf("turn error leaks the key: %q", m)
				}
			},
		},
		{
			name:     "connection reset before headers",
			replies:  fixed(openaitest.Reset(), ok),
			methods:  modelThen,
			model_:   []notice{oa(1, 250, "connectionError", 0)},
			terminal: "completed", attempts: msp.Attempts{Count: 2, OutputTokens: 2},
		},
		{
			name: "stream cut after deltas",
			replies: fixed(openaitest.Stream(openaitest.Role(), openaitest.Delta("Hel"), openaitest.Delta("lo wor")),
				ok),
			methods: "item/started, item/delta, item/completed, turn/retryScheduled, " + answer,
			turn_:   []turnNotice{turntest.NewTurnRetry(1, 5, 250, "provider stream disconnected")},
			items:   [][2]string{{"failed", "Hello wor"}, {"completed", "Hello"}},
			// The cut attempt's usage never came: a floor, not a count.
			terminal: "completed", attempts: msp.Attempts{Count: 2, OutputTokens: 2},
			check: distinctItems,
		},
		{
			name: "connection dropped mid-body",
			replies: fixed(openaitest.StreamAbort(openaitest.Role(), openaitest.Delta("Hel")),
				ok),
			methods:  "item/started, item/delta, item/completed, turn/retryScheduled, " + answer,
			turn_:    []turnNotice{turntest.NewTurnRetry(1, 5, 250, "provider stream disconnected")},
			items:    [][2]string{{"failed", "Hel"}, {"completed", "Hello"}},
			terminal: "completed", attempts: msp.Attempts{Count: 2, OutputTokens: 2},
		},
		{
			// The 200 stream had begun: that attempt's usage is unknown.
			name: "error frame before any content",
			replies: fixed(openaitest.Stream(openaitest.Role(),
				openaitest.ErrorFrame("The server had an error while processing your request.", "server_error", "")), ok),
			methods:  modelThen,
			model_:   []notice{oa(1, 250, "serverError", 500)},
			terminal: "completed", attempts: msp.Attempts{Count: 2, OutputTokens: 2},
		},
		{
			name: "error frame after content",
			replies: fixed(openaitest.Stream(openaitest.Role(), openaitest.Delta("Hel"),
				openaitest.ErrorFrame("The server had an error while processing your request.", "server_error", "")), ok),
			methods:  "item/started, item/delta, item/completed, turn/retryScheduled, " + answer,
			turn_:    []turnNotice{turntest.NewTurnRetry(1, 5, 250, "provider stream failed: server error (HTTP 500)")},
			items:    [][2]string{{"failed", "Hel"}, {"completed", "Hello"}},
			terminal: "completed", attempts: msp.Attempts{Count: 2, OutputTokens: 2},
		},
		{
			name:     "idle stream after content",
			model:    func(c *openai.Config) { c.IdleTimeout = 40 * time.Millisecond },
			replies:  fixed(openaitest.StreamStall(openaitest.Role(), openaitest.Delta("Hel")), ok),
			methods:  "item/started, item/delta, item/completed, turn/retryScheduled, " + answer,
			turn_:    []turnNotice{turntest.NewTurnRetry(1, 5, 250, "provider stream failed: timed out")},
			items:    [][2]string{{"failed", "Hel"}, {"completed", "Hello"}},
			terminal: "completed", attempts: msp.Attempts{Count: 2, OutputTokens: 2},
		},
		{
			name:     "idle stream before content",
			model:    func(c *openai.Config) { c.IdleTimeout = 40 * time.Millisecond },
			replies:  fixed(openaitest.StreamStall(openaitest.Role()), openaitest.StallHeaders(), ok),
			methods:  "turn/modelRetryScheduled, " + modelThen,
			model_:   []notice{oa(1, 250, "timeout", 0), oa(2, 500, "timeout", 0)},
			terminal: "completed", attempts: msp.Attempts{Count: 3, OutputTokens: 2},
		},
		{
			name: "finish_reason length grows max tokens",
			spec: func(s *turn.Spec) { s.MaxTokens = 100 },
			replies: fixed(openaitest.Stream(openaitest.Role(), openaitest.Delta("Once upon"), openaitest.Finish("length"),
				openaitest.Usage(12, 100, 0, 0), openaitest.Done), ok),
			methods:  answer + ", turn/retryScheduled, " + answer,
			turn_:    []turnNotice{turntest.NewTurnRetry(1, 5, 250, "output truncated at 100 tokens; retrying with 200")},
			items:    [][2]string{{"failed", "Once upon"}, {"completed", "Hello"}},
			terminal: "completed", attempts: msp.Attempts{Count: 2, OutputTokens: 102, UsageComplete: true},
			check: func(t *testing.T, srv *openaitest.Server, _ turnRun) {
				var got []any
				for _, r := range srv.Requests() {
					got = append(got, r.Body["max_completion_tokens"])
				}
				if !reflect.DeepEqual(got, []any{float64(100), float64(200)}) {
					t.Errorf("max_completion_tokens per request %v, want [100 200]", got)
				}
			},
		},
		{
			name:     "structured output native",
			spec:     func(s *turn.Spec) { s.ResponseSchema = schema },
			replies:  fixed(openaitest.Stream(openaitest.Answer(`{"answer":`, `"42"}`)...)),
			methods:  answer,
			terminal: "completed",
			attempts: msp.Attempts{Count: 1, OutputTokens: 2, UsageComplete: true, StructuredOutput: "native"},
			check: func(t *testing.T, srv *openaitest.Server, r turnRun) {
				rf, _ := srv.Requests()[0].Body["response_format"].(map[string]any)
				js, _ := rf["json_schema"].(map[string]any)
				if rf["type"] != "json_schema" || js["name"] != "response" || js["strict"] != false || js["schema"] == nil {
					t.Errorf("response_format %v", rf)
				}
				if r.out.Answer != `{"answer":"42"}` {
					t.Errorf("answer %q", r.out.Answer)
				}
			},
		},
		{
			name: "structured output not JSON re-runs",
			spec: func(s *turn.Spec) { s.ResponseSchema = schema },
			replies: fixed(openaitest.Stream(openaitest.Answer(`The answer is 42.`)...),
				openaitest.Stream(openaitest.Answer(`{"answer":"42"}`)...)),
			methods:  answer + ", turn/retryScheduled, " + answer,
			turn_:    []turnNotice{turntest.NewTurnRetry(1, 5, 250, "answer does not match the response schema: the answer is not valid JSON")},
			items:    [][2]string{{"failed", `The answer is 42.`}, {"completed", `{"answer":"42"}`}},
			terminal: "completed",
			attempts: msp.Attempts{Count: 2, OutputTokens: 2, UsageComplete: true, StructuredOutput: "native"},
		},
		{
			name: "structured output missing property re-runs",
			spec: func(s *turn.Spec) { s.ResponseSchema = schema },
			replies: fixed(openaitest.Stream(openaitest.Answer(`{"nope":1}`)...),
				openaitest.Stream(openaitest.Answer(`{"answer":"42"}`)...)),
			methods:  answer + ", turn/retryScheduled, " + answer,
			turn_:    []turnNotice{turntest.NewTurnRetry(1, 5, 250, "answer does not match the response schema: answer: required")},
			items:    [][2]string{{"failed", `{"nope":1}`}, {"completed", `{"answer":"42"}`}},
			terminal: "completed",
			attempts: msp.Attempts{Count: 2, OutputTokens: 2, UsageComplete: true, StructuredOutput: "native"},
			check: func(t *testing.T, _ *openaitest.Server, r turnRun) {
				if n := turntest.TurnRetries(r.sink); len(n) != 1 || !strings.HasPrefix(n[0].Reason, "answer does not match the response schema") {
					t.Errorf("turn notices %+v", n)
				}
			},
		},
		{
			name: "usage chunk missing",
			replies: fixed(openaitest.Stream(openaitest.Role(), openaitest.Delta("Hi"), openaitest.Finish("stop"),
				openaitest.Done)),
			methods:  "item/started, item/delta, item/completed",
			terminal: "completed", attempts: msp.Attempts{Count: 1, OutputTokens: 0, UsageComplete: false},
		},
		{
			name: "history and max tokens on the wire",
			spec: func(s *turn.Spec) {
				s.MaxTokens = 300
				s.History = []provider.Message{
					{Role: provider.RoleUser, Text: "Hi"},
					{Role: provider.RoleAssistant, Text: "Hello! How can I help?"},
					{Role: provider.RoleUser, Text: "Tell me a joke."},
				}
			},
			replies:  fixed(openaitest.Error(500, openaitest.ServerErrorBody), ok),
			methods:  modelThen,
			model_:   []notice{oa(1, 250, "serverError", 500)},
			terminal: "completed", attempts: msp.Attempts{Count: 2, OutputTokens: 2, UsageComplete: true},
			check: func(t *testing.T, srv *openaitest.Server, _ turnRun) {
				reqs := srv.Requests()
				for i, r := range reqs {
					msgs, _ := r.Body["messages"].([]any)
					var roles []string
					for _, m := range msgs {
						mm := m.(map[string]any)
						roles = append(roles, fmt.Sprintf("%s:%s", mm["role"], mm["content"]))
					}
					want := []string{"user:Hi", "assistant:Hello! How can I help?", "user:Tell me a joke."}
					if !reflect.DeepEqual(roles, want) || r.Body["max_completion_tokens"] != float64(300) ||
						r.Body["stream"] != true {
						t.Errorf("request %d body %s", i+1, r.Raw)
					}
					if got := r.Header.Get("X-Stainless-Retry-Count"); got != fmt.Sprint(i) {
						t.Errorf("request %d X-Stainless-Retry-Count %q, want %d", i+1, got, i)
					}
				}
			},
		},
		{
			name:  "compatible server under a prefix reports its system",
			model: func(c *openai.Config) { c.System = "vllm"; c.MaxTokensField = openai.MaxTokens },
			replies: fixed(openaitest.Stream(openaitest.Role(),
				`{"error":{"object":"error","message":"engine dead","type":"InternalServerError","param":null,"code":500}}`), ok),
			methods:  modelThen,
			model_:   []notice{turntest.NewModelRetry(1, 5, 250, "vllm", "serverError", 500)},
			terminal: "completed", attempts: msp.Attempts{Count: 2, OutputTokens: 2},
		},
		{
			name:     "attempts exhausted",
			replies:  fixed(openaitest.Error(503, openaitest.OverloadedBody), openaitest.Error(503, openaitest.OverloadedBody), openaitest.Error(503, openaitest.OverloadedBody)),
			spec:     func(s *turn.Spec) { n := 3; s.Retry = &msp.RetryPolicy{MaxAttempts: &n} },
			methods:  "turn/modelRetryScheduled, turn/modelRetryScheduled",
			model_:   []notice{turntest.NewModelRetry(1, 3, 250, "openai", "overloaded", 503), turntest.NewModelRetry(2, 3, 500, "openai", "overloaded", 503)},
			terminal: "failed", errText: "overloaded (HTTP 503); gave up after 3 attempts",
			attempts: msp.Attempts{Count: 3, UsageComplete: true},
		},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			start := time.Now().Truncate(time.Second)
			srv := openaitest.New(t, "/v1", sc.replies(start)...)
			m := newModel(t, srv, sc.model)
			spec := turn.Spec{SessionID: "session-1", TurnID: "turn-1",
				History: []provider.Message{{Role: provider.RoleUser, Text: "Hi"}}}
			if sc.spec != nil {
				sc.spec(&spec)
			}
			r := runTurn(t, m, spec, start, nil)
			c := r.out.Completed
			if got := r.sink.Methods(); got != sc.methods {
				t.Errorf("methods\n got %s\nwant %s", got, sc.methods)
			}
			if got := turntest.ModelRetries(r.sink); !reflect.DeepEqual(got, sc.model_) {
				t.Errorf("turn/modelRetryScheduled\n got %+v\nwant %+v", got, sc.model_)
			}
			if got := turntest.TurnRetries(r.sink); !reflect.DeepEqual(got, sc.turn_) {
				t.Errorf("turn/retryScheduled\n got %+v\nwant %+v", got, sc.turn_)
			}
			if sc.items != nil {
				if got := items(r.sink); !reflect.DeepEqual(got, sc.items) {
					t.Errorf("items %v, want %v", got, sc.items)
				}
			}
			if c.Terminal != sc.terminal {
				t.Errorf("terminal %q, want %q (error %+v)", c.Terminal, sc.terminal, c.Error)
			}
			if sc.errText != "" && (c.Error == nil || c.Error.Kind != msp.TurnErrorModel || !strings.Contains(c.Error.Message, sc.errText)) {
				t.Errorf("turn error %+v, want modelError containing %q", c.Error, sc.errText)
			}
			if sc.errText == "" && c.Error != nil {
				t.Errorf("unexpected turn error %+v", c.Error)
			}
			if c.Attempts == nil || *c.Attempts != sc.attempts {
				t.Errorf("attempts %+v, want %+v", c.Attempts, sc.attempts)
			}
			// One HTTP request per attempt: the SDK never retries behind
			// mspd's back.
			if n := srv.Count(); n != sc.attempts.Count {
				t.Errorf("server saw %d requests for %d attempts", n, sc.attempts.Count)
			}
			if sc.check != nil {
				sc.check(t, srv, r)
			}
		})
	}
}

// sleeps checks the backoffs slept on the fake clock.
func sleeps(want ...time.Duration) func(*testing.T, *openaitest.Server, turnRun) {
	return func(t *testing.T, _ *openaitest.Server, r turnRun) {
		if got := r.clock.Sleeps(); !reflect.DeepEqual(got, want) {
			t.Errorf("slept %v, want %v", got, want)
		}
	}
}

// distinctItems checks each attempt streamed into its own item.
func distinctItems(t *testing.T, _ *openaitest.Server, r turnRun) {
	started := turntest.Of[*msp.ItemParams](r.sink, msp.NotifyItemStarted)
	if len(started) != 2 || started[0].Item.ItemID == started[1].Item.ItemID {
		t.Fatalf("items %v", started)
	}
	if got := r.sink.Text(started[0].Item.ItemID); got != "Hello wor" {
		t.Errorf("first item deltas %q", got)
	}
	if got := r.sink.Text(started[1].Item.ItemID); got != "Hello" {
		t.Errorf("second item deltas %q", got)
	}
}

// --- Responses API ---

func responsesModel(t *testing.T, srv *openaitest.Server) *openai.Model {
	return newModel(t, srv, func(c *openai.Config) { c.API = openai.APIResponses })
}

func TestResponsesAPI(t *testing.T) {
	t.Run("answer and request body", func(t *testing.T) {
		srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.RCreated(), openaitest.RTextDelta(1, "Hel"),
			openaitest.RTextDelta(2, "lo"), openaitest.RCompleted(3, 12, 16, 4, 3)))
		req := hello
		req.Messages = []provider.Message{{Role: provider.RoleUser, Text: "Hi"},
			{Role: provider.RoleAssistant, Text: "Hello!"}, {Role: provider.RoleUser, Text: "Bye"}}
		req.ResponseSchema = json.RawMessage(`{"type":"object"}`)
		text, resp, err := stream(t, responsesModel(t, srv), req)
		want := provider.Response{FinishReason: provider.FinishStop, Model: openaitest.Model, StructuredOutput: "native",
			Usage: &provider.Usage{InputTokens: 12, OutputTokens: 16, CachedTokens: 4, ReasoningTokens: 3}}
		if err != nil || text != "Hello" || !reflect.DeepEqual(resp, want) {
			t.Fatalf("got %q %+v %v", text, resp, err)
		}
		r := srv.Requests()[0]
		wantBody := map[string]any{
			"model": "gpt-4o-mini", "stream": true, "store": false, "max_output_tokens": float64(64),
			"input": []any{
				map[string]any{"role": "user", "content": "Hi"},
				map[string]any{"role": "assistant", "content": "Hello!"},
				map[string]any{"role": "user", "content": "Bye"},
			},
			"text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "response",
				"schema": map[string]any{"type": "object"}, "strict": false}},
		}
		if r.Path != "/v1/responses" || !reflect.DeepEqual(r.Body, wantBody) {
			t.Errorf("%s %s\nwant %v", r.Path, r.Raw, wantBody)
		}
	})
	for _, tc := range []struct {
		name   string
		frames []string
		finish string
	}{
		{"incomplete max_output_tokens", []string{openaitest.RIncomplete(2, "max_output_tokens", 5, 64)}, provider.FinishLength},
		{"incomplete content_filter", []string{openaitest.RIncomplete(2, "content_filter", 5, 3)}, provider.FinishContentFilter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frames := append([]string{openaitest.RCreated(), openaitest.RTextDelta(1, "x")}, tc.frames...)
			srv := openaitest.New(t, "/v1", openaitest.Stream(frames...))
			_, resp, err := stream(t, responsesModel(t, srv), hello)
			if err != nil || resp.FinishReason != tc.finish || resp.Usage == nil {
				t.Errorf("got %+v %v, want %q with usage", resp, err, tc.finish)
			}
		})
	}
	for _, tc := range []struct {
		name   string
		reply  openaitest.Reply
		kind   string
		status int
	}{
		{"response.failed server_error", openaitest.Stream(openaitest.RCreated(), openaitest.RFailed(1, "server_error", "boom")), "serverError", 500},
		{"response.failed invalid_prompt", openaitest.Stream(openaitest.RCreated(), openaitest.RFailed(1, "invalid_prompt", "no")), "invalidRequest", 400},
		{"error event rate limit", openaitest.Stream(openaitest.RCreated(), openaitest.RError(1, "rate_limit_exceeded", "Please try again in 2s.")), "rateLimited", 429},
		{"cut before terminal", openaitest.Stream(openaitest.RCreated(), openaitest.RTextDelta(1, "Hel")), "streamInterrupted", 0},
		{"429 quota", openaitest.Error(429, openaitest.QuotaBody), "quotaExhausted", 429},
		{"idle", openaitest.StreamStall(openaitest.RCreated()), "timeout", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := openaitest.New(t, "/v1", tc.reply)
			m := newModel(t, srv, func(c *openai.Config) { c.API = openai.APIResponses; c.IdleTimeout = 40 * time.Millisecond })
			_, _, err := stream(t, m, hello)
			pe := providerError(t, err)
			if pe.Kind != tc.kind || pe.HTTPStatus != tc.status || srv.Count() != 1 {
				t.Errorf("got %+v after %d requests, want %s %d", pe, srv.Count(), tc.kind, tc.status)
			}
		})
	}
	t.Run("bad API", func(t *testing.T) {
		if _, err := openai.New(openai.Config{Endpoint: provider.Endpoint{Model: "m"}, API: "assistants"}); err == nil {
			t.Error("New accepted it")
		}
	})
}

func TestResponsesTurn(t *testing.T) {
	ok := openaitest.Stream(openaitest.RCreated(), openaitest.RTextDelta(1, "Hel"), openaitest.RTextDelta(2, "lo"),
		openaitest.RCompleted(3, 12, 2, 0, 0))
	t.Run("truncation doubles max_output_tokens", func(t *testing.T) {
		srv := openaitest.New(t, "/v1", openaitest.Stream(openaitest.RCreated(), openaitest.RTextDelta(1, "Once"),
			openaitest.RIncomplete(2, "max_output_tokens", 12, 100)), ok)
		spec := turn.Spec{TurnID: "turn-1", MaxTokens: 100, History: []provider.Message{{Role: provider.RoleUser, Text: "Hi"}}}
		r := runTurn(t, responsesModel(t, srv), spec, time.Now(), nil)
		want := "item/started, item/delta, item/completed, session/tokenUsage, turn/retryScheduled, item/started, item/delta, item/completed, session/tokenUsage"
		if got := r.sink.Methods(); got != want {
			t.Errorf("methods %s", got)
		}
		if got := turntest.TurnRetries(r.sink); !reflect.DeepEqual(got, []turnNotice{turntest.NewTurnRetry(1, 5, 250, "output truncated at 100 tokens; retrying with 200")}) {
			t.Errorf("notices %+v", got)
		}
		var sent []any
		for _, q := range srv.Requests() {
			sent = append(sent, q.Body["max_output_tokens"])
		}
		if !reflect.DeepEqual(sent, []any{float64(100), float64(200)}) {
			t.Errorf("max_output_tokens %v", sent)
		}
		if a := *r.out.Completed.Attempts; a != (msp.Attempts{Count: 2, OutputTokens: 102, UsageComplete: true}) {
			t.Errorf("attempts %+v", a)
		}
	})
	t.Run("response.failed before output, then cut after output", func(t *testing.T) {
		srv := openaitest.New(t, "/v1",
			openaitest.Stream(openaitest.RCreated(), openaitest.RFailed(1, "server_error", "boom")),
			openaitest.Stream(openaitest.RCreated(), openaitest.RTextDelta(1, "Hel")),
			ok)
		spec := turn.Spec{TurnID: "turn-1", History: []provider.Message{{Role: provider.RoleUser, Text: "Hi"}}}
		r := runTurn(t, responsesModel(t, srv), spec, time.Now(), nil)
		want := "turn/modelRetryScheduled, item/started, item/delta, item/completed, turn/retryScheduled, item/started, item/delta, item/completed, session/tokenUsage"
		if got := r.sink.Methods(); got != want {
			t.Errorf("methods %s", got)
		}
		if got := turntest.ModelRetries(r.sink); !reflect.DeepEqual(got, []notice{turntest.NewModelRetry(1, 5, 250, "openai", "serverError", 500)}) {
			t.Errorf("model notices %+v", got)
		}
		if got := turntest.TurnRetries(r.sink); !reflect.DeepEqual(got, []turnNotice{turntest.NewTurnRetry(2, 5, 500, "provider stream disconnected")}) {
			t.Errorf("turn notices %+v", got)
		}
		if r.out.Answer != "Hello" || r.out.Completed.Attempts.Count != 3 || srv.Count() != 3 {
			t.Errorf("answer %q attempts %+v requests %d", r.out.Answer, r.out.Completed.Attempts, srv.Count())
		}
	})
}

// TestFinishedThenDropped: the stream delivered every delta and
// finish_reason "stop", then the connection dropped before the usage chunk
// and data: [DONE]. The answer is whole, exactly as in TestStreamEnds' "cut
// after finish, before usage and DONE" (which ends the body cleanly), so it
// succeeds the same way, with nil Usage.
func TestFinishedThenDropped(t *testing.T) {
	srv := openaitest.New(t, "/v1", openaitest.StreamAbort(openaitest.Role(), openaitest.Delta("Hi"),
		openaitest.Finish("stop")))
	text, resp, err := stream(t, newModel(t, srv, nil), hello)
	if err != nil || text != "Hi" || resp.FinishReason != provider.FinishStop || resp.Usage != nil {
		t.Errorf("got %q %+v %v; want Hi, stop, nil usage (the answer finished; only the accounting was lost)", text, resp, err)
	}
}

// TestFinishedThenDroppedTurn: the same through the runner: the finished
// answer is kept after one request, not thrown away and bought again.
func TestFinishedThenDroppedTurn(t *testing.T) {
	srv := openaitest.New(t, "/v1",
		openaitest.StreamAbort(openaitest.Role(), openaitest.Delta("Hel"), openaitest.Delta("lo"), openaitest.Finish("stop")),
		openaitest.Stream(openaitest.Answer("Hel", "lo")...))
	start := time.Now().Truncate(time.Second)
	r := runTurn(t, newModel(t, srv, nil), turn.Spec{SessionID: "session-1", TurnID: "turn-1",
		History: []provider.Message{{Role: provider.RoleUser, Text: "Hi"}}}, start, nil)
	c := r.out.Completed
	if n := srv.Count(); n != 1 || c.Attempts == nil || c.Attempts.Count != 1 {
		t.Errorf("%d requests, attempts %+v; want the finished answer kept after 1 request (events: %s)",
			n, c.Attempts, r.sink.Methods())
	}
	if got := items(r.sink); len(got) == 0 || got[0] != [2]string{msp.ItemCompleted, "Hello"} {
		t.Errorf("items %v; want the finished answer completed", got)
	}
}

// TestFinishedThenSilent: a compatible server sends finish_reason and the
// usage chunk, then keeps the connection open without data: [DONE]. The
// answer and its accounting are complete, so the idle watchdog's firing
// does not fail the attempt.
func TestFinishedThenSilent(t *testing.T) {
	srv := openaitest.New(t, "/v1", openaitest.StreamStall(openaitest.Role(), openaitest.Delta("Hi"),
		openaitest.Finish("stop"), openaitest.Usage(12, 1, 0, 0)))
	text, resp, err := stream(t, newModel(t, srv, func(c *openai.Config) { c.IdleTimeout = 50 * time.Millisecond }), hello)
	if err != nil || text != "Hi" || resp.FinishReason != provider.FinishStop || resp.Usage == nil {
		t.Errorf("got %q %+v %v; want Hi, stop, usage kept", text, resp, err)
	}
}

// TestRedirectIsNotFollowed: one attempt is one HTTP request; a redirect
// fails the attempt as an invalid request (a base URL to fix) instead of
// becoming a second request.
func TestRedirectIsNotFollowed(t *testing.T) {
	srv := openaitest.New(t, "/v1", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/v1/elsewhere", http.StatusTemporaryRedirect)
	})
	_, _, err := stream(t, newModel(t, srv, nil), hello)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Kind != modelretry.KindInvalidRequest || srv.Count() != 1 {
		t.Fatalf("err %v, %d requests; want an invalid request after one request", err, srv.Count())
	}
}
