package bench

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"mspd/internal/cli/clitest"
	"mspd/internal/testlane"
)

// The fake finds a turn's number in a request's body, whatever follows
// it, and counts nothing else as a turn.
func TestFailoverTurnOf(t *testing.T) {
	for body, want := range map[string]int{
		`{"messages":[{"role":"user","content":"failover turn 12"}]}`:   12,
		`{"messages":[{"role":"user","content":"failover turn 7"},{}]}`: 7,
		`{"messages":[{"role":"user","content":"failover turn 0"}]}`:    0,
	} {
		if j, ok := failoverTurnOf([]byte(body)); !ok || j != want {
			t.Errorf("%s: %d, %v; want %d", body, j, ok, want)
		}
	}
	for _, body := range []string{`{"messages":[{"role":"user","content":"hi"}]}`, `"failover turn x"`} {
		if j, ok := failoverTurnOf([]byte(body)); ok {
			t.Errorf("%s: turn %d", body, j)
		}
	}
}

// The failover scenario on three sessions with a 2 s lease TTL: n1 dies
// with three turns streaming, and each turn resumes elsewhere once, is
// answered by exactly two provider requests and completes; every figure
// is measured for every turn.
func TestFailoverScenario(t *testing.T) {
	testlane.Slow(t, "runs three mspd processes on embedded NATS and kills one")
	cfg := Config{Scenarios: []string{"failover"}, FailoverSessions: []int{3}, FailoverLeaseTTL: 2 * time.Second,
		WorkDir: t.TempDir(), Log: io.Discard, ServerEnv: []string{clitest.Env}}
	cfg.defaults()
	r := &runner{cfg: cfg, bin: clitest.Self(), rep: &Report{}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := r.failoverScenario(ctx); err != nil {
		t.Fatal(err)
	}
	rows := map[string]Row{}
	for _, row := range r.rep.Rows {
		if row.Scenario != "failover K=3" {
			t.Errorf("row of scenario %q", row.Scenario)
		}
		rows[row.Figure] = row
	}
	for _, f := range []string{"turns lost", "turns not resumed", "provider requests beyond 2 a turn", "turns with fewer than 2 provider requests"} {
		if row, ok := rows[f]; !ok || row.Value != 0 {
			t.Errorf("%s: %v (reported: %v)", f, row.Value, ok)
		}
	}
	for _, f := range []string{"kill → turn/retryScheduled", "kill → resumed provider request", "kill → new attempt's first delta"} {
		p50 := rows[f+" p50"]
		if p50.Value <= 0 || rows[f+" max"].Value < p50.Value || !strings.Contains(p50.Note, "3 of 3 turns") {
			t.Errorf("%s: p50 %v ms, max %v ms (%s)", f, p50.Value, rows[f+" max"].Value, p50.Note)
		}
	}
	if note := rows["kill → turn/retryScheduled p50"].Note; !strings.Contains(note, "lease TTL 2s") {
		t.Errorf("the note names no TTL: %s", note)
	}
}
