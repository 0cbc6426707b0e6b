package provider

import (
	"strings"
	"testing"
	"time"
)

// Resolve fills in the provider's defaults, keeps what is set, and
// refuses a missing model or a base URL that is not absolute http(s)
// without echoing the URL.
func TestEndpointResolve(t *testing.T) {
	e := Endpoint{Model: "m"}
	if err := e.Resolve("p", "psys", time.Minute); err != nil || e.System != "psys" || e.IdleTimeout != time.Minute {
		t.Errorf("defaults: %+v, %v", e, err)
	}
	e = Endpoint{Model: "m", System: "vllm", IdleTimeout: -1, BaseURL: "https://proxy.test/v1"}
	if err := e.Resolve("p", "psys", time.Minute); err != nil || e.System != "vllm" || e.IdleTimeout != -1 {
		t.Errorf("set values: %+v, %v", e, err)
	}
	for _, bad := range []Endpoint{{}, {Model: "m", BaseURL: "localhost:8000/v1"}, {Model: "m", BaseURL: "ftp://u:s3cret@host/"}} {
		err := bad.Resolve("p", "psys", time.Minute)
		if err == nil || !strings.HasPrefix(err.Error(), "p: ") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Resolve(%+v) = %v; want a refusal naming p, without the URL", bad, err)
		}
	}
}
