package jetstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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
	keys, _, err := s.ownerKeys(ctx, q.Owner, after, nil)
	if err != nil {
		return nil, fmt.Errorf("jetstream: search: %w", err)
	}
	if q.IDs != nil {
		keys = slices.DeleteFunc(keys, func(k ownedKey) bool { return !slices.Contains(q.IDs, k.ID) })
	}
	var texts []map[string]storedMsg // by shard
	if !q.Name.Empty() || !q.Content.Empty() {
		texts, err = eachShard(ctx, s.shards, func(ctx context.Context, _ int, sh *shard) (map[string]storedMsg, error) {
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

// Sessions implements store.Store. Each stream's leader names the owner's
// index entries there (the subjects <p>.own.<owner>.*, from its
// per-subject index, whatever else the stream holds). When one page holds
// them all, their rows are read at once, a direct-get batch a stream;
// otherwise the entries (headers alone) are read so, merged and sorted,
// and then the rows of the page: O(owner's sessions + limit) in a handful
// of requests. The entries' messages are found by subject (lastOf),
// without walking the stream.
func (s *Store) Sessions(ctx context.Context, owner string, after *store.SessionKey, limit int) ([]store.Session, error) {
	done, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer done()
	if limit <= 0 {
		return nil, nil
	}
	views, err := s.ownerViews(ctx, owner)
	if err != nil {
		return nil, fmt.Errorf("jetstream: sessions: %w", err)
	}
	entries := 0
	for _, v := range views {
		entries += len(v.subjects)
	}
	if entries <= limit {
		// One page holds them all: their rows carry what their index
		// entries would, so the entries need not be read.
		out, err := s.ownerRows(ctx, owner, after, views)
		if err != nil {
			return nil, fmt.Errorf("jetstream: sessions: %w", err)
		}
		return out, nil
	}
	keys, lasts, err := s.ownerKeys(ctx, owner, after, views)
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
	each, err := eachShard(ctx, s.shards, func(ctx context.Context, i int, sh *shard) ([]store.Session, error) {
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

// ownerViews asks each stream's leader, at once, which entries an
// owner's index has there, and its last sequence.
func (s *Store) ownerViews(ctx context.Context, owner string) ([]leaderView, error) {
	return eachShard(ctx, s.shards, func(ctx context.Context, _ int, sh *shard) (leaderView, error) {
		return sh.subjectsOn(ctx, sh.subj.ownedBy(owner))
	})
}

// ownerRows reads the rows of every session in an owner's index (views,
// from ownerViews) and returns its live ones after the key (all when
// nil), newest first: a list whose page holds the whole index, read
// without reading the index entries.
func (s *Store) ownerRows(ctx context.Context, owner string, after *store.SessionKey, views []leaderView) ([]store.Session, error) {
	each, err := eachShard(ctx, s.shards, func(ctx context.Context, i int, sh *shard) ([]store.Session, error) {
		ids, err := views[i].ids(sh.subj.ownedID)
		if err != nil {
			return nil, err
		}
		return sh.rows(ctx, ids, views[i].last)
	})
	if err != nil {
		return nil, err
	}
	var out []store.Session
	for _, rows := range each {
		for _, row := range rows {
			if !row.Erasing && row.Owner == owner && (after == nil || isAfter(keyOf(row), after)) {
				out = append(out, row)
			}
		}
	}
	slices.SortFunc(out, func(a, b store.Session) int { return newestFirst(keyOf(a), keyOf(b)) })
	return out, nil
}

// isAfter tells whether the session of key k comes after key after in a
// list, newest first.
func isAfter(k store.SessionKey, after *store.SessionKey) bool {
	return compareKeys(k.UpdatedAt.UnixNano(), k.ID, store.ClampUnixNanos(after.UpdatedAt), after.ID) < 0
}

// newestFirst orders keys as a list shows them: the most recently
// updated first, then by id.
func newestFirst(a, b store.SessionKey) int {
	return compareKeys(b.UpdatedAt.UnixNano(), b.ID, a.UpdatedAt.UnixNano(), a.ID)
}

// keyOf is a row's key in its owner's list.
func keyOf(r store.Session) store.SessionKey {
	return store.SessionKey{UpdatedAt: r.UpdatedAt, ID: r.ID}
}

// ownerKeys reads an owner's index in every stream at once and returns
// the keys of its live sessions after the key (all when nil), newest
// first, and each shard's leader's last sequence they were read as of.
// views, from ownerViews, says which entries there are; nil asks.
func (s *Store) ownerKeys(ctx context.Context, owner string, after *store.SessionKey, views []leaderView) ([]ownedKey, []uint64, error) {
	if views == nil {
		var err error
		if views, err = s.ownerViews(ctx, owner); err != nil {
			return nil, nil, err
		}
	}
	each, err := eachShard(ctx, s.shards, func(ctx context.Context, i int, sh *shard) ([]store.SessionKey, error) {
		return sh.ownerKeys(ctx, views[i], after)
	})
	if err != nil {
		return nil, nil, err
	}
	var keys []ownedKey
	lasts := make([]uint64, len(each))
	for i, ks := range each {
		lasts[i] = views[i].last
		for _, k := range ks {
			keys = append(keys, ownedKey{SessionKey: k, shard: i})
		}
	}
	if len(each) > 1 {
		slices.SortFunc(keys, func(a, b ownedKey) int { return newestFirst(a.SessionKey, b.SessionKey) })
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

// ownerKeys reads the entries of an owner's index in this shard's stream
// that view (its leader's) names, and returns the keys of its live
// sessions after the key (all when nil), newest first.
func (s *shard) ownerKeys(ctx context.Context, view leaderView, after *store.SessionKey) ([]store.SessionKey, error) {
	entries, err := s.lastOf(ctx, slices.Collect(maps.Keys(view.subjects)), view.last)
	if err != nil {
		return nil, err
	}
	keys := make([]store.SessionKey, 0, len(entries))
	for subject, m := range entries {
		if m.header.Get(hdrErasing) == "1" {
			continue
		}
		id, err := s.subj.ownedID(subject)
		if err != nil {
			return nil, err
		}
		updated, err := headerInt(m, hdrUpdated)
		if err != nil {
			return nil, err
		}
		keys = append(keys, store.SessionKey{UpdatedAt: time.Unix(0, updated), ID: id})
	}
	slices.SortFunc(keys, newestFirst)
	if after != nil {
		keys = slices.DeleteFunc(keys, func(k store.SessionKey) bool { return !isAfter(k, after) })
	}
	return keys, nil
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
