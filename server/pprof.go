package server

import (
	"net/http"
	"net/http/pprof"
)

// pprofHandler serves the Go runtime's profiles under /debug/pprof/ when
// Config.Pprof is set. Profiles carry no session data, but a CPU profile
// or trace costs the server CPU for as long as it is asked to run, and
// goroutine dumps show the code's inner workings, so the endpoints are
// guarded as /msp is, not exempt as /metrics is: the Host check while no
// credential is configured, and a valid token when one is (the daemon
// refuses --pprof on a non-loopback address without one).
// /debug/pprof/cmdline is left out: it would print an --auth-token given
// on the command line.
func (s *Server) pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /debug/pprof/cmdline", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not served: the command line may hold a token", http.StatusNotFound)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.cfg.Auth.Authenticate(r); err != nil {
			s.log.Warn("refused a profiling request", "reason", err, "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="mspd", error="invalid_token"`)
			http.Error(w, "a valid token is required", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}
