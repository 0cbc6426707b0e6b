package jetstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"mspd/store"
)

// maxText bounds a session's search text: past it the oldest messages
// leave it (the name stays), so a long chat is found by its later part.
const maxText = 64 << 10

// textDoc is a session's search text. Its subject's payload is Canon (the
// name and the messages canonical, store.Canonical, one a line), a NUL,
// then the doc as JSON: a search rejects most sessions by a substring
// test of the canonical text, before it decodes or tokenizes anything.
type textDoc struct {
	Name     string   `json:"name,omitempty"`
	Messages []string `json:"messages,omitempty"`
	Canon    string   `json:"-"`
}

// encode is the payload of d.
func (d *textDoc) encode() ([]byte, error) {
	j, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	return append(append([]byte(d.Canon), 0), j...), nil
}

// splitText splits a payload into its canonical text and its JSON.
func splitText(data []byte) (canon, doc []byte, err error) {
	i := bytes.IndexByte(data, 0)
	if i < 0 {
		return nil, nil, errors.New("no canonical text")
	}
	return data[:i], data[i+1:], nil
}

// canon fills d.Canon.
func (d *textDoc) canon() {
	parts := []string{store.Canonical(d.Name)}
	for _, m := range d.Messages {
		parts = append(parts, store.Canonical(m))
	}
	d.Canon = strings.Join(parts, "\n")
}

// mayMatch tells whether t could match the canonical text: each AllOf
// term's first token, and one AnyOf term's, is in it somewhere.
func mayMatch(canon string, t store.Terms) bool {
	in := func(term string) bool {
		toks := store.Tokens(term)
		return len(toks) > 0 && strings.Contains(canon, toks[0])
	}
	for _, term := range t.AllOf {
		if !in(term) {
			return false
		}
	}
	return len(t.AnyOf) == 0 || slices.ContainsFunc(t.AnyOf, in)
}

// textMsg reads a session's search text and returns its successor with t
// added, rolled up: the session's commits are one at a time (its writer
// holds its lease), so the read and the write do not race.
func (s *shard) textMsg(ctx context.Context, sessionID string, t *store.Text) (*nats.Msg, error) {
	subject := s.subj.text(t.Owner, sessionID)
	var doc textDoc
	m, err := s.get(ctx, getRequest{LastFor: subject})
	switch {
	case errors.Is(err, errNoMsg):
	case err != nil:
		return nil, fmt.Errorf("jetstream: search text of %q: %w", sessionID, err)
	default:
		_, raw, err := splitText(m.data)
		if err == nil {
			err = json.Unmarshal(raw, &doc)
		}
		if err != nil {
			return nil, fmt.Errorf("jetstream: search text of %q: %w", sessionID, err)
		}
	}
	if t.Name != nil {
		doc.Name = *t.Name
	}
	for _, msg := range t.Messages {
		doc.Messages = append(doc.Messages, store.CutMessage(msg))
	}
	size := len(doc.Name)
	for _, msg := range doc.Messages {
		size += len(msg)
	}
	for size > maxText && len(doc.Messages) > 0 {
		size -= len(doc.Messages[0])
		doc.Messages = doc.Messages[1:]
	}
	doc.canon()
	data, err := doc.encode()
	if err != nil {
		return nil, err
	}
	out := nats.NewMsg(subject)
	out.Header.Set("Nats-Rollup", "sub")
	out.Data = data
	return out, nil
}

// Search implements store.Store: it reads the owner's index entries and
// search texts in each stream (one scan of each of its two subject
// families there, however many other owners' sessions the stream holds),
// matches the texts here, and reads the rows of the page.
func (s *Store) Search(ctx context.Context, q store.Query, after *store.SessionKey, limit int) ([]store.Hit, error) {
	done, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer done()
	if limit <= 0 || (q.IDs != nil && len(q.IDs) == 0) {
		return nil, nil
	}
	keys, _, err := s.ownerKeys(ctx, q.Owner, after)
	if err != nil {
		return nil, fmt.Errorf("jetstream: search: %w", err)
	}
	if q.IDs != nil {
		keys = slices.DeleteFunc(keys, func(k ownedKey) bool { return !slices.Contains(q.IDs, k.ID) })
	}
	var texts []map[string]storedMsg // by shard
	if !q.Name.Empty() || !q.Content.Empty() {
		texts, err = eachShard(ctx, s.shards, func(ctx context.Context, sh *shard) (map[string]storedMsg, error) {
			return sh.lastOn(ctx, sh.subj.textsOf(q.Owner))
		})
		if err != nil {
			return nil, fmt.Errorf("jetstream: search: %w", err)
		}
	}
	var out []store.Hit
	for _, k := range keys {
		if len(out) == limit {
			break
		}
		var shardTexts map[string]storedMsg
		if texts != nil {
			shardTexts = texts[k.shard]
		}
		sh := s.shards[k.shard]
		match, ok, err := sh.matchText(q, shardTexts, k.ID)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		row, ok, err := sh.ownedRow(ctx, q.Owner, k.ID)
		if err != nil {
			return nil, fmt.Errorf("jetstream: search: %w", err)
		}
		if ok {
			out = append(out, store.Hit{Session: row, Match: match})
		}
	}
	return out, nil
}

// Sessions implements store.Store. It reads the owner's index in each
// stream (the entries on <p>.own.<owner>.*, headers alone), merges and
// sorts them, and reads the rows of the page in one direct-get batch a
// stream: O(owner's sessions + limit), whatever the other owners hold,
// in a handful of requests.
func (s *Store) Sessions(ctx context.Context, owner string, after *store.SessionKey, limit int) ([]store.Session, error) {
	done, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer done()
	if limit <= 0 {
		return nil, nil
	}
	keys, lasts, err := s.ownerKeys(ctx, owner, after)
	if err != nil {
		return nil, fmt.Errorf("jetstream: sessions: %w", err)
	}
	out := make([]store.Session, 0, min(limit, len(keys)))
	// The rows of a page at a time; a row gone or erasing since its entry
	// was read leaves room for the next key.
	for len(out) < limit && len(keys) > 0 {
		page := keys[:min(limit-len(out), len(keys))]
		keys = keys[len(page):]
		rows, err := s.pageRows(ctx, page, lasts)
		if err != nil {
			return nil, fmt.Errorf("jetstream: sessions: %w", err)
		}
		for _, k := range page {
			if row, ok := rows[k.ID]; ok && !row.Erasing && row.Owner == owner {
				out = append(out, row)
			}
		}
	}
	return out, nil
}

// pageRows reads the rows of page's keys, each stream's at once, as new
// as its leader was at lasts[shard], by id.
func (s *Store) pageRows(ctx context.Context, page []ownedKey, lasts []uint64) (map[string]store.Session, error) {
	byShard := make([][]string, len(s.shards))
	for _, k := range page {
		byShard[k.shard] = append(byShard[k.shard], k.ID)
	}
	each, err := eachShard(ctx, s.shards, func(ctx context.Context, sh *shard) ([]store.Session, error) {
		i := slices.Index(s.shards, sh)
		if len(byShard[i]) == 0 {
			return nil, nil
		}
		return sh.rows(ctx, byShard[i], lasts[i])
	})
	if err != nil {
		return nil, err
	}
	rows := make(map[string]store.Session, len(page))
	for _, shardRows := range each {
		for _, row := range shardRows {
			rows[row.ID] = row
		}
	}
	return rows, nil
}

// ownedKey is an entry of an owner's index and the shard holding it.
type ownedKey struct {
	store.SessionKey
	shard int
}

// ownerKeys reads an owner's index in every stream at once and returns
// the keys of its live sessions after the key (all when nil), newest
// first, and each shard's leader's last sequence they were read as of.
func (s *Store) ownerKeys(ctx context.Context, owner string, after *store.SessionKey) ([]ownedKey, []uint64, error) {
	type shardKeys struct {
		keys []store.SessionKey
		last uint64
	}
	each, err := eachShard(ctx, s.shards, func(ctx context.Context, sh *shard) (shardKeys, error) {
		keys, last, err := sh.ownerKeys(ctx, owner, after)
		return shardKeys{keys, last}, err
	})
	if err != nil {
		return nil, nil, err
	}
	var keys []ownedKey
	lasts := make([]uint64, len(each))
	for i, ks := range each {
		lasts[i] = ks.last
		for _, k := range ks.keys {
			keys = append(keys, ownedKey{SessionKey: k, shard: i})
		}
	}
	if len(each) > 1 {
		slices.SortFunc(keys, func(a, b ownedKey) int {
			return compareKeys(b.UpdatedAt.UnixNano(), b.ID, a.UpdatedAt.UnixNano(), a.ID)
		})
	}
	return keys, lasts, nil
}

// matchText matches a session's search text against q.
func (s *shard) matchText(q store.Query, texts map[string]storedMsg, id string) (match string, ok bool, err error) {
	if q.Name.Empty() && q.Content.Empty() {
		return "", true, nil
	}
	m, found := texts[s.subj.text(q.Owner, id)]
	if !found {
		return "", false, nil
	}
	canon, raw, err := splitText(m.data)
	if err != nil {
		return "", false, fmt.Errorf("jetstream: search text of %q: %w", id, err)
	}
	if !mayMatch(string(canon), q.Name) || !mayMatch(string(canon), q.Content) {
		return "", false, nil
	}
	var doc textDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		return "", false, fmt.Errorf("jetstream: search text of %q: %w", id, err)
	}
	toks := make([][]string, len(doc.Messages))
	for i, msg := range doc.Messages {
		toks[i] = store.Tokens(msg)
	}
	if !q.Name.Matches(store.Tokens(doc.Name)) || !q.Content.MatchesAny(toks) {
		return "", false, nil
	}
	if i := q.Content.BestMatch(toks); i >= 0 {
		match = doc.Messages[i]
	}
	return match, true, nil
}

// ownerKeys reads an owner's index in this shard's stream and returns the
// keys of its live sessions after the key (all when nil), newest first,
// and the leader's last sequence they were read as of.
func (s *shard) ownerKeys(ctx context.Context, owner string, after *store.SessionKey) ([]store.SessionKey, uint64, error) {
	entries, last, err := s.ownerIndex(ctx, owner)
	if err != nil {
		return nil, 0, err
	}
	keys := make([]store.SessionKey, 0, len(entries))
	for subject, m := range entries {
		if m.header.Get(hdrErasing) == "1" {
			continue
		}
		id, err := s.subj.ownedID(subject)
		if err != nil {
			return nil, 0, err
		}
		updated, err := headerInt(m, hdrUpdated)
		if err != nil {
			return nil, 0, err
		}
		keys = append(keys, store.SessionKey{UpdatedAt: time.Unix(0, updated), ID: id})
	}
	slices.SortFunc(keys, func(a, b store.SessionKey) int {
		return compareKeys(b.UpdatedAt.UnixNano(), b.ID, a.UpdatedAt.UnixNano(), a.ID)
	})
	if after != nil {
		// Newest first: skip the entries at or above the key.
		key, i := store.ClampUnixNanos(after.UpdatedAt), 0
		for i < len(keys) && compareKeys(keys[i].UpdatedAt.UnixNano(), keys[i].ID, key, after.ID) >= 0 {
			i++
		}
		keys = keys[i:]
	}
	return keys, last, nil
}

// ownedRow reads a session's row; ok is false when it has gone since its
// index entry was read, is being erased, or is not owner's.
func (s *shard) ownedRow(ctx context.Context, owner, id string) (store.Session, bool, error) {
	m, err := s.get(ctx, getRequest{LastFor: s.subj.row(id)})
	if errors.Is(err, errNoMsg) {
		return store.Session{}, false, nil
	}
	if err != nil {
		return store.Session{}, false, err
	}
	row, err := decodeRow(id, m)
	if err != nil {
		return store.Session{}, false, err
	}
	return row, !row.Erasing && row.Owner == owner, nil
}
