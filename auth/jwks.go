package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxJWKSBytes bounds a fetched key set.
const maxJWKSBytes = 1 << 20

// errKeysUnavailable: the key set has never been fetched.
var errKeysUnavailable = errors.New("JWKS unavailable")

// jwks is a JSON Web Key Set fetched from a URL and cached. Keys are
// fetched again when they are older than maxAge, or when a token names a
// key id the set lacks (a signer's rotation), but never more often than
// minRefresh; a failed fetch keeps the keys already held.
type jwks struct {
	url        string
	client     *http.Client
	maxAge     time.Duration
	minRefresh time.Duration
	now        func() time.Time
	log        *slog.Logger

	fetchMu sync.Mutex // one fetch at a time
	state   atomic.Pointer[jwksState]
}

// jwksState is one snapshot of the cache.
type jwksState struct {
	keys    []verificationKey
	fetched time.Time // when keys were fetched (zero: never)
	tried   time.Time // when a fetch was last attempted
}

func newJWKS(ctx context.Context, cfg JWTConfig, log *slog.Logger) (*jwks, error) {
	if err := checkJWKSURL(cfg.JWKSURL); err != nil {
		return nil, err
	}
	j := &jwks{url: cfg.JWKSURL, client: cfg.HTTPClient, maxAge: cfg.JWKSMaxAge,
		minRefresh: cfg.JWKSMinRefresh, now: cfg.Now, log: log}
	if j.client == nil {
		j.client = &http.Client{Timeout: 10 * time.Second}
	}
	if j.maxAge <= 0 {
		j.maxAge = time.Hour
	}
	if j.minRefresh <= 0 {
		j.minRefresh = 30 * time.Second
	}
	j.state.Store(&jwksState{})
	// An identity provider that is down at startup must not keep the
	// server (and its other credentials) down: the set is fetched again
	// when a token needs it.
	j.refresh(ctx, j.state.Load())
	return j, nil
}

// checkJWKSURL accepts https, or http to a loopback host.
func checkJWKSURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("auth: JWKS URL: %w", err)
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && isLoopbackHost(u.Hostname()):
		return nil
	}
	return fmt.Errorf("auth: JWKS URL %q: want https (or http to a loopback host)", raw)
}

// isLoopbackHost reports whether host (no port) is "localhost" or a
// loopback IP address.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (j *jwks) reload() error { return nil } // fetched on its own schedule

func (j *jwks) held() []verificationKey { return j.state.Load().keys }

func (j *jwks) keys(ctx context.Context, kid string) ([]verificationKey, error) {
	st := j.state.Load()
	if j.now().Sub(st.fetched) > j.maxAge {
		st = j.refresh(ctx, st)
	}
	if len(st.keys) == 0 {
		return nil, errKeysUnavailable
	}
	keys := withKid(st.keys, kid)
	if len(keys) == 0 && kid != "" {
		keys = withKid(j.refresh(ctx, st).keys, kid)
	}
	return keys, nil
}

// withKid returns the keys a token naming kid may use: all of them when
// it names none.
func withKid(keys []verificationKey, kid string) []verificationKey {
	if kid == "" {
		return keys
	}
	var out []verificationKey
	for _, k := range keys {
		if k.kid == kid {
			out = append(out, k)
		}
	}
	return out
}

// refresh fetches the set unless another caller already replaced seen, or
// a fetch was attempted less than minRefresh ago; it returns the state
// then in force.
func (j *jwks) refresh(ctx context.Context, seen *jwksState) *jwksState {
	j.fetchMu.Lock()
	defer j.fetchMu.Unlock()
	cur := j.state.Load()
	now := j.now()
	if cur != seen || (!cur.tried.IsZero() && now.Sub(cur.tried) < j.minRefresh) {
		return cur
	}
	next := &jwksState{keys: cur.keys, fetched: cur.fetched, tried: now}
	keys, err := j.fetch(ctx)
	if err != nil {
		j.log.Warn("auth: JWKS fetch failed; keeping the keys held", "url", j.url, "keys", len(cur.keys), "err", err)
	} else {
		next.keys, next.fetched = keys, now
		j.log.Info("auth: JWKS fetched", "url", j.url, "keys", len(keys))
	}
	j.state.Store(next)
	return next
}

func (j *jwks) fetch(ctx context.Context) ([]verificationKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := j.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJWKSBytes)).Decode(&set); err != nil {
		return nil, fmt.Errorf("decoding the key set: %w", err)
	}
	var keys []verificationKey
	for i, k := range set.Keys {
		vk, err := k.verificationKey()
		if err != nil {
			// One odd key (an encryption key, a new type) must not
			// take down the rest.
			j.log.Debug("auth: JWKS key skipped", "index", i, "kid", k.Kid, "reason", err)
			continue
		}
		keys = append(keys, vk)
	}
	if len(keys) == 0 {
		return nil, errors.New("no usable signing key in the set")
	}
	return keys, nil
}

// jwk is a JSON Web Key (RFC 7517) of the public kinds this package uses.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// verificationKey converts a signing key; symmetric ("oct") and
// encryption keys are refused, so a key set can never turn a public value
// into an HMAC secret.
func (k jwk) verificationKey() (verificationKey, error) {
	if k.Use != "" && k.Use != "sig" {
		return verificationKey{}, fmt.Errorf("use %q", k.Use)
	}
	var key crypto.PublicKey
	var err error
	switch k.Kty {
	case "RSA":
		key, err = k.rsa()
	case "EC":
		key, err = k.ecdsa()
	case "OKP":
		key, err = k.ed25519()
	default:
		return verificationKey{}, fmt.Errorf("key type %q", k.Kty)
	}
	if err == nil {
		err = checkKey(key)
	}
	if err != nil {
		return verificationKey{}, err
	}
	return verificationKey{kid: k.Kid, alg: k.Alg, key: key}, nil
}

func (k jwk) rsa() (*rsa.PublicKey, error) {
	n, err := b64(k.N)
	if err != nil {
		return nil, fmt.Errorf("n: %w", err)
	}
	e, err := b64(k.E)
	if err != nil {
		return nil, fmt.Errorf("e: %w", err)
	}
	exp := new(big.Int).SetBytes(e)
	if len(e) == 0 || len(e) > 4 || exp.Int64() < 3 || exp.Int64()%2 == 0 {
		return nil, errors.New("bad exponent")
	}
	return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(exp.Int64())}, nil
}

var curves = map[string]elliptic.Curve{"P-256": elliptic.P256(), "P-384": elliptic.P384(), "P-521": elliptic.P521()}

func (k jwk) ecdsa() (*ecdsa.PublicKey, error) {
	curve, ok := curves[k.Crv]
	if !ok {
		return nil, fmt.Errorf("curve %q", k.Crv)
	}
	size := (curve.Params().BitSize + 7) / 8
	x, errX := b64(k.X)
	y, errY := b64(k.Y)
	if errX != nil || errY != nil || len(x) != size || len(y) != size {
		return nil, errors.New("bad coordinates")
	}
	// ParseUncompressedPublicKey checks that the point is on the curve.
	return ecdsa.ParseUncompressedPublicKey(curve, append(append([]byte{4}, x...), y...))
}

func (k jwk) ed25519() (ed25519.PublicKey, error) {
	if k.Crv != "Ed25519" {
		return nil, fmt.Errorf("curve %q", k.Crv)
	}
	x, err := b64(k.X)
	if err != nil || len(x) != ed25519.PublicKeySize {
		return nil, errors.New("bad public key")
	}
	return ed25519.PublicKey(x), nil
}

// b64 decodes base64url, with or without padding.
func b64(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}
