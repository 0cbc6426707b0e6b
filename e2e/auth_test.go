package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"mspd/auth"
	"mspd/client"
	"mspd/daemon"
	"mspd/provider/scripted"
	"mspd/schema/msp"
)

const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-0123456789"
)

// tokensFile writes a tokens file and returns its path.
func tokensFile(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// wantNotFound checks that err is the typed sessionNotFound error.
func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	var me *msp.Error
	if !errors.As(err, &me) || me.Data.Kind != msp.KindSessionNotFound {
		t.Errorf("%s on another principal's session: %v, want sessionNotFound", what, err)
	}
}

// listed returns the session ids session/list shows c.
func listed(t *testing.T, ctx context.Context, c *checkedClient) []string {
	t.Helper()
	var res msp.SessionListResult
	if err := c.Call(ctx, msp.MethodSessionList, msp.SessionListParams{}, &res); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range res.Sessions {
		ids = append(ids, s.SessionID)
	}
	return ids
}

// nextSessionStarted returns the next session/started c receives.
func nextSessionStarted(t *testing.T, ctx context.Context, c *checkedClient) string {
	t.Helper()
	for {
		n, err := c.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Method == msp.NotifySessionStarted {
			return decode[msp.SessionStartedParams](t, n).Session.SessionID
		}
	}
}

// TestPrincipalsSeeOnlyTheirOwn: two principals on one server. Each sees
// only its own sessions, through every method that names one; the other's
// sessions do not exist for it, and no broadcast about them reaches it.
func TestPrincipalsSeeOnlyTheirOwn(t *testing.T) {
	d := startDaemon(t, daemon.Config{Auth: auth.Config{TokensFile: tokensFile(t, "alice "+aliceToken, "bob "+bobToken)}})
	ctx := testCtx(t)
	alice := dial(t, d.URL(), client.Options{Token: aliceToken})
	alice2 := dialListening(t, d.URL(), client.Options{Token: aliceToken})
	bob := dialListening(t, d.URL(), client.Options{Token: bobToken})

	start, err := alice.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sid := start.Session.SessionID
	if got := nextSessionStarted(t, ctx, alice2); got != sid {
		t.Fatalf("alice's other connection heard of %s, want %s", got, sid)
	}
	// A turn that runs a while, and one queued behind it.
	slow := scripted.Script(scripted.Step{Text: strings.Repeat("slow ", 200), Chunks: 200, ChunkDelayMs: 20})
	running, err := alice.StartTurn(ctx, sid, slow)
	if err != nil {
		t.Fatal(err)
	}
	queued, err := alice.StartTurn(ctx, sid, "queued")
	if err != nil {
		t.Fatal(err)
	}

	// Bob's session/started is the first he hears of: alice's came first
	// and never reached him.
	bobSID := newSession(t, bob)
	if got := nextSessionStarted(t, ctx, bob); got != bobSID {
		t.Fatalf("bob heard of session %s first, want his own %s", got, bobSID)
	}

	// Every method naming alice's session answers bob sessionNotFound.
	var snap msp.SessionSnapshot
	wantNotFound(t, "session/read", bob.Call(ctx, msp.MethodSessionRead, msp.SessionReadParams{SessionID: sid}, &snap))
	_, err = bob.Resume(ctx, sid, nil)
	wantNotFound(t, "session/resume", err)
	wantNotFound(t, "view/subscribe", bob.Call(ctx, msp.MethodViewSubscribe, msp.ViewSubscribeParams{SessionID: sid}, nil))
	wantNotFound(t, "view/page", bob.Call(ctx, msp.MethodViewPage, msp.ViewPageParams{SessionID: sid, Limit: 10}, nil))
	_, err = bob.StartTurn(ctx, sid, "hijack")
	wantNotFound(t, "turn/start", err)
	wantNotFound(t, "turn/interrupt", bob.Call(ctx, msp.MethodTurnInterrupt, msp.TurnStopParams{CommandID: client.NewCommandID(), SessionID: sid}, nil))
	wantNotFound(t, "turn/cancel", bob.Call(ctx, msp.MethodTurnCancel, msp.TurnStopParams{CommandID: client.NewCommandID(), SessionID: sid, TurnID: running.TurnID}, nil))
	wantNotFound(t, "turn/unqueue", bob.Call(ctx, msp.MethodTurnUnqueue, msp.TurnStopParams{CommandID: client.NewCommandID(), SessionID: sid, TurnID: queued.TurnID}, nil))
	wantNotFound(t, "model/list", bob.Call(ctx, msp.MethodModelList, map[string]string{"sessionId": sid}, nil))
	if ids := listed(t, ctx, bob); len(ids) != 1 || ids[0] != bobSID {
		t.Errorf("bob's session/list: %v, want only %s", ids, bobSID)
	}
	if ids := listed(t, ctx, alice); len(ids) != 1 || ids[0] != sid {
		t.Errorf("alice's session/list: %v, want only %s", ids, sid)
	}
	// And alice cannot reach bob's.
	wantNotFound(t, "session/read (alice)", alice.Call(ctx, msp.MethodSessionRead, msp.SessionReadParams{SessionID: bobSID}, &snap))

	// Bob's attempts changed nothing: alice's own unqueue and interrupt
	// find her turns where she left them.
	var ack msp.CommandAck
	if err := alice.Call(ctx, msp.MethodTurnUnqueue, msp.TurnStopParams{CommandID: client.NewCommandID(), SessionID: sid, TurnID: queued.TurnID}, &ack); err != nil {
		t.Fatalf("alice's unqueue: %v", err)
	}
	if err := alice.Call(ctx, msp.MethodTurnInterrupt, msp.TurnStopParams{CommandID: client.NewCommandID(), SessionID: sid}, &ack); err != nil || ack.TurnID != running.TurnID {
		t.Fatalf("alice's interrupt: %+v %v", ack, err)
	}
	if _, err := alice.WaitTurn(ctx, running.TurnID); err != nil {
		t.Fatal(err)
	}

	// Everything bob received up to his own turn's end is about his own
	// session: none of alice's turn events leaked to him.
	mine, err := bob.StartTurn(ctx, bobSID, "mine")
	if err != nil {
		t.Fatal(err)
	}
	events, err := bob.WaitTurn(ctx, mine.TurnID)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range events {
		if strings.Contains(string(n.Params), sid) {
			t.Errorf("bob received %s about alice's session", n.Method)
		}
	}
}

// TestTokensFileReloadOnDaemon: ReloadAuth (SIGHUP) takes a new tokens
// file for new connections and keeps the old one when the new is bad.
func TestTokensFileReloadOnDaemon(t *testing.T) {
	path := tokensFile(t, "alice "+aliceToken)
	d := startDaemon(t, daemon.Config{Auth: auth.Config{TokensFile: path}})
	ctx := testCtx(t)
	dial(t, d.URL(), client.Options{Token: aliceToken})

	if err := os.WriteFile(path, []byte("bob "+bobToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.ReloadAuth(); err != nil {
		t.Fatal(err)
	}
	dial(t, d.URL(), client.Options{Token: bobToken})
	if _, err := client.Dial(ctx, d.URL(), client.Options{Token: aliceToken}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a removed token: %v, want 401", err)
	}

	if err := os.WriteFile(path, []byte("bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.ReloadAuth(); err == nil {
		t.Error("a malformed tokens file was taken")
	}
	dial(t, d.URL(), client.Options{Token: bobToken})
}

// TestJWTUserAndServiceAccount: JWT users and tokens-file service
// accounts on one server, each principal apart; an expired JWT is 401.
func TestJWTUserAndServiceAccount(t *testing.T) {
	key, keyFile := jwtSigningKey(t)
	d := startDaemon(t, daemon.Config{Auth: auth.Config{
		TokensFile: tokensFile(t, "ci "+aliceToken),
		JWT:        auth.JWTConfig{KeyFile: keyFile, Issuer: "https://issuer.test", Audience: "mspd"},
	}})
	ctx := testCtx(t)
	userJWT := func(exp time.Duration) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.RegisteredClaims{Subject: "user-1", Issuer: "https://issuer.test",
			Audience: jwt.ClaimStrings{"mspd"}, ExpiresAt: jwt.NewNumericDate(time.Now().Add(exp))}).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	user := dial(t, d.URL(), client.Options{Token: userJWT(time.Hour)})
	ci := dial(t, d.URL(), client.Options{Token: aliceToken})
	start, err := user.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ids := listed(t, ctx, ci); len(ids) != 0 {
		t.Errorf("the service account lists %v", ids)
	}
	// The same user on a browser-style connection: token as ?access_token.
	again := dial(t, d.URL()+"?access_token="+userJWT(time.Hour), client.Options{})
	if ids := listed(t, ctx, again); len(ids) != 1 || ids[0] != start.Session.SessionID {
		t.Errorf("the user's second connection lists %v", ids)
	}
	_, err = client.Dial(ctx, d.URL(), client.Options{Token: userJWT(-time.Hour)})
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("an expired JWT: %v, want 401", err)
	}
}

// jwtSigningKey makes a P-256 key that signs the test's JWTs, and a PEM
// file of its public half for --auth-jwt-key-file.
func jwtSigningKey(t *testing.T) (*ecdsa.PrivateKey, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "jwt.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return key, keyFile
}
