package cluster

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// BenchmarkLeaseUpkeep measures what keeping its leases costs a node that
// has claimed N sessions: KV writes a second (both buckets' streams) and
// this process's CPU a second, in-process NATS server included, over
// windows of one lease TTL (three renewals) after the claims were made. Flat in N is the
// point: the heartbeat is per node.
//
//	go test -run x -bench LeaseUpkeep -benchtime 3x ./cluster
func BenchmarkLeaseUpkeep(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			nc, js := startNATS(b)
			const window = time.Second
			c, err := New(b.Context(), nc, js, Options{Node: "a", LeaseTTL: window})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			claimAll(b, c, n)
			writes := func() uint64 {
				var sum uint64
				for _, bucket := range []string{"MSPD_NODES", "MSPD_CLAIMS"} {
					st, err := js.Stream(b.Context(), "KV_"+bucket)
					if err != nil {
						b.Fatal(err)
					}
					info, err := st.Info(b.Context())
					if err != nil {
						b.Fatal(err)
					}
					sum += info.State.LastSeq
				}
				return sum
			}
			beats := heartbeats(b, js)
			runtime.GC()
			w0, cpu0, t0 := writes(), cpuTime(), time.Now()
			for b.Loop() {
				awaitBeats(b, beats, 3) // one TTL of upkeep: three renewals
			}
			elapsed := time.Since(t0).Seconds()
			b.ReportMetric(float64(writes()-w0)/elapsed, "kvwrites/s")
			b.ReportMetric((cpuTime()-cpu0).Seconds()*1000/elapsed, "cpu-ms/s")
		})
	}
}

// claimAll claims sessions s0…s(n-1), 64 at a time.
func claimAll(b *testing.B, c *Cluster, n int) {
	sem := make(chan struct{}, 64)
	errs := make(chan error, n)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			leader, err := c.Claim(context.Background(), fmt.Sprint("s", i))
			if err == nil && leader != "a" {
				err = fmt.Errorf("s%d led by %q", i, leader)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	for range cap(sem) {
		sem <- struct{}{}
	}
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// cpuTime is this process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
