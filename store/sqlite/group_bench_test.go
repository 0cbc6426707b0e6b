package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"mspd/store"
)

// burstSessions is the notice burst's session count (BENCHMARKS.md): the
// pages a group touches are spread over this many sessions' rows.
const burstSessions = 1000

// BenchmarkGroupCommit256 is one group commit of 256 small batches, as
// the writer meets them in the burst of BENCHMARKS.md's notice scenario:
// admissions (two records, a ledger entry, the session's row and its
// search text) or retry notices (a record and the row), each on its own
// session of 1,000 that already hold a turn's history. An op is one
// group; cpu-µs/batch is the whole process's CPU (writer, fsync, the
// callers' goroutines) per batch, pages/group what its COMMIT wrote to
// the log.
func BenchmarkGroupCommit256(b *testing.B) {
	for _, kind := range []string{"admissions", "notices"} {
		b.Run(kind, func(b *testing.B) { benchGroups(b, kind) })
	}
}

func benchGroups(b *testing.B, kind string) {
	const group = 256
	var pages, groups int
	var mu sync.Mutex
	s, err := Open(filepath.Join(b.TempDir(), "mspd.db"), WithCommitObserver(func(g GroupCommit) {
		mu.Lock()
		pages += g.Pages
		groups++
		mu.Unlock()
	}))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	heads := make([]int64, burstSessions)
	// A turn's history on every session: the writer's pages are spread
	// as in a server that has run a while.
	for i := range burstSessions {
		if err := s.Commit(ctx, admission(i, &heads[i])); err != nil {
			b.Fatal(err)
		}
		if err := s.Commit(ctx, turnEnd(i, &heads[i])); err != nil {
			b.Fatal(err)
		}
	}
	next := 0
	batchFor := func(i int) store.Batch {
		if kind == "notices" {
			return notice(i, &heads[i])
		}
		return admission(i, &heads[i])
	}
	mu.Lock()
	pages, groups = 0, 0
	mu.Unlock()
	cpu0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		batches := make([]store.Batch, group)
		for j := range batches {
			batches[j] = batchFor((next + j) % burstSessions)
		}
		next = (next + group) % burstSessions
		commitAsOneGroup(b, s, batches)
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*group), "cpu-µs/batch")
	mu.Lock()
	defer mu.Unlock()
	if groups > 0 {
		b.ReportMetric(float64(pages)/float64(groups), "pages/group")
		b.ReportMetric(float64(groups)/float64(b.N), "groups/op")
	}
}

// commitAsOneGroup commits batches from as many goroutines, held until
// all are queued so that the writer takes them as one group.
func commitAsOneGroup(b *testing.B, s *Store, batches []store.Batch) {
	release := make(chan struct{})
	held := make(chan struct{})
	go func() {
		_, _ = s.runTask(context.Background(), func() taskResult {
			close(held)
			<-release
			return taskResult{}
		})
	}()
	<-held
	var wg sync.WaitGroup
	for _, bt := range batches {
		wg.Go(func() {
			if err := s.Commit(context.Background(), bt); err != nil {
				b.Error(err)
			}
		})
	}
	for len(s.reqs)+len(s.urgent) < len(batches) {
		runtime.Gosched() // until every batch is queued
	}
	close(release)
	wg.Wait()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Sizes as mspd writes them for a short turn (bytes of JSON).
var (
	benchState  = []byte(`{"owner":"bench","createdAt":"2026-12-06T00:00:00Z","cursorSpans":[{"epoch":"e1","from":1}],"active":{"turnId":"` + strings.Repeat("t", 36) + `","attempt":1,"checkpoint":{"attempt":1,"begun":true}},"turnCount":1,"model":"scripted","pad":"` + strings.Repeat("x", 700) + `"}`)
	benchRecord = strings.Repeat("r", 600)
)

func benchSessionID(i int) string { return fmt.Sprintf("sess-%08x-bench", i*2654435761%(1<<32)) }

func benchRow(i int) *store.Session {
	now := time.Now()
	return &store.Session{ID: benchSessionID(i), Owner: "bench", CreatedAt: now, UpdatedAt: now, Busy: true, State: benchState}
}

func benchRecords(head *int64, methods ...string) []store.Record {
	rs := make([]store.Record, len(methods))
	for k, m := range methods {
		*head++
		rs[k] = store.Record{Seq: *head, Method: m, Params: []byte(`{"p":"` + benchRecord + `"}`)}
	}
	return rs
}

// admission is a turn/start's commit: turn/started and the user's item,
// the ledger entry, the row, the message's search text.
func admission(i int, head *int64) store.Batch {
	id := benchSessionID(i)
	return store.Batch{
		SessionID: id,
		Records:   benchRecords(head, "turn/started", "item/completed"),
		Commands:  []store.Command{{ID: fmt.Sprintf("cmd-%s-%d", id, *head), Digest: "d", Response: []byte(`{"status":"accepted","turnId":"x"}`)}},
		Session:   benchRow(i),
		Text:      &store.Text{Messages: []string{"please write a short poem about the sea"}},
	}
}

// notice is a retry notice's commit: the notice and the row with its
// checkpoint.
func notice(i int, head *int64) store.Batch {
	return store.Batch{SessionID: benchSessionID(i), Records: benchRecords(head, "turn/retryScheduled"), Session: benchRow(i), Urgent: true}
}

// turnEnd is a turn's last commit: its answer, usage and terminal.
func turnEnd(i int, head *int64) store.Batch {
	return store.Batch{SessionID: benchSessionID(i), Records: benchRecords(head, "item/completed", "session/tokenUsage", "turn/completed"), Session: benchRow(i)}
}
