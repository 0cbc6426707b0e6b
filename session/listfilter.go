package session

import (
	"regexp"
	"slices"
	"strings"
	"unicode"

	"mspd/schema/msp"
	"mspd/store"
)

// Bounds of session/list's filter (upstream's, and the content
// extension's alike).
const (
	maxFilterTerms     = 16
	maxFilterTermBytes = 128
	maxFilterIDs       = 200
	snippetRunes       = 160
)

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// listFilter is a session/list filter made canonical: the store query it
// becomes and the echo it is answered with.
type listFilter struct {
	query   store.Query
	applied msp.SessionListFilter
	// none: the filter selects nothing mspd serves (text of the title
	// alone: mspd serves no title).
	none bool
}

// canonicalFilter checks a filter and makes it canonical. A bad member is
// invalidParams naming it.
func canonicalFilter(f *msp.SessionListFilter, principal string) (listFilter, error) {
	lf := listFilter{query: store.Query{Owner: principal}}
	if f.SessionID != nil {
		ids := f.SessionID.AnyOf
		if len(ids) < 1 || len(ids) > maxFilterIDs {
			return lf, msp.ErrInvalidParams("filter.sessionId.anyOf", "filter.sessionId.anyOf takes 1 to %d session ids, not %d", maxFilterIDs, len(ids))
		}
		canon := make([]string, 0, len(ids))
		for _, id := range ids {
			if !uuidRE.MatchString(id) {
				return lf, msp.ErrInvalidParams("filter.sessionId.anyOf", "%q is not a session id (a UUID)", id)
			}
			canon = append(canon, strings.ToLower(id))
		}
		slices.Sort(canon)
		canon = slices.Compact(canon)
		lf.applied.SessionID = &msp.SessionListSessionIDFilter{AnyOf: canon}
		lf.query.IDs = []string{}
		for _, id := range canon {
			// Its scoped key, or the id itself for a session kept
			// unscoped (from before keys were): the owner is checked
			// either way.
			lf.query.IDs = append(lf.query.IDs, sessionKey(principal, id))
			if k := sessionKey(principal, id); k != id {
				lf.query.IDs = append(lf.query.IDs, id)
			}
		}
	}
	if t := f.Text; t != nil {
		fields, err := canonicalFields(t.Fields)
		if err != nil {
			return lf, err
		}
		terms, err := canonicalTerms("filter.text", t.AllOf, t.AnyOf)
		if err != nil {
			return lf, err
		}
		lf.applied.Text = &msp.SessionListTextFilter{AllOf: terms.AllOf, AnyOf: terms.AnyOf, Fields: fields}
		if slices.Contains(fields, msp.TextFieldName) {
			lf.query.Name = terms
		} else {
			lf.none = true
		}
	}
	if c := f.Content; c != nil {
		terms, err := canonicalTerms("filter.content", c.AllOf, c.AnyOf)
		if err != nil {
			return lf, err
		}
		lf.applied.Content = &msp.SessionListContentFilter{AllOf: terms.AllOf, AnyOf: terms.AnyOf}
		lf.query.Content = terms
	}
	return lf, nil
}

// canonicalFields checks text.fields: 1–2 unique served fields, echoed
// name then title.
func canonicalFields(fields []string) ([]string, error) {
	var out []string
	for _, f := range []string{msp.TextFieldName, msp.TextFieldTitle} {
		if slices.Contains(fields, f) {
			out = append(out, f)
		}
	}
	for _, f := range fields {
		if f != msp.TextFieldName && f != msp.TextFieldTitle {
			return nil, msp.ErrInvalidParams("filter.text.fields", "filter.text.fields: %q is not a field (name or title)", f)
		}
	}
	if len(fields) < 1 || len(fields) > 2 || len(out) != len(fields) {
		return nil, msp.ErrInvalidParams("filter.text.fields", "filter.text.fields takes 1 or 2 unique fields (name, title), not %q", fields)
	}
	return out, nil
}

// canonicalTerms checks and canonicalizes a member's terms: 1–16 in all,
// each 1–128 bytes canonical (trimmed, lowercased, NFC); each set
// deduplicated and sorted.
func canonicalTerms(member string, allOf, anyOf []string) (store.Terms, error) {
	if n := len(allOf) + len(anyOf); n < 1 || n > maxFilterTerms {
		return store.Terms{}, msp.ErrInvalidParams(member, "%s takes 1 to %d terms in allOf and anyOf together, not %d", member, maxFilterTerms, n)
	}
	set := func(name string, terms []string) ([]string, error) {
		var out []string
		for _, term := range terms {
			c := store.Canonical(term)
			if len(c) < 1 || len(c) > maxFilterTermBytes {
				return nil, msp.ErrInvalidParams(member+"."+name, "%s.%s: a term is 1 to %d bytes once trimmed, lowercased and NFC-normalized, not %d", member, name, maxFilterTermBytes, len(c))
			}
			out = append(out, c)
		}
		slices.Sort(out)
		return slices.Compact(out), nil
	}
	all, err := set("allOf", allOf)
	if err != nil {
		return store.Terms{}, err
	}
	anyTerms, err := set("anyOf", anyOf)
	if err != nil {
		return store.Terms{}, err
	}
	return store.Terms{AllOf: all, AnyOf: anyTerms}, nil
}

// snippet is plain text of a matching message for its row: its spaces
// folded, at most snippetRunes runes, from a little before the first word
// a term matches, with "…" where it was cut.
func snippet(text string, t store.Terms) string {
	rs := []rune(strings.Join(strings.Fields(text), " "))
	if len(rs) <= snippetRunes {
		return string(rs)
	}
	start := max(0, firstMatch(rs, slices.Concat(t.AllOf, t.AnyOf))-40)
	start = min(start, len(rs)-(snippetRunes-1))
	switch {
	case start <= 0:
		return string(rs[:snippetRunes-1]) + "…"
	case len(rs)-start <= snippetRunes-1:
		return "…" + string(rs[start:])
	}
	return "…" + string(rs[start:start+snippetRunes-2]) + "…"
}

// firstMatch is the rune index of the first token of rs that a term's
// first token begins, 0 when none is found.
func firstMatch(rs []rune, terms []string) int {
	lower := make([]rune, len(rs))
	for i, r := range rs {
		lower[i] = unicode.ToLower(r)
	}
	var heads [][]rune
	for _, term := range terms {
		if toks := store.Tokens(term); len(toks) > 0 {
			heads = append(heads, []rune(toks[0]))
		}
	}
	for i := range lower {
		if !isWordRune(lower[i]) || i > 0 && isWordRune(lower[i-1]) {
			continue
		}
		for _, h := range heads {
			if len(lower)-i >= len(h) && slices.Equal(lower[i:i+len(h)], h) {
				return i
			}
		}
	}
	return 0
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r) }
