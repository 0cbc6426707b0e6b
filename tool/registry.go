package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// Registry is the set of tools one session sees: the tools of its
// servers' Clients, operator servers first, then the session's extra ones.
// Clients are shared: a Registry does not own or close them. It is safe
// for concurrent use.
type Registry struct {
	clients []*Client
	byName  map[string]*Client // by server name

	mu   sync.Mutex
	snap *Snapshot
}

// Snapshot is the registry's tools at one moment.
type Snapshot struct {
	// Version changes whenever a server's tool list changes (it is the sum
	// of the servers' list versions, each of which only grows).
	Version uint64
	// Tools in order: servers in the registry's order, each server's tools
	// in the order it listed them.
	Tools   []Tool
	byModel map[string]int
	byPair  map[[2]string]int
}

// NewRegistry returns the registry of these servers, whose names must
// differ.
func NewRegistry(clients ...*Client) (*Registry, error) {
	r := &Registry{byName: make(map[string]*Client, len(clients))}
	for _, c := range clients {
		if r.byName[c.Name()] != nil {
			return nil, fmt.Errorf("mcp server %q: the name is used twice", c.Name())
		}
		r.byName[c.Name()] = c
		r.clients = append(r.clients, c)
	}
	return r, nil
}

// With returns a registry of r's servers and extra ones (a session's own);
// names must still differ.
func (r *Registry) With(extra ...*Client) (*Registry, error) {
	return NewRegistry(append(r.clients[:len(r.clients):len(r.clients)], extra...)...)
}

// Servers names the registry's servers, in its order.
func (r *Registry) Servers() []string {
	names := make([]string, len(r.clients))
	for i, c := range r.clients {
		names[i] = c.Name()
	}
	return names
}

// Snapshot returns the current tools; it is rebuilt only when a list
// changed. Treat it as read-only.
func (r *Registry) Snapshot() *Snapshot {
	lists := make([][]Tool, len(r.clients))
	var version uint64
	for i, c := range r.clients {
		var v uint64
		lists[i], v = c.Tools()
		version += v
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.snap != nil && r.snap.Version == version {
		return r.snap
	}
	s := &Snapshot{Version: version, byModel: map[string]int{}, byPair: map[[2]string]int{}}
	for _, l := range lists {
		for _, t := range l {
			s.byModel[t.ModelName] = len(s.Tools)
			s.byPair[[2]string{t.Server, t.Name}] = len(s.Tools)
			s.Tools = append(s.Tools, t)
		}
	}
	r.snap = s
	return s
}

// Lookup finds a tool by its model-facing name.
func (s *Snapshot) Lookup(modelName string) (Tool, bool) {
	i, ok := s.byModel[modelName]
	if !ok {
		return Tool{}, false
	}
	return s.Tools[i], true
}

// LookupTool finds a tool by its server's name and its MCP name.
func (s *Snapshot) LookupTool(server, tool string) (Tool, bool) {
	i, ok := s.byPair[[2]string{server, tool}]
	if !ok {
		return Tool{}, false
	}
	return s.Tools[i], true
}

// Lookup finds a tool by its model-facing name in the current snapshot.
func (r *Registry) Lookup(modelName string) (Tool, bool) { return r.Snapshot().Lookup(modelName) }

// LookupTool finds a tool by server and MCP name in the current snapshot.
func (r *Registry) LookupTool(server, tool string) (Tool, bool) {
	return r.Snapshot().LookupTool(server, tool)
}

// Call calls a tool by its model-facing name (see Client.Call). A name
// no server lists is an *ArgumentError: the model asked for a tool that
// does not exist.
func (r *Registry) Call(ctx context.Context, modelName string, args json.RawMessage) (Result, error) {
	t, ok := r.Lookup(modelName)
	if !ok {
		return Result{}, &ArgumentError{Name: modelName, Message: "no such tool"}
	}
	return r.byName[t.Server].Call(ctx, t.Name, args)
}

// Check tells whether args would be accepted by the tool's input schema,
// calling nothing (see Client.Check).
func (r *Registry) Check(modelName string, args json.RawMessage) error {
	t, ok := r.Lookup(modelName)
	if !ok {
		return &ArgumentError{Name: modelName, Message: "no such tool"}
	}
	return r.byName[t.Server].Check(t.Name, args)
}
