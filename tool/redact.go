package tool

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// minSecretLen is the shortest secret a redacting logger looks for:
// shorter strings would blank out common words, and are no credential.
const minSecretLen = 4

// redacted replaces a secret in what a redacting logger writes.
const redacted = "[redacted]"

// redactingHandler is a slog.Handler that writes no secret (see
// Redacting).
type redactingHandler struct {
	next    slog.Handler
	secrets []string
}

// Redacting returns a logger that writes what l writes but none of
// secrets (strings of at least 4 bytes): every string it is handed, the
// message, attribute values, errors and whatever else it formats, has each
// replaced. Give it as Options.Logger for a server whose configuration
// came from a less trusted party, with its header and env values: this
// package prints their keys only, but the go-sdk and a stdio server's
// stderr log what they log.
func Redacting(l *slog.Logger, secrets ...string) *slog.Logger {
	if h, hides := newRedactingHandler(l.Handler(), secrets); hides {
		return slog.New(h)
	}
	return l
}

// newRedactingHandler wraps next so that none of secrets (those of at
// least minSecretLen bytes) is written; with none to hide it is next, and
// hides is false.
func newRedactingHandler(next slog.Handler, secrets []string) (h slog.Handler, hides bool) {
	var keep []string
	for _, s := range secrets {
		if len(s) >= minSecretLen {
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		return next, false
	}
	return &redactingHandler{next: next, secrets: keep}, true
}

func (h *redactingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *redactingHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.redact(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *redactingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = h.attr(a)
	}
	return &redactingHandler{next: h.next.WithAttrs(clean), secrets: h.secrets}
}

func (h *redactingHandler) WithGroup(name string) slog.Handler {
	return &redactingHandler{next: h.next.WithGroup(name), secrets: h.secrets}
}

// attr is a with every string in its value redacted; values that are not
// strings, numbers, times or groups are formatted first, so an error or a
// struct cannot carry a secret past it.
func (h *redactingHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.redact(v.String()))
	case slog.KindGroup:
		group := v.Group()
		clean := make([]slog.Attr, len(group))
		for i, g := range group {
			clean[i] = h.attr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(clean...)}
	case slog.KindAny:
		s := fmt.Sprint(v.Any())
		if r := h.redact(s); r != s {
			return slog.String(a.Key, r)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

func (h *redactingHandler) redact(s string) string {
	for _, secret := range h.secrets {
		if strings.Contains(s, secret) {
			s = strings.ReplaceAll(s, secret, redacted)
		}
	}
	return s
}
