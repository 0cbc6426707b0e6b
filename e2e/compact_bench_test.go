package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/openai/openaitest"
	"mspd/provider/providertest"
	"mspd/schema/msp"
)

// BenchmarkCompactionTurn: what an automatic compaction costs a turn,
// over the WebSocket, against the fake Chat Completions API answering
// every request after a fixed 20 ms (a 2000-token window). Each iteration
// starts a session and runs a first turn off the clock, then times the
// second: in "plain" the first turn's usage leaves the context at 5%
// (one request), in "compacting" at 85%, so the second turn first
// summarises the first (the summarising request, the compaction item
// written) and then answers. Same daemon build, same run.
// go test ./e2e -run '^$' -bench CompactionTurn
func BenchmarkCompactionTurn(b *testing.B) {
	const delay = 20 * time.Millisecond
	for _, c := range []struct {
		name string
		used int64 // the first turn's prompt tokens
	}{{"plain", 90}, {"compacting", 1600}} {
		b.Run(c.name, func(b *testing.B) {
			answer := func(prompt, completion int64) providertest.Reply {
				frames := openaitest.AnswerUsage(prompt, completion, "An answer.")
				return func(w http.ResponseWriter, r *http.Request) {
					select { // the provider's own time, unless the request is gone
					case <-time.After(delay):
					case <-r.Context().Done():
						return
					}
					openaitest.Stream(frames...)(w, r)
				}
			}
			var script []providertest.Reply
			for range b.N {
				script = append(script, answer(c.used, 10))
				if c.used > 1000 {
					script = append(script, answer(1600, 30)) // the summary
				}
				script = append(script, answer(100, 10))
			}
			fake := openaitest.New(b, "/v1", script...)
			file := filepath.Join(b.TempDir(), "mspd.toml")
			conf := fmt.Sprintf("[[providers]]\nid = \"chat\"\ntype = \"openai\"\nbase_url = %q\nmodel = \"gpt-4o-mini\"\napi_key_env = \"TEST_KEY\"\ncontext_window = 2000\n", fake.URL())
			if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
				b.Fatal(err)
			}
			d, err := daemon.New(context.Background(), daemon.Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", ConfigFile: file,
				Env: mapEnv(map[string]string{"TEST_KEY": "sk-bench"}), Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			if err := d.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { d.Close(context.Background()) })
			ctx := context.Background()
			cl, err := client.Dial(ctx, d.URL(), client.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cl.Close() })
			turnOn := func(sid, text string) msp.TurnCompletedParams {
				ack, err := cl.StartTurn(ctx, sid, text)
				if err != nil {
					b.Fatal(err)
				}
				events, err := cl.WaitTurn(ctx, ack.TurnID)
				if err != nil {
					b.Fatal(err)
				}
				return decodeB[msp.TurnCompletedParams](b, events[len(events)-1])
			}
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				start, err := cl.StartSession(ctx)
				if err != nil {
					b.Fatal(err)
				}
				sid := start.Session.SessionID
				turnOn(sid, "The first question.")
				b.StartTimer()
				done := turnOn(sid, "The second question.")
				if want := 1 + int(c.used/1000); done.Terminal != msp.TerminalCompleted || done.Attempts.Count != want {
					b.Fatalf("second turn %+v, want %d attempts", done, want)
				}
			}
		})
	}
}
