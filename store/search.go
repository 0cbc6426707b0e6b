package store

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Text is what a Commit adds to its session's search index (Batch.Text):
// the chat's name and the text of its messages, so that Search finds the
// session by either. Both stores keep it with the commit, atomically.
type Text struct {
	// Owner is the session's owner; a store may key its index by it.
	Owner string
	// Name, when non-nil, replaces the session's indexed name.
	Name *string
	// Messages are appended to the session's indexed message text, each
	// cut to MaxIndexedMessage bytes.
	Messages []string
}

// Indexer tells what of a record a session's search index keeps: the
// name it gives the session (nil: none) and the text of the message it
// adds ("": none). The session layer owns what records mean; stores call
// it to index logs written before they kept an index.
type Indexer func(Record) (name *string, message string)

// Add adds what indexer finds in r to t.
func (t *Text) Add(indexer Indexer, r Record) {
	name, msg := indexer(r)
	if name != nil {
		t.Name = name
	}
	if msg != "" {
		t.Messages = append(t.Messages, msg)
	}
}

// MaxIndexedMessage bounds the bytes of one message a store indexes: a
// long answer is found by its beginning.
const MaxIndexedMessage = 4 << 10

// Terms is one field's token-prefix predicate: every term of AllOf and at
// least one of AnyOf (when it has any) must match. Terms are canonical
// (Canonical). The zero Terms selects everything.
type Terms struct {
	AllOf, AnyOf []string
}

// Empty tells whether t selects everything.
func (t Terms) Empty() bool { return len(t.AllOf) == 0 && len(t.AnyOf) == 0 }

// Query selects an owner's sessions for Search. Its predicates are ANDed.
type Query struct {
	Owner string
	// IDs, when non-nil, keeps only these session ids (store keys).
	IDs []string
	// Name matches the session's indexed name.
	Name Terms
	// Content matches the session's indexed messages: each term may
	// match a different message.
	Content Terms
}

// Hit is a session Search found.
type Hit struct {
	Session
	// Match is the indexed message that matches the most of the query's
	// content terms (the earliest of those), "" without content terms.
	Match string
}

// Canonical is a term's or a text's canonical form: trimmed, lowercased,
// NFC.
func Canonical(s string) string {
	return norm.NFC.String(strings.ToLower(strings.TrimSpace(s)))
}

// isTokenRune tells the runes tokens are made of: letters, digits and the
// marks that go with them. Everything else separates tokens.
func isTokenRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r)
}

// Tokens splits s, canonicalized, into its alphanumeric tokens, in order.
func Tokens(s string) []string {
	return strings.FieldsFunc(Canonical(s), func(r rune) bool { return !isTokenRune(r) })
}

// UniqueTokens is Tokens without repeats, sorted.
func UniqueTokens(s string) []string {
	ts := Tokens(s)
	slices.Sort(ts)
	return slices.Compact(ts)
}

// MatchTokens tells whether the term (canonical) matches the beginning of a
// token of text's tokens: its own tokens appear in a row, each but the last
// equal and the last a prefix (so "check" matches "Checkout" and "check
// o" matches "check out"; "eck" matches nothing). A term with no token
// matches nothing.
func MatchTokens(text []string, term string) bool {
	tt := Tokens(term)
	if len(tt) == 0 {
		return false
	}
	last := len(tt) - 1
	for i := 0; i+last < len(text); i++ {
		if slices.Equal(text[i:i+last], tt[:last]) && strings.HasPrefix(text[i+last], tt[last]) {
			return true
		}
	}
	return false
}

// Matches tells whether text's tokens satisfy t.
func (t Terms) Matches(text []string) bool {
	for _, term := range t.AllOf {
		if !MatchTokens(text, term) {
			return false
		}
	}
	return len(t.AnyOf) == 0 || slices.ContainsFunc(t.AnyOf, func(term string) bool { return MatchTokens(text, term) })
}

// MatchesAny tells whether t's terms, each in any of texts, satisfy t:
// how Content is matched across a session's messages.
func (t Terms) MatchesAny(texts [][]string) bool {
	in := func(term string) bool {
		return slices.ContainsFunc(texts, func(x []string) bool { return MatchTokens(x, term) })
	}
	for _, term := range t.AllOf {
		if !in(term) {
			return false
		}
	}
	return len(t.AnyOf) == 0 || slices.ContainsFunc(t.AnyOf, in)
}

// BestMatch returns the index of the message matching the most of t's
// terms (the earliest of those), or -1 when none matches any.
func (t Terms) BestMatch(texts [][]string) int {
	best, most := -1, 0
	for i, x := range texts {
		n := 0
		for _, term := range slices.Concat(t.AllOf, t.AnyOf) {
			if MatchTokens(x, term) {
				n++
			}
		}
		if n > most {
			best, most = i, n
		}
	}
	return best
}

// CutMessage cuts a message to MaxIndexedMessage bytes, at a rune
// boundary.
func CutMessage(s string) string {
	if len(s) <= MaxIndexedMessage {
		return s
	}
	i := MaxIndexedMessage
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
