package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"mspd/schema/msp"
)

// idle: the server's resident memory per open, handshaken, subscribed
// connection that is doing nothing, from /proc/<pid>/status VmRSS before
// and after opening them (all subscribed to one session).
func (r *runner) idle(ctx context.Context) error {
	for _, n := range r.cfg.IdleConns {
		if err := r.idleAt(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) idleAt(ctx context.Context, n int) error {
	srv, err := r.startServer(ctx)
	if err != nil {
		return err
	}
	defer srv.stop()
	owner, err := setupSessions(ctx, srv.url, 1)
	if err != nil {
		return err
	}
	defer closeSessions(owner)
	sid := owner[0].id
	// A few connections first, so that pools and maps the first ones
	// allocate are not charged to the measured ones.
	warm, err := openIdle(ctx, srv.url, sid, 16)
	defer closeAll(warm)
	if err != nil {
		return err
	}
	before, err := settledRSS(srv)
	if err != nil {
		return err
	}
	conns, err := openIdle(ctx, srv.url, sid, n)
	defer closeAll(conns)
	if err != nil {
		return err
	}
	after, err := settledRSS(srv)
	if err != nil {
		return err
	}
	if r.cfg.Profile != "" {
		for _, p := range []string{"heap", "goroutine", "heap?debug=1"} {
			file := fmt.Sprintf("%s.idle%d.%s", r.cfg.Profile, n, strings.ReplaceAll(p, "?debug=1", ".txt"))
			if err := fetch(ctx, srv.base+"/debug/pprof/"+p, file); err != nil {
				return err
			}
			r.logf("  %s profile: %s", p, file)
		}
	}
	open, err := srv.metric(ctx, "mspd_connections_open")
	if err != nil {
		return err
	}
	if int(open) < n {
		return fmt.Errorf("%w: %v connections open, want %d", errIncomplete, open, n)
	}
	r.add(Row{Scenario: fmt.Sprintf("idle %d conns", n), Figure: "RSS per connection", Value: float64(after-before) / float64(n) / 1024,
		Unit: "KiB", Note: fmt.Sprintf("VmRSS %d → %d MiB", before>>20, after>>20)})
	return nil
}

// openIdle opens n handshaken connections subscribed to sid; they keep
// reading in the background (so pings are answered) and do nothing else.
func openIdle(ctx context.Context, url, sid string, n int) ([]*mspConn, error) {
	cs := make([]*mspConn, n)
	err := parallel(ctx, n, setupParallelism, func(ctx context.Context, i int) error {
		c, err := dialReady(ctx, url)
		if err != nil {
			return err
		}
		cs[i] = c
		if _, err := c.call(ctx, msp.MethodViewSubscribe, msp.ViewSubscribeParams{SessionID: sid}); err != nil {
			return err
		}
		c.drainInBackground()
		return nil
	})
	return cs, err
}

func closeAll(cs []*mspConn) {
	for _, c := range cs {
		if c != nil {
			c.close()
		}
	}
}

// settledRSS reads the server's RSS once it stops moving: goroutines the
// connections started may still be finishing.
func settledRSS(srv *server) (int64, error) {
	last, err := srv.rss()
	if err != nil {
		return 0, err
	}
	for range 20 {
		time.Sleep(250 * time.Millisecond)
		now, err := srv.rss()
		if err != nil {
			return 0, err
		}
		if now == last {
			return now, nil
		}
		last = now
	}
	return last, nil
}
