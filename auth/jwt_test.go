package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwtAuth is an Authenticator taking JWTs checked against keyFile.
func jwtAuth(t *testing.T, keyFile string, c *clock) *Authenticator {
	t.Helper()
	return newAuth(t, Config{JWT: JWTConfig{KeyFile: keyFile, Issuer: testIssuer, Audience: testAudience, Now: c.Now}})
}

func TestJWTKeyFile(t *testing.T) {
	c := newClock()
	ec, ed, other := newECKey(t), newEdKey(t), newECKey(t)
	pubPEM := pemPublic(t, &ec.PublicKey, ed.Public(), &rsaKey().PublicKey)
	a := jwtAuth(t, writeFile(t, "keys.pem", pubPEM), c)
	now := c.Now()
	good := claims("alice", now)

	wantPrincipal(t, a, bearer(sign(t, jwt.SigningMethodES256, ec, good, "")), "alice")
	wantPrincipal(t, a, bearer(sign(t, jwt.SigningMethodEdDSA, ed, claims("bob", now), "")), "bob")
	wantPrincipal(t, a, bearer(sign(t, jwt.SigningMethodRS256, rsaKey(), good, "any-kid")), "alice")
	wantPrincipal(t, a, bearer(sign(t, jwt.SigningMethodPS384, rsaKey(), good, "")), "alice")

	expired := good
	expired.ExpiresAt = jwt.NewNumericDate(now.Add(-time.Hour))
	notYet := good
	notYet.NotBefore = jwt.NewNumericDate(now.Add(time.Hour))
	wrongAud := good
	wrongAud.Audience = jwt.ClaimStrings{"someone-else"}
	wrongIss := good
	wrongIss.Issuer = "https://evil.test"
	noSub := good
	noSub.Subject = ""
	noExp := good
	noExp.ExpiresAt = nil
	for name, tc := range map[string]struct {
		tok, reason string
	}{
		"expired":        {sign(t, jwt.SigningMethodES256, ec, expired, ""), "JWT expired"},
		"not yet valid":  {sign(t, jwt.SigningMethodES256, ec, notYet, ""), "JWT not valid yet"},
		"wrong audience": {sign(t, jwt.SigningMethodES256, ec, wrongAud, ""), "JWT for the wrong audience"},
		"wrong issuer":   {sign(t, jwt.SigningMethodES256, ec, wrongIss, ""), "JWT of the wrong issuer"},
		"no sub":         {sign(t, jwt.SigningMethodES256, ec, noSub, ""), "JWT without sub"},
		"no exp":         {sign(t, jwt.SigningMethodES256, ec, noExp, ""), "JWT without a required claim"},
		"wrong key":      {sign(t, jwt.SigningMethodES256, other, good, ""), "JWT with a bad signature or an algorithm not accepted"},
		"alg none":       {sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good, ""), "JWT with a bad signature or an algorithm not accepted"},
		// The classic confusion: the public key's bytes as an HMAC secret.
		"HS256 with the public key": {sign(t, jwt.SigningMethodHS256, pubPEM, good, ""), "JWT with a bad signature or an algorithm not accepted"},
		// ES384 names a curve the file has no key on.
		"alg not fitting the key": {esWithAlg(t, ec, good), "JWT signed by an unknown key"},
		"malformed":               {"a.b.c", "malformed JWT"},
	} {
		t.Run(name, func(t *testing.T) { wantRefusal(t, a, bearer(tc.tok), tc.reason) })
	}
}

// esWithAlg signs with ec but labels the token ES384.
func esWithAlg(t *testing.T, ec any, c jwt.Claims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, c)
	tok.Header["alg"] = "ES384"
	s, err := tok.SignedString(ec)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestJWTLeeway: a token a few seconds past exp still passes (clock skew).
func TestJWTLeeway(t *testing.T) {
	c := newClock()
	ec := newECKey(t)
	a := jwtAuth(t, writeFile(t, "k.pem", pemPublic(t, &ec.PublicKey)), c)
	cl := claims("alice", c.Now())
	cl.ExpiresAt = jwt.NewNumericDate(c.Now().Add(-10 * time.Second))
	wantPrincipal(t, a, bearer(sign(t, jwt.SigningMethodES256, ec, cl, "")), "alice")
}

func TestJWTConfigRefused(t *testing.T) {
	ec := newECKey(t)
	keys := writeFile(t, "k.pem", pemPublic(t, &ec.PublicKey))
	for name, tc := range map[string]struct {
		cfg  JWTConfig
		want string
	}{
		"no issuer":     {JWTConfig{KeyFile: keys, Audience: testAudience}, "issuer"},
		"no keys":       {JWTConfig{Issuer: testIssuer, Audience: testAudience}, "without keys"},
		"no audience":   {JWTConfig{KeyFile: keys, Issuer: testIssuer}, "audience"},
		"both sources":  {JWTConfig{KeyFile: keys, JWKSURL: "https://x.test/jwks", Issuer: testIssuer, Audience: testAudience}, "not both"},
		"private key":   {JWTConfig{KeyFile: writeFile(t, "p.pem", []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")), Issuer: testIssuer, Audience: testAudience}, "a PRIVATE KEY block"},
		"no PEM":        {JWTConfig{KeyFile: writeFile(t, "e.pem", []byte("secret")), Issuer: testIssuer, Audience: testAudience}, "no PEM public key"},
		"plain http":    {JWTConfig{JWKSURL: "http://idp.example/jwks", Issuer: testIssuer, Audience: testAudience}, "want https"},
		"missing file":  {JWTConfig{KeyFile: "/no/such.pem", Issuer: testIssuer, Audience: testAudience}, "no such file"},
		"small RSA key": {JWTConfig{KeyFile: writeFile(t, "s.pem", smallRSA(t)), Issuer: testIssuer, Audience: testAudience}, "RSA key of 1024 bits"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(context.Background(), Config{JWT: tc.cfg})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// smallRSA is a 1024-bit RSA public key in PEM.
func smallRSA(t *testing.T) []byte {
	k, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	return pemPublic(t, &k.PublicKey)
}

// TestJWTKeyFileReload: Reload swaps in a rotated key file and keeps the
// old keys when the new file is bad.
func TestJWTKeyFileReload(t *testing.T) {
	c := newClock()
	oldKey, newKey := newECKey(t), newECKey(t)
	path := writeFile(t, "k.pem", pemPublic(t, &oldKey.PublicKey))
	a := jwtAuth(t, path, c)
	good := claims("alice", c.Now())
	wantPrincipal(t, a, bearer(sign(t, jwt.SigningMethodES256, oldKey, good, "")), "alice")

	if err := os.WriteFile(path, pemPublic(t, &newKey.PublicKey), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	wantPrincipal(t, a, bearer(sign(t, jwt.SigningMethodES256, newKey, good, "")), "alice")
	wantRefusal(t, a, bearer(sign(t, jwt.SigningMethodES256, oldKey, good, "")), "JWT with a bad signature or an algorithm not accepted")

	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil {
		t.Fatal("a bad key file was reloaded")
	}
	wantPrincipal(t, a, bearer(sign(t, jwt.SigningMethodES256, newKey, good, "")), "alice")
}

// TestStaticAndJWTTogether: a tokens file for service accounts and JWTs
// for users on one server.
func TestStaticAndJWTTogether(t *testing.T) {
	c := newClock()
	ec := newECKey(t)
	a := newAuth(t, Config{
		TokensFile: writeFile(t, "tokens", []byte("ci "+aliceToken+"\n")),
		JWT:        JWTConfig{KeyFile: writeFile(t, "k.pem", pemPublic(t, &ec.PublicKey)), Issuer: testIssuer, Audience: testAudience, Now: c.Now},
	})
	wantPrincipal(t, a, bearer(aliceToken), "ci")
	wantPrincipal(t, a, bearer(sign(t, jwt.SigningMethodES256, ec, claims("user-1", c.Now()), "")), "user-1")
	wantRefusal(t, a, bearer("not-a-jwt"), "unknown token")
}
