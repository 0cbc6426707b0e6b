package provider

import (
	"errors"
	"net/http"

	"mspd/modelretry"
)

// ErrRedirect is the failure of a request the provider answered with a
// redirect: mspd does not follow it, because one attempt must be one
// request the provider saw, and a base URL that redirects is a
// configuration error that retrying will not fix.
var ErrRedirect = errors.New("the provider answered with a redirect (check the base URL)")

// NoRedirects returns a copy of c (nil: a fresh client) that refuses
// redirects with ErrRedirect.
func NoRedirects(c *http.Client) *http.Client {
	var cp http.Client
	if c != nil {
		cp = *c
	}
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return ErrRedirect }
	return &cp
}

// RedirectError describes a refused redirect for the retry layer: an
// invalid request, not retried. It returns nil when err is not one.
func RedirectError(err error) *Error {
	if !errors.Is(err, ErrRedirect) {
		return nil
	}
	return &Error{Kind: modelretry.KindInvalidRequest, Message: ErrRedirect.Error(), Err: ErrRedirect}
}
