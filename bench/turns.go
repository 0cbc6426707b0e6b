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
	frames  int             // item/delta frames
	text    int             // bytes of delta text
	gaps    int             // view/gap frames
	end     time.Time       // turn/completed arrived
	first   []byte          // the first item/delta frame, verbatim
	notices []time.Duration // each retry notice's emittedAtMs → its receipt
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
		case msp.NotifyTurnModelRetryScheduled:
			res.notices = append(res.notices, time.Since(time.UnixMilli(intMember(f, "emittedAtMs"))))
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
// same number of frames of the same size to as many connections. It runs
// at two operating points: readers that keep up with answers paced as a
// person reads them (one frame a delta), and readers that fall behind
// answers streamed as fast as the provider can (deltas coalesced).
func (r *runner) turns(ctx context.Context) error {
	if n := r.cfg.KeepUpSessions; n > 0 {
		k, pace := r.cfg.KeepUpDeltas, r.cfg.KeepUpPaceMs
		scen := fmt.Sprintf("turns %d×%d keeps up (%d ms apart)", n, k, pace)
		script := keepUpScript(k, pace)
		if err := r.turnsAt(ctx, scen, n, k, pace, func(int) string { return script }); err != nil {
			return err
		}
	}
	for _, n := range r.cfg.TurnSessions {
		k := r.cfg.TurnDeltas
		script := turnScript(1, k)
		scen := fmt.Sprintf("turns %d×%d falls behind", n, k)
		if err := r.turnsAt(ctx, scen, n, k, 0, func(int) string { return script }); err != nil {
			return err
		}
	}
	return nil
}

// keepUpScript is the turn of the keeps-up operating point: a 429
// retried after 1 ms (so that 100 turns starting together send 100 retry
// notices at once, as the falls-behind point does), then k deltas pace ms
// apart.
func keepUpScript(k, pace int) string {
	retry := 1
	return scripted.Script(
		scripted.Step{Status: 429, ErrorKind: "rateLimited", RetryAfterMs: &retry},
		scripted.Step{Text: strings.Repeat(deltaWord, k), Chunks: k, ChunkDelayMs: pace},
	)
}

// turnsAt runs one operating point: n sessions, each turn script(i) of k
// deltas, paced pace ms apart (0: unpaced). The raw baseline writes k
// frames a connection, as paced: over loopback, a write that wakes an idle
// reader pays for the wake-up, so a paced stream costs more a frame than
// a burst, for mspd and for the baseline alike. A paced run also measures
// raw unpaced, for reference.
func (r *runner) turnsAt(ctx context.Context, scen string, n, k, pace int, script func(i int) string) error {
	rounds := r.cfg.Rounds
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
	round := func(ctx context.Context) ([]turnResult, time.Duration, error) { return turnRound(ctx, ss, script) }
	// Rounds alternate between mspd and the baseline, so that a change in
	// the machine's load between them shows in both.
	var mine, raw, unpaced roundTally
	for range rounds {
		if err := mine.measure(ctx, []*server{srv}, round); err != nil {
			return err
		}
		if err := raw.measurePacedRaw(ctx, rc, k, pace, mine.sample); err != nil {
			return err
		}
		mine.ratios = append(mine.ratios, mine.last()/raw.last())
		if pace > 0 {
			if err := unpaced.measureRaw(ctx, rc, k, mine.sample); err != nil {
				return err
			}
		}
	}
	if r.cfg.Profile != "" {
		file := fmt.Sprintf("%s.turns%dx%d", r.cfg.Profile, n, k)
		err := r.profile(ctx, srv, file, func(ctx context.Context) error {
			_, _, err := round(ctx)
			return err
		})
		if err != nil {
			return err
		}
	}
	if err := r.turnRows(scen, n*k*rounds, &mine, &raw); err != nil {
		return err
	}
	if pace > 0 {
		r.add(Row{Scenario: scen, Figure: "raw unpaced: server CPU per frame", Value: perItem(unpaced.serverCPU, n*k*rounds), Unit: "µs",
			Note: "coder/websocket writing the same frames as fast as they go, for reference"})
	}
	if len(mine.notices) > 0 {
		r.latencyRows(scen, "retry notice emitted→received", mine.notices, "ms clock")
	}
	return nil
}

// turnRound starts one turn on every session at once (session i's is
// script(i)), each on
// its session's connection, and follows each to its end there; it returns
// what each client saw and the time until the last turn/completed.
func turnRound(ctx context.Context, ss []session, script func(i int) string) ([]turnResult, time.Duration, error) {
	results := make([]turnResult, len(ss))
	start := time.Now()
	err := parallel(ctx, len(ss), len(ss), func(ctx context.Context, i int) error {
		if err := ss[i].c.sendTurn(ctx, ss[i].id, script(i)); err != nil {
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

// roundTally adds up the rounds of one contender of a turns comparison
// (mspd on some set-up, or the raw baseline).
type roundTally struct {
	rates, ratios        []float64
	serverCPU, clientCPU time.Duration
	frames, deltas, gaps int
	sample               []byte          // the first item/delta frame seen
	nodeCPU              []time.Duration // serverCPU by process
	notices              []time.Duration // retry notices' emittedAtMs → receipt
}

// last is the latest round's rate.
func (t *roundTally) last() float64 { return t.rates[len(t.rates)-1] }

// measure runs one round of turns, charging the CPU of srvs (all of an
// mspd set-up's processes) and of this process to it.
func (t *roundTally) measure(ctx context.Context, srvs []*server, round func(context.Context) ([]turnResult, time.Duration, error)) error {
	cpu0 := cpuOf(srvs)
	me0, _ := procCPU(os.Getpid())
	results, elapsed, err := round(ctx)
	if err != nil {
		return err
	}
	t.serverCPU += addCPU(&t.nodeCPU, cpu0, cpuOf(srvs))
	me1, _ := procCPU(os.Getpid())
	t.clientCPU += me1 - me0
	text := 0
	for _, res := range results {
		t.frames, text, t.gaps = t.frames+res.frames, text+res.text, t.gaps+res.gaps
		t.notices = append(t.notices, res.notices...)
		if t.sample == nil {
			t.sample = res.first
		}
	}
	t.deltas += text / len(deltaWord)
	t.rates = append(t.rates, float64(text/len(deltaWord))/elapsed.Seconds())
	return nil
}

// measureRaw runs one raw round: k copies of frame to each connection.
func (t *roundTally) measureRaw(ctx context.Context, rc *rawConns, k int, frame []byte) error {
	return t.measurePacedRaw(ctx, rc, k, 0, frame)
}

// measurePacedRaw runs one raw round: k copies of frame to each
// connection, paceMs apart (0: as fast as they go).
func (t *roundTally) measurePacedRaw(ctx context.Context, rc *rawConns, k, paceMs int, frame []byte) error {
	me0, _ := procCPU(os.Getpid())
	raw, err := rc.pacedRound(ctx, k, paceMs, frame)
	if err != nil {
		return fmt.Errorf("raw baseline: %w", err)
	}
	me1, _ := procCPU(os.Getpid())
	t.serverCPU += raw.cpu
	t.clientCPU += me1 - me0
	t.rates = append(t.rates, raw.rate())
	return nil
}

// cpuOf is the CPU time of each of srvs so far.
func cpuOf(srvs []*server) []time.Duration {
	out := make([]time.Duration, len(srvs))
	for i, s := range srvs {
		out[i], _ = s.cpu()
	}
	return out
}

// addCPU adds each process's CPU time from before to after to its entry
// of *by (made on first use) and returns their sum.
func addCPU(by *[]time.Duration, before, after []time.Duration) time.Duration {
	if *by == nil {
		*by = make([]time.Duration, len(before))
	}
	var total time.Duration
	for i := range before {
		(*by)[i] += after[i] - before[i]
		total += after[i] - before[i]
	}
	return total
}

// serversCPU is the CPU time of every process of a set-up so far.
func serversCPU(srvs []*server) time.Duration {
	var total time.Duration
	for _, c := range cpuOf(srvs) {
		total += c
	}
	return total
}

// turnRows reports a turns comparison: want deltas were streamed over all
// rounds of mine; raw is the baseline's tally.
func (r *runner) turnRows(scen string, want int, mine, raw *roundTally) error {
	note := fmt.Sprintf("median of %d alternating rounds; %d-byte frames", len(mine.rates), len(mine.sample))
	r.add(Row{Scenario: scen, Figure: "delivered deltas/s", Value: median(mine.rates), Unit: "/s", Baseline: median(raw.rates),
		Ratio: median(mine.ratios), Note: note + "; ratio: median of the rounds' ratios"})
	r.add(Row{Scenario: scen, Figure: "frames per delta", Value: float64(mine.frames) / float64(max(mine.deltas, 1)), Unit: "",
		Note: "below 1: deltas coalesced under pressure"})
	m, theirs := perItem(mine.serverCPU, want), perItem(raw.serverCPU, want)
	r.add(Row{Scenario: scen, Figure: "server CPU per delta", Value: m, Unit: "µs",
		Baseline: theirs, Ratio: theirs / m, Note: "ratio: baseline ÷ mspd"})
	m, theirs = perItem(mine.clientCPU, want), perItem(raw.clientCPU, want)
	r.add(Row{Scenario: scen, Figure: "client CPU per delta", Value: m, Unit: "µs",
		Baseline: theirs, Ratio: theirs / m, Note: "all clients: this process"})
	lost := want - mine.deltas
	r.add(Row{Scenario: scen, Figure: "deltas lost", Value: float64(lost), Unit: "", Note: fmt.Sprintf("%d view/gap", mine.gaps)})
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
