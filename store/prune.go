package store

import (
	"context"
	"log/slog"
	"time"
)

// DefaultPruneChunk is how many ledger entries a Pruner deletes per
// PruneCommands call unless told otherwise: small enough that each call
// holds a backend's write lock briefly, large enough that a backlog of a
// day's commands goes in a few hundred calls.
const DefaultPruneChunk = 500

// Pruner deletes commandId ledger entries older than a retention window,
// for any backend. The window is the exactly-once window: a command
// replayed after its entry is pruned is taken as new.
type Pruner struct {
	// Store is the backend pruned.
	Store Store
	// Retention is how long an entry is kept after its CreatedAt.
	Retention time.Duration
	// Chunk bounds each PruneCommands call (0: DefaultPruneChunk).
	Chunk int
	// Log receives a line per pass that pruned or failed (nil: discarded).
	Log *slog.Logger
}

// PruneOnce deletes every entry created before now minus Retention, a
// chunk per call, and returns how many it deleted, also on error.
func (p *Pruner) PruneOnce(ctx context.Context, now time.Time) (int, error) {
	chunk := p.Chunk
	if chunk <= 0 {
		chunk = DefaultPruneChunk
	}
	before := now.Add(-p.Retention)
	total := 0
	for {
		n, err := p.Store.PruneCommands(ctx, before, chunk)
		total += n
		if err != nil || n < chunk {
			return total, err
		}
	}
}

// Run prunes as of each tick's time until ctx ends. A failed pass is
// logged and the next tick tries again.
func (p *Pruner) Run(ctx context.Context, ticks <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticks:
			p.pass(ctx, now)
		}
	}
}

// pass runs PruneOnce and logs its outcome.
func (p *Pruner) pass(ctx context.Context, now time.Time) {
	n, err := p.PruneOnce(ctx, now)
	log := p.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch {
	case err != nil && ctx.Err() == nil:
		log.Warn("pruning the command ledger", "err", err, "pruned", n)
	case n > 0:
		log.Info("pruned the command ledger", "entries", n, "retention", p.Retention)
	}
}

// PruneEvery prunes st's ledger of entries older than retention at once
// and then every interval, until ctx ends.
func PruneEvery(ctx context.Context, st Store, retention, interval time.Duration, log *slog.Logger) {
	p := &Pruner{Store: st, Retention: retention, Log: log}
	p.pass(ctx, time.Now())
	t := time.NewTicker(interval)
	defer t.Stop()
	p.Run(ctx, t.C)
}
