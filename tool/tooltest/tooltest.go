// Package tooltest is an MCP server for tests, written with the go-sdk,
// whose tools count their invocations: the exactly-once tests call it
// through mspd and count what ran. It runs in the test's process (over
// HTTP with HTTPHandler, or any transport), or as a stdio child: the test
// binary re-executes itself (Command) and its TestMain hands over to the
// server first:
//
//	func TestMain(m *testing.M) {
//		tooltest.MainIfChild()
//		os.Exit(m.Run())
//	}
//
// A journal file records each invocation, so that counts survive the
// server's process (restarts, a child killed mid-call) and are read from
// the test's process with Count.
package tooltest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tools, by their MCP names.
const (
	// Append (args {text}) is neither read-only nor idempotent: each call
	// is an effect. It answers "appended N", N counting its calls.
	Append = "append"
	// Lookup (args {key}) is read-only: it answers "value of KEY".
	Lookup = "lookup"
	// Slow (no args) answers "done" once Release is called (in-process) or
	// never (a child): for timeouts, cancellation and calls in flight. It
	// is neither read-only nor idempotent.
	Slow = "slow"
	// SlowIdempotent is Slow annotated idempotent, and SlowReadOnly is
	// Slow annotated read-only: calls in flight that may run again.
	SlowIdempotent = "slow_idempotent"
	SlowReadOnly   = "slow_read_only"
	// Fail (args {message}) answers a tool error (isError) with message.
	Fail = "fail"
	// Big (args {bytes}) answers that many bytes of text, "é" and "x"
	// alternating, so that a cut can fall inside a UTF-8 sequence.
	Big = "big"
	// Env (args {name}) is read-only: it answers the server process's
	// environment variable of that name.
	Env = "env"
	// AddTool (args {name}) lists a new tool of that name (answering
	// "added"), which announces notifications/tools/list_changed.
	AddTool = "add_tool"
)

// ChildEnv is the environment variable that makes MainIfChild serve: its
// value is the journal's path.
const ChildEnv = "MSPD_TOOLTEST_SERVER"

// Server is the counting server.
type Server struct {
	// MCP is the go-sdk server, to connect to any transport.
	MCP     *mcp.Server
	journal string
	mu      sync.Mutex
	counts  map[string]int
	counted chan struct{} // closed and replaced at each invocation
	release chan struct{}
	once    sync.Once
}

// New returns a server that records invocations in the journal file at
// path (created if missing; "" keeps counts in memory only).
func New(journal string) *Server {
	s := &Server{journal: journal, counts: map[string]int{}, counted: make(chan struct{}), release: make(chan struct{})}
	s.MCP = mcp.NewServer(&mcp.Implementation{Name: "tooltest", Version: "1"}, nil)
	type textArgs struct {
		Text string `json:"text"`
	}
	mcp.AddTool(s.MCP, &mcp.Tool{Name: Append, Description: "Appends text (an effect per call)."},
		func(_ context.Context, _ *mcp.CallToolRequest, in textArgs) (*mcp.CallToolResult, any, error) {
			n, err := s.record(Append, in)
			if err != nil {
				return nil, nil, err
			}
			return text(fmt.Sprintf("appended %d", n)), nil, nil
		})
	type keyArgs struct {
		Key string `json:"key"`
	}
	mcp.AddTool(s.MCP, &mcp.Tool{Name: Lookup, Description: "Looks a key up.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in keyArgs) (*mcp.CallToolResult, any, error) {
			if _, err := s.record(Lookup, in); err != nil {
				return nil, nil, err
			}
			return text("value of " + in.Key), nil, nil
		})
	for _, slow := range []*mcp.Tool{
		{Name: Slow, Description: "Answers when released."},
		{Name: SlowIdempotent, Description: "Answers when released; idempotent.", Annotations: &mcp.ToolAnnotations{IdempotentHint: true}},
		{Name: SlowReadOnly, Description: "Answers when released; read-only.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
	} {
		mcp.AddTool(s.MCP, slow, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			if _, err := s.record(slow.Name, nil); err != nil {
				return nil, nil, err
			}
			select {
			case <-s.release:
				return text("done"), nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
	}
	type failArgs struct {
		Message string `json:"message"`
	}
	mcp.AddTool(s.MCP, &mcp.Tool{Name: Fail, Description: "Fails."},
		func(_ context.Context, _ *mcp.CallToolRequest, in failArgs) (*mcp.CallToolResult, any, error) {
			if _, err := s.record(Fail, in); err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: in.Message}}}, nil, nil
		})
	type bigArgs struct {
		Bytes int `json:"bytes" jsonschema:"how many bytes to answer"`
	}
	mcp.AddTool(s.MCP, &mcp.Tool{Name: Big, Description: "Answers many bytes.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in bigArgs) (*mcp.CallToolResult, any, error) {
			if _, err := s.record(Big, in); err != nil {
				return nil, nil, err
			}
			var b strings.Builder
			for b.Len()+len("éx") <= in.Bytes {
				b.WriteString("éx")
			}
			for b.Len() < in.Bytes {
				b.WriteByte('x')
			}
			return text(b.String()), nil, nil
		})
	type nameArgs struct {
		Name string `json:"name"`
	}
	mcp.AddTool(s.MCP, &mcp.Tool{Name: Env, Description: "Reads an environment variable.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in nameArgs) (*mcp.CallToolResult, any, error) {
			if _, err := s.record(Env, in); err != nil {
				return nil, nil, err
			}
			return text(os.Getenv(in.Name)), nil, nil
		})
	mcp.AddTool(s.MCP, &mcp.Tool{Name: AddTool, Description: "Lists a new tool."},
		func(_ context.Context, _ *mcp.CallToolRequest, in nameArgs) (*mcp.CallToolResult, any, error) {
			if _, err := s.record(AddTool, in); err != nil {
				return nil, nil, err
			}
			s.AddTool(in.Name)
			return text("added"), nil, nil
		})
	return s
}

// AddTool lists a new tool that answers its own name, announcing
// notifications/tools/list_changed to connected clients.
func (s *Server) AddTool(name string) {
	mcp.AddTool(s.MCP, &mcp.Tool{Name: name, Description: "Added while running."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			if _, err := s.record(name, nil); err != nil {
				return nil, nil, err
			}
			return text(name), nil, nil
		})
}

// Release lets every call of the slow tools (Slow, SlowIdempotent,
// SlowReadOnly), current and later, answer.
func (s *Server) Release() { s.once.Do(func() { close(s.release) }) }

// Count is how many times tool was invoked: read from the journal when
// the server has one (the invocations of every process that used it).
func (s *Server) Count(tool string) int {
	if s.journal == "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.counts[tool]
	}
	n, err := Count(s.journal, tool)
	if err != nil {
		return -1
	}
	return n
}

// WaitCount waits until this process's server has been invoked n times
// for tool (a call has reached the tool), or ctx ends.
func (s *Server) WaitCount(ctx context.Context, tool string, n int) error {
	for {
		s.mu.Lock()
		got, ch := s.counts[tool], s.counted
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s was invoked %d times, waiting for %d: %w", tool, got, n, ctx.Err())
		}
	}
}

// HTTPHandler serves the server over streamable HTTP.
func (s *Server) HTTPHandler() http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.MCP }, nil)
}

// record counts an invocation (and journals it) before the tool acts, so
// that a process killed during the call has counted it. It returns the
// tool's count: the journal's, which other processes may have written.
func (s *Server) record(tool string, args any) (int, error) {
	s.mu.Lock()
	s.counts[tool]++
	n := s.counts[tool]
	close(s.counted)
	s.counted = make(chan struct{})
	s.mu.Unlock()
	if s.journal == "" {
		return n, nil
	}
	raw, _ := json.Marshal(args)
	f, err := os.OpenFile(s.journal, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	// One short write with O_APPEND: concurrent calls' lines do not mix.
	_, err = fmt.Fprintf(f, "%s\t%s\n", tool, raw)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return Count(s.journal, tool)
}

// Count reads how many times tool was invoked from a journal file; a
// missing file counts none.
func Count(journal, tool string) (int, error) {
	f, err := os.Open(journal)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, _, _ := strings.Cut(sc.Text(), "\t"); name == tool {
			n++
		}
	}
	return n, sc.Err()
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// StartedLine is what a child server writes to its stderr when it starts,
// followed by its pid.
const StartedLine = "tooltest server started, pid "

// MainIfChild serves over stdio and exits when ChildEnv is set (the
// process is a child Command started); otherwise it returns at once.
func MainIfChild() {
	journal, ok := os.LookupEnv(ChildEnv)
	if !ok {
		return
	}
	fmt.Fprintf(os.Stderr, "%s%d\n", StartedLine, os.Getpid())
	err := New(journal).MCP.Run(context.Background(), &mcp.StdioTransport{})
	if err != nil && !errors.Is(err, mcp.ErrConnectionClosed) {
		fmt.Fprintln(os.Stderr, "tooltest server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Command returns how to start the test binary as a stdio child server
// journaling to journal: the running executable, arguments that would run
// no test if TestMain did not call MainIfChild, and ChildEnv.
func Command(journal string) (command string, args []string, env map[string]string) {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exe, []string{"-test.run=^$"}, map[string]string{ChildEnv: journal}
}
