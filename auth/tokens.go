package auth

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode"
)

// MinTokenLength is the shortest token a tokens file may give, and the
// shortest shared token a server listening beyond loopback takes:
// shorter ones are guessable.
const MinTokenLength = 16

// CheckStrength refuses a token shorter than MinTokenLength. The error
// says the minimum, never the token.
func CheckStrength(token string) error {
	if len(token) < MinTokenLength {
		return fmt.Errorf("token shorter than %d characters", MinTokenLength)
	}
	return nil
}

// tokenSet maps token digests to principals. Tokens are kept only as
// SHA-256 digests, so every comparison is of equal length and a lookup
// reveals nothing of which entry, if any, matched.
type tokenSet struct {
	entries []tokenEntry
}

type tokenEntry struct {
	principal string
	digest    [sha256.Size]byte
	line      int // where the tokens file gave it (0: the shared token)
}

// lookup returns the principal whose token has digest d. It compares
// against every entry, in constant time, with no early exit.
func (s *tokenSet) lookup(d [sha256.Size]byte) (string, bool) {
	found := -1
	for i := range s.entries {
		eq := subtle.ConstantTimeCompare(s.entries[i].digest[:], d[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return "", false
	}
	return s.entries[found].principal, true
}

// add records token for principal, refusing a token already given (it
// would be ambiguous which principal it names).
func (s *tokenSet) add(principal, token string) error {
	d := sha256.Sum256([]byte(token))
	for _, e := range s.entries {
		if e.digest == d {
			if e.line == 0 {
				return errors.New("token is the shared --auth-token")
			}
			return fmt.Errorf("token already given on line %d", e.line)
		}
	}
	s.entries = append(s.entries, tokenEntry{principal: principal, digest: d})
	return nil
}

// principals counts the distinct principals (for logs).
func (s *tokenSet) principals() int {
	seen := map[string]bool{}
	for _, e := range s.entries {
		seen[e.principal] = true
	}
	return len(seen)
}

// readTokensFile parses a tokens file: one "principal token" pair a line,
// # comments and blank lines ignored. Errors name the line, never its
// contents.
func readTokensFile(path string) (*tokenSet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth: tokens file: %w", err)
	}
	defer f.Close()
	set := &tokenSet{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if err := set.parseLine(sc.Text(), n); err != nil {
			return nil, fmt.Errorf("auth: tokens file %s line %d: %w", path, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("auth: tokens file %s: %w", path, err)
	}
	return set, nil
}

func (s *tokenSet) parseLine(line string, n int) error {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return nil
	}
	fields := strings.Fields(line)
	switch {
	case len(fields) != 2:
		return fmt.Errorf("want \"principal token\", found %d fields", len(fields))
	case strings.IndexFunc(fields[0]+fields[1], unicode.IsControl) >= 0:
		return errors.New("control character")
	}
	if err := CheckStrength(fields[1]); err != nil {
		return err
	}
	if err := s.add(fields[0], fields[1]); err != nil {
		return err
	}
	s.entries[len(s.entries)-1].line = n
	return nil
}
