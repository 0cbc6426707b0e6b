package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// deltaWord is the text of every scripted delta: the answer of K deltas
// is deltaWord K times, so delivered text counts delivered deltas.
const deltaWord = "word "

// session is one benchmark session on its own connection.
type session struct {
	c      *mspConn
	id     string
	cursor string // head cursor at start
}

// setupSessions opens n connections, each with a session of its own. The
// initialized notification goes last, so no connection is past its
// handshake (and so owed broadcasts) while the others start sessions.
func setupSessions(ctx context.Context, url string, n int) ([]session, error) {
	ss := make([]session, n)
	err := parallel(ctx, n, setupParallelism, func(ctx context.Context, i int) error {
		c, err := dialMSP(ctx, url)
		if err != nil {
			return err
		}
		ss[i].c = c
		ss[i].id, ss[i].cursor, err = c.startSession(ctx)
		if err != nil {
			return err
		}
		return c.sendReady(ctx)
	})
	if err != nil {
		closeSessions(ss)
		return nil, err
	}
	return ss, nil
}

func closeSessions(ss []session) {
	for _, s := range ss {
		if s.c != nil {
			s.c.close()
		}
	}
}

// turnScript is a turn answered by a 429 (retried after retryAfterMs) and
// then deltas deltas.
func turnScript(retryAfterMs, deltas int) string {
	return scripted.Script(
		scripted.Step{Status: 429, ErrorKind: "rateLimited", RetryAfterMs: &retryAfterMs},
		scripted.Step{Text: strings.Repeat(deltaWord, deltas), Chunks: deltas},
	)
}

// turnResult is what one client saw of its turn.
type turnResult struct {
	frames int       // item/delta frames
	text   int       // bytes of delta text
	gaps   int       // view/gap frames
	end    time.Time // turn/completed arrived
	first  []byte    // the first item/delta frame, verbatim
}

// followTurn reads c's frames until turn/completed, counting deltas.
func followTurn(ctx context.Context, c *mspConn) (turnResult, error) {
	var res turnResult
	for {
		f, err := c.read(ctx)
		if err != nil {
			return res, err
		}
		switch string(methodOf(f)) {
		case msp.NotifyItemDelta:
			res.frames++
			res.text += len(stringMember(f, "delta"))
			if res.first == nil {
				res.first = bytes.Clone(f)
			}
		case msp.NotifyViewGap:
			res.gaps++
		case msp.NotifyTurnCompleted:
			res.end = time.Now()
			if t := stringMember(f, "terminal"); string(t) != "completed" {
				return res, fmt.Errorf("turn ended %s: %s", t, f)
			}
			return res, nil
		}
	}
}

// turns: N sessions × one turn (a 429, then K deltas), all started
// together; delivered deltas/s against coder/websocket alone writing the
// same number of frames of the same size to as many connections.
func (r *runner) turns(ctx context.Context) error {
	for _, n := range r.cfg.TurnSessions {
		if err := r.turnsAt(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) turnsAt(ctx context.Context, n int) error {
	k, rounds := r.cfg.TurnDeltas, r.cfg.Rounds
	srv, err := r.startServer(ctx)
	if err != nil {
		return err
	}
	defer srv.stop()
	ss, err := setupSessions(ctx, srv.url, n)
	if err != nil {
		return err
	}
	defer closeSessions(ss)
	rc, err := dialRaw(ctx, r.raw, n)
	if err != nil {
		return fmt.Errorf("raw baseline: %w", err)
	}
	defer rc.close()
	script := turnScript(1, k)
	turnRound := func(ctx context.Context) ([]turnResult, time.Duration, error) {
		results := make([]turnResult, n)
		start := time.Now()
		err := parallel(ctx, n, n, func(ctx context.Context, i int) error {
			if err := ss[i].c.sendTurn(ctx, ss[i].id, script); err != nil {
				return err
			}
			var err error
			results[i], err = followTurn(ctx, ss[i].c)
			return err
		})
		var end time.Time
		for _, res := range results {
			if res.end.After(end) {
				end = res.end
			}
		}
		return results, end.Sub(start), err
	}
	// Rounds alternate between mspd and the baseline, so that a change in
	// the machine's load between them shows in both.
	var rates, rawRates, ratios []float64
	var cpu, rawCPU, clientCPU, rawClientCPU time.Duration
	var frames, deltas, gaps int
	var sample []byte
	self := os.Getpid()
	for range rounds {
		cpu0, _ := srv.cpu()
		me0, _ := procCPU(self)
		results, elapsed, err := turnRound(ctx)
		if err != nil {
			return err
		}
		cpu1, _ := srv.cpu()
		me1, _ := procCPU(self)
		cpu += cpu1 - cpu0
		clientCPU += me1 - me0
		text := 0
		for _, res := range results {
			frames, text, gaps = frames+res.frames, text+res.text, gaps+res.gaps
			if sample == nil {
				sample = res.first
			}
		}
		deltas += text / len(deltaWord)
		rate := float64(text/len(deltaWord)) / elapsed.Seconds()
		me0, _ = procCPU(self)
		raw, err := rc.round(ctx, k, sample)
		if err != nil {
			return fmt.Errorf("raw baseline: %w", err)
		}
		me1, _ = procCPU(self)
		rawCPU += raw.cpu
		rawClientCPU += me1 - me0
		rates, rawRates, ratios = append(rates, rate), append(rawRates, raw.rate()), append(ratios, rate/raw.rate())
	}
	if r.cfg.Profile != "" {
		file := fmt.Sprintf("%s.turns%d", r.cfg.Profile, n)
		err := r.profile(ctx, srv, file, func(ctx context.Context) error {
			_, _, err := turnRound(ctx)
			return err
		})
		if err != nil {
			return err
		}
	}
	want := n * k * rounds
	scen := fmt.Sprintf("turns %d×%d", n, k)
	note := fmt.Sprintf("median of %d alternating rounds; %d-byte frames", rounds, len(sample))
	r.add(Row{Scenario: scen, Figure: "delivered deltas/s", Value: median(rates), Unit: "/s", Baseline: median(rawRates),
		Ratio: median(ratios), Note: note + "; ratio: median of the rounds' ratios"})
	r.add(Row{Scenario: scen, Figure: "frames per delta", Value: float64(frames) / float64(max(deltas, 1)), Unit: "",
		Note: "below 1: deltas coalesced under pressure"})
	mine, theirs := perItem(cpu, want), perItem(rawCPU, want)
	r.add(Row{Scenario: scen, Figure: "server CPU per delta", Value: mine, Unit: "µs",
		Baseline: theirs, Ratio: theirs / mine, Note: "ratio: baseline ÷ mspd"})
	mine, theirs = perItem(clientCPU, want), perItem(rawClientCPU, want)
	r.add(Row{Scenario: scen, Figure: "client CPU per delta", Value: mine, Unit: "µs",
		Baseline: theirs, Ratio: theirs / mine, Note: "all clients: this process"})
	lost := want - deltas
	r.add(Row{Scenario: scen, Figure: "deltas lost", Value: float64(lost), Unit: "", Note: fmt.Sprintf("%d view/gap", gaps)})
	if lost < 0 {
		return fmt.Errorf("%w: %d deltas more than streamed", errIncomplete, -lost)
	}
	return nil
}

// perItem is d per item in microseconds.
func perItem(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(d.Nanoseconds()) / float64(n) / 1e3
}

// latencyRows adds p50, p99 and max rows of a latency sample.
func (r *runner) latencyRows(scen, what string, d []time.Duration, note string) {
	p := percentilesOf(d)
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	note = strings.TrimSpace(fmt.Sprintf("%d samples; %s", p.n, note))
	for _, q := range []struct {
		name string
		v    time.Duration
	}{{"p50", p.p50}, {"p99", p.p99}, {"max", p.max}} {
		r.add(Row{Scenario: scen, Figure: what + " " + q.name, Value: ms(q.v), Unit: "ms", Note: note})
	}
}
