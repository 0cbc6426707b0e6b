package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// JWTConfig configures JWT bearer tokens. Exactly one of KeyFile and
// JWKSURL names the keys; Issuer and Audience are then required.
type JWTConfig struct {
	// KeyFile is a PEM file of public keys (PUBLIC KEY, RSA PUBLIC KEY or
	// CERTIFICATE blocks; RSA of 2048 bits or more, ECDSA P-256/384/521,
	// Ed25519). Reload re-reads it.
	KeyFile string
	// JWKSURL is a JSON Web Key Set, fetched and cached (https, or http to
	// a loopback host).
	JWKSURL string
	// Issuer must equal the token's iss.
	Issuer string
	// Audience must be among the token's aud.
	Audience string
	// Leeway tolerates clock skew on exp and nbf (default 30 s).
	Leeway time.Duration
	// HTTPClient fetches the JWKS (default: a client with a 10 s timeout).
	HTTPClient *http.Client
	// JWKSMaxAge is how long fetched keys are used before they are fetched
	// again (default 1 h).
	JWKSMaxAge time.Duration
	// JWKSMinRefresh is the least time between two fetches, which bounds
	// the refetches that tokens naming unknown key ids cause (default 30 s).
	JWKSMinRefresh time.Duration
	// Now replaces the clock (tests).
	Now func() time.Time
}

func (c JWTConfig) enabled() bool { return c.KeyFile != "" || c.JWKSURL != "" }

// algorithms lists the accepted signature algorithms: asymmetric only, so
// a public key can never serve as an HMAC secret, and never "none".
var algorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// errUnknownKey: no configured key fits the token's kid and algorithm.
var errUnknownKey = errors.New("no matching key")

// verificationKey is one public key a token may be signed with.
type verificationKey struct {
	kid string // "" when the source names none
	alg string // the algorithm the key is restricted to, or ""
	key crypto.PublicKey
}

// accepts reports whether a token signed with alg may be checked with k.
func (k verificationKey) accepts(alg string) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	switch key := k.key.(type) {
	case *rsa.PublicKey:
		switch alg {
		case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
			return true
		}
	case *ecdsa.PublicKey:
		return alg == ecdsaAlg[key.Curve]
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

var ecdsaAlg = map[elliptic.Curve]string{elliptic.P256(): "ES256", elliptic.P384(): "ES384", elliptic.P521(): "ES512"}

// checkKey refuses key types and sizes this package does not verify with.
func checkKey(key crypto.PublicKey) error {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return fmt.Errorf("RSA key of %d bits (want 2048 or more)", k.N.BitLen())
		}
	case *ecdsa.PublicKey:
		if ecdsaAlg[k.Curve] == "" {
			return errors.New("ECDSA key on an unsupported curve")
		}
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return errors.New("Ed25519 key of the wrong size")
		}
	default:
		return fmt.Errorf("unsupported key type %T", key)
	}
	return nil
}

// keySource yields the keys a token with key id kid may be signed with.
type keySource interface {
	keys(ctx context.Context, kid string) ([]verificationKey, error)
	// held are the keys held now, fetching none.
	held() []verificationKey
	reload() error
}

// jwtVerifier checks JWT bearer tokens.
type jwtVerifier struct {
	parser *jwt.Parser
	src    keySource
	now    func() time.Time
	leeway time.Duration
}

func newJWTVerifier(ctx context.Context, cfg JWTConfig, log *slog.Logger) (*jwtVerifier, error) {
	switch {
	case cfg.KeyFile != "" && cfg.JWKSURL != "":
		return nil, errors.New("auth: JWT keys: give a key file or a JWKS URL, not both")
	case cfg.Issuer == "":
		return nil, errors.New("auth: JWT needs the issuer to check (--auth-jwt-issuer)")
	case cfg.Audience == "":
		return nil, errors.New("auth: JWT needs the audience to check (--auth-jwt-audience)")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Leeway == 0 {
		cfg.Leeway = 30 * time.Second
	}
	v := &jwtVerifier{now: cfg.Now, leeway: cfg.Leeway, parser: jwt.NewParser(
		jwt.WithValidMethods(algorithms),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithAudience(cfg.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(cfg.Leeway),
		jwt.WithTimeFunc(cfg.Now),
		jwt.WithStrictDecoding(),
	)}
	var err error
	if cfg.KeyFile != "" {
		v.src, err = newFileKeys(cfg.KeyFile, log)
	} else {
		v.src, err = newJWKS(ctx, cfg, log)
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

// verify checks tok's signature and claims and returns its credential:
// the subject, until exp (plus the leeway), and the key that verified it.
func (v *jwtVerifier) verify(ctx context.Context, tok string) (Credential, error) {
	var claims jwt.RegisteredClaims
	var set jwt.VerificationKeySet
	parsed, err := v.parser.ParseWithClaims(tok, &claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		keys, err := v.src.keys(ctx, kid)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			if k.accepts(t.Method.Alg()) {
				set.Keys = append(set.Keys, k.key)
			}
		}
		if len(set.Keys) == 0 {
			return nil, errUnknownKey
		}
		return set, nil
	})
	if err != nil {
		return Credential{}, refuse(jwtReason(err))
	}
	if claims.Subject == "" {
		return Credential{}, refuse("JWT without sub")
	}
	return Credential{Principal: claims.Subject, Expires: claims.ExpiresAt.Add(v.leeway), kind: kindJWT,
		key: signingKey(parsed, tok, set.Keys)}, nil
}

// signingKey is the one of keys that verified t (whose text is tok): the
// library tries each without saying which; with several (a signer
// rotating), the signature is checked against each again.
func signingKey(t *jwt.Token, tok string, keys []jwt.VerificationKey) crypto.PublicKey {
	if len(keys) == 1 {
		return keys[0]
	}
	signed := tok[:strings.LastIndexByte(tok, '.')]
	for _, k := range keys {
		if t.Method.Verify(signed, t.Signature, k) == nil {
			return k
		}
	}
	return nil
}

// holds reports whether a credential of this verifier is still accepted:
// not expired, and its key still held (a reloaded key file may have
// dropped it).
func (v *jwtVerifier) holds(c Credential) bool {
	return v.now().Before(c.Expires) && c.key != nil && holdsKey(v.src.held(), c.key)
}

func (v *jwtVerifier) reload() error { return v.src.reload() }

// jwtReason names why a JWT was refused in fixed words: the library's
// messages may quote decoded parts of the token.
func jwtReason(err error) string {
	for _, r := range []struct {
		err    error
		reason string
	}{
		{jwt.ErrTokenMalformed, "malformed JWT"},
		{jwt.ErrTokenExpired, "JWT expired"},
		{jwt.ErrTokenNotValidYet, "JWT not valid yet"},
		{jwt.ErrTokenInvalidIssuer, "JWT of the wrong issuer"},
		{jwt.ErrTokenInvalidAudience, "JWT for the wrong audience"},
		{jwt.ErrTokenRequiredClaimMissing, "JWT without a required claim"},
		{errKeysUnavailable, "JWT signing keys unavailable"},
		{errUnknownKey, "JWT signed by an unknown key"},
		{jwt.ErrTokenSignatureInvalid, "JWT with a bad signature or an algorithm not accepted"},
		{jwt.ErrTokenUnverifiable, "unverifiable JWT"},
	} {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return "invalid JWT"
}
