package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"mspd/auth"
	"mspd/client"
	"mspd/daemon"
	"mspd/schema/msp"
)

// refusal is an answer's error with the session id it names made
// anonymous, so that the answers for two ids compare.
func refusal(t *testing.T, err error, id string) string {
	t.Helper()
	var me *msp.Error
	if !errors.As(err, &me) {
		t.Fatalf("want an MSP error, got %v", err)
	}
	b, _ := json.Marshal(me)
	return strings.ReplaceAll(string(b), id, "<id>")
}

// startAt starts a session of the given id on c.
func startAt(t *testing.T, ctx context.Context, c *checkedClient, id string) msp.SessionStartResult {
	t.Helper()
	var res msp.SessionStartResult
	if err := c.Call(ctx, msp.MethodSessionStart, msp.SessionStartParams{CommandID: client.NewCommandID(), SessionID: id}, &res); err != nil {
		t.Fatalf("session/start %s: %v", id, err)
	}
	return res
}

// userTexts is what a resume of session id shows c of its user messages.
func userTexts(t *testing.T, ctx context.Context, c *checkedClient, id string) []string {
	t.Helper()
	snap, err := c.Resume(ctx, id, nil)
	if err != nil {
		t.Fatalf("resume %s: %v", id, err)
	}
	var texts []string
	for _, it := range snap.History.Items {
		if it.Kind == msp.ItemUserMessage && it.Text != nil {
			texts = append(texts, *it.Text)
		}
	}
	return texts
}

// TestSessionIDsArePerPrincipal: over a real WebSocket with two
// principals, alice's session id tells bob nothing. Before he uses it,
// every method naming it answers him exactly as for an id nobody uses;
// his session/start of it is answered as a start of a fresh id is — his
// own new session of that id — and from then on the two sessions of one
// id run turns, resume, list and delete apart.
func TestSessionIDsArePerPrincipal(t *testing.T) {
	d := startDaemon(t, daemon.Config{Auth: auth.Config{TokensFile: tokensFile(t, "alice "+aliceToken, "bob "+bobToken)}})
	ctx := testCtx(t)
	alice := dial(t, d.URL(), client.Options{Token: aliceToken})
	bob := dial(t, d.URL(), client.Options{Token: bobToken})
	x, fresh := uuid.NewString(), uuid.NewString()
	startAt(t, ctx, alice, x)
	answerTurn(t, alice, x, "alice's question")

	// Alice's id and one nobody uses, side by side.
	ask := map[string]func(id string) error{
		"session/read": func(id string) error {
			return bob.Call(ctx, msp.MethodSessionRead, msp.SessionReadParams{SessionID: id}, nil)
		},
		"session/resume": func(id string) error { _, err := bob.Resume(ctx, id, nil); return err },
		"view/page": func(id string) error {
			return bob.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: id, Limit: 10}, nil)
		},
		"session/delete": func(id string) error {
			return bob.Call(ctx, msp.MethodSessionDelete, msp.SessionDeleteParams{CommandID: client.NewCommandID(), SessionID: id}, nil)
		},
		"session/fork": func(id string) error {
			return bob.Call(ctx, msp.MethodSessionFork, msp.SessionForkParams{CommandID: client.NewCommandID(), SessionID: id}, nil)
		},
	}
	unused := uuid.NewString()
	for method, call := range ask {
		if a, b := refusal(t, call(x), x), refusal(t, call(unused), unused); a != b {
			t.Errorf("bob's %s of alice's session: %s; of an unused id: %s", method, a, b)
		}
	}

	// Bob's start of alice's id is a start like any other.
	for _, id := range []string{x, fresh} {
		res := startAt(t, ctx, bob, id)
		if res.Session.SessionID != id || !strings.HasPrefix(res.ViewCursor, "v:"+id+":") || cursorPos(t, res.ViewCursor) != [2]int64{0, 0} || res.Session.TurnCount != 0 || res.Session.Status != msp.SessionIdle {
			t.Fatalf("bob's start of %s: %+v, want a new idle session of that id", id, res)
		}
	}
	answerTurn(t, bob, x, "bob's question")
	if got := userTexts(t, ctx, alice, x); !slices.Equal(got, []string{"alice's question"}) {
		t.Errorf("alice's %s holds %q", x, got)
	}
	if got := userTexts(t, ctx, bob, x); !slices.Equal(got, []string{"bob's question"}) {
		t.Errorf("bob's %s holds %q", x, got)
	}
	if got := listed(t, ctx, alice); !slices.Equal(got, []string{x}) {
		t.Errorf("alice lists %v, want [%s]", got, x)
	}
	if got := listed(t, ctx, bob); !slices.Equal(got, []string{x, fresh}) {
		t.Errorf("bob lists %v, want [%s %s] (his last turn was on %s)", got, x, fresh, x)
	}

	// Bob deletes his: alice's stays whole, and his id is free again.
	if err := bob.Call(ctx, msp.MethodSessionDelete, msp.SessionDeleteParams{CommandID: client.NewCommandID(), SessionID: x}, nil); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := bob.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Method == msp.NotifySessionDeleteCompleted && decode[msp.SessionDeleteCompletedParams](t, n).SessionID == x {
			break
		}
	}
	_, err := bob.Resume(ctx, x, nil)
	if a, b := refusal(t, err, x), refusal(t, ask["session/resume"](unused), unused); a != b {
		t.Errorf("bob's resume of his deleted session: %s; of an unused id: %s", a, b)
	}
	if got := userTexts(t, ctx, alice, x); !slices.Equal(got, []string{"alice's question"}) {
		t.Errorf("alice's %s after bob's deletion holds %q", x, got)
	}
	if got := listed(t, ctx, bob); !slices.Equal(got, []string{fresh}) {
		t.Errorf("bob lists %v after his deletion, want [%s]", got, fresh)
	}
}
