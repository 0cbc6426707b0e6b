// Package tool is mspd's side of MCP: it connects to the MCP servers an
// operator configured ([[mcp]] tables, ServerConfig) through the official
// go-sdk, over stdio (a child process it supervises: restarted with
// capped, jittered backoff when it dies, its stderr logged) or streamable
// HTTP (with the configured headers), lists their tools (again on
// notifications/tools/list_changed), and calls them: arguments checked
// against the tool's input schema first, a timeout, output bounded. It
// knows nothing of sessions, MSP or providers; the turn layer decides
// when a call may run (approvals, exactly once) and what the model and the
// transcript see.
//
// A Client is one server, shared by every session; a Registry is the set
// of servers one session sees, and names each tool for models as
// server__tool (see ModelName). A step of a turn looks like this:
//
//	reg, err := operators.With(sessionServers...) // tool.NewRegistry(clients...)
//	snap := reg.Snapshot()                         // snap.Tools → the model's tool specs
//	// … the model asks for call.Name with call.Args …
//	t, ok := snap.Lookup(call.Name)                // t.NeedsApproval, t.Repeatable()
//	res, err := reg.Call(ctx, call.Name, call.Args)
//	switch tool.KindOf(err) {
//	case "":               // res.Text (item, bounded), res.Output (model, readOutput), res.IsError
//	case tool.KindArgument: // the model's mistake: re-run the step (turn/retryScheduled)
//	case tool.KindTimeout, tool.KindCancelled, tool.KindUnavailable, tool.KindProtocol:
//		// (*tool.Error).MayHaveRun says whether the effect is unknown
//	}
//
// A tool's annotations (read-only, idempotent, destructive) are its
// server's word: trust them only as far as the operator trusts the
// server. Env and header values are secrets: nothing here logs or prints
// them. Tool output is untrusted text: never render it as HTML.
//
// Package tool/builtin is the demo's in-process server (clock,
// calculator); package tool/tooltest is a counting server for tests;
// package tool/sessionmcp adds the servers clients name in session/start
// to their own sessions, under the operator's policy.
package tool
