package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"mspd/client"
	"mspd/daemon"
	"mspd/provider/scripted"
	"mspd/server"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestOpsEndpoints(t *testing.T) {
	d := startDaemon(t, daemon.Config{})
	base := "http://" + d.Addr()
	for _, path := range []string{"/livez", "/readyz"} {
		if code, _ := get(t, base+path); code != http.StatusOK {
			t.Errorf("%s: %d", path, code)
		}
	}
	c := dial(t, d.URL(), client.Options{})
	start, err := c.StartSession(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	answerTurn(t, c, start.Session.SessionID, scripted.Script(scripted.Step{Status: 429}, scripted.Step{Text: "ok"}))
	answerTurn(t, c, start.Session.SessionID, scripted.Script(scripted.Step{Status: 401}))
	_, metrics := get(t, base+"/metrics")
	for _, want := range []string{
		"mspd_connections_open 1",
		`mspd_turns_total{terminal="completed"} 1`,
		`mspd_turns_total{terminal="failed"} 1`,
		`mspd_model_retries_total{error_kind="rateLimited"} 1`,
		"mspd_provider_attempts_total 3",
		`mspd_turn_attempts_bucket{le="1"} 1`,
		`mspd_turn_attempts_bucket{le="2"} 2`,
		"mspd_turn_attempts_count 2",
		"# TYPE mspd_turn_attempts histogram",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
}

// TestUnansweredPingCloses: a peer that stops answering pings is closed,
// so half-open connections do not linger.
func TestUnansweredPingCloses(t *testing.T) {
	d := startDaemon(t, daemon.Config{Server: server.Config{PingInterval: 30 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}})
	ctx := testCtx(t)
	base := "http://" + d.Addr()
	// A client that never reads never answers a ping.
	ws, _, err := websocket.Dial(ctx, d.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	// The server serves a connection on a goroutine of its own (the
	// upgrade's handler returns at once): it is done with it once it
	// counts it closed.
	for {
		if _, m := get(t, base+"/metrics"); strings.Contains(m, "mspd_connections_total 1\n") && strings.Contains(m, "mspd_connections_open 0\n") {
			return
		}
		if ctx.Err() != nil {
			t.Fatal("the silent connection is still open")
		}
	}
}

// TestAuthToken: with a token configured, /msp opens only with it (as a
// bearer header, or as access_token for browsers).
func TestAuthToken(t *testing.T) {
	d := startDaemon(t, daemon.Config{Server: server.Config{AuthToken: "s3cret-token"}})
	ctx := testCtx(t)
	for _, bad := range []client.Options{{}, {Token: "wrong"}} {
		if _, err := client.Dial(ctx, d.URL(), bad); err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("token %q: %v, want a 401 refusal", bad.Token, err)
		}
	}
	c := dial(t, d.URL(), client.Options{Token: "s3cret-token"})
	if _, err := c.StartSession(ctx); err != nil {
		t.Fatal(err)
	}
	browser := dial(t, d.URL()+"?access_token=s3cret-token", client.Options{})
	if _, err := browser.StartSession(ctx); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, "http://"+d.Addr()+"/livez"); code != http.StatusOK {
		t.Errorf("/livez behind auth: %d", code)
	}
}
