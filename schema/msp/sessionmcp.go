package msp

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
)

// CapabilitySessionMCP is the capability a client requests to name MCP
// servers of its own in session/start (config.mcpServers).
const CapabilitySessionMCP = "sessionMcp"

// SessionConfig is the config member of session/start and session/resume:
// per-session configuration. Unknown members are ignored.
type SessionConfig struct {
	// MCPServers are MCP servers added to this session alone, by name.
	MCPServers map[string]SessionMCPServerConfig `json:"mcpServers,omitempty"`
	// Instructions (mspd's member) are the session's system prompt, sent
	// after the operator's with every request; at most
	// MaxInstructionsBytes.
	Instructions string `json:"instructions,omitempty"`
}

// SessionMCPServerConfig is one MCP server a client adds to its session:
// a closed union on Transport. A stdio server sets Command (Args, Env,
// Framing); a streamableHttp one sets URL (Headers). Env and Headers
// values are secrets: String, GoString and LogValue print their keys only,
// and neither the command nor the URL (which may carry a credential in
// its path or query).
type SessionMCPServerConfig struct {
	Transport string            `json:"transport"`
	Command   string            `json:"command,omitempty"`
	Args      []string          `json:"args,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Framing   string            `json:"framing,omitempty"`
	URL       string            `json:"url,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	// Mode is MCPModeRequired (the default, "") or MCPModeOptional.
	Mode string `json:"mode,omitempty"`
}

// Transports of a session MCP server.
const (
	MCPTransportStdio          = "stdio"
	MCPTransportStreamableHTTP = "streamableHttp"
)

// Modes of a session MCP server: what a turn does when it cannot reach it.
const (
	// MCPModeRequired fails the turn (environmentError).
	MCPModeRequired = "required"
	// MCPModeOptional runs the turn without the server's tools.
	MCPModeOptional = "optional"
)

// Stdio framings of a session MCP server.
const (
	MCPFramingAuto              = "auto"
	MCPFramingContentLength     = "contentLength"
	MCPFramingLineDelimitedJSON = "lineDelimitedJson"
)

// Required tells whether a turn fails when the server cannot be reached.
func (c SessionMCPServerConfig) Required() bool { return c.Mode != MCPModeOptional }

// String describes the server by transport and the names of its env or
// headers, never their values, the command or the URL.
func (c SessionMCPServerConfig) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "session mcp server (%s", c.Transport)
	if keys := c.secretKeys(); len(keys) > 0 {
		fmt.Fprintf(&b, ", %s %s", c.secretsName(), strings.Join(keys, " "))
	}
	b.WriteString(")")
	return b.String()
}

// GoString is String, so that %#v redacts too.
func (c SessionMCPServerConfig) GoString() string { return c.String() }

// LogValue logs the server's transport and mode, and its env or headers by
// their keys only.
func (c SessionMCPServerConfig) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("transport", c.Transport), slog.String("mode", cmp.Or(c.Mode, MCPModeRequired))}
	if keys := c.secretKeys(); len(keys) > 0 {
		attrs = append(attrs, slog.Any(c.secretsName(), keys))
	}
	return slog.GroupValue(attrs...)
}

func (c SessionMCPServerConfig) secretsName() string {
	if c.Transport == MCPTransportStdio {
		return "env"
	}
	return "headers"
}

func (c SessionMCPServerConfig) secretKeys() []string {
	m := c.Headers
	if c.Transport == MCPTransportStdio {
		m = c.Env
	}
	return slices.Sorted(maps.Keys(m))
}

// OutputRef names an item's stored output (a toolCall's whole output, of
// which the item shows visibleOutput): item/readOutput reads it by ID.
type OutputRef struct {
	Availability string `json:"availability"`
	ByteLen      int64  `json:"byteLen"`
	Digest       string `json:"digest,omitempty"`
	ID           string `json:"id"`
	Kind         string `json:"kind"`
	MediaType    string `json:"mediaType,omitempty"`
	Path         string `json:"path,omitempty"`
	// Truncated (mspd's additive member) says the output was longer than
	// what was kept: the stored bytes are its first ByteLen.
	Truncated bool   `json:"truncated,omitempty"`
	URI       string `json:"uri"`
}

// Values of OutputRef and ItemReadOutputResult members.
const (
	// OutputKindTool is OutputRef.Kind of a tool call's output.
	OutputKindTool = "tool_output"
	// MediaTypeText is the media type of text output.
	MediaTypeText = "text/plain"
	// EncodingUTF8 and EncodingBase64 are item/readOutput's encodings:
	// text media is always utf8.
	EncodingUTF8   = "utf8"
	EncodingBase64 = "base64"
)

// Availabilities of a stored output (OutputRef.Availability, and
// ErrorData.Availability of outputUnavailable).
const (
	OutputAvailable    = "available"
	OutputMissing      = "missing"
	OutputUnsupported  = "unsupported"
	OutputAccessFailed = "accessFailed"
)

// ItemReadOutputParams are the params of item/readOutput.
type ItemReadOutputParams struct {
	SessionID   string `json:"sessionId"`
	ItemID      string `json:"itemId"`
	OutputRef   string `json:"outputRef"`
	OffsetBytes *int64 `json:"offsetBytes,omitempty"`
	LengthBytes *int64 `json:"lengthBytes,omitempty"`
}

// MaxReadOutputBytes is item/readOutput's default and largest
// lengthBytes (upstream's 6 MiB); more is read as this much.
const MaxReadOutputBytes = 6 << 20

// ItemReadOutputResult is the result of item/readOutput: ByteLen stored
// bytes from OffsetBytes, as Content.
type ItemReadOutputResult struct {
	ByteLen     int64  `json:"byteLen"`
	Content     string `json:"content"`
	Encoding    string `json:"encoding"`
	EOF         bool   `json:"eof"`
	MediaType   string `json:"mediaType"`
	OffsetBytes int64  `json:"offsetBytes"`
}
