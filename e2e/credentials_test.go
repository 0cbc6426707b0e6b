package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"mspd/auth"
	"mspd/client"
	"mspd/daemon"
	"mspd/schema/msp"
	"mspd/server"
)

// closedWith waits for c's connection to end and returns the close status
// the server sent.
func closedWith(t *testing.T, ctx context.Context, c *checkedClient) websocket.CloseError {
	t.Helper()
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the connection was not closed")
	}
	for {
		_, err := c.Next(ctx)
		if err == nil {
			continue // notifications queued before the close
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("the connection ended without a close status: %v", err)
		}
		return ce
	}
}

// wantCredentialEnded checks a close status: StatusCredentialEnded with
// the given reason.
func wantCredentialEnded(t *testing.T, ce websocket.CloseError, reason string) {
	t.Helper()
	if ce.Code != server.StatusCredentialEnded || ce.Reason != reason {
		t.Errorf("closed with %d %q, want %d %q", ce.Code, ce.Reason, server.StatusCredentialEnded, reason)
	}
}

// TestRevokedConnectionClosedOnSIGHUP: a real mspd process; alice's token
// is removed from the tokens file and SIGHUP sent: her open connection is
// closed as revoked, bob's goes on.
func TestRevokedConnectionClosedOnSIGHUP(t *testing.T) {
	path := tokensFile(t, "alice "+aliceToken, "bob "+bobToken)
	p := startProcess(t, t.TempDir(), "--auth-tokens", path)
	ctx := testCtx(t) // after the first start, which may build mspd
	alice := dial(t, p.url, client.Options{Token: aliceToken})
	bob := dial(t, p.url, client.Options{Token: bobToken})
	newSession(t, alice)

	if err := os.WriteFile(path, []byte("bob "+bobToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wantCredentialEnded(t, closedWith(t, ctx, alice), server.ReasonRevoked)
	if ids := listed(t, ctx, bob); len(ids) != 0 {
		t.Errorf("bob lists %v", ids)
	}
	if _, err := client.Dial(ctx, p.url, client.Options{Token: aliceToken}); err == nil {
		t.Error("the revoked token opened a connection")
	}
}

// TestRevokedConnectionRunsNothing: frames a revoked principal sends right
// after the reload, racing the close, are not executed: no session they
// name is started and no turn runs on the session she had; bob's
// connection goes on, and a new token of hers finds her session as it was.
func TestRevokedConnectionRunsNothing(t *testing.T) {
	path := tokensFile(t, "alice "+aliceToken, "bob "+bobToken)
	d := startDaemon(t, daemon.Config{Auth: auth.Config{TokensFile: path}})
	ctx := testCtx(t)
	alice := dial(t, d.URL(), client.Options{Token: aliceToken})
	bob := dial(t, d.URL(), client.Options{Token: bobToken})
	sid := newSession(t, alice)

	if err := os.WriteFile(path, []byte("bob "+bobToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.ReloadAuth(); err != nil {
		t.Fatal(err)
	}
	// Sent at once: the connection is still open as the client sees it
	// until the close frame arrives, so these reach the server.
	var late []string
	for i := range 20 {
		id := fmt.Sprintf("0199aaaa-0000-7000-8000-%012d", i)
		late = append(late, id)
		start := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"session/start","params":{"commandId":%q,"sessionId":%q}}`, 100+i, client.NewCommandID(), id)
		turn := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"turn/start","params":{"commandId":%q,"sessionId":%q,"input":[{"type":"text","text":"late"}]}}`, 200+i, client.NewCommandID(), sid)
		if alice.SendRaw(ctx, []byte(start)) != nil || alice.SendRaw(ctx, []byte(turn)) != nil {
			break // the close got through
		}
	}
	wantCredentialEnded(t, closedWith(t, ctx, alice), server.ReasonRevoked)
	if ids := listed(t, ctx, bob); len(ids) != 0 {
		t.Errorf("bob lists %v", ids)
	}

	// alice comes back with a new token: only her first session exists,
	// and no turn ran on it.
	const aliceNew = "alice-new-token-0123456789"
	if err := os.WriteFile(path, []byte("bob "+bobToken+"\nalice "+aliceNew+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.ReloadAuth(); err != nil {
		t.Fatal(err)
	}
	again := dial(t, d.URL(), client.Options{Token: aliceNew})
	if ids := listed(t, ctx, again); len(ids) != 1 || ids[0] != sid {
		t.Errorf("alice lists %v, want only %s: frames sent after the revocation ran", ids, sid)
	}
	var snap msp.SessionSnapshot
	if err := again.Call(ctx, msp.MethodSessionRead, msp.SessionReadParams{SessionID: sid}, &snap); err != nil {
		t.Fatal(err)
	}
	if snap.Session.TurnCount != 0 || snap.Session.ActiveTurnID != nil {
		t.Errorf("a turn sent after the revocation ran: %+v", snap.Session)
	}
	for _, id := range late {
		wantNotFound(t, "session/read of a late session/start", again.Call(ctx, msp.MethodSessionRead, msp.SessionReadParams{SessionID: id}, &snap))
	}
}

// TestJWTConnectionClosedAtExpiry: a JWT connection is closed when its
// token expires (exp plus the clock skew allowed, here 1 ms), never
// before, with StatusCredentialEnded and the expiry reason; a connection
// whose token lasts longer stays open and serving.
func TestJWTConnectionClosedAtExpiry(t *testing.T) {
	key, keyFile := jwtSigningKey(t)
	d := startDaemon(t, daemon.Config{Auth: auth.Config{
		JWT: auth.JWTConfig{KeyFile: keyFile, Issuer: "https://issuer.test", Audience: "mspd", Leeway: time.Millisecond},
	}})
	ctx := testCtx(t)
	token := func(exp time.Time) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.RegisteredClaims{Subject: "user-1", Issuer: "https://issuer.test",
			Audience: jwt.ClaimStrings{"mspd"}, ExpiresAt: jwt.NewNumericDate(exp)}).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	long := dial(t, d.URL(), client.Options{Token: token(time.Now().Add(time.Hour))})
	exp := jwt.NewNumericDate(time.Now().Add(2 * time.Second)).Time // whole seconds, as on the wire
	short := dial(t, d.URL(), client.Options{Token: token(exp)})
	newSession(t, short)

	ce := closedWith(t, ctx, short)
	if now := time.Now(); now.Before(exp) {
		t.Errorf("closed %v before the token expired", exp.Sub(now))
	}
	wantCredentialEnded(t, ce, server.ReasonExpired)
	if ids := listed(t, ctx, long); len(ids) != 1 {
		t.Errorf("the longer-lived connection lists %v, want the session the other made", ids)
	}
	select {
	case <-long.Done():
		t.Error("the connection whose token has not expired was closed")
	default:
	}
}
