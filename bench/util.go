package bench

import (
	"context"
	"slices"
	"sync"
	"time"
)

// setupParallelism bounds how many connections are being set up at once,
// so that setting up thousands does not look like a SYN flood.
const setupParallelism = 64

// parallel runs f(i) for i in [0, n) on at most width goroutines and
// returns the first error; the others see ctx cancelled.
func parallel(ctx context.Context, n, width int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(n, width) {
		wg.Go(func() {
			for i := range next {
				if ctx.Err() != nil {
					continue
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// percentiles of a sample of durations.
type percentiles struct {
	p50, p99, max time.Duration
	n             int
}

func percentilesOf(d []time.Duration) percentiles {
	if len(d) == 0 {
		return percentiles{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[int(q*float64(len(s)-1)+0.5)] }
	return percentiles{p50: at(0.50), p99: at(0.99), max: s[len(s)-1], n: len(s)}
}

// median of a non-empty sample.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
