package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"mspd/daemon"
	"mspd/modelretry"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// noticeSample is one retry notice as a client received it.
type noticeSample struct {
	turn      int
	delayMs   int64     // retryDelayMs of the notice
	emittedMs int64     // its emittedAtMs
	recv      time.Time // when the client had read it
}

// runNotices runs turns turns over the sessions: turn j on session
// j mod len(ss), due at start + j/rate (all at once when rate is 0); a
// session's next turn waits for its previous one to end. Each turn is
// script(j). It returns every retry notice received.
func runNotices(ctx context.Context, ss []session, turns int, rate float64, script func(j int) string) ([]noticeSample, error) {
	var mu sync.Mutex
	var samples []noticeSample
	start := time.Now()
	err := parallel(ctx, len(ss), len(ss), func(ctx context.Context, s int) error {
		c := ss[s].c
		for j := s; j < turns; j += len(ss) {
			if rate > 0 {
				due := start.Add(time.Duration(float64(j) / rate * float64(time.Second)))
				time.Sleep(time.Until(due))
			}
			if err := c.sendTurn(ctx, ss[s].id, script(j)); err != nil {
				return err
			}
			if err := awaitTurn(ctx, c, func(f []byte) {
				n := noticeSample{turn: j, recv: time.Now(), delayMs: intMember(f, "retryDelayMs"), emittedMs: intMember(f, "emittedAtMs")}
				mu.Lock()
				samples = append(samples, n)
				mu.Unlock()
			}); err != nil {
				return err
			}
		}
		return nil
	})
	return samples, err
}

// idleTurns is how many turns idleReplies times.
const idleTurns = 50

// idleReplies times turn/start → its answer on an otherwise idle server,
// n one-delta turns one after another on one session: the admission (a
// commit) and the answer's way back.
func idleReplies(ctx context.Context, url string, n int) ([]time.Duration, error) {
	ss, err := setupSessions(ctx, url, 1)
	if err != nil {
		return nil, err
	}
	defer closeSessions(ss)
	c, script := ss[0].c, scripted.Script(scripted.Step{Text: "ok"})
	var out []time.Duration
	for range n {
		start := time.Now()
		id, err := c.send(ctx, msp.MethodTurnStart, msp.TurnStartParams{CommandID: newCommandID(), SessionID: ss[0].id,
			Input: []msp.TurnInputPart{{Type: "text", Text: script}}})
		if err != nil {
			return nil, err
		}
		for answered := false; ; {
			f, err := c.read(ctx)
			if err != nil {
				return nil, err
			}
			if _, ok, err := responseTo(f, id); ok {
				if err != nil {
					return nil, err
				}
				out, answered = append(out, time.Since(start)), true
			}
			if answered && string(methodOf(f)) == msp.NotifyTurnCompleted {
				break
			}
		}
	}
	return out, nil
}

// awaitTurn reads frames until turn/completed, handing each
// turn/modelRetryScheduled to notice.
func awaitTurn(ctx context.Context, c *mspConn, notice func(frame []byte)) error {
	for {
		f, err := c.read(ctx)
		if err != nil {
			return err
		}
		switch string(methodOf(f)) {
		case msp.NotifyTurnModelRetryScheduled:
			notice(f)
		case msp.NotifyTurnCompleted:
			return nil
		}
	}
}

// noticeDelayMs is the Retry-After of turn j's 429 in the in-process
// runs: it identifies the turn's backoff on the recording clock.
func noticeDelayMs(j int) int { return 10 + j%1000 }

// noticeScript is turn j of the notice scenario: a 429 with a backoff of
// noticeDelayMs(j), then a short answer.
func (r *runner) noticeScript(j int) string {
	ms := noticeDelayMs(j)
	return scripted.Script(
		scripted.Step{Status: 429, ErrorKind: "rateLimited", RetryAfterMs: &ms},
		scripted.Step{Text: strings.Repeat(deltaWord, r.cfg.NoticeDeltas), Chunks: r.cfg.NoticeDeltas},
	)
}

// notice measures how long a retry notice takes to reach its reader.
//
// Against a separate mspd process the clocks compared are the server's
// emittedAtMs (whole milliseconds, stamped as the notice is appended,
// before its commit) and the client's receipt: each figure over-reads by
// less than 1 ms. The in-process run compares one monotonic clock at
// nanosecond precision: the daemon's injected clock records when the
// retry engine starts its backoff sleep, which it does right after the
// notice was committed and handed to every subscriber's outbox; that
// figure is the fan-out → socket → client part alone.
func (r *runner) notice(ctx context.Context) error {
	n, turns, rate := r.cfg.NoticeSessions, r.cfg.NoticeTurns, r.cfg.NoticeRate
	steady := fmt.Sprintf("notice %d sessions, %g turns/s", n, rate)
	burst := fmt.Sprintf("notice %d turns at once", r.cfg.NoticeBurst)
	emitted := func(s []noticeSample) []time.Duration {
		d := make([]time.Duration, len(s))
		for i, x := range s {
			d[i] = x.recv.Sub(time.UnixMilli(x.emittedMs))
		}
		return d
	}
	// run runs turns on new sessions; then, when set, runs on the same
	// sessions before they close.
	run := func(url string, sessions, turns int, rate float64, then func([]session) error) ([]noticeSample, error) {
		ss, err := setupSessions(ctx, url, sessions)
		if err != nil {
			return nil, err
		}
		defer closeSessions(ss)
		s, err := runNotices(ctx, ss, turns, rate, r.noticeScript)
		if err == nil && then != nil {
			err = then(ss)
		}
		return s, err
	}

	srv, err := r.startServer(ctx)
	if err != nil {
		return err
	}
	replies, err := idleReplies(ctx, srv.url, idleTurns)
	if err != nil {
		srv.stop()
		return err
	}
	r.latencyRows("idle server", "turn/start → reply", replies, "one turn at a time; separate process")
	s, err := run(srv.url, n, turns, rate, nil)
	srv.stop()
	if err != nil {
		return err
	}
	r.latencyRows(steady, "emitted→received", emitted(s), "separate process; ms clock")
	if r.cfg.NoticeBurst > 0 {
		if srv, err = r.startServer(ctx); err != nil {
			return err
		}
		var profile func([]session) error
		if r.cfg.Profile != "" {
			profile = func(ss []session) error { return r.profileBurst(ctx, srv, ss) }
		}
		s, err = run(srv.url, r.cfg.NoticeBurst, r.cfg.NoticeBurst, 0, profile)
		srv.stop()
		if err != nil {
			return err
		}
		r.latencyRows(burst, "emitted→received", emitted(s), "separate process; ms clock")
	}

	in, err := r.inProcess(ctx)
	if err != nil {
		return err
	}
	defer in.close()
	if s, err = run(in.d.URL(), n, turns, rate, nil); err != nil {
		return err
	}
	r.latencyRows(steady, "fanned out→received", in.clock.latencies(s), "in-process; ns clock")
	if r.cfg.NoticeBurst > 0 {
		in.close()
		if in, err = r.inProcess(ctx); err != nil {
			return err
		}
		if s, err = run(in.d.URL(), r.cfg.NoticeBurst, r.cfg.NoticeBurst, 0, nil); err != nil {
			return err
		}
		r.latencyRows(burst, "fanned out→received", in.clock.latencies(s), "in-process; ns clock")
	}
	return nil
}

// profileBurst profiles srv (Profile.notice-burst) while bursts run again
// on the burst's sessions ss, each turn a 429 with a backoff of a few
// milliseconds and a one-delta answer, so that the profile is of the work
// the burst's notices wait behind (admissions, notices, turns starting)
// rather than of answers streaming.
func (r *runner) profileBurst(ctx context.Context, srv *server, ss []session) error {
	short := func(j int) string {
		ms := 1 + j%10
		return scripted.Script(scripted.Step{Status: 429, ErrorKind: "rateLimited", RetryAfterMs: &ms}, scripted.Step{Text: "ok"})
	}
	return r.profile(ctx, srv, r.cfg.Profile+".notice-burst", func(ctx context.Context) error {
		_, err := runNotices(ctx, ss, len(ss), 0, short)
		return err
	})
}

// inProcessDaemon is an mspd in the benchmark's own process, on a
// recording clock.
type inProcessDaemon struct {
	d     *daemon.Daemon
	dir   string
	clock *recordingClock
}

// inProcess starts a daemon configured as the separate servers are.
func (r *runner) inProcess(ctx context.Context) (*inProcessDaemon, error) {
	dir, err := os.MkdirTemp(r.cfg.WorkDir, "mspd-inproc-")
	if err != nil {
		return nil, err
	}
	clock := &recordingClock{sleeps: make(map[time.Duration][]time.Time)}
	d, err := daemon.New(ctx, daemon.Config{
		DataDir: dir, Listen: "127.0.0.1:0", Provider: "scripted",
		RetryBudget: daemon.Budget{Tokens: -1},
		Clock:       clock,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	if err := d.Start(); err != nil {
		d.Close(ctx)
		return nil, err
	}
	return &inProcessDaemon{d: d, dir: dir, clock: clock}, nil
}

func (p *inProcessDaemon) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.d.Close(ctx)
	os.RemoveAll(p.dir)
}

// recordingClock is the real clock, noting when each backoff sleep
// starts, by its duration.
type recordingClock struct {
	mu     sync.Mutex
	sleeps map[time.Duration][]time.Time
}

// Now implements modelretry.Clock.
func (c *recordingClock) Now() time.Time { return time.Now() }

// Sleep implements modelretry.Clock.
func (c *recordingClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.Now()
	c.mu.Lock()
	c.sleeps[d] = append(c.sleeps[d], t)
	c.mu.Unlock()
	return modelretry.SystemClock().Sleep(ctx, d)
}

// latencies pairs each notice with the backoff that followed it: turns
// sharing a delay are far apart, so the k-th notice of a delay (in turn
// order) goes with the k-th sleep of that duration.
func (c *recordingClock) latencies(s []noticeSample) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	s = slices.Clone(s)
	slices.SortFunc(s, func(a, b noticeSample) int { return a.turn - b.turn })
	used := make(map[time.Duration]int)
	var out []time.Duration
	for _, x := range s {
		d := time.Duration(x.delayMs) * time.Millisecond
		k := used[d]
		used[d]++
		if k < len(c.sleeps[d]) {
			out = append(out, x.recv.Sub(c.sleeps[d][k]))
		}
	}
	return out
}
