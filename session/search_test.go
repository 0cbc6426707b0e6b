package session

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"mspd/schema/msp"
	"mspd/store"
)

// chat starts a session of ctx's principal and runs one turn of text in
// it, to its end.
func chat(t *testing.T, m *Manager, ctx context.Context, text string) string {
	t.Helper()
	conn := bcastSub{newRecSub()}
	raw, attach, err := m.StartSession(ctx, conn, mustJSON(msp.SessionStartParams{CommandID: cmdID()}))
	if err != nil {
		t.Fatal(err)
	}
	attach(ctx)
	var started msp.SessionStartResult
	if err := json.Unmarshal(raw, &started); err != nil {
		t.Fatal(err)
	}
	sid := started.Session.SessionID
	p := textTurn(sid, text)
	p.CommandID = cmdID()
	ackRaw, launch, err := m.StartTurn(ctx, nil, mustJSON(p))
	if err != nil {
		t.Fatal(err)
	}
	launch()
	var ack msp.TurnStartResult
	if err := json.Unmarshal(ackRaw, &ack); err != nil {
		t.Fatal(err)
	}
	conn.waitTerminal(t, ack.TurnID)
	return sid
}

func list(t *testing.T, m *Manager, ctx context.Context, f *msp.SessionListFilter, limit int, cursor *string) msp.SessionListResult {
	t.Helper()
	res, err := m.ListSessions(ctx, mustJSON(msp.SessionListParams{Filter: f, Limit: &limit, Cursor: cursor}))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func listedIDs(res msp.SessionListResult) []string {
	out := []string{}
	for _, s := range res.Sessions {
		out = append(out, s.SessionID)
	}
	return out
}

// TestListFilter: session/list's filter finds a principal's chats by
// their name and by what was said in them (the user's message and the
// answer), with a snippet, paged, echoed canonically; never another
// principal's; a bad filter is invalidParams naming its member.
func TestListFilter(t *testing.T) {
	m := newManager(t, openStore(t), newHistModel(), mgrOpts{})
	alice := WithPrincipal(context.Background(), "alice")
	bob := WithPrincipal(context.Background(), "bob")
	trip := chat(t, m, alice, "Plan a trip to Kraków "+strings.Repeat("with plenty of time for museums and food, ", 6)+"and a zeppelin ride at the end")
	bread := chat(t, m, alice, "Bread recipe please")
	chat(t, m, bob, "Plan a trip to Kraków for bob")

	res := list(t, m, alice, &msp.SessionListFilter{Content: &msp.SessionListContentFilter{AllOf: []string{" ZEPPEL "}}}, 50, nil)
	if got := listedIDs(res); len(got) != 1 || got[0] != trip {
		t.Fatalf("content search = %v, want [%s]", got, trip)
	}
	snip := res.Sessions[0].Match
	if snip == nil || !strings.Contains(snip.Snippet, "zeppelin") || len([]rune(snip.Snippet)) > 160 || !strings.HasPrefix(snip.Snippet, "…") {
		t.Errorf("match = %+v, want a snippet of ≤160 characters around zeppelin", snip)
	}
	if a := res.AppliedFilter; a == nil || a.Content == nil || a.Content.AllOf[0] != "zeppel" {
		t.Errorf("appliedFilter = %+v, want the canonical content term", a)
	}
	// Names, with the echo's canonical order; branch is not applied, so
	// not echoed.
	res = list(t, m, alice, &msp.SessionListFilter{Branch: json.RawMessage(`{"anyOf":["main"]}`),
		Text: &msp.SessionListTextFilter{Fields: []string{"title", "name"}, AnyOf: []string{"bread", "Plan", "bread"}}}, 1, nil)
	if got := listedIDs(res); len(got) != 1 || got[0] != bread || res.NextCursor == nil {
		t.Fatalf("name search page 1 = %v (next %v), want [%s] and more", got, res.NextCursor, bread)
	}
	if a := res.AppliedFilter; a.Branch != nil || a.Text == nil || strings.Join(a.Text.Fields, ",") != "name,title" || strings.Join(a.Text.AnyOf, ",") != "bread,plan" {
		t.Errorf("appliedFilter = %+v", a)
	}
	res = list(t, m, alice, &msp.SessionListFilter{Text: &msp.SessionListTextFilter{Fields: []string{"name"}, AnyOf: []string{"bread", "plan"}}}, 1, res.NextCursor)
	if got := listedIDs(res); len(got) != 1 || got[0] != trip || res.NextCursor != nil {
		t.Fatalf("name search page 2 = %v (next %v), want [%s], last", got, res.NextCursor, trip)
	}
	// The answer is indexed too (the model echoes the history).
	res = list(t, m, alice, &msp.SessionListFilter{SessionID: &msp.SessionListSessionIDFilter{AnyOf: []string{strings.ToUpper(trip)}}}, 50, nil)
	if got := listedIDs(res); len(got) != 1 || got[0] != trip {
		t.Fatalf("sessionId filter = %v, want [%s]", got, trip)
	}
	// Bob finds his own chat only; alice's words are not his.
	if got := listedIDs(list(t, m, bob, &msp.SessionListFilter{Content: &msp.SessionListContentFilter{AnyOf: []string{"kraków", "bread"}}}, 50, nil)); len(got) != 1 || got[0] == trip {
		t.Fatalf("bob's search = %v, want his one chat", got)
	}
	if got := listedIDs(list(t, m, bob, &msp.SessionListFilter{SessionID: &msp.SessionListSessionIDFilter{AnyOf: []string{trip}}}, 50, nil)); len(got) != 0 {
		t.Fatalf("bob lists alice's session by id: %v", got)
	}
	// Deleting a chat removes it from the index.
	_, erase, err := m.DeleteSession(alice, bcastSub{newRecSub()}, mustJSON(msp.SessionDeleteParams{CommandID: cmdID(), SessionID: bread}))
	if err != nil {
		t.Fatal(err)
	}
	if erase != nil {
		erase(alice)
	}
	if hits, err := m.store.Search(t.Context(), store.Query{Owner: "alice", Content: store.Terms{AllOf: []string{"bread"}}}, nil, 10); err != nil || len(hits) != 0 {
		t.Fatalf("after the deletion the index finds %d, %v", len(hits), err)
	}

	for member, f := range map[string]*msp.SessionListFilter{
		"filter.text.fields":     {Text: &msp.SessionListTextFilter{Fields: []string{"body"}, AllOf: []string{"x"}}},
		"filter.text":            {Text: &msp.SessionListTextFilter{Fields: []string{"name"}}},
		"filter.content.allOf":   {Content: &msp.SessionListContentFilter{AllOf: []string{"   "}}},
		"filter.content.anyOf":   {Content: &msp.SessionListContentFilter{AnyOf: []string{strings.Repeat("a", 129)}}},
		"filter.content":         {Content: &msp.SessionListContentFilter{AllOf: make([]string, 17)}},
		"filter.sessionId.anyOf": {SessionID: &msp.SessionListSessionIDFilter{AnyOf: []string{"not-a-uuid"}}},
	} {
		_, err := m.ListSessions(alice, mustJSON(msp.SessionListParams{Filter: f}))
		var me *msp.Error
		if !errors.As(err, &me) || me.Data.Kind != msp.KindInvalidParams || me.Data.Details["field"] != member {
			t.Errorf("filter %s: got %v, want invalidParams naming %s", member, err, member)
		}
	}
}
