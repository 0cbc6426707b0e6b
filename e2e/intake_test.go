package e2e

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"mspd/client"
	"mspd/daemon"
	"mspd/observe/observetest"
	"mspd/schema/msp"
	"mspd/server"
)

// rawWS is a bare WebSocket client past its handshake, for frames the MSP
// client cannot send (one sent half-way).
func rawWS(t *testing.T, ctx context.Context, url string) *websocket.Conn {
	t.Helper()
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(-1)
	t.Cleanup(func() { ws.CloseNow() })
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"clientInfo":{"name":"raw","version":"1"}}}`)); err != nil {
		t.Fatal(err)
	}
	awaitAnswer(t, ctx, ws, `"init"`)
	return ws
}

// awaitAnswer reads frames until the answer to id (JSON text) and fails
// unless it is a result.
func awaitAnswer(t *testing.T, ctx context.Context, ws *websocket.Conn, id string) {
	t.Helper()
	for {
		_, f, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for the answer to %s: %v", id, err)
		}
		if strings.HasPrefix(string(f), `{"jsonrpc":"2.0","id":`+id+`,`) {
			if !strings.Contains(string(f), `"result":`) {
				t.Fatalf("answer to %s: %.300s", id, f)
			}
			return
		}
	}
}

// paddedRequest is a session/list request of n bytes, white space padding
// it: valid whatever its size.
func paddedRequest(id string, n int) []byte {
	head := `{"jsonrpc":"2.0","id":` + id + `,"method":"session/list","params":{}`
	return []byte(head + strings.Repeat(" ", n-len(head)-1) + "}")
}

// gaugeValue reads an unlabelled gauge from the daemon's /metrics.
func gaugeValue(t *testing.T, d *daemon.Daemon, name string) float64 {
	t.Helper()
	_, text, err := observetest.Scrape("http://" + d.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// awaitGauge waits until the gauge reads want.
func awaitGauge(t *testing.T, ctx context.Context, d *daemon.Daemon, name string, want float64) {
	t.Helper()
	for got := gaugeValue(t, d, name); got != want; got = gaugeValue(t, d, name) {
		select {
		case <-ctx.Done():
			t.Fatalf("%s reads %v, want %v", name, got, want)
		case <-time.After(5 * time.Millisecond): // the next scrape
		}
	}
}

// Over real WebSockets, connections each sending a large frame at once
// are all answered, the server-wide intake budget bounding what is
// decoded together: while one client's half-sent frame holds the whole
// budget, eight others' frames wait for it (not read on: TCP pushes back)
// and a small request is answered meanwhile; once the first frame is
// whole, every frame is answered and the budget is empty again. Each
// connection used to read and decode its frame at once, whatever the
// others held.
func TestInboundBudgetOverWebSocket(t *testing.T) {
	const limit = 1 << 20
	d := startDaemon(t, daemon.Config{Server: server.Config{MaxFrameBytes: limit, InboundBytes: limit}})
	ctx := testCtx(t)

	holder := rawWS(t, ctx, d.URL())
	w, err := holder.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	big := paddedRequest(`"holder"`, 900<<10)
	if _, err := w.Write(big[:200<<10]); err != nil {
		t.Fatal(err)
	}
	awaitGauge(t, ctx, d, "mspd_inbound_bytes", limit)

	waiters := make([]*websocket.Conn, 8)
	for i := range waiters {
		waiters[i] = rawWS(t, ctx, d.URL())
		go waiters[i].Write(ctx, websocket.MessageText, paddedRequest(strconv.Itoa(i), 900<<10))
	}
	awaitGauge(t, ctx, d, "mspd_inbound_waiting", float64(len(waiters)))

	small := dial(t, d.URL(), client.Options{})
	if err := small.Call(ctx, msp.MethodSessionList, struct{}{}, nil); err != nil {
		t.Fatalf("a small request while the budget is taken: %v", err)
	}

	if _, err := w.Write(big[200<<10:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	awaitAnswer(t, ctx, holder, `"holder"`)
	for i, ws := range waiters {
		awaitAnswer(t, ctx, ws, strconv.Itoa(i))
	}
	awaitGauge(t, ctx, d, "mspd_inbound_bytes", 0)
	awaitGauge(t, ctx, d, "mspd_inbound_waiting", 0)
}
