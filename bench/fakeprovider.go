package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// fakeProvider is an OpenAI-compatible Chat Completions server on loopback,
// in the benchmark's own process, speaking the real streaming wire: each
// answer is `data: {chat.completion.chunk}` events, the usage in a last
// chunk when the request asks for it (stream_options.include_usage), and
// `data: [DONE]`. It waits firstByte before the response's first byte, then
// streams chunks content deltas evenly until total has passed since the
// request arrived. The first delta's text is its send time (stampPrefix
// and the Unix nanoseconds): a client in the same process subtracts it
// from the time it read that delta, the first-token latency it was added
// on the way. It counts the TCP connections it accepts.
type fakeProvider struct {
	url       string // the API root: http://127.0.0.1:port/v1
	srv       *http.Server
	firstByte time.Duration
	total     time.Duration
	chunks    int
	// plan, when set, times each answer from its request's body instead
	// (the failover scenario answers a turn's first request slowly and
	// its resumed one quickly); it is called as the request arrives.
	plan     func(body []byte) answerPlan
	accepted atomic.Int64
	answered atomic.Int64
}

// answerPlan times one answer of the fake: its first byte after
// firstByte, its end after total, chunks deltas after the first between.
type answerPlan struct {
	firstByte, total time.Duration
	chunks           int
}

// planFor times the answer to a request of body.
func (f *fakeProvider) planFor(body []byte) answerPlan {
	if f.plan != nil {
		a := f.plan(body)
		a.chunks = max(a.chunks, 1)
		return a
	}
	return answerPlan{firstByte: f.firstByte, total: f.total, chunks: f.chunks}
}

// stampPrefix starts the first delta of every answer, before the fake's
// send time in Unix nanoseconds and a space.
const stampPrefix = "@"

// startFakeProvider listens on loopback and serves until stop.
func startFakeProvider(firstByte, total time.Duration, chunks int) (*fakeProvider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &fakeProvider{url: "http://" + ln.Addr().String() + "/v1", firstByte: firstByte, total: total, chunks: max(chunks, 1)}
	f.srv = &http.Server{
		Handler: http.HandlerFunc(f.serve),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				f.accepted.Add(1)
			}
		},
	}
	go f.srv.Serve(ln)
	return f, nil
}

func (f *fakeProvider) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if f.srv.Shutdown(ctx) != nil {
		f.srv.Close()
	}
}

// chunk frames of an answer: the start of every content delta and the
// finish, without their per-answer parts.
const (
	chunkHead    = `data: {"id":"chatcmpl-mspbench","object":"chat.completion.chunk","created":1764480000,"model":"mspbench","choices":[{"index":0,"delta":{`
	chunkFinish  = `data: {"id":"chatcmpl-mspbench","object":"chat.completion.chunk","created":1764480000,"model":"mspbench","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	chunkUsage   = `data: {"id":"chatcmpl-mspbench","object":"chat.completion.chunk","created":1764480000,"model":"mspbench","choices":[],"usage":{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}}` + "\n\n"
	chunkDone    = "data: [DONE]\n\n"
	fakeWordText = "word "
)

func (f *fakeProvider) serve(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	body, err := io.ReadAll(r.Body)
	if err != nil || r.Method != http.MethodPost || !bytes.Contains(body, []byte(`"stream":true`)) {
		http.Error(w, `{"error":{"message":"mspbench's fake takes streamed chat completions","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	usage := bytes.Contains(body, []byte(`"include_usage":true`))
	plan := f.planFor(body)
	if !sleepUntil(r.Context(), arrived.Add(plan.firstByte)) {
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	buf := make([]byte, 0, 512)
	first := time.Now()
	buf = append(buf, chunkHead...)
	buf = append(buf, `"role":"assistant","content":"`+stampPrefix...)
	buf = strconv.AppendInt(buf, first.UnixNano(), 10)
	buf = append(buf, " \"},\"finish_reason\":null}]}\n\n"...)
	if !f.write(w, rc, buf) {
		return
	}
	// The deltas after the first, evenly spaced, the last at total.
	stream := plan.total - plan.firstByte
	for k := 1; k <= plan.chunks; k++ {
		if !sleepUntil(r.Context(), first.Add(stream*time.Duration(k)/time.Duration(plan.chunks))) {
			return
		}
		buf = append(buf[:0], chunkHead...)
		buf = append(buf, `"content":"`+fakeWordText+`"},"finish_reason":null}]}`+"\n\n"...)
		if k == plan.chunks {
			buf = append(buf, chunkFinish...)
			if usage {
				buf = fmt.Appendf(buf, chunkUsage, plan.chunks+1, plan.chunks+9)
			}
			buf = append(buf, chunkDone...)
		}
		if !f.write(w, rc, buf) {
			return
		}
	}
	f.answered.Add(1)
}

// write sends b and flushes it; false when the client has gone.
func (f *fakeProvider) write(w http.ResponseWriter, rc *http.ResponseController, b []byte) bool {
	if _, err := w.Write(b); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// sleepUntil waits for t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// parseStamp reads the fake's send time from the text of an answer's first
// delta (as it arrives, JSON-escaped or not: the stamp is plain digits).
func parseStamp(text []byte) (time.Time, error) {
	i := bytes.Index(text, []byte(stampPrefix))
	if i < 0 {
		return time.Time{}, errors.New("no send time in the first delta")
	}
	rest := text[i+len(stampPrefix):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	ns, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("the first delta's send time: %w", err)
	}
	return time.Unix(0, ns), nil
}
