package bench

import (
	"context"
	"fmt"
	"time"

	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// cluster: the turns scenario (N sessions × one turn: a 429, then K
// deltas) on a cluster of ClusterNodes mspd processes on JetStream, every
// session led by node 1, read by clients on node 1 (the leader: its own
// fan-out) and by clients on node 2 (a follower: the leader publishes
// each event on core NATS and node 2 fans it out), beside the same turns
// on one mspd on SQLite and the raw baseline. All run at once, their
// rounds alternating, so that the figures compare.
func (r *runner) clusterScenario(ctx context.Context) error {
	for _, n := range r.cfg.ClusterSessions {
		if err := r.clusterAt(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) clusterAt(ctx context.Context, n int) error {
	k, rounds, size, replicas := r.cfg.TurnDeltas, r.cfg.Rounds, r.cfg.ClusterNodes, r.cfg.ClusterReplicas
	single, err := r.startServer(ctx)
	if err != nil {
		return err
	}
	defer single.stop()
	r.logf("  starting %d mspd nodes on JetStream, %d replicas", size, replicas)
	ns, err := r.startNodes(ctx, size, replicas)
	if err != nil {
		return err
	}
	defer ns.stop()
	lone, err := setupSessions(ctx, single.url, n)
	if err != nil {
		return err
	}
	defer closeSessions(lone)
	led, err := setupSessions(ctx, ns.srvs[0].url, n)
	if err != nil {
		return err
	}
	defer closeSessions(led)
	// A first short turn each: node 1 takes the leases of led's sessions,
	// and every session is loaded where it is read.
	for _, ss := range [][]session{lone, led} {
		if err := parallel(ctx, n, n, func(ctx context.Context, i int) error { _, err := shortTurn(ctx, ss[i]); return err }); err != nil {
			return err
		}
	}
	followed, err := followedSessions(ctx, ns.srvs[0].url, ns.srvs[1].url, n)
	if err != nil {
		return err
	}
	defer closeSessions(followed)
	rc, err := dialRaw(ctx, r.raw, n)
	if err != nil {
		return fmt.Errorf("raw baseline: %w", err)
	}
	defer rc.close()

	one := turnScript(1, k)
	script := func(int) string { return one }
	on := func(ss []session) func(context.Context) ([]turnResult, time.Duration, error) {
		return func(ctx context.Context) ([]turnResult, time.Duration, error) { return turnRound(ctx, ss, script) }
	}
	var sqlite, leader, follower, raw roundTally
	var followerVsLeader, followerVsSQLite []float64
	var idleCPU, idleTime time.Duration
	for range rounds {
		c0, t0 := serversCPU(ns.processes()), time.Now()
		if err := sqlite.measure(ctx, []*server{single}, on(lone)); err != nil {
			return err
		}
		// The cluster sat idle meanwhile: what its leases and adoption
		// scans cost.
		idleCPU, idleTime = idleCPU+serversCPU(ns.processes())-c0, idleTime+time.Since(t0)
		if err := leader.measure(ctx, ns.processes(), on(led)); err != nil {
			return err
		}
		if err := follower.measure(ctx, ns.processes(), on(followed)); err != nil {
			return err
		}
		if err := raw.measureRaw(ctx, rc, k, sqlite.sample); err != nil {
			return err
		}
		for _, t := range []*roundTally{&sqlite, &leader, &follower} {
			t.ratios = append(t.ratios, t.last()/raw.last())
		}
		followerVsLeader = append(followerVsLeader, follower.last()/leader.last())
		followerVsSQLite = append(followerVsSQLite, follower.last()/sqlite.last())
	}
	if r.cfg.Profile != "" {
		// The leader and the follower while followers read.
		files := []string{fmt.Sprintf("%s.cluster%d.leader", r.cfg.Profile, n), fmt.Sprintf("%s.cluster%d.follower", r.cfg.Profile, n)}
		err := r.profileAll(ctx, ns.srvs[:2], files, func(ctx context.Context) error {
			_, _, err := turnRound(ctx, followed, script)
			return err
		})
		if err != nil {
			return err
		}
	}
	want := n * k * rounds
	scen := fmt.Sprintf("cluster %d×%d", n, k)
	deployment := fmt.Sprintf("%d nodes, JetStream R%d", size, replicas)
	for _, c := range []struct {
		what string
		t    *roundTally
	}{
		{"one node, SQLite", &sqlite},
		{deployment + ", read on the leader", &leader},
		{deployment + ", read on a follower", &follower},
	} {
		if err := r.turnRows(scen+": "+c.what, want, c.t, &raw); err != nil {
			return err
		}
	}
	r.add(Row{Scenario: scen, Figure: "follower ÷ leader, delivered deltas/s", Value: median(followerVsLeader), Unit: "",
		Note: "median of the rounds' ratios"})
	r.add(Row{Scenario: scen, Figure: "follower ÷ one SQLite node, delivered deltas/s", Value: median(followerVsSQLite), Unit: "",
		Note: "median of the rounds' ratios"})
	for _, c := range []struct {
		where string
		t     *roundTally
	}{{"the leader", &leader}, {"a follower", &follower}} {
		for i, cpu := range c.t.nodeCPU {
			r.add(Row{Scenario: scen + ": " + deployment + ", read on " + c.where, Figure: fmt.Sprintf("node n%d CPU per delta", i+1),
				Value: perItem(cpu, want), Unit: "µs", Note: nodeRole(i, c.t == &follower)})
		}
	}
	r.add(Row{Scenario: scen + ": " + deployment, Figure: "CPU while idle", Value: 100 * idleCPU.Seconds() / idleTime.Seconds(), Unit: "% of a core",
		Note: fmt.Sprintf("all nodes, holding %d leases, during the SQLite rounds", 2*n)})
	return nil
}

// nodeRole says what node i (0-based) does for sessions read on the
// leader or on a follower.
func nodeRole(i int, followed bool) string {
	switch {
	case i == 0:
		return "the leader: runs the turns, publishes each event on NATS"
	case i == 1 && followed:
		return "the follower: its clients read here"
	}
	return "neither: its NATS server routes, its JetStream replicates"
}

// shortTurn runs a one-delta turn on s and returns the cursor of its
// turn/completed.
func shortTurn(ctx context.Context, s session) (string, error) {
	if err := s.c.sendTurn(ctx, s.id, scripted.Script(scripted.Step{Text: "ok"})); err != nil {
		return "", err
	}
	for {
		f, err := s.c.read(ctx)
		if err != nil {
			return "", err
		}
		if string(methodOf(f)) == msp.NotifyTurnCompleted {
			return string(stringMember(f, "viewCursor")), nil
		}
	}
}

// followedSessions starts n sessions on the node at leaderURL, which
// takes their leases with a first short turn each, closes the connections
// there, and returns the sessions as read from the node at followerURL:
// a connection each, resumed at the session's head (subscribed), whose
// turn/start that node forwards to the leader.
func followedSessions(ctx context.Context, leaderURL, followerURL string, n int) ([]session, error) {
	started, err := setupSessions(ctx, leaderURL, n)
	if err != nil {
		return nil, err
	}
	defer closeSessions(started)
	ss := make([]session, n)
	err = parallel(ctx, n, setupParallelism, func(ctx context.Context, i int) error {
		head, err := shortTurn(ctx, started[i])
		if err != nil {
			return err
		}
		c, err := dialReady(ctx, followerURL)
		if err != nil {
			return err
		}
		ss[i] = session{c: c, id: started[i].id, cursor: head}
		_, err = c.call(ctx, msp.MethodSessionResume, msp.SessionResumeParams{CommandID: newCommandID(), SessionID: ss[i].id, Cursor: &head})
		return err
	})
	if err != nil {
		closeSessions(ss)
		return nil, err
	}
	return ss, nil
}
