package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"mspd/provider"
	"mspd/schema/msp"
)

// The gateway scenario is the protocol people compare LLM gateways by: an
// offered rate of requests for a while against a mocked OpenAI endpoint
// that takes 1.5 s to answer, reporting achieved throughput, success,
// latency percentiles, memory and the gateway's own overhead. Here each
// request is a turn/start on a session of its own, opened beforehand, and
// the endpoint streams (fakeProvider). The same offered load goes, in the
// same run, from the same scheduling code straight to the fake over HTTP
// (the direct baseline), so that mspd's cost is a difference measured
// side by side.

// kneeShare is the share of the offered rate below which a rate is past
// the knee.
const kneeShare = 0.99

// kneeStep multiplies the offered rate past the listed rates, until the
// knee; kneeCeiling stops the sweep whatever happens.
const (
	kneeStep    = 1.5
	kneeCeiling = 50_000
)

// gatewayDrain is how long turns may still end after the last one is due,
// beyond the fake's own answer time.
const gatewayDrain = 30 * time.Second

// openLoop is one run's offered load: turn j is due at start + due[j],
// whatever happened to the turns before it (an open loop: a slow server
// does not slow the arrivals, and a late send counts from its due time).
type openLoop struct {
	rate float64
	due  []time.Duration
}

// span is the time the turns arrive over: n turns, one every 1/rate on
// average.
func (l openLoop) span() time.Duration {
	return time.Duration(float64(len(l.due)) / l.rate * float64(time.Second))
}

// newOpenLoop offers rate turns a second for d: evenly spaced, or with
// exponential gaps (Poisson arrivals) from a fixed seed.
func newOpenLoop(rate float64, d time.Duration, poisson bool) openLoop {
	n := max(1, int(math.Round(rate*d.Seconds())))
	due := make([]time.Duration, n)
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	at := 0.0
	for j := range due {
		due[j] = time.Duration(at * float64(time.Second))
		if poisson {
			at += rng.ExpFloat64() / rate
		} else {
			at += 1 / rate
		}
	}
	return openLoop{rate: rate, due: due}
}

// gatewayTurn is what the client saw of one turn. Each is written by one
// goroutine (its connection's reader, or its direct request) and read
// after all have ended.
type gatewayTurn struct {
	reply     time.Time // turn/start's response (mspd only)
	first     time.Time // the first delta read
	fakeFirst time.Time // the fake's send time of that delta
	end       time.Time // turn/completed (mspd) or data: [DONE] (direct)
	ok        bool
}

// gatewayRun is one path's run at one rate.
type gatewayRun struct {
	start   time.Time
	loop    openLoop
	turns   []gatewayTurn
	conns   int64 // TCP connections the fake accepted
	elapsed time.Duration
}

// gatewayFigures are a run's figures.
type gatewayFigures struct {
	achieved, success   float64
	e2e, added, replies []time.Duration
	connections         int64
}

func (g *gatewayRun) figures() gatewayFigures {
	var f gatewayFigures
	var ends []time.Time
	for j, t := range g.turns {
		due := g.start.Add(g.loop.due[j])
		if !t.reply.IsZero() {
			f.replies = append(f.replies, t.reply.Sub(due))
		}
		if !t.first.IsZero() && !t.fakeFirst.IsZero() {
			f.added = append(f.added, t.first.Sub(t.fakeFirst))
		}
		if t.ok {
			f.e2e = append(f.e2e, t.end.Sub(due))
			ends = append(ends, t.end)
		}
	}
	f.success = 100 * float64(len(ends)) / float64(len(g.turns))
	f.achieved = achievedRate(g.start, g.loop.span(), f.e2e, ends)
	f.connections = g.conns
	return f
}

// achievedRate is the rate at which turns ended in steady state: the
// successful turns that ended within the offered span (span: the time
// the turns arrived over), shifted by their median latency, over that
// span. A server that keeps up ends turns as fast as they arrive; one
// that falls behind ends them ever later, past the window, and turns
// that never end are missing.
func achievedRate(start time.Time, span time.Duration, e2e []time.Duration, ends []time.Time) float64 {
	if len(ends) == 0 || span <= 0 {
		return 0
	}
	lo := start.Add(quantiles(e2e)[0])
	hi := lo.Add(span)
	in := 0
	for _, e := range ends {
		if !e.Before(lo) && e.Before(hi) {
			in++
		}
	}
	return float64(in) / span.Seconds()
}

// gateway runs the sweep: each rate on a fresh mspd and a fresh fake, the
// direct baseline first, then mspd; past the listed rates it goes on until
// mspd achieves less than kneeShare of the offered rate.
func (r *runner) gateway(ctx context.Context) error {
	rates := slices.Clone(r.cfg.GatewayRates)
	knee := 0.0
	for i := 0; i < len(rates); i++ {
		rate := rates[i]
		ok, err := r.gatewayAt(ctx, rate)
		if err != nil {
			return err
		}
		if ok {
			knee = max(knee, rate)
		}
		if i == len(rates)-1 && ok && r.cfg.GatewayKnee && rate*kneeStep <= kneeCeiling {
			rates = append(rates, math.Round(rate*kneeStep))
		}
	}
	r.add(Row{Scenario: "gateway", Figure: "highest rate kept up with", Value: knee, Unit: "/s",
		Note: fmt.Sprintf("≥ %.0f%% of offered achieved, 100%% success; rates run: %v", 100*kneeShare, rates)})
	return nil
}

// gatewayAt runs one rate on both paths and reports it; ok when mspd kept
// up (kneeShare of the rate achieved, every turn a success).
func (r *runner) gatewayAt(ctx context.Context, rate float64) (ok bool, err error) {
	loop := newOpenLoop(rate, r.cfg.GatewayDuration, r.cfg.GatewayPoisson)
	scen := fmt.Sprintf("gateway %g/s", rate)
	r.logf("  %s: %d turns; direct baseline", scen, len(loop.due))
	direct, err := r.gatewayDirect(ctx, loop)
	if err != nil {
		return false, fmt.Errorf("direct baseline: %w", err)
	}
	r.logf("  %s: mspd", scen)
	mine, srvStats, err := r.gatewayMSPD(ctx, loop)
	if err != nil {
		return false, err
	}
	m, d := mine.figures(), direct.figures()
	r.gatewayRows(scen, loop, m, d, srvStats)
	return m.achieved >= kneeShare*rate && m.success == 100, nil
}

// gatewayServerStats are what mspd's process and /metrics say of a run.
type gatewayServerStats struct {
	cpu     time.Duration
	peakRSS int64
	fsyncs  float64
}

func (r *runner) gatewayRows(scen string, loop openLoop, m, d gatewayFigures, s gatewayServerStats) {
	arrivals := "constant"
	if r.cfg.GatewayPoisson {
		arrivals = "Poisson"
	}
	n := len(loop.due)
	r.add(Row{Scenario: scen, Figure: "offered", Value: loop.rate, Unit: "turns/s",
		Note: fmt.Sprintf("%s arrivals for %s: %d turns, each on its own session, over %d connections; fake: first byte %s, answer %s",
			arrivals, r.cfg.GatewayDuration, n, min(r.cfg.GatewayConns, n), r.cfg.GatewayFirstByte, r.cfg.GatewayTotal)})
	r.add(Row{Scenario: scen, Figure: "achieved", Value: m.achieved, Unit: "turns/s", Baseline: d.achieved,
		Note: "baseline: the same load sent straight to the fake"})
	r.add(Row{Scenario: scen, Figure: "success", Value: m.success, Unit: "%", Baseline: d.success})
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	pm, pd := quantiles(m.e2e), quantiles(d.e2e)
	for i, q := range quantileNames {
		r.add(Row{Scenario: scen, Figure: "end to end " + q, Value: ms(pm[i]), Unit: "ms", Baseline: ms(pd[i]),
			Note: fmt.Sprintf("mspd − direct: %+.1f ms", ms(pm[i]-pd[i]))})
	}
	am, ad := quantiles(m.added), quantiles(d.added)
	for _, i := range []int{0, 1} {
		r.add(Row{Scenario: scen, Figure: "first token added " + quantileNames[i], Value: ms(am[i]), Unit: "ms", Baseline: ms(ad[i]),
			Note: "client's first delta − the fake's first byte"})
	}
	rp := quantiles(m.replies)
	for _, i := range []int{0, 1} {
		r.add(Row{Scenario: scen, Figure: "turn/start reply " + quantileNames[i], Value: ms(rp[i]), Unit: "ms",
			Note: "from the turn's due time"})
	}
	done := max(len(m.e2e), 1)
	r.add(Row{Scenario: scen, Figure: "server CPU per turn", Value: ms(s.cpu) / float64(done), Unit: "ms",
		Note: "from /proc, from the first turn due to the last ended"})
	r.add(Row{Scenario: scen, Figure: "peak RSS", Value: float64(s.peakRSS) / (1 << 20), Unit: "MiB",
		Note: fmt.Sprintf("VmHWM, sessions opened included; ~%.0f turns in flight", loop.rate*r.cfg.GatewayTotal.Seconds())})
	r.add(Row{Scenario: scen, Figure: "fsyncs per turn", Value: s.fsyncs / float64(done), Unit: "",
		Note: "from /metrics: one a group commit, two a checkpoint"})
	r.add(Row{Scenario: scen, Figure: "provider connections", Value: float64(m.connections), Unit: "", Baseline: float64(d.connections),
		Note: fmt.Sprintf("TCP connections the fake accepted for %d requests", n)})
}

// quantileNames name what quantiles returns.
var quantileNames = []string{"p50", "p99", "p999"}

// quantiles are the p50, p99 and p99.9 of d (zeros when empty).
func quantiles(d []time.Duration) [3]time.Duration {
	var out [3]time.Duration
	if len(d) == 0 {
		return out
	}
	s := slices.Clone(d)
	slices.Sort(s)
	for i, q := range []float64{0.50, 0.99, 0.999} {
		out[i] = s[int(q*float64(len(s)-1)+0.5)]
	}
	return out
}

// gatewayDirect offers loop straight to a fresh fake, each turn one
// streamed request on an HTTP client pooled as mspd's providers are.
func (r *runner) gatewayDirect(ctx context.Context, loop openLoop) (*gatewayRun, error) {
	fake, err := r.startFake()
	if err != nil {
		return nil, err
	}
	defer fake.stop()
	client := provider.Pool{}.Client()
	defer client.CloseIdleConnections()
	body := []byte(`{"model":"mspbench","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`)
	run := &gatewayRun{loop: loop, turns: make([]gatewayTurn, len(loop.due))}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	run.start = time.Now().Add(100 * time.Millisecond)
	deadline := time.AfterFunc(time.Until(r.gatewayDeadline(run)), cancel)
	defer deadline.Stop()
	for j, due := range loop.due {
		if !sleepUntil(ctx, run.start.Add(due)) {
			break
		}
		wg.Go(func() { run.turns[j] = directTurn(ctx, client, fake.url+"/chat/completions", body) })
	}
	wg.Wait()
	run.elapsed = time.Since(run.start)
	run.conns = fake.accepted.Load()
	return run, nil
}

// directTurn streams one answer from the fake.
func directTurn(ctx context.Context, client *http.Client, url string, body []byte) gatewayTurn {
	var t gatewayTurn
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return t
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return t
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return t
	}
	br := bufio.NewReaderSize(resp.Body, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return t
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		if bytes.HasPrefix(data, []byte("[DONE]")) {
			t.end, t.ok = time.Now(), !t.first.IsZero()
			return t
		}
		if t.first.IsZero() && bytes.Contains(data, []byte(`"content":"`)) {
			t.first = time.Now()
			t.fakeFirst, _ = parseStamp(data)
		}
	}
}

// gatewayDeadline is when a run's turns stop being waited for.
func (r *runner) gatewayDeadline(run *gatewayRun) time.Time {
	return run.start.Add(run.loop.due[len(run.loop.due)-1] + r.cfg.GatewayTotal + gatewayDrain)
}

func (r *runner) startFake() (*fakeProvider, error) {
	return startFakeProvider(r.cfg.GatewayFirstByte, r.cfg.GatewayTotal, r.cfg.GatewayChunks)
}

// gatewayMSPD offers loop to a fresh mspd whose provider is a fresh fake.
func (r *runner) gatewayMSPD(ctx context.Context, loop openLoop) (*gatewayRun, gatewayServerStats, error) {
	var stats gatewayServerStats
	fake, err := r.startFake()
	if err != nil {
		return nil, stats, err
	}
	defer fake.stop()
	args := append(slices.Clip(r.cfg.ServerArgs), "--provider", "openai", "--model", "gpt-4o-mini")
	if r.cfg.Profile != "" {
		args = append(args, "--pprof")
	}
	env := append(slices.Clip(r.cfg.ServerEnv), "OPENAI_BASE_URL="+fake.url, "OPENAI_API_KEY=mspbench")
	srv, err := startServer(ctx, r.bin, r.cfg.WorkDir, args, env)
	if err != nil {
		return nil, stats, err
	}
	defer srv.stop()
	conns, err := openGatewaySessions(ctx, srv.url, len(loop.due), r.cfg.GatewayConns)
	if err != nil {
		return nil, stats, fmt.Errorf("opening %d sessions: %w", len(loop.due), err)
	}
	defer func() {
		for _, c := range conns {
			c.c.close()
		}
	}()
	fsync0, err := srvFsyncs(ctx, srv)
	if err != nil {
		return nil, stats, err
	}
	cpu0, _ := srv.cpu()
	run := &gatewayRun{loop: loop, turns: make([]gatewayTurn, len(loop.due))}
	run.start = time.Now().Add(100 * time.Millisecond)
	runCtx, cancel := context.WithDeadline(ctx, r.gatewayDeadline(run))
	defer cancel()
	var profile chan error
	if r.cfg.Profile != "" {
		profile = make(chan error, 1)
		go func() { profile <- r.gatewayProfiles(ctx, srv, run) }()
	}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { c.write(runCtx, run) })
		wg.Go(func() { c.readTurns(runCtx, run) })
	}
	wg.Wait()
	run.elapsed = time.Since(run.start)
	cpu1, _ := srv.cpu()
	stats.cpu = cpu1 - cpu0
	stats.peakRSS, _ = procPeakRSS(srv.pid)
	fsync1, err := srvFsyncs(ctx, srv)
	if err != nil {
		return nil, stats, err
	}
	stats.fsyncs = fsync1 - fsync0
	run.conns = fake.accepted.Load()
	if profile != nil {
		if err := <-profile; err != nil {
			return nil, stats, err
		}
	}
	return run, stats, nil
}

// gatewayProfiles writes mspd's profiles of a run (started with --pprof):
// a CPU profile of the steady state, from a second after the first turn
// is due for up to gatewayProfileSeconds (Profile.gateway<rate>), and,
// as the last turn is due (the most turns in flight), the heap
// (.heap, and .heap.txt with the runtime's memory statistics) and the
// goroutines (.goroutine).
func (r *runner) gatewayProfiles(ctx context.Context, srv *server, run *gatewayRun) error {
	file := fmt.Sprintf("%s.gateway%g", r.cfg.Profile, run.loop.rate)
	span := run.loop.span()
	cpuFrom := run.start.Add(min(time.Second, span/4))
	secs := max(1, min(gatewayProfileSeconds, int((span-time.Second).Seconds())))
	cpu := make(chan error, 1)
	go func() {
		if !sleepUntil(ctx, cpuFrom) {
			cpu <- ctx.Err()
			return
		}
		cpu <- fetch(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", srv.base, secs), file)
	}()
	var errs []error
	if sleepUntil(ctx, run.start.Add(run.loop.due[len(run.loop.due)-1])) {
		for _, p := range []string{"heap", "heap?debug=1", "goroutine"} {
			out := file + "." + strings.ReplaceAll(p, "?debug=1", ".txt")
			errs = append(errs, fetch(ctx, srv.base+"/debug/pprof/"+p, out))
		}
		r.logf("  heap and goroutine profiles: %s.heap, .heap.txt, .goroutine", file)
	}
	errs = append(errs, <-cpu)
	r.logf("  CPU profile: %s", file)
	return errors.Join(errs...)
}

// gatewayProfileSeconds bounds the gateway's CPU profile.
const gatewayProfileSeconds = 15

// srvFsyncs counts the fsyncs of mspd's SQLite store so far, from
// /metrics: one a group commit, two a checkpoint (the log, then the
// database file).
func srvFsyncs(ctx context.Context, s *server) (float64, error) {
	commits, err := s.metric(ctx, "mspd_store_commit_seconds_count")
	if err != nil {
		return 0, err
	}
	checkpoints, err := s.metricSum(ctx, "mspd_store_checkpoints_total")
	return commits + 2*checkpoints, err
}

// gatewayConn is one client connection of the gateway scenario, with the
// turns it sends: turn j on session j, each turn/start prepared before
// the clock starts.
type gatewayConn struct {
	c      *mspConn
	turns  []int          // the turns it sends, in due order
	frames [][]byte       // their turn/start frames, by index in turns
	bySess map[string]int // session id → turn
}

// openGatewaySessions opens min(conns, n) connections and n sessions over
// them, turn j's on connection j mod conns, before the clock starts.
func openGatewaySessions(ctx context.Context, url string, n, conns int) ([]*gatewayConn, error) {
	conns = max(1, min(conns, n))
	gc := make([]*gatewayConn, conns)
	err := parallel(ctx, conns, setupParallelism, func(ctx context.Context, i int) error {
		c, err := dialMSP(ctx, url)
		if err != nil {
			return err
		}
		gc[i] = &gatewayConn{c: c, bySess: make(map[string]int)}
		return nil
	})
	if err == nil {
		err = parallel(ctx, conns, conns, func(ctx context.Context, i int) error {
			return gc[i].startSessions(ctx, n, conns, i)
		})
	}
	if err == nil {
		err = parallel(ctx, conns, setupParallelism, func(ctx context.Context, i int) error { return gc[i].c.sendReady(ctx) })
	}
	if err != nil {
		for _, g := range gc {
			if g != nil {
				g.c.close()
			}
		}
		return nil, err
	}
	return gc, nil
}

// startSessions starts the sessions of turns i, i+conns, … below n and
// prepares their turn/start frames, whose ids are the turns' numbers + 1.
func (g *gatewayConn) startSessions(ctx context.Context, n, conns, i int) error {
	for j := i; j < n; j += conns {
		id, _, err := g.c.startSession(ctx)
		if err != nil {
			return err
		}
		g.bySess[id] = j
		g.turns = append(g.turns, j)
		g.frames = append(g.frames, fmt.Appendf(nil,
			`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"commandId":%q,"sessionId":%q,"input":[{"type":"text","text":"hi"}]}}`,
			j+1, msp.MethodTurnStart, newCommandID(), id))
	}
	return nil
}

// write sends each turn/start at its due time, or as soon after as the
// connection lets it: a late send still counts from its due time.
func (g *gatewayConn) write(ctx context.Context, run *gatewayRun) {
	for k, j := range g.turns {
		if !sleepUntil(ctx, run.start.Add(run.loop.due[j])) {
			return
		}
		if g.c.ws.Write(ctx, websocket.MessageText, g.frames[k]) != nil {
			return
		}
	}
}

// readTurns reads the connection's frames until each of its turns has
// ended (or failed), noting when each turn's reply, first delta and
// turn/completed arrived.
func (g *gatewayConn) readTurns(ctx context.Context, run *gatewayRun) {
	ctx, stop := g.c.bound(ctx) // one watch for the run, not one a frame
	defer stop()
	for left := len(g.turns); left > 0; {
		f, err := g.c.read(ctx)
		if err != nil {
			return
		}
		now := time.Now()
		if id, isErr, ok := responseID(f); ok {
			if j := id - 1; j >= 0 && j < len(run.turns) {
				run.turns[j].reply = now
				if isErr {
					left--
				}
			}
			continue
		}
		switch string(methodOf(f)) {
		case msp.NotifyItemDelta:
			j, ok := g.bySess[string(stringMember(f, "sessionId"))]
			if ok && run.turns[j].first.IsZero() {
				run.turns[j].first = now
				run.turns[j].fakeFirst, _ = parseStamp(stringMember(f, "delta"))
			}
		case msp.NotifyTurnCompleted:
			if j, ok := g.bySess[string(stringMember(f, "sessionId"))]; ok {
				run.turns[j].end = now
				run.turns[j].ok = string(stringMember(f, "terminal")) == "completed"
				left--
			}
		}
	}
}

// responsePrefix starts every response mspd encodes.
var responsePrefix = []byte(`{"jsonrpc":"2.0","id":`)

// responseID reads a response's numeric id without decoding it, and
// whether it is an error; ok is false for anything else.
func responseID(frame []byte) (id int, isErr, ok bool) {
	rest, found := bytes.CutPrefix(frame, responsePrefix)
	if !found {
		return 0, false, false
	}
	k := 0
	for k < len(rest) && rest[k] >= '0' && rest[k] <= '9' {
		k++
	}
	id, err := strconv.Atoi(string(rest[:k]))
	if err != nil {
		return 0, false, false
	}
	return id, strings.HasPrefix(string(rest[k:]), `,"error"`), true
}
