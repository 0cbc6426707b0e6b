package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestPprof: profiles are off by default; on, they are served to a
// loopback Host without credentials, refused a foreign Host (DNS
// rebinding), and need the token once one is configured; the command
// line, which may hold the token, is never served.
func TestPprof(t *testing.T) {
	const token = "s3cret-token-for-tests"
	bearer := http.Header{"Authorization": {"Bearer " + token}}
	for _, tc := range []struct {
		name     string
		cfg      Config
		path     string
		host     string
		header   http.Header
		want     int
		profiles bool // the response is pprof's
	}{
		{"off by default", Config{}, "/debug/pprof/", "127.0.0.1", nil, http.StatusOK, false},
		{"loopback", Config{Pprof: true}, "/debug/pprof/", "127.0.0.1", nil, http.StatusOK, true},
		{"a named profile", Config{Pprof: true}, "/debug/pprof/goroutine?debug=1", "localhost:7700", nil, http.StatusOK, true},
		{"foreign host", Config{Pprof: true}, "/debug/pprof/", "attacker.example", nil, http.StatusForbidden, false},
		{"no command line", Config{Pprof: true}, "/debug/pprof/cmdline", "127.0.0.1", nil, http.StatusNotFound, false},
		{"token missing", Config{Pprof: true, AuthToken: token}, "/debug/pprof/", "127.0.0.1", nil, http.StatusUnauthorized, false},
		{"token given", Config{Pprof: true, AuthToken: token}, "/debug/pprof/", "mspd.example", bearer, http.StatusOK, true},
		{"off with a token", Config{AuthToken: token}, "/debug/pprof/", "127.0.0.1", bearer, http.StatusOK, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := serveFrontDoor(t, tc.cfg)
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tc.host
			for k, v := range tc.header {
				req.Header[k] = v
			}
			resp, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("GET %s (Host %s) = %d, want %d", tc.path, tc.host, resp.StatusCode, tc.want)
			}
			if got := strings.Contains(string(body), "goroutine"); got != tc.profiles {
				t.Errorf("GET %s (Host %s): profiles served %v, want %v:\n%.200s", tc.path, tc.host, got, tc.profiles, body)
			}
		})
	}
}
