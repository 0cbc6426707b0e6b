package provider

import (
	"context"
	"strings"
	"time"
	"unicode"
)

// LastUserText is the text of the turn's own message: the last message
// with the user role.
func LastUserText(msgs []Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == RoleUser {
			return msgs[i].Text
		}
	}
	return ""
}

// SplitWords cuts text into word-sized deltas, each word carrying the
// whitespace before it, so the deltas concatenate back to text exactly.
// Local models use it to stream at a word's pace.
func SplitWords(text string) []string {
	var chunks []string
	start, inWord := 0, false
	for i, r := range text {
		space := unicode.IsSpace(r)
		if !space && !inWord && i > start && strings.TrimSpace(text[start:i]) != "" {
			chunks = append(chunks, text[start:i])
			start = i
		}
		inWord = !space
	}
	if start < len(text) {
		chunks = append(chunks, text[start:])
	}
	return chunks
}

// Wait pauses for d, or until ctx is done (returning its error); local
// models use it to pace their output.
func Wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
