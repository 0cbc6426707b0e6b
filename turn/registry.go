package turn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"mspd/provider"
	"mspd/tool"
)

// Registry is the Toolbox of a tool registry's tools: what a turn offers
// the model of the MCP servers a session sees.
func Registry(r *tool.Registry) Toolbox { return registry{r} }

type registry struct{ r *tool.Registry }

func (b registry) Specs() []provider.ToolSpec {
	tools := b.r.Snapshot().Tools
	out := make([]provider.ToolSpec, len(tools))
	for i, t := range tools {
		out[i] = provider.ToolSpec{Name: t.ModelName, Description: t.Description, InputSchema: t.InputSchema}
	}
	return out
}

func (b registry) Lookup(name string) (ToolInfo, bool) {
	t, ok := b.r.Lookup(name)
	return ToolInfo{Server: t.Server, Tool: t.Name, ReplaySafe: t.Repeatable(), ReadOnly: t.Annotations.ReadOnlyHint,
		NeedsApproval: t.NeedsApproval}, ok
}

func (b registry) Check(name, args string) error {
	err := b.r.Check(name, json.RawMessage(args))
	var ae *tool.ArgumentError
	if errors.As(err, &ae) {
		// The turn's reason names the tool already.
		if ae.Path == "" {
			return errors.New(ae.Message)
		}
		return fmt.Errorf("argument %s: %s", ae.Path, ae.Message)
	}
	return err
}

func (b registry) Call(ctx context.Context, name, args string) (ToolOutput, error) {
	res, err := b.r.Call(ctx, name, json.RawMessage(args))
	if err != nil {
		return ToolOutput{}, err
	}
	// The whole output, as far as the client kept it: the item shows its
	// first MaxVisibleOutput bytes, the session keeps the rest.
	return ToolOutput{Text: res.Output, Incomplete: res.OutputTruncated, IsError: res.IsError}, nil
}
