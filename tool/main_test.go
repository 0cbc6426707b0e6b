package tool_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"mspd/tool"
	"mspd/tool/tooltest"
)

func TestMain(m *testing.M) {
	tooltest.MainIfChild()
	os.Exit(m.Run())
}

// stdioConfig is a [[mcp]] entry starting this test binary as a tooltest
// server, journaling to a file of the test's.
func stdioConfig(t *testing.T, name string) (tool.ServerConfig, string) {
	t.Helper()
	journal := filepath.Join(t.TempDir(), "journal")
	command, args, env := tooltest.Command(journal)
	return tool.ServerConfig{Name: name, Command: command, Args: args, Env: env, Approval: tool.ApprovalNever}, journal
}

// start starts a client and waits until it is connected; it is closed at
// the test's end.
func start(t *testing.T, cfg tool.ServerConfig, opts tool.Options) *tool.Client {
	t.Helper()
	c, err := tool.Start(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitFor waits, on the client's change notifications, until cond holds.
func waitFor(t *testing.T, c *tool.Client, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		ch := c.Changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting until %s (status %+v)", what, c.Status())
		}
	}
}
