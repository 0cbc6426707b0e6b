package e2e

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// benchDaemon is a daemon and a client with an open session, for benchmarks
// (frames are not schema-checked here: that cost belongs to the client).
func benchDaemon(b *testing.B) (*daemon.Daemon, *client.Client, string) {
	b.Helper()
	d := startDaemonB(b)
	ctx := context.Background()
	c, err := client.Dial(ctx, d.URL(), client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	start, err := c.StartSession(ctx)
	if err != nil {
		b.Fatal(err)
	}
	c.Next(ctx) // session/started
	return d, c, start.Session.SessionID
}

func startDaemonB(b *testing.B) *daemon.Daemon {
	b.Helper()
	d, err := daemon.New(context.Background(), daemon.Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", Provider: "scripted",
		Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close(context.Background()) })
	return d
}

// BenchmarkTurnRoundTrip: turn/start to turn/completed for a one-delta
// answer: admission, six durable appends (each fsynced) and the fan-out.
func BenchmarkTurnRoundTrip(b *testing.B) {
	_, c, sid := benchDaemon(b)
	ctx := context.Background()
	script := scripted.Script(scripted.Step{Text: "ok"})
	b.ResetTimer()
	for b.Loop() {
		ack, err := c.StartTurn(ctx, sid, script)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.WaitTurn(ctx, ack.TurnID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkToolStep: what a tool step adds to a turn — the same
// one-delta answer, alone (one provider request) and after one call of
// the built-in calculator (two requests, the call's toolCall item durable
// before the call and its result durable before the second request), on
// one daemon and connection in the same run. Each turn runs in a new
// session (started, and left, off the clock), so that the history sent
// is the same size every time.
func BenchmarkToolStep(b *testing.B) {
	_, c, _ := benchDaemon(b)
	ctx := context.Background()
	for _, bc := range []struct {
		name   string
		script string
	}{
		{"answer", scripted.Script(scripted.Step{Text: "ok"})},
		{"calculator then answer", scripted.Script(
			scripted.Step{Calls: []scripted.Call{{Name: "builtin__calculator", Args: `{"expression":"6*7"}`}}},
			scripted.Step{Text: "ok"})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				start, err := c.StartSession(ctx)
				if err != nil {
					b.Fatal(err)
				}
				sid := start.Session.SessionID
				b.StartTimer()
				ack, err := c.StartTurn(ctx, sid, bc.script)
				if err != nil {
					b.Fatal(err)
				}
				events, err := c.WaitTurn(ctx, ack.TurnID)
				if err != nil {
					b.Fatal(err)
				}
				if done := decodeB[msp.TurnCompletedParams](b, events[len(events)-1]); done.Terminal != msp.TerminalCompleted {
					b.Fatalf("turn ended %s: %+v", done.Terminal, done.Error)
				}
				b.StopTimer()
				if err := c.Call(ctx, msp.MethodViewUnsubscribe, msp.ViewUnsubscribeParams{SessionID: sid}, nil); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// decodeB is decode for benchmarks.
func decodeB[T any](b *testing.B, n client.Notification) T {
	var v T
	if err := json.Unmarshal(n.Params, &v); err != nil {
		b.Fatal(err)
	}
	return v
}

// BenchmarkStreamDeltas: the per-delta cost from the provider callback to
// a client's socket, in a 1000-delta answer.
func BenchmarkStreamDeltas(b *testing.B) {
	_, c, sid := benchDaemon(b)
	streamDeltas(b, c, sid)
}

// streamDeltas runs 1000-delta turns on c and reports the cost per delta.
func streamDeltas(b *testing.B, c *client.Client, sid string) {
	ctx := context.Background()
	script := scripted.Script(scripted.Step{Text: strings.Repeat("word ", 1000), Chunks: 1000})
	b.ResetTimer()
	deltas := 0
	for b.Loop() {
		ack, err := c.StartTurn(ctx, sid, script)
		if err != nil {
			b.Fatal(err)
		}
		events, err := c.WaitTurn(ctx, ack.TurnID)
		if err != nil {
			b.Fatal(err)
		}
		deltas += len(only(events, msp.NotifyItemDelta))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(deltas), "ns/delta")
	b.ReportMetric(float64(deltas)/b.Elapsed().Seconds(), "deltas/s")
}

// BenchmarkFanOut50: one turn of 200 deltas watched by 50 connections.
func BenchmarkFanOut50(b *testing.B) {
	d, c, sid := benchDaemon(b)
	ctx := context.Background()
	const watchers = 50
	var ws []*client.Client
	for range watchers {
		w, err := client.Dial(ctx, d.URL(), client.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { w.Close() })
		if err := w.Call(ctx, msp.MethodViewSubscribe, msp.ViewSubscribeParams{SessionID: sid}, nil); err != nil {
			b.Fatal(err)
		}
		ws = append(ws, w)
	}
	script := scripted.Script(scripted.Step{Text: strings.Repeat("word ", 200), Chunks: 200})
	b.ResetTimer()
	frames := 0
	for b.Loop() {
		ack, err := c.StartTurn(ctx, sid, script)
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range append(ws, c) {
			events, err := w.WaitTurn(ctx, ack.TurnID)
			if err != nil {
				b.Fatal(err)
			}
			frames += len(events)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(frames), "ns/frame")
}

// BenchmarkIdleConnectionMemory reports the server-side heap held per open,
// initialised, subscribed WebSocket connection (both ends live in this
// process, so the client's share is included: an upper bound).
func BenchmarkIdleConnectionMemory(b *testing.B) {
	d, _, sid := benchDaemon(b)
	ctx := context.Background()
	const n = 500
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		conns := make([]*client.Client, 0, n)
		for range n {
			w, err := client.Dial(ctx, d.URL(), client.Options{})
			if err != nil {
				b.Fatal(err)
			}
			if err := w.Call(ctx, msp.MethodViewSubscribe, msp.ViewSubscribeParams{SessionID: sid}, nil); err != nil {
				b.Fatal(err)
			}
			// A subscription attaches after its result is sent, before
			// the connection reads its next request: this one's answer
			// says the connection is settled.
			if err := w.Call(ctx, msp.MethodModelList, struct{}{}, nil); err != nil {
				b.Fatal(err)
			}
			conns = append(conns, w)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/n/1024, "KiB/conn")
		for _, w := range conns {
			w.Close()
		}
	}
}
