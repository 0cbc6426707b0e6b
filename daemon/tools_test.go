package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"mspd/tool"
	"mspd/tool/tooltest"
)

// mcpConfig writes a configuration file of the scripted provider and one
// [[mcp]] server "t" at url.
func mcpConfig(t *testing.T, url string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mspd.toml")
	cfg := fmt.Sprintf("[[providers]]\ntype = \"scripted\"\n\n[[mcp]]\nname = \"t\"\nurl = %q\napproval = \"never\"\n", url)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStartWaitsForTheToolServers: New returns once the configured MCP
// servers are connected and their tools listed — it resumes the turns a
// previous process left running, which must find their tools (a call
// cut off is made again only if its tool is known to be replay-safe) —
// even when a server is slow to answer; a server that stays down holds
// the start up no longer than Tools.ReadyWait.
func TestStartWaitsForTheToolServers(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	counting := tooltest.New("")
	serve := counting.HTTPHandler()
	var once sync.Once
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { // a server slow to initialize, until its client gives up
			select {
			case <-time.After(300 * time.Millisecond):
			case <-r.Context().Done():
			}
		})
		serve.ServeHTTP(w, r)
	}))
	defer slow.Close()
	d, err := New(context.Background(), Config{DataDir: t.TempDir(), ConfigFile: mcpConfig(t, slow.URL), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.Background())
	if _, ok := d.tools.registry.Lookup(tool.ModelName("t", tooltest.SlowIdempotent)); !ok {
		var names []string
		for _, tl := range d.tools.registry.Snapshot().Tools {
			names = append(names, tl.ModelName)
		}
		t.Fatalf("New returned before the server's tools were listed: %v", names)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there
	began := time.Now()
	d2, err := New(context.Background(), Config{DataDir: t.TempDir(), ConfigFile: mcpConfig(t, down), Logger: quiet,
		Tools: Tools{ReadyWait: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close(context.Background())
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("a server that is down held the start up for %s", took)
	}
	if _, ok := d2.tools.registry.Lookup(tool.ModelName("t", tooltest.Append)); ok {
		t.Error("a server that is down lists tools")
	}
}
