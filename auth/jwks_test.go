package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"mspd/internal/testlog"
)

// idp serves a JSON Web Key Set that a test can rotate, counting fetches.
type idp struct {
	srv *httptest.Server

	mu      sync.Mutex
	keys    []map[string]string
	status  int
	fetches int
}

func newIDP(t *testing.T) *idp {
	p := &idp{status: http.StatusOK}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.fetches++
		if p.status != http.StatusOK {
			http.Error(w, "down", p.status)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"keys": p.keys})
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *idp) serve(status int, keys ...map[string]string) {
	p.mu.Lock()
	p.status, p.keys = status, keys
	p.mu.Unlock()
}

func (p *idp) fetched() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fetches
}

func enc(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// jwkOf renders a public key as a JWK.
func jwkOf(t *testing.T, kid string, key any) map[string]string {
	t.Helper()
	switch k := key.(type) {
	case *rsa.PublicKey:
		return map[string]string{"kty": "RSA", "kid": kid, "n": enc(k.N.Bytes()), "e": enc(big.NewInt(int64(k.E)).Bytes())}
	case *ecdsa.PublicKey:
		b, err := k.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{"kty": "EC", "kid": kid, "crv": "P-256", "x": enc(b[1:33]), "y": enc(b[33:])}
	case ed25519.PublicKey:
		return map[string]string{"kty": "OKP", "kid": kid, "crv": "Ed25519", "x": enc(k)}
	}
	t.Fatalf("no JWK for %T", key)
	return nil
}

func jwksAuth(t *testing.T, p *idp, c *clock, logs *testlog.Buffer) *Authenticator {
	t.Helper()
	return newAuth(t, Config{Logger: logs.TextLogger(), JWT: JWTConfig{
		JWKSURL: p.srv.URL + "/jwks", Issuer: testIssuer, Audience: testAudience, Now: c.Now,
		JWKSMinRefresh: time.Minute, JWKSMaxAge: time.Hour,
	}})
}

// TestJWKSRotation: keys come from the set by kid; a token signed by a
// key the cache lacks refetches the set (at most once a minute), so a
// signer's rotation is picked up and an unknown kid cannot hammer the IdP.
func TestJWKSRotation(t *testing.T) {
	c, p, logs := newClock(), newIDP(t), &testlog.Buffer{}
	ec1, ec2, ed := newECKey(t), newECKey(t), newEdKey(t)
	p.serve(http.StatusOK, jwkOf(t, "k1", &ec1.PublicKey), jwkOf(t, "rsa", &rsaKey().PublicKey), jwkOf(t, "ed", ed.Public()))
	a := jwksAuth(t, p, c, logs)
	if p.fetched() != 1 {
		t.Fatalf("%d fetches at start, want 1", p.fetched())
	}
	good := claims("alice", c.Now())
	wantPrincipal(t, a, bearer(sign(t, jwt.SigningMethodES256, ec1, good, "k1")), "alice")
	wantPrincipal(t, a, bearer(sign(t, jwt.SigningMethodRS512, rsaKey(), good, "rsa")), "alice")
	wantPrincipal(t, a, bearer(sign(t, jwt.SigningMethodEdDSA, ed, good, "ed")), "alice")
	wantPrincipal(t, a, bearer(sign(t, jwt.SigningMethodES256, ec1, good, "")), "alice") // no kid: any key
	// A kid naming a key of another type is no way around the key type.
	wantRefusal(t, a, bearer(sign(t, jwt.SigningMethodES256, ec1, good, "rsa")), "JWT signed by an unknown key")

	// The signer rotates to k2; a k2 token comes before the next refresh.
	p.serve(http.StatusOK, jwkOf(t, "k2", &ec2.PublicKey))
	c.advance(2 * time.Minute)
	tok2 := sign(t, jwt.SigningMethodES256, ec2, claims("alice", c.Now()), "k2")
	wantPrincipal(t, a, bearer(tok2), "alice")
	if p.fetched() != 2 {
		t.Fatalf("%d fetches after the rotation, want 2", p.fetched())
	}
	// Unknown kids within the minute do not refetch.
	for range 3 {
		wantRefusal(t, a, bearer(sign(t, jwt.SigningMethodES256, ec1, claims("alice", c.Now()), "k9")), "JWT signed by an unknown key")
	}
	if p.fetched() != 2 {
		t.Fatalf("%d fetches after unknown kids, want still 2", p.fetched())
	}
	// The retired key is gone.
	wantRefusal(t, a, bearer(sign(t, jwt.SigningMethodES256, ec1, claims("alice", c.Now()), "k1")), "JWT signed by an unknown key")

	// Past the max age the set is fetched again; a failed fetch keeps the
	// keys held.
	p.serve(http.StatusInternalServerError)
	c.advance(2 * time.Hour)
	tok2 = sign(t, jwt.SigningMethodES256, ec2, claims("alice", c.Now()), "k2")
	wantPrincipal(t, a, bearer(tok2), "alice")
	if p.fetched() != 3 || !strings.Contains(logs.String(), "JWKS fetch failed; keeping the keys held") {
		t.Fatalf("%d fetches, log:\n%s", p.fetched(), logs.String())
	}
}

// TestJWKSUnavailableAtStart: an IdP down at startup does not stop the
// server; tokens are refused until the set can be fetched.
func TestJWKSUnavailableAtStart(t *testing.T) {
	c, p, logs := newClock(), newIDP(t), &testlog.Buffer{}
	p.serve(http.StatusServiceUnavailable)
	a := jwksAuth(t, p, c, logs)
	ec := newECKey(t)
	wantRefusal(t, a, bearer(sign(t, jwt.SigningMethodES256, ec, claims("alice", c.Now()), "k1")), "JWT signing keys unavailable")

	p.serve(http.StatusOK, jwkOf(t, "k1", &ec.PublicKey))
	c.advance(time.Minute)
	wantPrincipal(t, a, bearer(sign(t, jwt.SigningMethodES256, ec, claims("alice", c.Now()), "k1")), "alice")
}

// TestJWKSOnlyAsymmetric: symmetric ("oct") and encryption keys in a set
// are skipped, and HS256 or none tokens are refused whatever the kid.
func TestJWKSOnlyAsymmetric(t *testing.T) {
	c, p, logs := newClock(), newIDP(t), &testlog.Buffer{}
	ec := newECKey(t)
	secret := []byte("0123456789abcdef0123456789abcdef")
	encKey := jwkOf(t, "enc", &ec.PublicKey)
	encKey["use"] = "enc"
	p.serve(http.StatusOK, jwkOf(t, "k1", &ec.PublicKey), map[string]string{"kty": "oct", "kid": "h", "k": base64.RawURLEncoding.EncodeToString(secret)}, encKey)
	a := jwksAuth(t, p, c, logs)
	good := claims("alice", c.Now())
	wantRefusal(t, a, bearer(sign(t, jwt.SigningMethodHS256, secret, good, "h")), "JWT with a bad signature or an algorithm not accepted")
	wantRefusal(t, a, bearer(sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good, "k1")), "JWT with a bad signature or an algorithm not accepted")
	wantRefusal(t, a, bearer(sign(t, jwt.SigningMethodES256, ec, good, "enc")), "JWT signed by an unknown key")
	wantPrincipal(t, a, bearer(sign(t, jwt.SigningMethodES256, ec, good, "k1")), "alice")
}

// TestJWKSBadKeys: malformed keys are skipped, not fatal to the set.
func TestJWKSBadKeys(t *testing.T) {
	ec := newECKey(t)
	good := jwkOf(t, "k1", &ec.PublicKey)
	offCurve := jwkOf(t, "off", &ec.PublicKey)
	offCurve["y"] = enc(make([]byte, 32))
	for name, k := range map[string]map[string]string{
		"off the curve":  offCurve,
		"unknown kty":    {"kty": "XYZ"},
		"unknown curve":  {"kty": "EC", "crv": "P-192", "x": "AA", "y": "AA"},
		"short ed25519":  {"kty": "OKP", "crv": "Ed25519", "x": "AAAA"},
		"even exponent":  {"kty": "RSA", "n": enc(rsaKey().N.Bytes()), "e": enc([]byte{2})},
		"bad base64 n":   {"kty": "RSA", "n": "!!", "e": "AQAB"},
		"X25519 key":     {"kty": "OKP", "crv": "X25519", "x": enc(make([]byte, 32))},
		"short EC coord": {"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"},
	} {
		raw, _ := json.Marshal(k)
		var j jwk
		json.Unmarshal(raw, &j)
		if _, err := j.verificationKey(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	raw, _ := json.Marshal(good)
	var j jwk
	json.Unmarshal(raw, &j)
	if _, err := j.verificationKey(); err != nil {
		t.Errorf("a good key: %v", err)
	}
	if err := checkJWKSURL("http://127.0.0.1:9/jwks"); err != nil {
		t.Errorf("http to loopback refused: %v", err)
	}
	if _, err := New(context.Background(), Config{JWT: JWTConfig{JWKSURL: "http://idp.example/jwks", Issuer: testIssuer, Audience: testAudience}}); err == nil {
		t.Error("plain http to a remote IdP accepted")
	}
}
