package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// silentServer accepts WebSocket connections and reads without answering.
func silentServer(t *testing.T) string {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		for {
			if _, _, err := ws.Read(r.Context()); err != nil {
				return
			}
		}
	}))
	t.Cleanup(hs.Close)
	return "ws://" + hs.Listener.Addr().String()
}

// TestCallAfterTheDeadlineSaysSo: a call made once its context has ended
// failed as "failed to write msg: failed to acquire lock: context deadline
// exceeded" (coder/websocket's lock select picks the ended context at
// random), which reads like lock contention — a hang under load was once
// chased that way when the test's own deadline had simply passed. It must
// say that nothing was sent and why, name the method, and leave nothing
// pending.
func TestCallAfterTheDeadlineSaysSo(t *testing.T) {
	dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(dctx, silentServer(t), Options{SkipHandshake: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ended, cancelEnded := context.WithTimeout(context.Background(), 0)
	defer cancelEnded()
	for range 20 { // the library's choice is random: try it often
		err := c.Call(ended, "turn/start", map[string]string{}, nil)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "turn/start: not sent, the context ended first") {
			t.Fatalf("Call with an ended context: %v", err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) != 0 {
		t.Errorf("%d calls left pending after failed writes", len(c.pending))
	}
}

// TestRefusedUpgradeIsTyped: an HTTP status instead of the upgrade (401
// for a wrong token) is a *RefusedError carrying it, so callers such as
// `mspd tail` can tell it from a network failure.
func TestRefusedUpgradeIsTyped(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "a valid token is required", http.StatusUnauthorized)
	}))
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := Dial(ctx, "ws://"+hs.Listener.Addr().String()+"/msp", Options{Token: "wrong"})
	var re *RefusedError
	if !errors.As(err, &re) || re.StatusCode != http.StatusUnauthorized {
		t.Fatalf("Dial = %v, want a *RefusedError with 401", err)
	}
}
