// Package auth turns an HTTP request into a principal or a refusal.
//
// A principal is the party a connection acts for; the session layer scopes
// every session to the principal that started it. The empty principal is
// the one user of a server without per-user authentication: no credential
// at all, or the single shared token. Per-user principals come from a
// tokens file ("principal token" lines, re-read on Reload) and from JWT
// bearer tokens (the `sub` claim), verified against a PEM key file or a
// JWKS URL. Several mechanisms may be configured together.
//
// A client presents its token as "Authorization: Bearer <token>", as a
// WebSocket subprotocol "msp.bearer.<token>" (browsers cannot set headers
// on a WebSocket handshake; offer "msp" alongside it, which the server
// echoes), or as ?access_token=<token>. Refusals carry a reason fit for
// logs: never the token.
package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
)

// Subprotocol is the neutral WebSocket subprotocol a server echoes when the
// client offers it, so that a browser that also offered a token-bearing
// subprotocol accepts the handshake.
const Subprotocol = "msp"

// BearerSubprotocolPrefix prefixes a token offered as a WebSocket
// subprotocol: "msp.bearer.<token>". The token must consist of characters
// valid in an HTTP token (JWTs and hex or base64url secrets do).
const BearerSubprotocolPrefix = "msp.bearer."

// Config configures an Authenticator. The zero Config authenticates
// nothing: every request is the empty principal.
type Config struct {
	// Token is the one shared token of a single-user server; it
	// authenticates as the empty principal.
	Token string
	// TokensFile names a file of "principal token" lines; # starts a
	// comment line and blank lines are ignored.
	TokensFile string
	// JWT accepts signed JWT bearer tokens when its KeyFile or JWKSURL is
	// set.
	JWT JWTConfig
	// Logger receives reload outcomes and key-set fetches (default
	// slog.Default()).
	Logger *slog.Logger
}

// Refusal is why a request was not authenticated. Its reason is a fixed
// phrase, never the token or any part of it, so it can be logged.
type Refusal struct {
	Reason string
}

func (r *Refusal) Error() string { return "auth: " + r.Reason }

func refuse(reason string) error { return &Refusal{Reason: reason} }

// Authenticator authenticates requests. It is safe for concurrent use.
type Authenticator struct {
	shared     string // the single-user token, or ""
	tokensFile string
	tokens     atomic.Pointer[tokenSet]
	jwt        *jwtVerifier // nil: JWT off
	log        *slog.Logger
}

// New builds an Authenticator, reading the tokens file and the JWT keys
// (a JWKS that cannot be fetched yet is only logged: it is fetched again
// when a token needs it).
func New(ctx context.Context, cfg Config) (*Authenticator, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Authenticator{shared: cfg.Token, tokensFile: cfg.TokensFile, log: cfg.Logger}
	set, err := a.loadTokens()
	if err != nil {
		return nil, err
	}
	a.tokens.Store(set)
	switch {
	case cfg.JWT.enabled():
		if a.jwt, err = newJWTVerifier(ctx, cfg.JWT, cfg.Logger); err != nil {
			return nil, err
		}
	case cfg.JWT.Issuer != "" || cfg.JWT.Audience != "":
		return nil, errors.New("auth: a JWT issuer or audience without keys: give a key file or a JWKS URL")
	}
	return a, nil
}

// Enabled reports whether any credential is configured. When it is not,
// every request is the empty principal and the server must guard itself
// otherwise (loopback only, Host checks).
func (a *Authenticator) Enabled() bool {
	return a.shared != "" || a.tokensFile != "" || a.jwt != nil
}

// PerUser reports whether credentials name principals of their own (a
// tokens file, JWT): the server then serves several users, and hands none
// of them its filesystem paths.
func (a *Authenticator) PerUser() bool { return a.tokensFile != "" || a.jwt != nil }

// Authenticate returns the credential r presents, naming the principal
// it acts for, or a *Refusal.
func (a *Authenticator) Authenticate(r *http.Request) (Credential, error) {
	if !a.Enabled() {
		return Credential{}, nil
	}
	tok := RequestToken(r)
	if tok == "" {
		return Credential{}, refuse("no token")
	}
	d := sha256.Sum256([]byte(tok))
	if p, ok := a.tokens.Load().lookup(d); ok {
		return Credential{Principal: p, kind: kindToken, digest: d}, nil
	}
	if a.jwt != nil && strings.Count(tok, ".") == 2 {
		return a.jwt.verify(r.Context(), tok)
	}
	return Credential{}, refuse("unknown token")
}

// RequestToken returns the token r presents: the bearer Authorization
// header, else a "msp.bearer.<token>" subprotocol, else ?access_token=.
func RequestToken(r *http.Request) string {
	if h, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(h)
	}
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(v, ",") {
			if tok, ok := strings.CutPrefix(strings.TrimSpace(p), BearerSubprotocolPrefix); ok && tok != "" {
				return tok
			}
		}
	}
	return r.URL.Query().Get("access_token")
}

// Reload re-reads the tokens file and the JWT key file. A file that does
// not load leaves the previous set in force; the outcome is logged
// (without tokens) and the error returned. Credentials already handed
// out are not touched: their holders ask Valid.
func (a *Authenticator) Reload() error {
	var errs []error
	if a.tokensFile != "" {
		set, err := a.loadTokens()
		if err != nil {
			a.log.Warn("auth: tokens file not reloaded; the previous tokens stay in force", "file", a.tokensFile, "err", err)
			errs = append(errs, err)
		} else {
			a.tokens.Store(set)
			a.log.Info("auth: tokens file reloaded", "file", a.tokensFile, "tokens", len(set.entries), "principals", set.principals())
		}
	}
	if a.jwt != nil {
		if err := a.jwt.reload(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// loadTokens builds the token set: the shared token and the file's.
func (a *Authenticator) loadTokens() (*tokenSet, error) {
	set := &tokenSet{}
	if a.tokensFile != "" {
		var err error
		if set, err = readTokensFile(a.tokensFile); err != nil {
			return nil, err
		}
	}
	if a.shared != "" {
		if err := set.add("", a.shared); err != nil {
			return nil, fmt.Errorf("auth: the shared token: %w", err)
		}
	}
	return set, nil
}
