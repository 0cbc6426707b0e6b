package cli

import (
	"context"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

// lifecycle turns the signals mspd serve gets into its lifecycle. It is
// registered once, before anything starts, and held until the process
// ends: no signal falls between two handlers, and SIGHUP, whose default
// action kills, never does — not while the daemon starts, nor while it
// shuts down.
type lifecycle struct {
	// run ends at the first SIGINT or SIGTERM: serving stops.
	run context.Context
	// grace ends at the next one once run has ended: the shutdown stops
	// waiting for running turns.
	grace context.Context

	endRun context.CancelFunc
	reload atomic.Pointer[func()]
	stop   func()
}

// watchSignals starts following SIGINT, SIGTERM and SIGHUP.
func watchSignals() *lifecycle {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	run, endRun := context.WithCancel(context.Background())
	grace, endGrace := context.WithCancel(context.Background())
	l := &lifecycle{run: run, grace: grace, endRun: endRun}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-sigs:
				switch {
				case s == syscall.SIGHUP:
					if f := l.reload.Load(); f != nil {
						(*f)()
					}
				case run.Err() == nil:
					endRun()
				default:
					endGrace()
				}
			}
		}
	}()
	l.stop = func() {
		signal.Stop(sigs)
		close(done)
		endRun()
		endGrace()
	}
	return l
}

// onReload makes each later SIGHUP call f (before, SIGHUP is ignored).
func (l *lifecycle) onReload(f func()) { l.reload.Store(&f) }

// stopping marks the shutdown begun for another reason than a signal (a
// stdio client's end of input): the next signal ends its grace.
func (l *lifecycle) stopping() { l.endRun() }
