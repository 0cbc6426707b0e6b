package session

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"mspd/observe"
	"mspd/observe/observetest"
	"mspd/schema/msp"
)

// TestStatsRunningAndQueued: a turn in its model call counts as running,
// one admitted behind it as queued, and both settle to zero.
func TestStatsRunningAndQueued(t *testing.T) {
	model := newHistModel()
	m := newManager(t, openStore(t), model, mgrOpts{})
	sub := newRecSub()
	sid := startSession(t, m, sub)
	first := startTurn(t, m, textTurn(sid, "block"))
	model.waitStarted(t, "block")
	second := startTurn(t, m, textTurn(sid, "queued"))
	if st := m.Stats(); st.RunningTurns != 1 || st.QueuedTurns != 1 {
		t.Fatalf("running %d queued %d, want 1 and 1", st.RunningTurns, st.QueuedTurns)
	}
	interrupt(t, m, sid)
	sub.waitTerminal(t, first.TurnID)
	sub.waitTerminal(t, second.TurnID)
	if err := m.WaitIdle(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := m.Stats(); st.RunningTurns != 0 || st.QueuedTurns != 0 {
		t.Fatalf("after both ended: running %d queued %d", st.RunningTurns, st.QueuedTurns)
	}
}

// TestMetricsCountWrittenEvents: turns, retry notices and attempts are
// counted into Config.Metrics as their events are written.
func TestMetricsCountWrittenEvents(t *testing.T) {
	metrics := observe.New(prometheus.NewRegistry())
	m, err := New(context.Background(), Config{Store: openStore(t), Runner: newTestRunner(newHistModel()), LogPath: "test.db",
		Logger: slog.New(slog.DiscardHandler), Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	sub := newRecSub()
	sid := startSession(t, m, sub)
	if c := runTurn(t, m, sub, textTurn(sid, "cut once")); c.Terminal != msp.TerminalCompleted {
		t.Fatalf("cut turn: %+v", c)
	}
	if c := runTurn(t, m, sub, textTurn(sid, "fail")); c.Terminal != msp.TerminalFailed {
		t.Fatalf("failing turn: %+v", c)
	}
	srv := httptest.NewServer(metrics.Handler())
	defer srv.Close()
	f, text, err := observetest.Scrape(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		sel  observetest.Labels
		want float64
	}{
		{"mspd_turns_total", observetest.Labels{"terminal": "completed"}, 1},
		{"mspd_turns_total", observetest.Labels{"terminal": "failed"}, 1},
		{"mspd_turn_retries_total", nil, 1},
		{"mspd_provider_attempts_total", nil, 3},
	} {
		if got := f.Value(c.name, c.sel); got != c.want {
			t.Errorf("%s%v = %v, want %v\n%s", c.name, c.sel, got, c.want, text)
		}
	}
	if got := f.Count("mspd_turn_attempts", nil); got != 2 {
		t.Errorf("turn_attempts count %d, want 2", got)
	}
}
