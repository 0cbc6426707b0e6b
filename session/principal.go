package session

import "context"

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
