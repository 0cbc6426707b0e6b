package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"mspd/schema/msp"
	"mspd/session"
)

// TestAnotherPrincipalsSessionIsUnknown: every method that names a
// session answers a connection of another principal exactly as it answers
// for a session that does not exist — the same bytes but for the id — so
// nothing tells the two apart; and none of them changes the session.
func TestAnotherPrincipalsSessionIsUnknown(t *testing.T) {
	m, head := testManager(t)
	sid := startWithTurns(t, m, head, nopSub{}, 2) // the anonymous principal's
	before := head(sid)
	unknown := "0198f0aa-ffff-7000-8000-00000000beef"
	if len(unknown) != len(sid) {
		t.Fatalf("unknown id %q is not shaped like %q", unknown, sid)
	}
	srv, err := New(m, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// bob sends every request naming session target on a connection of
	// his, and gets the answers with target and the commandIds (fresh
	// ones each time) replaced by placeholders.
	bob := func(target string) []string {
		var in strings.Builder
		in.WriteString(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}` + "\n")
		var cmds []string
		cmd := func() string { c := newCommandID(); cmds = append(cmds, c); return c }
		cursor := "v:" + target + ":1"
		for i, req := range []struct{ method, params string }{
			{msp.MethodSessionRead, `{"sessionId":%q,"excludeItems":false}`},
			{msp.MethodSessionResume, `{"commandId":"` + cmd() + `","sessionId":%q}`},
			{msp.MethodSessionResume, `{"commandId":"` + cmd() + `","sessionId":%q,"cursor":"` + cursor + `"}`},
			{msp.MethodViewSubscribe, `{"sessionId":%q,"after":"` + cursor + `"}`},
			{msp.MethodViewUnsubscribe, `{"sessionId":%q}`},
			{msp.MethodViewPage, `{"sessionId":%q,"cursor":"` + cursor + `","limit":10}`},
			{msp.MethodSessionFork, `{"commandId":"` + cmd() + `","sessionId":%q}`},
			{msp.MethodSessionRename, `{"commandId":"` + cmd() + `","sessionId":%q,"name":"mine"}`},
			{msp.MethodSessionSetModel, `{"commandId":"` + cmd() + `","sessionId":%q,"model":{"modelId":"m"}}`},
			{msp.MethodTurnStart, `{"commandId":"` + cmd() + `","sessionId":%q,"input":[{"type":"text","text":"x"}]}`},
			{msp.MethodTurnInterrupt, `{"commandId":"` + cmd() + `","sessionId":%q}`},
			{msp.MethodTurnCancel, `{"commandId":"` + cmd() + `","sessionId":%q}`},
			{msp.MethodTurnUnqueue, `{"commandId":"` + cmd() + `","sessionId":%q,"turnId":"` + cmd() + `"}`},
			{msp.MethodModelList, `{"sessionId":%q}`},
			{msp.MethodSessionDelete, `{"commandId":"` + cmd() + `","sessionId":%q}`},
		} {
			fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":`+req.params+"}\n", i+1, req.method, target)
		}
		var out bytes.Buffer
		srv.run(session.WithPrincipal(context.Background(), "bob"), newLineTransport(strings.NewReader(in.String()), &out, nil, 1<<20), srv.log)
		text := strings.ReplaceAll(out.String(), target, "<session>")
		for i, c := range cmds {
			text = strings.ReplaceAll(text, c, fmt.Sprintf("<command %d>", i))
		}
		lines := strings.Split(strings.TrimSpace(text), "\n")
		return lines[1:]
	}
	theirs, none := bob(sid), bob(unknown)
	if len(theirs) != len(none) {
		t.Fatalf("%d answers for another principal's session, %d for an unknown one", len(theirs), len(none))
	}
	for i := range theirs {
		if theirs[i] != none[i] {
			t.Errorf("request %d is answered differently:\nanother's: %s\nunknown:   %s", i+1, theirs[i], none[i])
		}
		if !strings.Contains(theirs[i], `"kind":"sessionNotFound"`) {
			t.Errorf("request %d: %s, want sessionNotFound", i+1, theirs[i])
		}
	}
	if got := head(sid); got != before {
		t.Errorf("the session's log went from %d records to %d", before, got)
	}
	if _, err := m.ReadSession(context.Background(), mustMarshal(msp.SessionReadParams{SessionID: sid})); err != nil {
		t.Errorf("the owner lost the session: %v", err)
	}
}
