package tool_test

import (
	"context"
	"encoding/json"
	"testing"

	"mspd/tool"
	"mspd/tool/tooltest"
)

// BenchmarkCall measures one call through a Client: the argument check,
// the MCP round trip and the bounded result, over the in-memory transport
// and over a stdio child.
func BenchmarkCall(b *testing.B) {
	args := json.RawMessage(`{"key":"k"}`)
	run := func(b *testing.B, c *tool.Client) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Call(context.Background(), tooltest.Lookup, args); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("in-process", func(b *testing.B) {
		c, err := tool.StartInProcess("bench", tooltest.New("").MCP, tool.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		if err := c.WaitReady(context.Background()); err != nil {
			b.Fatal(err)
		}
		run(b, c)
	})
	b.Run("stdio", func(b *testing.B) {
		command, cargs, env := tooltest.Command("")
		c, err := tool.Start(tool.ServerConfig{Name: "bench", Command: command, Args: cargs, Env: env}, tool.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		if err := c.WaitReady(context.Background()); err != nil {
			b.Fatal(err)
		}
		run(b, c)
	})
}
