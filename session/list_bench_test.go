package session

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"mspd/schema/msp"
	"mspd/store/sqlite"
)

// BenchmarkListBesideOthers is bob's session/list (limit 1) of his one
// session beside alice's others: its cost should not grow with hers.
func BenchmarkListBesideOthers(b *testing.B) {
	for _, others := range []int{0, 4000} {
		b.Run(fmt.Sprintf("others=%d", others), func(b *testing.B) {
			st, err := sqlite.Open(filepath.Join(b.TempDir(), "mspd.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			m, err := New(context.Background(), Config{Store: st, Runner: newTestRunner(newHistModel()), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(m.Close)
			alice := WithPrincipal(context.Background(), "alice")
			bob := WithPrincipal(context.Background(), "bob")
			start := func(ctx context.Context) {
				if _, _, err := m.StartSession(ctx, nil, mustJSON(msp.SessionStartParams{CommandID: cmdID()})); err != nil {
					b.Error(err)
				}
			}
			start(bob)
			var wg sync.WaitGroup
			sem := make(chan struct{}, 16)
			for range others {
				sem <- struct{}{}
				wg.Go(func() { defer func() { <-sem }(); start(alice) })
			}
			wg.Wait()
			limit := 1
			params := mustJSON(msp.SessionListParams{Limit: &limit})
			for b.Loop() {
				res, err := m.ListSessions(bob, params)
				if err != nil || len(res.Sessions) != 1 {
					b.Fatalf("bob's list: %+v, %v", res, err)
				}
			}
		})
	}
}
