package jetstream

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// logPage is how many consecutive records of a session share one subject.
// A read finds its start with one lookup of the page's first record and
// skips at most logPage-1 records; the server's per-subject index holds
// one entry per page rather than one per record.
const logPage = 32

// subjects builds the stream's subjects under one prefix:
//
//	<p>.log.<session>.<page>  records; page = (seq-1)/logPage
//	<p>.row.<session>         the session row (rolled up: only the last kept)
//	<p>.own.<owner>.<session> the row's entry in its owner's index (rolled up)
//	<p>.txt.<owner>.<session> the session's search text (rolled up; search.go)
//	<p>.cmd.<command>.<session> ledger entries ("=" as session: none)
//	<p>.busy.<session>        the row's busy entry, written with it (rolled up;
//	                          an idle entry expires, so only busy sessions stay)
//	<p>.meta.layout           the layout version the stream is written in
//
// Ids become tokens (see token), so no id can reach into another's subjects.
type subjects struct{ prefix string }

func (s subjects) logPage(session string, seq int64) string {
	return s.prefix + ".log." + token(session) + "." + strconv.FormatInt((seq-1)/logPage, 10)
}

// log matches every page of a session's log.
func (s subjects) log(session string) string { return s.prefix + ".log." + token(session) + ".*" }

func (s subjects) row(session string) string { return s.prefix + ".row." + token(session) }

// rows matches every session row.
func (s subjects) rows() string { return s.prefix + ".row.*" }

// owned is a session's entry in its owner's index.
func (s subjects) owned(owner, session string) string {
	return s.prefix + ".own." + token(owner) + "." + token(session)
}

// ownedBy matches every entry of an owner's index.
func (s subjects) ownedBy(owner string) string { return s.prefix + ".own." + token(owner) + ".*" }

// ownedAny matches a session's index entry under whatever owner.
func (s subjects) ownedAny(session string) string { return s.prefix + ".own.*." + token(session) }

// text is a session's search text, under its owner (rolled up).
func (s subjects) text(owner, session string) string {
	return s.prefix + ".txt." + token(owner) + "." + token(session)
}

// textsOf matches every search text of an owner's sessions.
func (s subjects) textsOf(owner string) string { return s.prefix + ".txt." + token(owner) + ".*" }

// textAny matches a session's search text under whatever owner.
func (s subjects) textAny(session string) string { return s.prefix + ".txt.*." + token(session) }

func (s subjects) command(id, session string) string {
	return s.prefix + ".cmd." + token(id) + "." + token(session)
}

// commandAny matches a command id under whatever session it names.
func (s subjects) commandAny(id string) string { return s.prefix + ".cmd." + token(id) + ".*" }

// commandsOf matches the ledger entries that name a session.
func (s subjects) commandsOf(session string) string { return s.prefix + ".cmd.*." + token(session) }

// commands matches the whole ledger.
func (s subjects) commands() string { return s.prefix + ".cmd.*.*" }

// busy is a session's busy entry.
func (s subjects) busy(session string) string { return s.prefix + ".busy." + token(session) }

// busyAll matches every busy entry.
func (s subjects) busyAll() string { return s.prefix + ".busy.*" }

// layout holds the layout marker (rolled up).
func (s subjects) layout() string { return s.prefix + ".meta.layout" }

// busyID recovers the session id from a busy entry's subject.
func (s subjects) busyID(subject string) (string, error) {
	t, ok := strings.CutPrefix(subject, s.prefix+".busy.")
	if !ok || t == "" || strings.Contains(t, ".") {
		return "", fmt.Errorf("jetstream: %q is not a busy entry subject", subject)
	}
	return untoken(t)
}

// rowID recovers the session id from a row subject.
func (s subjects) rowID(subject string) (string, error) {
	head := s.prefix + ".row."
	if len(subject) <= len(head) || subject[:len(head)] != head {
		return "", fmt.Errorf("jetstream: %q is not a row subject", subject)
	}
	return untoken(subject[len(head):])
}

// ownedID recovers the session id from an index subject.
func (s subjects) ownedID(subject string) (string, error) {
	head := s.prefix + ".own."
	rest, ok := strings.CutPrefix(subject, head)
	i := strings.LastIndexByte(rest, '.')
	if !ok || i < 0 {
		return "", fmt.Errorf("jetstream: %q is not an index subject", subject)
	}
	return untoken(rest[i+1:])
}

// token turns an id into one subject token. Ids made only of ASCII letters,
// digits, '-' and '_' stand for themselves, so subjects stay readable for
// the usual ids; any other id, and the empty one, is "=" followed by its
// unpadded base64url encoding, which no plain id can equal.
func token(id string) string {
	if id != "" && plain(id) {
		return id
	}
	return "=" + base64.RawURLEncoding.EncodeToString([]byte(id))
}

func plain(id string) bool {
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func untoken(t string) (string, error) {
	if t == "" || t[0] != '=' {
		return t, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(t[1:])
	if err != nil {
		return "", fmt.Errorf("jetstream: bad subject token %q: %w", t, err)
	}
	return string(b), nil
}
