package provider

import (
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Endpoint is what configures a model provider reached over HTTP: the
// fields every such provider's Config embeds. Each provider's Config says
// what its own defaults are.
type Endpoint struct {
	// APIKey authenticates every request. It never appears in errors or
	// messages.
	APIKey string
	// BaseURL is the API root; "" means the provider's own. It must be an
	// absolute http(s) URL, and is never echoed (it may carry
	// credentials). The SDKs' environment variables (OPENAI_BASE_URL,
	// ANTHROPIC_BASE_URL, their API keys' ...) are ignored: mspd's
	// configuration is explicit.
	BaseURL string
	// Model is the model id used when a Request names none. Required.
	Model string
	// System is the OpenTelemetry gen_ai.provider.name reported in retry
	// notices; "" means the provider's default.
	System string
	// IdleTimeout fails a request, as Kind "timeout", when the server sends
	// nothing for this long, whether before the response headers or
	// between reads of the body (package httpwatch). Only time spent
	// waiting on the server counts, not time spent in onText. 0 means the
	// provider's default; a negative value turns the check off.
	IdleTimeout time.Duration
	// HTTPClient sends the requests; nil means Pool.Client(): a transport
	// of the provider's own. Its Timeout, if any, bounds whole streams, so
	// leave it 0 and rely on IdleTimeout.
	HTTPClient *http.Client
	// Pool sizes the connections kept to the API when HTTPClient is nil.
	Pool Pool
}

// Resolve checks e for the provider named name (the prefix of its
// errors) and fills in that provider's default system and idle timeout.
func (e *Endpoint) Resolve(name, system string, idle time.Duration) error {
	if e.Model == "" {
		return fmt.Errorf("%s: Config.Model is required", name)
	}
	if e.BaseURL != "" {
		// Checked now, so a typo fails at start-up rather than as a
		// connection error on every attempt.
		if u, err := url.Parse(e.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s: Config.BaseURL must be an absolute http(s) URL", name)
		}
	}
	if e.System == "" {
		e.System = system
	}
	if e.IdleTimeout == 0 {
		e.IdleTimeout = idle
	}
	return nil
}
