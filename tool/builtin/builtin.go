// Package builtin is mspd's built-in MCP server, which the offline demo's
// model calls so that a tool call needs no network: clock (the time in an
// IANA zone) and calculator (arithmetic on numbers). It is an ordinary
// go-sdk server; mspd reaches it through the SDK's in-memory transport
// (see Start), like any other server through tool.Client.
package builtin

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"mspd/tool"
)

// Name is the built-in server's name: its tools are builtin__clock and
// builtin__calculator to models.
const Name = "builtin"

// ClockArgs are the clock tool's arguments.
type ClockArgs struct {
	Zone string `json:"zone,omitempty" jsonschema:"an IANA time zone such as Europe/Paris; UTC when empty"`
}

// ClockResult is the clock tool's structured result.
type ClockResult struct {
	Time    string `json:"time" jsonschema:"RFC 3339, in the zone"`
	Zone    string `json:"zone"`
	Weekday string `json:"weekday"`
}

// CalculatorArgs are the calculator tool's arguments.
type CalculatorArgs struct {
	Expression string `json:"expression" jsonschema:"numbers with + - * / ^ and parentheses, e.g. (2+3)*4^2"`
}

// CalculatorResult is the calculator tool's structured result.
type CalculatorResult struct {
	Value float64 `json:"value"`
}

// New returns the built-in server; now reads the clock (time.Now when nil).
func New(now func() time.Time) *mcp.Server {
	if now == nil {
		now = time.Now
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "mspd-builtin", Version: "1"}, &mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{}})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "clock",
		Description: "The current date and time in a time zone.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in ClockArgs) (*mcp.CallToolResult, ClockResult, error) {
		zone := in.Zone
		if zone == "" {
			zone = "UTC"
		}
		loc, err := time.LoadLocation(zone)
		if err != nil {
			return nil, ClockResult{}, fmt.Errorf("unknown time zone %q", zone)
		}
		t := now().In(loc)
		out := ClockResult{Time: t.Format(time.RFC3339), Zone: zone, Weekday: t.Weekday().String()}
		text := fmt.Sprintf("%s, %s (%s)", out.Weekday, t.Format("2 January 2006 15:04:05 MST"), zone)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "calculator",
		Description: "Evaluates an arithmetic expression: numbers, + - * / ^ (power) and parentheses.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in CalculatorArgs) (*mcp.CallToolResult, CalculatorResult, error) {
		v, err := Calculate(in.Expression)
		if err != nil {
			return nil, CalculatorResult{}, err
		}
		text := strconv.FormatFloat(v, 'g', -1, 64)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, CalculatorResult{Value: v}, nil
	})
	return s
}

// Start connects a tool.Client to a new built-in server.
func Start(now func() time.Time, opts tool.Options) (*tool.Client, error) {
	return tool.StartInProcess(Name, New(now), opts)
}
