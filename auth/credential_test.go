package auth

import (
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// credential authenticates r, failing the test on a refusal.
func credential(t *testing.T, a *Authenticator, tok string) Credential {
	t.Helper()
	c, err := a.Authenticate(bearer(tok))
	if err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	return c
}

// TestCredentialAfterTokensReload: a credential from the tokens file stays
// valid while its token names the same principal; removing the token, or
// giving it to another principal, ends it; a file that does not load ends
// none; the shared token is never ended by a reload.
func TestCredentialAfterTokensReload(t *testing.T) {
	path := writeFile(t, "tokens", []byte("alice "+aliceToken+"\nbob "+bobToken+"\ncarol "+carolToken+"\n"))
	a := newAuth(t, Config{TokensFile: path, Token: "shared-token-0123456789"})
	alice, bob, carol := credential(t, a, aliceToken), credential(t, a, bobToken), credential(t, a, carolToken)
	shared := credential(t, a, "shared-token-0123456789")
	if !alice.Expires.IsZero() {
		t.Errorf("a tokens-file credential expires at %v", alice.Expires)
	}
	for _, c := range []Credential{alice, bob, carol, shared} {
		if !a.Valid(c) {
			t.Errorf("%q is not valid before any reload", c.Principal)
		}
	}

	// alice's token removed; carol's now given to bob.
	if err := os.WriteFile(path, []byte("bob "+bobToken+"\nbob "+carolToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	for c, want := range map[*Credential]bool{&alice: false, &bob: true, &carol: false, &shared: true} {
		if got := a.Valid(*c); got != want {
			t.Errorf("after the reload, %q valid = %v, want %v", c.Principal, got, want)
		}
	}

	if err := os.WriteFile(path, []byte("bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil {
		t.Fatal("a malformed tokens file was taken")
	}
	if !a.Valid(bob) {
		t.Error("a tokens file that did not load ended bob's credential")
	}
}

// TestCredentialOfJWT: a JWT's credential expires at exp plus the leeway
// (valid until then, not after), and ends when a reloaded key file no
// longer holds the key that signed it, whichever of several keys that was.
func TestCredentialOfJWT(t *testing.T) {
	c := newClock()
	first, second := newECKey(t), newECKey(t)
	path := writeFile(t, "keys.pem", pemPublic(t, &first.PublicKey, &second.PublicKey))
	a := newAuth(t, Config{JWT: JWTConfig{KeyFile: path, Issuer: testIssuer, Audience: testAudience, Leeway: 10 * time.Second, Now: c.Now}})
	claimsFor := func(sub string) jwt.RegisteredClaims {
		cl := claims(sub, c.Now())
		cl.ExpiresAt = jwt.NewNumericDate(c.Now().Add(time.Minute))
		return cl
	}
	byFirst := credential(t, a, sign(t, jwt.SigningMethodES256, first, claimsFor("alice"), ""))
	bySecond := credential(t, a, sign(t, jwt.SigningMethodES256, second, claimsFor("bob"), ""))
	exp := claimsFor("x").ExpiresAt.Time
	if want := exp.Add(10 * time.Second); !byFirst.Expires.Equal(want) {
		t.Errorf("Expires %v, want exp + leeway %v", byFirst.Expires, want)
	}

	// Reloading a file of the second key only ends what the first signed.
	if err := os.WriteFile(path, pemPublic(t, &second.PublicKey), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if a.Valid(byFirst) {
		t.Error("a JWT whose key left the key file is still valid")
	}
	if !a.Valid(bySecond) {
		t.Error("a JWT whose key is still in the key file was ended")
	}

	c.advance(time.Minute + 9*time.Second) // past exp, within the leeway
	if !a.Valid(bySecond) {
		t.Error("a JWT within the clock skew allowed is not valid")
	}
	c.advance(time.Second)
	if a.Valid(bySecond) {
		t.Error("a JWT past exp and the leeway is still valid")
	}
}

// TestCredentialWithoutAuthentication: a server with no credential
// configured hands out credentials that never end.
func TestCredentialWithoutAuthentication(t *testing.T) {
	a := newAuth(t, Config{})
	cred, err := a.Authenticate(httptest.NewRequest("GET", "/msp", nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if !a.Valid(cred) || !cred.Expires.IsZero() {
		t.Errorf("an open server's credential: valid %v, expires %v", a.Valid(cred), cred.Expires)
	}
}

// TestZeroCredentialNeverEnds: the zero credential, which a connection
// that needs none (stdio) holds, stays valid on an authenticating server.
func TestZeroCredentialNeverEnds(t *testing.T) {
	a := newAuth(t, Config{TokensFile: writeFile(t, "tokens", []byte("alice "+aliceToken+"\n"))})
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if !a.Valid(Credential{}) {
		t.Error("the zero credential was ended")
	}
}
