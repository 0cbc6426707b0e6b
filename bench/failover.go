package bench

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"mspd/schema/msp"
)

// failover: how long a dead node's busy sessions wait to run again
// elsewhere. Three mspd nodes on JetStream R3, with --lease-ttl
// FailoverLeaseTTL, answer from a fake OpenAI-compatible provider in this
// process. For each K of FailoverSessions, on a fresh cluster and a fresh
// fake: K sessions start on node n1 (which leads them) with one turn each,
// whose first provider request streams for far longer than the run; a
// client on n2 follows each session. Once every turn has streamed a delta
// to n2, n1 is killed (SIGKILL). Each turn must then resume on n2 or n3 as
// a new attempt (turn/retryScheduled "node n1 stopped during attempt 1"),
// which the fake answers in 100 ms, and complete. Figures, per turn, from
// the kill: to the notice on n2's client, to the fake receiving the
// resumed request, and to the new attempt's first delta on n2's client;
// and the violations, which must be 0: turns lost or not resumed, and
// provider requests other than two a turn.

// failoverFirstAnswer is how long a turn's first provider request streams:
// far past any run, so that every turn is busy when n1 dies. Its deltas
// come failoverFirstChunk apart, well within the provider's idle timeout.
const (
	failoverFirstAnswer = 30 * time.Minute
	failoverFirstChunk  = 2 * time.Second
)

// failoverResumedAnswer is how long the fake takes to answer a turn's
// second request, the resumed attempt, in failoverResumedChunks deltas.
const (
	failoverResumedAnswer = 100 * time.Millisecond
	failoverResumedChunks = 2
)

// failoverTurnText starts each turn's input, before the turn's number: the
// fake finds it in a request's body and so counts the requests per turn.
const failoverTurnText = "failover turn "

// failoverStoppedReason is what the resumed attempt's notice names: the
// node that died.
const failoverStoppedReason = "node n1 stopped"

// failoverScenario runs failoverAt for each session count.
func (r *runner) failoverScenario(ctx context.Context) error {
	for _, k := range r.cfg.FailoverSessions {
		if err := r.failoverAt(ctx, k); err != nil {
			return fmt.Errorf("%d sessions: %w", k, err)
		}
	}
	return nil
}

// failoverAt runs one round: k busy sessions on a fresh cluster, whose
// leader is killed.
func (r *runner) failoverAt(ctx context.Context, k int) error {
	ttl := r.cfg.FailoverLeaseTTL
	fake, err := startFailoverFake()
	if err != nil {
		return err
	}
	defer fake.stop()
	r.logf("  K=%d, lease TTL %s: starting 3 mspd nodes on JetStream, 3 replicas", k, ttl)
	args := []string{"--provider", "openai", "--model", "gpt-4o-mini", "--lease-ttl", ttl.String()}
	env := []string{"OPENAI_BASE_URL=" + fake.url, "OPENAI_API_KEY=mspbench"}
	ns, err := r.startNodesWith(ctx, 3, 3, args, env)
	if err != nil {
		return err
	}
	defer ns.stop()
	run, err := startFailoverTurns(ctx, ns.srvs[0].url, ns.srvs[1].url, k)
	if err != nil {
		return err
	}
	defer run.close()
	r.logf("  K=%d: waiting for every turn's first delta on n2", k)
	if err := run.awaitStreaming(failoverSetupLimit(k)); err != nil {
		return err
	}
	r.logf("  K=%d: killing n1 (SIGKILL)", k)
	if err := ns.srvs[0].cmd.Process.Kill(); err != nil {
		return fmt.Errorf("killing n1: %w", err)
	}
	killed := time.Now()
	run.awaitEnds(killed.Add(ttl + failoverSetupLimit(k)))
	r.failoverRows(k, killed, run, fake)
	return nil
}

// failoverSetupLimit bounds how long k sessions may take to stream their
// first delta, and, after the lease TTL, to end once n1 is killed.
func failoverSetupLimit(k int) time.Duration {
	return 2*time.Minute + time.Duration(k)*100*time.Millisecond
}

// failoverFake is the fake provider of a failover round: it answers a
// turn's first request slowly and any later one quickly, noting when
// each arrived.
type failoverFake struct {
	*fakeProvider
	mu       sync.Mutex
	requests map[int][]time.Time // turn number → its requests' arrivals
	stray    int                 // requests naming no turn
}

func startFailoverFake() (*failoverFake, error) {
	ff := &failoverFake{requests: make(map[int][]time.Time)}
	fake, err := startFakeProvider(0, failoverResumedAnswer, failoverResumedChunks)
	if err != nil {
		return nil, err
	}
	fake.plan = ff.plan
	ff.fakeProvider = fake
	return ff, nil
}

// plan notes the request and times its answer.
func (ff *failoverFake) plan(body []byte) answerPlan {
	now := time.Now()
	quick := answerPlan{total: failoverResumedAnswer, chunks: failoverResumedChunks}
	j, ok := failoverTurnOf(body)
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if !ok {
		ff.stray++
		return quick
	}
	ff.requests[j] = append(ff.requests[j], now)
	if len(ff.requests[j]) > 1 {
		return quick
	}
	return answerPlan{firstByte: 20 * time.Millisecond, total: failoverFirstAnswer,
		chunks: int(failoverFirstAnswer / failoverFirstChunk)}
}

// failoverTurnOf finds the turn number in a request's body.
func failoverTurnOf(body []byte) (int, bool) {
	i := bytes.Index(body, []byte(failoverTurnText))
	if i < 0 {
		return 0, false
	}
	rest := body[i+len(failoverTurnText):]
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	j, err := strconv.Atoi(string(rest[:n]))
	return j, err == nil
}

// requestsOf returns a copy of turn j's request arrivals.
func (ff *failoverFake) requestsOf(j int) []time.Time {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	return append([]time.Time(nil), ff.requests[j]...)
}

// failoverTurn is what n2's client saw of one turn; written by its reader
// alone, read once the reader has ended.
type failoverTurn struct {
	firstDelta   time.Time // the first attempt's first delta
	notice       time.Time // the first turn/retryScheduled
	reason       string    // its reason
	notices      int
	resumedDelta time.Time // the first delta after the notice
	end          time.Time // turn/completed
	terminal     string
}

// failoverRun is one round's sessions: their connections to n1, where
// they were started, and to n2, where they are read.
type failoverRun struct {
	leader, follower []*mspConn
	ids              []string // the sessions' ids
	turns            []failoverTurn
	streaming        sync.WaitGroup // a turn each, done at its first delta or its reader's end
	readers          sync.WaitGroup
	stop             context.CancelFunc // ends the readers
}

// startFailoverTurns starts k sessions on the node at leaderURL, has a
// client of the node at followerURL resume each, and starts a turn on
// each through its leader.
func startFailoverTurns(ctx context.Context, leaderURL, followerURL string, k int) (*failoverRun, error) {
	started, err := setupSessions(ctx, leaderURL, k)
	if err != nil {
		return nil, err
	}
	run := &failoverRun{leader: make([]*mspConn, k), follower: make([]*mspConn, k), ids: make([]string, k), turns: make([]failoverTurn, k)}
	for i, s := range started {
		run.leader[i], run.ids[i] = s.c, s.id
	}
	err = parallel(ctx, k, setupParallelism, func(ctx context.Context, i int) error {
		c, err := dialReady(ctx, followerURL)
		if err != nil {
			return err
		}
		run.follower[i] = c
		_, err = c.call(ctx, msp.MethodSessionResume, msp.SessionResumeParams{CommandID: newCommandID(),
			SessionID: started[i].id, Cursor: &started[i].cursor})
		return err
	})
	if err != nil {
		run.close()
		return nil, fmt.Errorf("following the sessions on n2: %w", err)
	}
	readCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	run.stop = stop
	run.streaming.Add(k)
	for i := range k {
		run.readers.Go(func() { run.read(readCtx, i) })
	}
	err = parallel(ctx, k, setupParallelism, func(ctx context.Context, i int) error {
		return startFailoverTurn(ctx, started[i], i)
	})
	if err != nil {
		run.close()
		return nil, fmt.Errorf("starting the turns on n1: %w", err)
	}
	return run, nil
}

// startFailoverTurn starts turn i of the round on s and leaves its
// connection read (and discarded) until it closes: n1's fan-out goes on
// as it would to a client there.
func startFailoverTurn(ctx context.Context, s session, i int) error {
	_, err := s.c.call(ctx, msp.MethodTurnStart, msp.TurnStartParams{CommandID: newCommandID(), SessionID: s.id,
		Input: []msp.TurnInputPart{{Type: "text", Text: failoverTurnText + strconv.Itoa(i)}}})
	if err != nil {
		return err
	}
	go func() {
		for {
			if _, err := s.c.read(context.Background()); err != nil {
				return
			}
		}
	}()
	return nil
}

// read notes what n2's client sees of turn i, until its turn/completed
// or the run's end.
func (run *failoverRun) read(ctx context.Context, i int) {
	t := &run.turns[i]
	streaming := true
	done := func() {
		if streaming {
			streaming = false
			run.streaming.Done()
		}
	}
	defer done()
	c := run.follower[i]
	ctx, stop := c.bound(ctx)
	defer stop()
	for {
		f, err := c.read(ctx)
		if err != nil {
			return
		}
		now := time.Now()
		switch string(methodOf(f)) {
		case msp.NotifyItemDelta:
			if t.firstDelta.IsZero() {
				t.firstDelta = now
				done()
			}
			if !t.notice.IsZero() && t.resumedDelta.IsZero() {
				t.resumedDelta = now
			}
		case msp.NotifyTurnRetryScheduled:
			if t.notices++; t.notices == 1 {
				t.notice, t.reason = now, string(stringMember(f, "reason"))
			}
		case msp.NotifyTurnCompleted:
			t.end, t.terminal = now, string(stringMember(f, "terminal"))
			return
		}
	}
}

// awaitStreaming waits up to limit for every turn to stream a delta to
// n2's client.
func (run *failoverRun) awaitStreaming(limit time.Duration) error {
	all := make(chan struct{})
	go func() { run.streaming.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(limit):
		run.stop()
		<-all
	}
	for i := range run.turns {
		if run.turns[i].firstDelta.IsZero() {
			return fmt.Errorf("turn %d streamed nothing to n2 within %s: %w", i, limit, errIncomplete)
		}
	}
	return nil
}

// awaitEnds waits until every turn has ended on n2's client, or deadline.
func (run *failoverRun) awaitEnds(deadline time.Time) {
	all := make(chan struct{})
	go func() { run.readers.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(time.Until(deadline)):
		run.stop()
		<-all
	}
}

// close ends the readers and every connection.
func (run *failoverRun) close() {
	if run.stop != nil {
		run.stop()
	}
	for _, cs := range [][]*mspConn{run.leader, run.follower} {
		for _, c := range cs {
			if c != nil {
				c.close()
			}
		}
	}
	run.readers.Wait()
}

// failoverFaultsLogged bounds the sessions gone wrong that a round logs.
const failoverFaultsLogged = 10

// failoverTally sums a round up.
type failoverTally struct {
	toNotice, toRequest, toDelta []time.Duration
	lost, notResumed, extra, few int
	// faults say what went wrong with which session, for the log.
	faults []string
}

// tallyFailover reads the round's turns and the fake's requests.
func tallyFailover(killed time.Time, run *failoverRun, fake *failoverFake) failoverTally {
	var t failoverTally
	for i, ft := range run.turns {
		reqs := fake.requestsOf(i)
		if ft.terminal != msp.TerminalCompleted {
			t.lost++
		}
		if ft.notice.IsZero() || !strings.Contains(ft.reason, failoverStoppedReason) {
			t.notResumed++
		} else {
			t.toNotice = append(t.toNotice, ft.notice.Sub(killed))
		}
		if !ft.resumedDelta.IsZero() {
			t.toDelta = append(t.toDelta, ft.resumedDelta.Sub(killed))
		}
		if len(reqs) >= 2 {
			t.toRequest = append(t.toRequest, reqs[1].Sub(killed))
		}
		t.extra += max(0, len(reqs)-2)
		if len(reqs) < 2 {
			t.few++
		}
		if ft.terminal != msp.TerminalCompleted || len(reqs) != 2 || ft.notices != 1 {
			t.faults = append(t.faults, fmt.Sprintf("session %s: terminal %q, %d provider requests, %d turn/retryScheduled (%q)",
				run.ids[i], ft.terminal, len(reqs), ft.notices, ft.reason))
		}
	}
	fake.mu.Lock()
	t.extra += fake.stray
	fake.mu.Unlock()
	return t
}

func (r *runner) failoverRows(k int, killed time.Time, run *failoverRun, fake *failoverFake) {
	t := tallyFailover(killed, run, fake)
	for i, f := range t.faults {
		if i == failoverFaultsLogged {
			r.logf("  … and %d more", len(t.faults)-i)
			break
		}
		r.logf("  K=%d, not as it should be: %s", k, f)
	}
	scen := fmt.Sprintf("failover K=%d", k)
	setting := fmt.Sprintf("lease TTL %s; %d busy sessions led by n1 of 3 nodes (JetStream R3), n1 SIGKILLed", r.cfg.FailoverLeaseTTL, k)
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	for _, c := range []struct {
		what, note string
		d          []time.Duration
		first      bool // a row of the earliest too
	}{
		{"kill → turn/retryScheduled", "on a client of n2; " + setting, t.toNotice, true},
		{"kill → resumed provider request", "at the fake provider", t.toRequest, false},
		{"kill → new attempt's first delta", "on a client of n2", t.toDelta, false},
	} {
		p := percentilesOf(c.d)
		note := fmt.Sprintf("%s; %d of %d turns", c.note, p.n, k)
		if c.first && len(c.d) > 0 {
			r.add(Row{Scenario: scen, Figure: c.what + " min", Value: ms(slices.Min(c.d)), Unit: "ms",
				Note: "the first turn resumed: when the lapse was seen"})
		}
		r.add(Row{Scenario: scen, Figure: c.what + " p50", Value: ms(p.p50), Unit: "ms", Note: note})
		r.add(Row{Scenario: scen, Figure: c.what + " p99", Value: ms(p.p99), Unit: "ms"})
		r.add(Row{Scenario: scen, Figure: c.what + " max", Value: ms(p.max), Unit: "ms"})
	}
	for _, v := range []struct {
		what, note string
		n          int
	}{
		{"turns lost", "must be 0: no turn/completed \"completed\" on n2 in time", t.lost},
		{"turns not resumed", "must be 0: no turn/retryScheduled naming " + failoverStoppedReason, t.notResumed},
		{"provider requests beyond 2 a turn", "must be 0: the first attempt and one resume", t.extra},
		{"turns with fewer than 2 provider requests", "must be 0", t.few},
	} {
		r.add(Row{Scenario: scen, Figure: v.what, Value: float64(v.n), Unit: "", Note: v.note})
	}
}
