package session

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"mspd/schema/msp"
	"mspd/store/sqlite"
	"mspd/store/storetest"
)

// BenchmarkSearchSessions is bob's session/list with a content filter,
// served by the session manager as the server serves it (params decoded,
// rows searched, states decoded, snippets cut): the one chat of his 1,000
// that mentions a word, beside 10,000 chats of other principals, on
// SQLite. The store-level figure is store/sqlite's BenchmarkSearch.
func BenchmarkSearchSessions(b *testing.B) {
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "mspd.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	storetest.FillSearch(b, st, 1000, 10000)
	m, err := New(context.Background(), Config{Store: st, Runner: newTestRunner(newHistModel()), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Close)
	bob := WithPrincipal(context.Background(), "bob")
	params := mustJSON(msp.SessionListParams{Filter: &msp.SessionListFilter{Content: &msp.SessionListContentFilter{AllOf: []string{"Zeppel"}}}})
	for b.Loop() {
		res, err := m.ListSessions(bob, params)
		if err != nil || len(res.Sessions) != 1 || res.Sessions[0].Match == nil {
			b.Fatalf("bob's search: %+v, %v", res, err)
		}
	}
}
