package tool

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Default output bounds (see Limits).
const (
	DefaultItemBytes   = 16 << 10 // 16 KiB
	DefaultOutputBytes = 1 << 20  // 1 MiB
)

// Limits bound a call's output. Zero fields take the defaults.
type Limits struct {
	// ItemBytes bounds Result.Text, the output shown in a tool call item
	// (default DefaultItemBytes).
	ItemBytes int
	// OutputBytes bounds Result.Output, the whole output kept for the model
	// and item/readOutput, and Result.Structured (default
	// DefaultOutputBytes).
	OutputBytes int
}

func (l Limits) withDefaults() Limits {
	if l.ItemBytes <= 0 {
		l.ItemBytes = DefaultItemBytes
	}
	if l.OutputBytes <= 0 {
		l.OutputBytes = DefaultOutputBytes
	}
	if l.ItemBytes > l.OutputBytes {
		l.ItemBytes = l.OutputBytes
	}
	return l
}

// Result is what a tool returned. Its text is untrusted: never render it
// as HTML.
type Result struct {
	// Text is the output's text, cut to Limits.ItemBytes (at a UTF-8
	// boundary); Truncated says it was cut.
	Text      string
	Truncated bool
	// Output is the whole text, up to Limits.OutputBytes; OutputTruncated
	// says the output was longer still. Bytes is its full length.
	Output          string
	OutputTruncated bool
	Bytes           int
	// IsError reports that the tool ran and failed: the model is told so,
	// it is not an error of the call.
	IsError bool
	// Structured is the structuredContent the tool returned, raw; nil if
	// none or if it is longer than Limits.OutputBytes.
	Structured json.RawMessage
}

// newResult joins a CallToolResult's content into a bounded Result.
// Text parts are joined by newlines; other parts appear as a short
// bracketed note, since the model and the item carry text.
func newResult(r *mcp.CallToolResult, l Limits) Result {
	var b strings.Builder
	for i, c := range r.Content {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(contentText(c))
	}
	full := b.String()
	res := Result{IsError: r.IsError, Bytes: len(full)}
	res.Output, res.OutputTruncated = cut(full, l.OutputBytes)
	res.Text, res.Truncated = cut(full, l.ItemBytes)
	if r.StructuredContent != nil {
		if raw, err := json.Marshal(r.StructuredContent); err == nil && len(raw) <= l.OutputBytes {
			res.Structured = raw
		}
	}
	return res
}

func contentText(c mcp.Content) string {
	switch c := c.(type) {
	case *mcp.TextContent:
		return c.Text
	case *mcp.EmbeddedResource:
		if c.Resource == nil {
			return "[resource]"
		}
		if c.Resource.Text != "" {
			return c.Resource.Text
		}
		return fmt.Sprintf("[resource %s, %s, %d bytes]", c.Resource.URI, c.Resource.MIMEType, len(c.Resource.Blob))
	case *mcp.ResourceLink:
		return fmt.Sprintf("[resource link %s]", c.URI)
	case *mcp.ImageContent:
		return fmt.Sprintf("[image, %s, %d bytes]", c.MIMEType, len(c.Data))
	case *mcp.AudioContent:
		return fmt.Sprintf("[audio, %s, %d bytes]", c.MIMEType, len(c.Data))
	default:
		return fmt.Sprintf("[%T content]", c)
	}
}

// cut returns s up to n bytes, not splitting a UTF-8 sequence.
func cut(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}
