package session

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"

	"mspd/schema/msp"
	"mspd/store"
)

// A principal is the authenticated party a request runs for: a user of a
// multi-user server. Sessions belong to the principal that started them;
// every other principal is told they do not exist. The empty principal is
// the one user of a server without per-user authentication.

type principalKey struct{}

// WithPrincipal returns a context carrying the principal requests made
// under it run for.
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// PrincipalFrom returns the principal ctx carries ("" when none).
func PrincipalFrom(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

type clientNameKey struct{}

// WithClientName returns a context carrying the clientInfo.name of the
// connection requests made under it come from: the records of the
// commands that name their requester (session/approvalModeChanged) carry
// it.
func WithClientName(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, clientNameKey{}, name)
}

// ClientNameFrom returns the client name ctx carries ("" when none).
func ClientNameFrom(ctx context.Context) string {
	n, _ := ctx.Value(clientNameKey{}).(string)
	return n
}

// sessionKey is where principal's session id is kept in the store and
// leased on a cluster: under the id itself for the empty principal, else
// under the principal (in hex) and "_" and the id, as its commandIds are
// scoped (ledgerKey). So alice's session X and bob's are two sessions,
// and neither principal can learn that the other's exists. The key of a
// UUID stays a plain subject token and lease key ([0-9a-f_-]), and since
// hex has no "_" no two principals' keys meet. The empty principal keeps
// the keys a server had before sessions were scoped.
func sessionKey(principal, id string) string {
	if principal == "" {
		return id
	}
	return hex.EncodeToString([]byte(principal)) + "_" + id
}

// wireID is the sessionId of owner's session kept under key: the key less
// its owner's scope, or the key itself for a session kept unscoped (the
// empty principal's, or one started before sessions were scoped).
func wireID(owner, key string) string {
	if owner == "" {
		return key
	}
	if id, ok := strings.CutPrefix(key, hex.EncodeToString([]byte(owner))+"_"); ok {
		return id
	}
	return key
}

// keyOf resolves where the caller's session id is kept: its scoped key,
// unless the store holds it unscoped and as the caller's (a session
// started before sessions were scoped, which stays where it was). The
// answer is the scoped key for a session that does not exist, and for
// another principal's: what follows cannot tell the two apart.
func (m *Manager) keyOf(ctx context.Context, id string) (string, error) {
	principal := PrincipalFrom(ctx)
	key := sessionKey(principal, id)
	if key == id {
		return key, nil
	}
	m.mu.Lock()
	scoped, resident := m.sessions[key], m.sessions[id]
	m.mu.Unlock()
	if scoped != nil {
		return key, nil
	}
	if resident != nil {
		select {
		case <-resident.done:
			if resident.s != nil && resident.s.owner == principal {
				return id, nil
			}
		default:
		}
	}
	if _, err := m.store.Session(ctx, key); err == nil {
		return key, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return "", msp.ErrInternal("loading session: %v", err)
	}
	if row, err := m.store.Session(ctx, id); err == nil && row.Owner == principal {
		return id, nil
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", msp.ErrInternal("loading session: %v", err)
	}
	return key, nil
}
