package tool

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxNameLen is the longest model-facing tool name: the providers accept
// ^[a-zA-Z0-9_-]{1,64}$.
const MaxNameLen = 64

// ModelName is the name a model calls a server's tool by: server + "__" +
// tool. It depends on the pair alone, so a name recorded in a session's
// history keeps naming the same tool. Server names (see ServerConfig.Name)
// contain no "__" and do not end in "_", so the first "__" splits the name
// and two pairs never share it. A tool name outside the providers'
// charset, or one too long, is spelled with its unsupported characters
// as '_', cut to fit, and followed by '_' and 8 hex digits of a hash of
// the exact name, which keeps such names apart.
func ModelName(server, tool string) string {
	name := server + "__" + tool
	if len(name) <= MaxNameLen && inCharset(tool) && tool != "" {
		return name
	}
	sum := sha256.Sum256([]byte(tool))
	suffix := "_" + hex.EncodeToString(sum[:4])
	room := MaxNameLen - len(server) - len("__") - len(suffix)
	var b strings.Builder
	for _, r := range tool {
		if b.Len() >= room {
			break
		}
		if r < 0x80 && isNameByte(byte(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return server + "__" + b.String() + suffix
}

func inCharset(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
