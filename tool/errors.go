package tool

import (
	"errors"
	"fmt"
)

// Kind classifies why a call produced no Result. A tool that ran and
// reported a failure is not an error: its Result has IsError set.
type Kind string

// The kinds of call errors.
const (
	// KindArgument: the arguments are not JSON or do not satisfy the tool's
	// input schema, or the tool does not exist. The tool did not run; the
	// model may try again (an *ArgumentError).
	KindArgument Kind = "argument"
	// KindUnavailable: the server is down, not yet connected, or the
	// connection was lost during the call.
	KindUnavailable Kind = "unavailable"
	// KindTimeout: the call outlived its timeout (the caller's deadline or
	// Options.CallTimeout).
	KindTimeout Kind = "timeout"
	// KindCancelled: the caller's context was cancelled.
	KindCancelled Kind = "cancelled"
	// KindProtocol: the server answered with a JSON-RPC error or an
	// answer this package cannot read.
	KindProtocol Kind = "protocol"
)

// Error is a call that produced no Result, other than an ArgumentError.
type Error struct {
	Kind   Kind
	Server string // the server's configured name
	Tool   string // the tool's MCP name
	// MayHaveRun is true when the request may have reached the server, so
	// the tool's effect is unknown. It is false when the call failed
	// before anything was sent (a server that is down).
	MayHaveRun bool
	Err        error
}

func (e *Error) Error() string {
	return fmt.Sprintf("tool %s of mcp server %q: %s: %v", e.Tool, e.Server, e.Kind, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// ArgumentError refuses a call whose arguments do not fit the tool: the
// tool was not called. Path names the failing field, dot-separated from
// the arguments object ("items.2.name"; empty for the object itself).
type ArgumentError struct {
	Name    string // the model-facing name the call used
	Path    string
	Message string
}

func (e *ArgumentError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("tool %s: arguments: %s", e.Name, e.Message)
	}
	return fmt.Sprintf("tool %s: argument %s: %s", e.Name, e.Path, e.Message)
}

// KindOf returns the Kind of a call's error, or "" for an error that is
// not this package's.
func KindOf(err error) Kind {
	var ae *ArgumentError
	if errors.As(err, &ae) {
		return KindArgument
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}

// errDown is the cause of KindUnavailable while a server is not connected.
var errDown = errors.New("the server is not connected")
