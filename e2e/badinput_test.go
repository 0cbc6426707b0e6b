package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"mspd/client"
	"mspd/daemon"
	"mspd/schema/msp"
	"mspd/server"
)

// rawExchange sends one frame and returns the response that answers it
// (matched by id text, or the next stray one).
func rawExchange(t *testing.T, ctx context.Context, c *checkedClient, frame string) (json.RawMessage, *msp.Error) {
	t.Helper()
	if err := c.SendRaw(ctx, []byte(frame)); err != nil {
		t.Fatalf("send: %v", err)
	}
	id, e, err := c.NextStray(ctx)
	if err != nil {
		t.Fatalf("no answer to %.80s: %v", frame, err)
	}
	return id, e
}

func TestBadInputIsAnsweredAndHarmless(t *testing.T) {
	d := startDaemon(t, daemon.Config{Server: server.Config{MaxFrameBytes: 4096}})
	ctx := testCtx(t)
	c := dial(t, d.URL(), client.Options{})
	start, err := c.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID
	answerTurn(t, c, sid, "hello")
	var before msp.ViewPageResult
	if err := c.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Limit: 1000}, &before); err != nil {
		t.Fatal(err)
	}

	big := `{"jsonrpc":"2.0","id":"big-1","method":"turn/start","params":{"text":"` + strings.Repeat("x", 5000) + `"}}`
	cases := []struct {
		name, frame string
		wantID      string // JSON text of the echoed id
		code        int
		kind        string
		field       string
	}{
		{"malformed JSON", `{"jsonrpc":"2.0","id":1,"method":`, "null", msp.CodeParseError, msp.KindParseError, ""},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"session/list"}]`, "null", msp.CodeInvalidRequest, msp.KindInvalidRequest, ""},
		{"no jsonrpc member", `{"id":"a","method":"session/list","params":{}}`, `"a"`, msp.CodeInvalidRequest, msp.KindInvalidRequest, ""},
		{"id without method, result or error", `{"jsonrpc":"2.0","id":"x2"}`, `"x2"`, msp.CodeInvalidRequest, msp.KindInvalidRequest, ""},
		{"bad id type", `{"jsonrpc":"2.0","id":1.5,"method":"session/list"}`, "null", msp.CodeInvalidRequest, msp.KindInvalidRequest, ""},
		{"frame over the limit", big, `"big-1"`, msp.CodeInputTooLarge, msp.KindInputTooLarge, ""},
		{"unknown method", `{"jsonrpc":"2.0","id":7,"method":"session/fly","params":{}}`, "7", msp.CodeMethodNotFound, msp.KindMethodNotFound, ""},
		{"closed enum", `{"jsonrpc":"2.0","id":8,"method":"turn/start","params":{"commandId":"` + client.NewCommandID() + `","sessionId":"` + sid + `","input":[{"type":"text","text":"x"}],"ifBusy":"later"}}`, "8", msp.CodeInvalidParams, msp.KindInvalidParams, "ifBusy"},
		{"missing commandId", `{"jsonrpc":"2.0","id":9,"method":"turn/start","params":{"sessionId":"` + sid + `","input":[{"type":"text","text":"x"}]}}`, "9", msp.CodeInvalidParams, msp.KindInvalidParams, "commandId"},
		{"commandId not a UUID", `{"jsonrpc":"2.0","id":10,"method":"turn/start","params":{"commandId":"abc","sessionId":"` + sid + `","input":[{"type":"text","text":"x"}]}}`, "10", msp.CodeInvalidParams, msp.KindInvalidParams, "commandId"},
		{"unknown input part", `{"jsonrpc":"2.0","id":11,"method":"turn/start","params":{"commandId":"` + client.NewCommandID() + `","sessionId":"` + sid + `","input":[{"type":"video"}]}}`, "11", msp.CodeInvalidParams, msp.KindInvalidParams, "input.0.type"},
		{"unknown session", `{"jsonrpc":"2.0","id":"s","method":"session/read","params":{"sessionId":"0199aaaa-0000-7000-8000-000000000000"}}`, `"s"`, msp.CodeSessionNotFound, msp.KindSessionNotFound, ""},
		{"unknown cursor", `{"jsonrpc":"2.0","id":12,"method":"view/page","params":{"sessionId":"` + sid + `","cursor":"v:` + sid + `:999","limit":5}}`, "12", msp.CodeNotFound, msp.KindNotFound, ""},
		{"cursor of another session", `{"jsonrpc":"2.0","id":13,"method":"view/subscribe","params":{"sessionId":"` + sid + `","after":"v:0199aaaa-0000-7000-8000-000000000000:1"}}`, "13", msp.CodeNotFound, msp.KindNotFound, ""},
		{"turn input too large for its echo", `{"jsonrpc":"2.0","id":15,"method":"turn/start","params":{"commandId":"` + client.NewCommandID() + `","sessionId":"` + sid + `","input":[{"type":"text","text":"` + strings.Repeat("y", 3500) + `"}]}}`, "15", msp.CodeInputTooLarge, msp.KindInputTooLarge, ""},
		{"retract is not supported", `{"jsonrpc":"2.0","id":16,"method":"turn/interrupt","params":{"commandId":"` + client.NewCommandID() + `","sessionId":"` + sid + `","retract":true}}`, "16", msp.CodeInvalidParams, msp.KindInvalidParams, "retract"},
		{"already initialized", `{"jsonrpc":"2.0","id":14,"method":"initialize","params":{"clientInfo":{"name":"x","version":"1"}}}`, "14", msp.CodeInvalidRequest, msp.KindAlreadyInitialized, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, e := rawExchange(t, ctx, c, tc.frame)
			if string(id) != tc.wantID {
				t.Errorf("id %s, want %s", id, tc.wantID)
			}
			if e == nil {
				t.Fatalf("no error")
			}
			if e.Code != tc.code || e.Data.Kind != tc.kind {
				t.Errorf("got %d/%s, want %d/%s (%s)", e.Code, e.Data.Kind, tc.code, tc.kind, e.Message)
			}
			if tc.field != "" && e.Data.Details["field"] != tc.field {
				t.Errorf("details %v, want field %q", e.Data.Details, tc.field)
			}
			if tc.kind == msp.KindInputTooLarge && e.Data.LimitBytes != 4096 && e.Data.LimitBytes != 4096-1024 {
				t.Errorf("limitBytes %d", e.Data.LimitBytes)
			}
			if tc.kind == msp.KindNotFound && e.Data.Reason != msp.ReasonMissingAnchor {
				t.Errorf("reason %q", e.Data.Reason)
			}
			// The connection is still open and serving.
			var list msp.SessionListResult
			if err := c.Call(ctx, msp.MethodSessionList, map[string]any{}, &list); err != nil {
				t.Fatalf("connection unusable after bad input: %v", err)
			}
		})
	}

	// Nothing stored was touched.
	var after msp.ViewPageResult
	if err := c.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Limit: 1000}, &after); err != nil {
		t.Fatal(err)
	}
	if jsonText(before) != jsonText(after) {
		t.Errorf("the log changed:\nbefore %s\nafter  %s", jsonText(before), jsonText(after))
	}
}

func TestHandshakeOrder(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	ctx := testCtx(t)
	raw := dial(t, d.URL(), client.Options{SkipHandshake: true})
	err := raw.Call(ctx, msp.MethodSessionList, map[string]any{}, nil)
	var me *msp.Error
	if !errors.As(err, &me) || me.Code != msp.CodeInvalidRequest || me.Data.Kind != msp.KindNotInitialized {
		t.Fatalf("before initialize: %v", err)
	}
	listStream := &msp.ClientCapabilities{RequestedCapabilities: []string{"sessionListStream"}}
	if err := raw.Call(ctx, msp.MethodInitialize, msp.InitializeParams{ClientInfo: msp.ClientInfo{Name: "raw", Version: "1"}, Capabilities: listStream}, nil); err != nil {
		t.Fatal(err)
	}
	err = raw.Call(ctx, msp.MethodInitialize, msp.InitializeParams{ClientInfo: msp.ClientInfo{Name: "raw", Version: "1"}}, nil)
	if !errors.As(err, &me) || me.Data.Kind != msp.KindAlreadyInitialized {
		t.Fatalf("second initialize: %v", err)
	}
	// Until it sends initialized, this connection gets no news of the
	// session list, though it asked for it.
	other := dial(t, d.URL(), client.Options{})
	if _, err := other.StartSession(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := other.Next(ctx); err != nil || n.Method != msp.NotifySessionStarted {
		t.Fatalf("the initialized client: %v %v", n.Method, err)
	}
	quiet, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if n, err := raw.Next(quiet); err == nil {
		t.Fatalf("a connection without initialized got %s", n.Method)
	}
	if err := raw.Notify(ctx, msp.NotifyInitialized, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := other.StartSession(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := raw.Next(ctx); err != nil || n.Method != msp.NotifySessionStarted {
		t.Fatalf("after initialized: %v %v", n.Method, err)
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
