package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"mspd/client"
	"mspd/daemon"
	"mspd/modelretry"
	"mspd/provider/anthropic/anthropictest"
	"mspd/provider/openai/openaitest"
	"mspd/schema/msp"
)

// BenchmarkFallback: what a fallback costs a user in latency. One daemon
// (SQLite, fsync on), one WebSocket connection, two fake providers over
// loopback HTTP: "oa" (OpenAI's wire) answers every request 429
// insufficient_quota, which moves a turn at once to its fallback
// "claude" (Anthropic's wire), which streams a two-delta answer. In the
// same run, turns on claude directly and turns on oa that fall back to
// it, each in a new session (started off the clock); breakers are off, so
// that every turn on oa asks it first. Reported, as
// medians: for the direct turns, the time from claude's request
// reaching the fake to the client's first delta (ask→delta); for the
// fallback turns, from the moment oa's fake answered its failure to the
// client's first delta (fail→delta), to the client's receipt of the
// fallback notice (fail→notice: reading the failure, classifying it, the
// notice durable with its checkpoint, fanned out) and to claude's request
// (fail→ask: the same, then the new request). What a fallback adds is
// fail→delta minus the direct ask→delta, about fail→ask.
func BenchmarkFallback(b *testing.B) {
	base := time.Now()
	var failedAt, askedAt atomic.Int64 // since base
	stamp := func(a *atomic.Int64) { a.Store(int64(time.Since(base))) }
	failure := openaitest.Error(429, openaitest.QuotaBody)
	oa := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stamp(&failedAt)
		failure(w, r)
	}))
	b.Cleanup(oa.Close)
	answer := anthropictest.Answer("end_turn", 2, "hello", " there")
	an := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stamp(&askedAt)
		answer(w, r)
	}))
	b.Cleanup(an.Close)

	file := filepath.Join(b.TempDir(), "mspd.toml")
	conf := fmt.Sprintf(`[[providers]]
id = "oa"
type = "openai"
base_url = %q
model = "gpt-test"
api_key_env = "TEST_KEY"
fallback = ["claude"]
[[providers]]
id = "claude"
type = "anthropic"
base_url = %q
model = %q
api_key_env = "TEST_ANTHROPIC_KEY"
`, oa.URL+"/v1", an.URL, anthropictest.Model)
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		b.Fatal(err)
	}
	d, err := daemon.New(context.Background(), daemon.Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", ConfigFile: file,
		Env: chainEnv, Logger: discardLogger(), RetryBudget: daemon.Budget{Tokens: -1},
		// Every turn on oa fails over: its breaker would open after five.
		Breaker: modelretry.BreakerConfig{Failures: -1}})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close(context.Background()) })
	ctx := context.Background()
	c, err := client.Dial(ctx, d.URL(), client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })

	for _, bc := range []struct{ name, provider string }{{"direct", "claude"}, {"fallback", "oa"}} {
		b.Run(bc.name, func(b *testing.B) {
			var toDelta, toAsk, toNotice []time.Duration
			for b.Loop() {
				b.StopTimer()
				var start msp.SessionStartResult
				provider := bc.provider
				if err := c.Call(ctx, msp.MethodSessionStart, msp.SessionStartParams{CommandID: client.NewCommandID(), ProviderID: &provider}, &start); err != nil {
					b.Fatal(err)
				}
				sid := start.Session.SessionID
				if _, err := c.Next(ctx); err != nil { // session/started
					b.Fatal(err)
				}
				b.StartTimer()
				ack, err := c.StartTurn(ctx, sid, "hi")
				if err != nil {
					b.Fatal(err)
				}
				var delta, notice time.Duration
				for delta == 0 {
					n, err := c.Next(ctx)
					if err != nil {
						b.Fatal(err)
					}
					switch n.Method {
					case msp.NotifyTurnModelRetryScheduled:
						notice = time.Since(base)
					case msp.NotifyItemDelta:
						delta = time.Since(base)
					case msp.NotifyTurnCompleted:
						b.Fatalf("turn ended before a delta: %s", n.Params)
					}
				}
				events, err := c.WaitTurn(ctx, ack.TurnID)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if done := decodeB[msp.TurnCompletedParams](b, events[len(events)-1]); done.Terminal != msp.TerminalCompleted {
					b.Fatalf("turn ended %s: %+v", done.Terminal, done.Error)
				}
				asked := time.Duration(askedAt.Load())
				if bc.name == "direct" {
					toDelta = append(toDelta, delta-asked)
				} else {
					failed := time.Duration(failedAt.Load())
					toDelta = append(toDelta, delta-failed)
					toAsk = append(toAsk, asked-failed)
					toNotice = append(toNotice, notice-failed)
				}
				if err := c.Call(ctx, msp.MethodViewUnsubscribe, msp.ViewUnsubscribeParams{SessionID: sid}, nil); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			if bc.name == "direct" {
				b.ReportMetric(median(toDelta), "µs-ask→delta")
			} else {
				b.ReportMetric(median(toDelta), "µs-fail→delta")
				b.ReportMetric(median(toAsk), "µs-fail→ask")
				b.ReportMetric(median(toNotice), "µs-fail→notice")
			}
		})
	}
}

// median is the middle of ds, in microseconds.
func median(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Microsecond)
}
