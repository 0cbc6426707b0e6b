package bench

import (
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mspd/internal/cli/clitest"
	"mspd/internal/testlane"
	"mspd/provider"
	"mspd/provider/openai"
)

// Constant arrivals are evenly spaced; Poisson ones average the rate.
func TestOpenLoop(t *testing.T) {
	l := newOpenLoop(100, 2*time.Second, false)
	if len(l.due) != 200 || l.due[0] != 0 || l.due[1] != 10*time.Millisecond || l.span() != 2*time.Second {
		t.Fatalf("constant: %d turns, due %v, %v…; span %v", len(l.due), l.due[0], l.due[1], l.span())
	}
	p := newOpenLoop(1000, 10*time.Second, true)
	last := p.due[len(p.due)-1]
	if len(p.due) != 10000 || math.Abs(last.Seconds()-10) > 0.5 {
		t.Fatalf("Poisson: %d turns, the last due at %v, want about 10 s", len(p.due), last)
	}
	for i := 1; i < len(p.due); i++ {
		if p.due[i] < p.due[i-1] {
			t.Fatalf("Poisson: turn %d due before turn %d", i, i-1)
		}
	}
}

// A server that keeps up achieves the offered rate; one whose latency
// grows, or that loses turns, achieves less.
func TestAchievedRate(t *testing.T) {
	start := time.Now()
	l := newOpenLoop(100, 10*time.Second, false)
	run := func(latency func(j int) time.Duration, lost func(j int) bool) float64 {
		var e2e []time.Duration
		var ends []time.Time
		for j, due := range l.due {
			if lost(j) {
				continue
			}
			e2e = append(e2e, latency(j))
			ends = append(ends, start.Add(due+latency(j)))
		}
		return achievedRate(start, l.span(), e2e, ends)
	}
	never := func(int) bool { return false }
	steady := func(j int) time.Duration { return 1500*time.Millisecond + time.Duration(j%7)*time.Millisecond }
	if got := run(steady, never); got < 99 || got > 101 {
		t.Errorf("keeping up: %v/s, want 100", got)
	}
	growing := func(j int) time.Duration { return 1500*time.Millisecond + time.Duration(j)*5*time.Millisecond }
	if got := run(growing, never); got > 80 {
		t.Errorf("falling behind: %v/s, want well under 100", got)
	}
	if got := run(steady, func(j int) bool { return j%5 == 0 }); got < 79 || got > 81 {
		t.Errorf("losing a fifth: %v/s, want 80", got)
	}
}

func TestResponseID(t *testing.T) {
	for frame, want := range map[string]struct {
		id        int
		isErr, ok bool
	}{
		`{"jsonrpc":"2.0","id":42,"result":{}}`:               {42, false, true},
		`{"jsonrpc":"2.0","id":7,"error":{"code":-32602}}`:    {7, true, true},
		`{"jsonrpc":"2.0","method":"item/delta","params":{}}`: {0, false, false},
		`{"jsonrpc":"2.0","id":"s","result":{}}`:              {0, false, false},
	} {
		id, isErr, ok := responseID([]byte(frame))
		if id != want.id || isErr != want.isErr || ok != want.ok {
			t.Errorf("%s: %d, %v, %v; want %+v", frame, id, isErr, ok, want)
		}
	}
}

// mspd's OpenAI provider reads the fake's stream as a real Chat
// Completions stream: the stamped first delta, the words, the usage; the
// stamp is the fake's send time, after its wait for the first byte.
func TestFakeProviderSpeaksChatCompletions(t *testing.T) {
	fake, err := startFakeProvider(20*time.Millisecond, 80*time.Millisecond, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer fake.stop()
	m, err := openai.New(openai.Config{Endpoint: provider.Endpoint{BaseURL: fake.url, Model: "gpt-4o-mini"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 3 {
		sent := time.Now()
		var deltas []string
		firstAt := time.Time{}
		resp, err := m.Stream(ctx, provider.Request{Messages: []provider.Message{{Role: provider.RoleUser, Text: "hi"}}, Attempt: 1},
			func(s string) {
				if firstAt.IsZero() {
					firstAt = time.Now()
				}
				deltas = append(deltas, s)
			})
		if err != nil {
			t.Fatal(err)
		}
		if len(deltas) != 4 || strings.Join(deltas[1:], "") != strings.Repeat(fakeWordText, 3) || resp.Usage == nil {
			t.Fatalf("deltas %q, usage %+v", deltas, resp.Usage)
		}
		stamp, err := parseStamp([]byte(deltas[0]))
		if err != nil {
			t.Fatal(err)
		}
		if stamp.Sub(sent) < 20*time.Millisecond || stamp.After(firstAt) {
			t.Fatalf("stamped %v after the request, %v before the delta was read", stamp.Sub(sent), firstAt.Sub(stamp))
		}
	}
	if n := fake.accepted.Load(); n != 1 {
		t.Errorf("3 requests one after another: %d connections, want 1", n)
	}
}

// The gateway scenario on a small load reports every figure for mspd and
// the direct baseline, and every turn succeeds on both; with --profile it
// writes mspd's CPU, heap and goroutine profiles.
func TestGatewayScenario(t *testing.T) {
	testlane.Slow(t, "runs mspd")
	dir := t.TempDir()
	cfg := Config{Scenarios: []string{"gateway"}, GatewayRates: []float64{20}, GatewayDuration: time.Second, GatewayConns: 4,
		GatewayFirstByte: 20 * time.Millisecond, GatewayTotal: 100 * time.Millisecond, GatewayChunks: 3,
		WorkDir: dir, Log: io.Discard, ServerEnv: []string{clitest.Env}, Profile: filepath.Join(dir, "p")}
	cfg.defaults()
	r := &runner{cfg: cfg, bin: clitest.Self(), rep: &Report{}}
	if err := r.gateway(context.Background()); err != nil {
		t.Fatal(err)
	}
	rows := map[string]Row{}
	for _, row := range r.rep.Rows {
		rows[row.Figure] = row
	}
	if s := rows["success"]; s.Value != 100 || s.Baseline != 100 {
		t.Errorf("success %v%%, direct %v%%", s.Value, s.Baseline)
	}
	for _, f := range []string{"end to end p50", "first token added p50", "provider connections"} {
		if row := rows[f]; row.Value <= 0 || row.Baseline <= 0 {
			t.Errorf("%s: %v, direct %v", f, row.Value, row.Baseline)
		}
	}
	for _, f := range []string{"turn/start reply p50", "server CPU per turn", "peak RSS", "fsyncs per turn", "achieved"} {
		if rows[f].Value <= 0 {
			t.Errorf("%s: %v", f, rows[f].Value)
		}
	}
	if e2e := rows["end to end p50"]; e2e.Value < 100 {
		t.Errorf("end to end p50 %v ms, under the fake's 100 ms answer", e2e.Value)
	}
	for _, ext := range []string{"", ".heap", ".heap.txt", ".goroutine"} {
		if fi, err := os.Stat(cfg.Profile + ".gateway20" + ext); err != nil || fi.Size() == 0 {
			t.Errorf("profile %q: %v", ext, err)
		}
	}
}
