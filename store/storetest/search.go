package storetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"mspd/store"
)

// searchTests are the Search group of Run.
func (h harness) searchTests() []subtest {
	return []subtest{
		{"Name", h.searchName},
		{"Content", h.searchContent},
		{"Paging", h.searchPaging},
		{"SessionIDs", h.searchIDs},
		{"OwnerIsolated", h.searchOwnerIsolated},
		{"RenameReplacesName", h.searchRename},
		{"DeleteErasesIndex", h.searchDelete},
		{"SurvivesReopen", h.searchReopen},
	}
}

// indexed commits a session of owner with a record per message, its row
// and its text, as the session layer does.
func indexed(t *testing.T, s store.Store, owner, id string, updated time.Duration, name string, msgs ...string) {
	t.Helper()
	row := sess(id, at(updated))
	row.Owner = owner
	mustCommit(t, s, store.Batch{SessionID: id, Session: row, Records: recs(1, int64(len(msgs))+1),
		Text: &store.Text{Owner: owner, Name: &name, Messages: msgs}})
}

// searchFixture: alice's three chats and bob's one, newest last.
func searchFixture(t *testing.T, s store.Store) {
	indexed(t, s, "alice", "a1", 1, "Checkout flow bugs", "How do I fix the checkout page?", "Try clearing the cache.")
	indexed(t, s, "alice", "a2", 2, "Trip to Kraków", "Plan a trip to Kraków in May", "Here is a plan: day one, the old town.")
	indexed(t, s, "alice", "a3", 3, "Recipes", "bread recipe please")
	indexed(t, s, "bob", "b1", 4, "Checkout", "checkout secret")
}

func search(t *testing.T, s store.Store, q store.Query, after *store.SessionKey, limit int) []store.Hit {
	t.Helper()
	hits, err := s.Search(t.Context(), q, after, limit)
	if err != nil {
		t.Fatalf("Search(%+v): %v", q, err)
	}
	return hits
}

func hitIDs(hs []store.Hit) []string {
	out := []string{}
	for _, h := range hs {
		out = append(out, h.ID)
	}
	return out
}

func wantHits(t *testing.T, s store.Store, q store.Query, want ...string) []store.Hit {
	t.Helper()
	got := search(t, s, q, nil, 50)
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(hitIDs(got), want) {
		t.Errorf("Search(%+v) = %v, want %v", q, hitIDs(got), want)
	}
	return got
}

func (h harness) searchName(t *testing.T) {
	s := h.fresh(t)
	searchFixture(t, s)
	wantHits(t, s, store.Query{Owner: "alice", Name: store.Terms{AllOf: []string{"check"}}}, "a1")
	wantHits(t, s, store.Query{Owner: "alice", Name: store.Terms{AllOf: []string{"eck"}}})
	wantHits(t, s, store.Query{Owner: "alice", Name: store.Terms{AnyOf: []string{"recipes", "kraków"}}}, "a3", "a2")
	wantHits(t, s, store.Query{Owner: "alice", Name: store.Terms{AllOf: []string{"trip", "krak"}}}, "a2")
	// Accents count; a name is not its messages.
	wantHits(t, s, store.Query{Owner: "alice", Name: store.Terms{AllOf: []string{"krakow"}}})
	wantHits(t, s, store.Query{Owner: "alice", Name: store.Terms{AllOf: []string{"bread"}}})
	// No filter: every session, newest first.
	wantHits(t, s, store.Query{Owner: "alice"}, "a3", "a2", "a1")
}

func (h harness) searchContent(t *testing.T) {
	s := h.fresh(t)
	searchFixture(t, s)
	got := wantHits(t, s, store.Query{Owner: "alice", Content: store.Terms{AllOf: []string{"cach"}}}, "a1")
	if len(got) == 1 && got[0].Match != "Try clearing the cache." {
		t.Errorf("Match = %q, want the message that matched", got[0].Match)
	}
	// Each term may match another message of the chat.
	got = wantHits(t, s, store.Query{Owner: "alice", Content: store.Terms{AllOf: []string{"may", "town"}}}, "a2")
	if len(got) == 1 && got[0].Match != "Plan a trip to Kraków in May" {
		t.Errorf("Match = %q, want the earliest message matching most terms", got[0].Match)
	}
	wantHits(t, s, store.Query{Owner: "alice", Content: store.Terms{AnyOf: []string{"bread", "cache"}}}, "a3", "a1")
	// A term of several tokens matches them in a row.
	wantHits(t, s, store.Query{Owner: "alice", Content: store.Terms{AllOf: []string{"old to"}}}, "a2")
	wantHits(t, s, store.Query{Owner: "alice", Content: store.Terms{AllOf: []string{"town old"}}})
	wantHits(t, s, store.Query{Owner: "alice", Content: store.Terms{AllOf: []string{"!!"}}})
	// Name and content together.
	wantHits(t, s, store.Query{Owner: "alice", Name: store.Terms{AllOf: []string{"trip"}}, Content: store.Terms{AllOf: []string{"plan"}}}, "a2")
	wantHits(t, s, store.Query{Owner: "alice", Name: store.Terms{AllOf: []string{"trip"}}, Content: store.Terms{AllOf: []string{"bread"}}})
}

func (h harness) searchPaging(t *testing.T) {
	s := h.fresh(t)
	for i := range 7 {
		msg := "about gardens"
		if i%2 == 0 {
			msg = "about tomatoes"
		}
		indexed(t, s, "alice", fmt.Sprintf("p%d", i), time.Duration(i), "chat", msg)
	}
	q := store.Query{Owner: "alice", Content: store.Terms{AllOf: []string{"tomato"}}}
	var all []string
	var after *store.SessionKey
	for range 10 {
		page := search(t, s, q, after, 2)
		all = append(all, hitIDs(page)...)
		if len(page) < 2 {
			break
		}
		last := page[len(page)-1]
		after = &store.SessionKey{UpdatedAt: last.UpdatedAt, ID: last.ID}
	}
	if want := []string{"p6", "p4", "p2", "p0"}; !slices.Equal(all, want) {
		t.Errorf("pages = %v, want %v", all, want)
	}
}

func (h harness) searchIDs(t *testing.T) {
	s := h.fresh(t)
	searchFixture(t, s)
	wantHits(t, s, store.Query{Owner: "alice", IDs: []string{"a1", "a3", "b1"}}, "a3", "a1")
	wantHits(t, s, store.Query{Owner: "alice", IDs: []string{}})
	wantHits(t, s, store.Query{Owner: "alice", IDs: []string{"a1", "a2"}, Content: store.Terms{AllOf: []string{"plan"}}}, "a2")
}

func (h harness) searchOwnerIsolated(t *testing.T) {
	s := h.fresh(t)
	searchFixture(t, s)
	wantHits(t, s, store.Query{Owner: "alice", Content: store.Terms{AllOf: []string{"secret"}}})
	wantHits(t, s, store.Query{Owner: "bob", Content: store.Terms{AllOf: []string{"checkout"}}}, "b1")
	wantHits(t, s, store.Query{Owner: "bob", Content: store.Terms{AllOf: []string{"cache"}}})
	wantHits(t, s, store.Query{Owner: "carol", Name: store.Terms{AllOf: []string{"checkout"}}})
	wantHits(t, s, store.Query{Owner: "bob", IDs: []string{"a1"}})
}

func (h harness) searchRename(t *testing.T) {
	s := h.fresh(t)
	searchFixture(t, s)
	name := "Sourdough"
	mustCommit(t, s, store.Batch{SessionID: "a3", Records: recs(3, 3), Text: &store.Text{Owner: "alice", Name: &name, Messages: []string{"and a starter"}}})
	wantHits(t, s, store.Query{Owner: "alice", Name: store.Terms{AllOf: []string{"recipes"}}})
	wantHits(t, s, store.Query{Owner: "alice", Name: store.Terms{AllOf: []string{"sour"}}}, "a3")
	wantHits(t, s, store.Query{Owner: "alice", Content: store.Terms{AllOf: []string{"bread", "starter"}}}, "a3")
}

func (h harness) searchDelete(t *testing.T) {
	s := h.fresh(t)
	searchFixture(t, s)
	if err := s.DeleteSession(t.Context(), "a1"); err != nil {
		t.Fatal(err)
	}
	wantHits(t, s, store.Query{Owner: "alice", Content: store.Terms{AllOf: []string{"cache"}}})
	// A session made again under the id has none of the old text.
	row := sess("a1", at(9))
	row.Owner = "alice"
	mustCommit(t, s, store.Batch{SessionID: "a1", Session: row})
	wantHits(t, s, store.Query{Owner: "alice", Content: store.Terms{AnyOf: []string{"cache", "checkout"}}})
	wantHits(t, s, store.Query{Owner: "alice", Name: store.Terms{AllOf: []string{"checkout"}}})
}

func (h harness) searchReopen(t *testing.T) {
	dir := t.TempDir()
	s := h.openAt(t, dir)
	searchFixture(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = h.openAt(t, dir)
	wantHits(t, s, store.Query{Owner: "alice", Content: store.Terms{AllOf: []string{"kraków"}}}, "a2")
}

// benchText is a few exchanges of ordinary chat, about 2 KB.
var benchText = []string{
	"Can you help me plan the next sprint? We have three bugs in the billing service and a migration that keeps slipping.",
	strings.Repeat("Start with the bugs that customers see, then schedule the migration for a quiet week, and write down who owns each step so nothing falls between the cracks. ", 4),
	"What about the flaky tests in the payment pipeline? They fail about one run in ten.",
	strings.Repeat("Quarantine them first, so the pipeline stays green, then look at their timing assumptions: most flaky tests wait for a fixed time instead of a condition. ", 4),
}

// BenchSearch measures a content search for the one chat of an owner's
// chats that mentions a word, beside others chats of other owners: each
// chat a few exchanges of about 2 KB. open opens an empty store, which the
// benchmark fills.
func BenchSearch(b *testing.B, open func(b *testing.B) store.Store, mine, others int) {
	s := open(b)
	q := FillSearch(b, s, mine, others)
	for b.Loop() {
		got, err := s.Search(b.Context(), q, nil, 50)
		if err != nil || len(got) != 1 {
			b.Fatalf("Search = %d hits, %v", len(got), err)
		}
	}
}

// FillSearch fills s for a search benchmark: mine chats of owner "bob",
// one of which (and no other) mentions "zeppelin", beside others chats of
// a hundred other owners, each a few exchanges of about 2 KB, with rows
// whose state is empty. It returns bob's query for that word.
func FillSearch(b *testing.B, s store.Store, mine, others int) store.Query {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	add := func(owner, id string, i int, msgs []string) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			name := "Sprint planning " + id
			row := &store.Session{ID: id, Owner: owner, CreatedAt: at(0), UpdatedAt: at(time.Duration(i) * time.Millisecond), State: raw(`{}`)}
			mustCommitB(b, s, store.Batch{SessionID: id, Session: row, Records: []store.Record{rec(1)},
				Text: &store.Text{Owner: owner, Name: &name, Messages: msgs}})
		})
	}
	for i := range others {
		add(fmt.Sprintf("user%d", i%100), fmt.Sprintf("o%05d", i), i, benchText)
	}
	for i := range mine {
		msgs := benchText
		if i == mine/3 {
			msgs = append(slices.Clone(benchText), "Remember the zeppelin launch checklist.")
		}
		add("bob", fmt.Sprintf("b%05d", i), others+i, msgs)
	}
	wg.Wait()
	return store.Query{Owner: "bob", Content: store.Terms{AllOf: []string{"zeppel"}}}
}
