package auth

import (
	"crypto"
	"crypto/sha256"
	"time"
)

// Credential is what a request authenticated with: the principal it acts
// for, until when, and enough for the Authenticator to tell later, after
// a reload, whether it still holds (Valid). It keeps no token: a token's
// SHA-256 digest, or the public key that verified a JWT.
type Credential struct {
	// Principal is the party the request acts for ("": the single user).
	Principal string
	// Expires is when the credential stops being accepted: a JWT's exp
	// plus the clock skew allowed (JWTConfig.Leeway). Zero: it does not
	// expire by itself.
	Expires time.Time

	kind   credentialKind
	digest [sha256.Size]byte // kindToken: the token's digest
	key    crypto.PublicKey  // kindJWT: the key that verified it
}

type credentialKind uint8

const (
	kindOpen  credentialKind = iota // none needed: no authentication configured, or stdio
	kindToken                       // the shared token or a tokens-file token
	kindJWT
)

// Valid reports whether c would still be accepted now: its token is still
// in the tokens file (for the same principal), or its JWT has not expired
// and the key that signed it is still held. The zero Credential, which a
// server without authentication hands out and which a connection that
// needs none (stdio) holds, never ends. A connection holds its Credential
// and asks again after every Reload.
func (a *Authenticator) Valid(c Credential) bool {
	switch c.kind {
	case kindToken:
		p, ok := a.tokens.Load().lookup(c.digest)
		return ok && p == c.Principal
	case kindJWT:
		return a.jwt != nil && a.jwt.holds(c)
	}
	return true
}

// publicKey is what the standard library's public keys implement.
type publicKey interface {
	Equal(crypto.PublicKey) bool
}

// holdsKey reports whether key is among keys.
func holdsKey(keys []verificationKey, key crypto.PublicKey) bool {
	for _, k := range keys {
		if pk, ok := k.key.(publicKey); ok && pk.Equal(key) {
			return true
		}
	}
	return false
}
