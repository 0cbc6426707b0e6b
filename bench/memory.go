package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// memoryCase is one load the memory scenario measures the peak of.
type memoryCase struct {
	name string
	// run applies the load to the server at url, whose history has the
	// session sid, and returns a note on what the clients got.
	run func(ctx context.Context, url, sid string) (string, error)
}

// memory: the server's peak resident memory (VmHWM) under loads that
// could make it hold much at once, beside its idle RSS. A session with a
// multi-megabyte history (MemoryTurns turns of MemoryInputBytes of input)
// is built once; then each case runs on a fresh mspd started on that data
// directory, so that the peak is the case's own, over the idle RSS of the
// same process measured just before: one and three concurrent
// session/read with items, one view/page of up to 1000 events, connections
// that never read each sending view/page after view/page, and connections
// each sending maximum-size frames.
func (r *runner) memory(ctx context.Context) error {
	dir, sid, err := r.buildHistory(ctx)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	text := strings.Repeat("x", r.cfg.MemoryInputBytes)
	cases := []memoryCase{
		{"session/read ×1", func(ctx context.Context, url, sid string) (string, error) { return readHistories(ctx, url, sid, 1) }},
		{"session/read ×3", func(ctx context.Context, url, sid string) (string, error) { return readHistories(ctx, url, sid, 3) }},
		{"view/page limit 1000", pageOnce},
		{fmt.Sprintf("%d non-reading conns × view/page", r.cfg.MemoryStalled), func(ctx context.Context, url, sid string) (string, error) {
			return stalledPages(ctx, url, sid, r.cfg.MemoryStalled)
		}},
		{fmt.Sprintf("%d conns × max-size frames", r.cfg.MemoryFramers), func(ctx context.Context, url, _ string) (string, error) {
			return largeFrames(ctx, url, r.cfg.MemoryFramers, text)
		}},
	}
	for _, c := range cases {
		if err := r.memoryCase(ctx, dir, sid, c); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return nil
}

// memoryCase runs one case on a fresh server over the history in dir.
func (r *runner) memoryCase(ctx context.Context, dir, sid string, c memoryCase) error {
	srv, err := launchServerOn(r.bin, dir, r.cfg.ServerArgs, r.cfg.ServerEnv)
	if err != nil {
		return err
	}
	defer srv.halt()
	if err := srv.waitListening(ctx, 60*time.Second); err != nil {
		return err
	}
	idle, err := settledRSS(srv)
	if err != nil {
		return err
	}
	note, err := c.run(ctx, srv.url, sid)
	if err != nil {
		return err
	}
	peak, err := procPeakRSS(srv.pid)
	if err != nil {
		return err
	}
	r.add(Row{Scenario: "memory " + c.name, Figure: "peak RSS over idle", Value: float64(peak-idle) / (1 << 20), Unit: "MiB",
		Note: fmt.Sprintf("VmHWM %d MiB, idle %d MiB; %s", peak>>20, idle>>20, note)})
	return nil
}

// buildHistory starts a server, has one session take MemoryTurns turns of
// MemoryInputBytes of input each (a script padded out: the answer is
// short) and stops the server, keeping its data directory.
func (r *runner) buildHistory(ctx context.Context) (dir, sid string, err error) {
	srv, err := r.startServer(ctx)
	if err != nil {
		return "", "", err
	}
	defer srv.halt()
	c, err := dialReady(ctx, srv.url)
	if err != nil {
		return "", "", err
	}
	defer c.close()
	if sid, _, err = c.startSession(ctx); err != nil {
		return "", "", err
	}
	text := paddedScript(r.cfg.MemoryInputBytes)
	for i := range r.cfg.MemoryTurns {
		if err := c.sendTurn(ctx, sid, text); err != nil {
			return "", "", err
		}
		if _, err := followTurn(ctx, c); err != nil {
			return "", "", fmt.Errorf("building the history, turn %d: %w", i+1, err)
		}
	}
	r.logf("  history: %d turns of %d MB input", r.cfg.MemoryTurns, r.cfg.MemoryInputBytes/1e6)
	return srv.dir, sid, nil
}

// paddedScript is a turn's input of about n bytes that the scripted
// provider answers with a short text: its script, padded.
func paddedScript(n int) string {
	script := strings.TrimSuffix(scripted.Script(scripted.Step{Text: "ok"}), "}")
	return script + `,"pad":"` + strings.Repeat("x", max(0, n-len(script)-9)) + `"}`
}

// readHistories has n connections read the session with its items at
// once, each reading its answer whole.
func readHistories(ctx context.Context, url, sid string, n int) (string, error) {
	withItems := false
	var answered, refused, bytes atomic.Int64
	err := parallel(ctx, n, n, func(ctx context.Context, _ int) error {
		c, err := dialReady(ctx, url)
		if err != nil {
			return err
		}
		defer c.close()
		res, err := c.call(ctx, msp.MethodSessionRead, msp.SessionReadParams{SessionID: sid, ExcludeItems: &withItems})
		return tally(res, err, &answered, &refused, &bytes)
	})
	return fmt.Sprintf("%d answered (%.1f MB in all), %d refused", answered.Load(), float64(bytes.Load())/1e6, refused.Load()), err
}

// pageOnce reads one view/page of up to 1000 events from the start.
func pageOnce(ctx context.Context, url, sid string) (string, error) {
	c, err := dialReady(ctx, url)
	if err != nil {
		return "", err
	}
	defer c.close()
	var answered, refused, bytes atomic.Int64
	res, err := c.call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Limit: 1000})
	if err := tally(res, err, &answered, &refused, &bytes); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d answered (%.1f MB), %d refused", answered.Load(), float64(bytes.Load())/1e6, refused.Load()), nil
}

// tally counts an answer: a result and its size, or a refusal (an MSP
// error: a bound that held); anything else is the run's error.
func tally(res []byte, err error, answered, refused, bytes *atomic.Int64) error {
	var me *msp.Error
	switch {
	case err == nil:
		answered.Add(1)
		bytes.Add(int64(len(res)))
	case errors.As(err, &me):
		refused.Add(1)
	default:
		return err
	}
	return nil
}

// stalledWindow is how long the connections that never read keep
// sending: past the server's default write timeout (10 s), by when it has
// given up on them.
const stalledWindow = 12 * time.Second

// stalledPages has n connections that never read their answers each send
// view/page (up to 1000 events) after view/page for stalledWindow: the
// server stops reading them once their answers have no room, and closes
// them once its writes to them time out.
func stalledPages(ctx context.Context, url, sid string, n int) (string, error) {
	conns := make([]*mspConn, n)
	defer closeAll(conns)
	for i := range conns {
		c, err := dialReady(ctx, url)
		if err != nil {
			return "", err
		}
		conns[i] = c
	}
	window, cancel := context.WithTimeout(ctx, stalledWindow)
	defer cancel()
	var sent atomic.Int64
	parallel(window, n, n, func(ctx context.Context, i int) error {
		for ctx.Err() == nil {
			if _, err := conns[i].send(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Limit: 1000}); err != nil {
				return nil // the window ended, or the server closed the connection
			}
			sent.Add(1)
		}
		return nil
	})
	<-window.Done()
	return fmt.Sprintf("%d view/page written into the sockets unread", sent.Load()), nil
}

// largeFrameRounds is how many maximum-size frames each connection of the
// largeFrames case sends, one after the other's answer.
const largeFrameRounds = 3

// largeFrames has n connections each send largeFrameRounds turn/start of
// text (a maximum-size frame) at once, for a session that does not exist:
// each is read, validated and decoded whole before the answer,
// sessionNotFound, so that the figure is the intake's and not a store's.
func largeFrames(ctx context.Context, url string, n int, text string) (string, error) {
	const missing = "0199aaaa-0000-7000-8000-000000000000"
	var answered, refused, bytes atomic.Int64
	err := parallel(ctx, n, n, func(ctx context.Context, _ int) error {
		c, err := dialReady(ctx, url)
		if err != nil {
			return err
		}
		defer c.close()
		for range largeFrameRounds {
			res, err := c.call(ctx, msp.MethodTurnStart, msp.TurnStartParams{CommandID: newCommandID(), SessionID: missing,
				Input: []msp.TurnInputPart{{Type: "text", Text: text}}})
			if err := tally(res, err, &answered, &refused, &bytes); err != nil {
				return err
			}
		}
		return nil
	})
	return fmt.Sprintf("%d frames of %.1f MB answered", answered.Load()+refused.Load(), float64(len(text))/1e6), err
}
