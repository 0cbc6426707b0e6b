package e2e

import (
	"context"
	"encoding/json"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"mspd/client"
	"mspd/daemon"
	"mspd/internal/testlane"
	"mspd/provider/scripted"
	"mspd/schema/msp"
	"mspd/session"
)

// allocated returns the bytes the process allocated while f ran: the
// daemon serving a request and the test's client reading its answer. It
// bounds how far the heap grew meanwhile, whatever the collector did.
func allocated(f func()) uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	before := s[0].Value.Uint64()
	f()
	metrics.Read(s)
	return s[0].Value.Uint64() - before
}

// TestLargeHistoryReadsAreBounded: a session of 8 turns, each a 2 MiB
// input answered by 2 MiB (a 32 MiB log, records of 2 MiB). Reads used
// to build their whole answer first: session/read with items read and
// decoded the whole log and encoded every item to measure the history,
// and view/page read as many records as its limit asked before trimming
// them to a frame. Now a read holds at most session.ReadBytes of the log
// at a time (or one record, when larger): a page ends early with the
// cursor to go on from, paging returns every record exactly once, the
// read answers with history "none"/historyBudget without holding the
// log, and what each request allocates — an upper bound of the heap's
// growth — stays within a few reads' worth.
func TestLargeHistoryReadsAreBounded(t *testing.T) {
	testlane.Slow(t, "a 32 MiB history")
	d := startDaemon(t, daemon.Config{})
	setup := dial(t, d.URL(), client.Options{})
	sid := newSession(t, setup)
	const turns, size = 8, 2 << 20
	for i := range turns {
		text := strings.Repeat(string(rune('a'+i)), size)
		answerTurn(t, setup, sid, scripted.Script(scripted.Step{Text: text, Chunks: 1}))
	}
	// Longer than testCtx: under the race detector, the 32 MiB of reads
	// below (and the schema check of the set-up client) take tens of
	// seconds on a loaded two-core machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var head string
	if err := setup.Call(ctx, msp.MethodSessionRead, msp.SessionReadParams{SessionID: sid}, &struct {
		ViewCursor *string `json:"viewCursor"`
	}{&head}); err != nil {
		t.Fatal(err)
	}
	last := cursorPos(t, head)[0]

	// The measured reads go through a client that does not validate
	// every frame, whose own allocations are then little more than the
	// answer it reads.
	c, err := client.Dial(ctx, d.URL(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A request holds at most one read of the log (ReadBytes, or a
	// record larger than that) and what it builds from it: the events
	// or items decoded, the answer encoded and written, and the client's
	// copy. Unbounded, each request here allocates the whole log a few
	// times over (about 100 MiB and more).
	const largest = 2*size + 4<<10 // a record: its item and envelope
	bound := uint64(6 * (session.ReadBytes + largest))

	excludeItems := false
	var read msp.SessionSnapshot
	n := allocated(func() {
		if err := c.Call(ctx, msp.MethodSessionRead, msp.SessionReadParams{SessionID: sid, ExcludeItems: &excludeItems}, &read); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("session/read with items: %.1f MiB allocated (bound %.1f MiB)", float64(n)/(1<<20), float64(bound)/(1<<20))
	if read.History.Mode != msp.HistoryNone || read.History.NoneReason != msp.NoneHistoryBudget {
		t.Fatalf("session/read of a %d MiB history served mode %q (%q), want none (historyBudget)", turns*2*size>>20, read.History.Mode, read.History.NoneReason)
	}
	if n > bound {
		t.Errorf("session/read with items allocated %.1f MiB, more than %.1f MiB", float64(n)/(1<<20), float64(bound)/(1<<20))
	}

	for _, dir := range []string{msp.Forward, msp.Backward} {
		var seqs []int64
		var cursor *string
		var most uint64 // the most a page allocated
		pages := 0
		for ; ; pages++ {
			var res msp.ViewPageResult
			n := allocated(func() {
				if err := c.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Cursor: cursor, Direction: dir, Limit: 1000}, &res); err != nil {
					t.Fatal(err)
				}
			})
			most = max(most, n)
			if n > bound {
				t.Errorf("view/page %s (page %d) allocated %.1f MiB, more than %.1f MiB", dir, pages, float64(n)/(1<<20), float64(bound)/(1<<20))
			}
			bytes := 0
			var page []int64
			for _, e := range res.Events {
				bytes += len(e.Params)
				var h struct {
					ViewCursor string `json:"viewCursor"`
				}
				if err := json.Unmarshal(e.Params, &h); err != nil {
					t.Fatal(err)
				}
				page = append(page, cursorPos(t, h.ViewCursor)[0])
			}
			if len(res.Events) > 1 && bytes > session.ReadBytes {
				t.Errorf("view/page %s served %d events of %d bytes, past the %d-byte bound", dir, len(res.Events), bytes, session.ReadBytes)
			}
			if dir == msp.Backward {
				seqs = append(page, seqs...)
			} else {
				seqs = append(seqs, page...)
			}
			if res.NextCursor == nil {
				if pages == 0 {
					t.Fatalf("view/page %s served the whole %d MiB log in one page", dir, turns*2*size>>20)
				}
				break
			}
			if len(res.Events) == 0 || len(res.Events) == 1000 {
				t.Fatalf("view/page %s page %d: %d events and a next cursor; want a page ended early by bytes", dir, pages, len(res.Events))
			}
			cursor = res.NextCursor
		}
		t.Logf("view/page %s: %d pages, at most %.1f MiB allocated for one", dir, pages+1, float64(most)/(1<<20))
		if int64(len(seqs)) != last {
			t.Fatalf("paging %s returned %d events, want %d", dir, len(seqs), last)
		}
		for i, s := range seqs {
			if s != int64(i+1) {
				t.Fatalf("paging %s: event %d is record %d; every record exactly once, in order", dir, i, s)
			}
		}
	}
	runtime.KeepAlive(setup)
}
