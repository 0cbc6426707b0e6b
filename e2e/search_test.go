package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"mspd/auth"
	"mspd/client"
	"mspd/daemon"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

// TestSearchOverTheWire: session/list's filter over a real WebSocket
// finds a principal's chats by name (text) and by what the model answered
// (content, with match.snippet), pages with the filter, echoes it as
// appliedFilter, never shows another principal's chats, and answers a bad
// filter invalidParams naming the member, on a connection that goes on.
func TestSearchOverTheWire(t *testing.T) {
	d := startDaemon(t, daemon.Config{Auth: auth.Config{TokensFile: tokensFile(t, "alice "+aliceToken, "bob "+bobToken)}})
	ctx := testCtx(t)
	alice := dial(t, d.URL(), client.Options{Token: aliceToken})
	bob := dial(t, d.URL(), client.Options{Token: bobToken})

	chat := func(c *checkedClient, name, answer string) string {
		sid := newSession(t, c)
		answerTurn(t, c, sid, scripted.Script(scripted.Step{Text: answer}))
		rename(t, c, sid, name)
		return sid
	}
	trip := chat(alice, "Trip to Kraków", "The zeppelin leaves at noon from the old town.")
	other := chat(alice, "Trip notes", "Pack an umbrella.")
	chat(bob, "Trip to Kraków", "The zeppelin is bob's.")

	search := func(c *checkedClient, f *msp.SessionListFilter, limit int, cursor *string) msp.SessionListResult {
		t.Helper()
		var res msp.SessionListResult
		if err := c.Call(ctx, msp.MethodSessionList, msp.SessionListParams{Filter: f, Limit: &limit, Cursor: cursor}, &res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := search(alice, &msp.SessionListFilter{Content: &msp.SessionListContentFilter{AllOf: []string{"Zeppel"}}}, 50, nil)
	if len(res.Sessions) != 1 || res.Sessions[0].SessionID != trip {
		t.Fatalf("content search lists %+v, want alice's %s alone", res.Sessions, trip)
	}
	if m := res.Sessions[0].Match; m == nil || !strings.Contains(m.Snippet, "The zeppelin leaves at noon") {
		t.Errorf("match = %+v, want a snippet of the message", m)
	}
	if a := res.AppliedFilter; a == nil || a.Content == nil || a.Content.AllOf[0] != "zeppel" {
		t.Errorf("appliedFilter = %+v", a)
	}

	// Names, a page at a time, with the filter: newest first.
	byName := &msp.SessionListFilter{Text: &msp.SessionListTextFilter{Fields: []string{"name"}, AllOf: []string{"trip"}}}
	first := search(alice, byName, 1, nil)
	if len(first.Sessions) != 1 || first.Sessions[0].SessionID != other || first.NextCursor == nil {
		t.Fatalf("page 1 = %+v (next %v), want %s and more", first.Sessions, first.NextCursor, other)
	}
	second := search(alice, byName, 1, first.NextCursor)
	if len(second.Sessions) != 1 || second.Sessions[0].SessionID != trip || second.NextCursor != nil {
		t.Fatalf("page 2 = %+v (next %v), want %s, last", second.Sessions, second.NextCursor, trip)
	}

	// Bob's search finds his own chat only.
	res = search(bob, &msp.SessionListFilter{Content: &msp.SessionListContentFilter{AnyOf: []string{"zeppelin", "umbrella"}}}, 50, nil)
	if len(res.Sessions) != 1 || res.Sessions[0].SessionID == trip {
		t.Fatalf("bob's search lists %+v, want his one chat", res.Sessions)
	}

	// A bad filter is typed, naming its member (the schema's check or
	// the bounds'), and the connection goes on. (A client of its own:
	// the checked one refuses to send what fails the schema.)
	unchecked, err := client.Dial(ctx, d.URL(), client.Options{Token: aliceToken})
	if err != nil {
		t.Fatal(err)
	}
	defer unchecked.Close()
	for want, f := range map[string]*msp.SessionListFilter{
		"filter.text.fields": {Text: &msp.SessionListTextFilter{Fields: []string{"body"}, AllOf: []string{"x"}}},
		"filter.content":     {Content: &msp.SessionListContentFilter{AnyOf: make([]string, 17)}},
	} {
		err := unchecked.Call(ctx, msp.MethodSessionList, msp.SessionListParams{Filter: f}, nil)
		var me *msp.Error
		if !errors.As(err, &me) || me.Data.Kind != msp.KindInvalidParams || !strings.HasPrefix(fmt.Sprint(me.Data.Details["field"]), want) {
			t.Fatalf("bad filter: %v, want invalidParams naming %s", err, want)
		}
	}
	var all msp.SessionListResult
	if err := unchecked.Call(ctx, msp.MethodSessionList, msp.SessionListParams{}, &all); err != nil || len(all.Sessions) != 2 || all.AppliedFilter != nil {
		t.Fatalf("after the refusals, session/list = %+v, %v", all, err)
	}
}
