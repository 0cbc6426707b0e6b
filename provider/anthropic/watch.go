package anthropic

import (
	"net/http"

	"mspd/provider/httpwatch"
)

// watchKey carries a request's *httpwatch.Watch in its context to the
// transport.
type watchKey struct{}

// watchTransport sends a request through the Watch in its context;
// requests without one pass through untouched. It sits under the SDK (and
// any tracing it adds), so the Watch sees every byte of the wire, pings
// included.
type watchTransport struct {
	base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *watchTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	w, _ := req.Context().Value(watchKey{}).(*httpwatch.Watch)
	if w == nil {
		return t.base.RoundTrip(req)
	}
	return w.RoundTrip(req, t.base.RoundTrip)
}
