package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"mspd/store"
)

// Fields of search_tokens.
const (
	fieldName    = 0
	fieldContent = 1
)

// indexText adds t to the session's search index inside the writer's
// open transaction: the name's tokens replace the old name's, each
// message is a text row and adds its tokens.
func (s *Store) indexText(ctx context.Context, sessionID string, t *store.Text) error {
	fail := func(err error) error { return fmt.Errorf("sqlite: index session %q: %w", sessionID, err) }
	if t.Name != nil {
		if _, err := s.w.deleteNameTokens.ExecContext(ctx, sessionID); err != nil {
			return fail(err)
		}
		if _, err := s.w.upsertText.ExecContext(ctx, sessionID, 0, *t.Name); err != nil {
			return fail(err)
		}
		if err := s.insertTokens(ctx, sessionID, fieldName, *t.Name); err != nil {
			return fail(err)
		}
	}
	if len(t.Messages) == 0 {
		return nil
	}
	for _, m := range t.Messages {
		m = store.CutMessage(m)
		if _, err := s.w.appendText.ExecContext(ctx, sessionID, m); err != nil {
			return fail(err)
		}
		if err := s.insertTokens(ctx, sessionID, fieldContent, m); err != nil {
			return fail(err)
		}
	}
	return nil
}

func (s *Store) insertTokens(ctx context.Context, sessionID string, field int, text string) error {
	toks := store.UniqueTokens(text)
	return s.tokenRows.exec(ctx, s.wc, len(toks), func(i int, args []any) []any {
		return append(args, sessionID, field, []byte(toks[i]))
	})
}

// Search implements store.Store. It walks sessions_by_owner newest first
// from the key, probing search_tokens for each row (one seek per token of
// each term), so it reads q.Owner's rows and their tokens alone. A term of
// several tokens is probed token by token and then checked in order
// against the session's texts, which are also where a row's Match comes
// from.
func (s *Store) Search(ctx context.Context, q store.Query, after *store.SessionKey, limit int) ([]store.Hit, error) {
	if limit <= 0 || (q.IDs != nil && len(q.IDs) == 0) {
		return nil, nil
	}
	var out []store.Hit
	for len(out) < limit {
		rows, err := s.searchRows(ctx, q, after, limit-len(out))
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			hit, ok, err := s.check(ctx, q, row)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, hit)
			}
		}
		if len(rows) < limit-len(out) || len(rows) == 0 {
			break
		}
		last := rows[len(rows)-1]
		after = &store.SessionKey{UpdatedAt: last.UpdatedAt, ID: last.ID}
	}
	return out, nil
}

// searchRows returns the rows whose tokens pass q: every token of every
// term present (the last as a prefix).
func (s *Store) searchRows(ctx context.Context, q store.Query, after *store.SessionKey, limit int) ([]store.Session, error) {
	var sb strings.Builder
	args := []any{q.Owner}
	sb.WriteString(`SELECT ` + sessionCols + ` FROM sessions s WHERE s.owner = ?`)
	if after != nil {
		sb.WriteString(` AND (s.updated_at, s.id) < (?, ?)`)
		args = append(args, store.ClampUnixNanos(after.UpdatedAt), after.ID)
	}
	if q.IDs != nil {
		sb.WriteString(` AND s.id IN (?` + strings.Repeat(`, ?`, len(q.IDs)-1) + `)`)
		for _, id := range q.IDs {
			args = append(args, id)
		}
	}
	args = probeTerms(&sb, args, fieldName, q.Name)
	args = probeTerms(&sb, args, fieldContent, q.Content)
	sb.WriteString(` ORDER BY s.updated_at DESC, s.id DESC LIMIT ?`)
	args = append(args, limit)
	rows, err := s.rdb.QueryContext(ctx, sb.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: search: %w", err)
	}
	return scanSessions(rows)
}

// probeTerms adds t's condition on field to a WHERE clause.
func probeTerms(sb *strings.Builder, args []any, field int, t store.Terms) []any {
	for _, term := range t.AllOf {
		sb.WriteString(` AND `)
		args = probeTerm(sb, args, field, term)
	}
	if len(t.AnyOf) > 0 {
		sb.WriteString(` AND (`)
		for i, term := range t.AnyOf {
			if i > 0 {
				sb.WriteString(` OR `)
			}
			args = probeTerm(sb, args, field, term)
		}
		sb.WriteString(`)`)
	}
	return args
}

// probeTerm writes one term's condition: each of its tokens in the
// session's field, the last as a prefix (a range of BLOBs: no UTF-8 byte
// is 0xFF). A term of no token matches nothing.
func probeTerm(sb *strings.Builder, args []any, field int, term string) []any {
	toks := store.Tokens(term)
	if len(toks) == 0 {
		sb.WriteString(`0`)
		return args
	}
	sb.WriteString(`(`)
	for i, tok := range toks {
		if i > 0 {
			sb.WriteString(` AND `)
		}
		if i < len(toks)-1 {
			sb.WriteString(`EXISTS (SELECT 1 FROM search_tokens t WHERE t.session_id = s.id AND t.field = ? AND t.token = ?)`)
			args = append(args, field, []byte(tok))
			continue
		}
		sb.WriteString(`EXISTS (SELECT 1 FROM search_tokens t WHERE t.session_id = s.id AND t.field = ? AND t.token >= ? AND t.token < ?)`)
		args = append(args, field, []byte(tok), append([]byte(tok), 0xFF))
	}
	sb.WriteString(`)`)
	return args
}

// check matches a row that passed the token probes against its texts, in
// order, and finds its Match.
func (s *Store) check(ctx context.Context, q store.Query, row store.Session) (store.Hit, bool, error) {
	hit := store.Hit{Session: row}
	if !manyTokens(q.Name) && q.Content.Empty() {
		return hit, true, nil
	}
	name, msgs, err := s.texts(ctx, row.ID)
	if err != nil {
		return store.Hit{}, false, err
	}
	toks := make([][]string, len(msgs))
	for i, m := range msgs {
		toks[i] = store.Tokens(m)
	}
	if !q.Name.Matches(store.Tokens(name)) || !q.Content.MatchesAny(toks) {
		return store.Hit{}, false, nil
	}
	if i := q.Content.BestMatch(toks); i >= 0 {
		hit.Match = msgs[i]
	}
	return hit, true, nil
}

// manyTokens tells whether a term of t has several tokens: the probes
// found them each, not yet in a row.
func manyTokens(t store.Terms) bool {
	for _, term := range append(t.AllOf[:len(t.AllOf):len(t.AllOf)], t.AnyOf...) {
		if len(store.Tokens(term)) > 1 {
			return true
		}
	}
	return false
}

// texts reads a session's indexed name and messages, in order.
func (s *Store) texts(ctx context.Context, sessionID string) (name string, msgs []string, err error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT n, text FROM search_text WHERE session_id = ? ORDER BY n`, sessionID)
	if err != nil {
		return "", nil, fmt.Errorf("sqlite: search texts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var n int64
		var text string
		if err := rows.Scan(&n, &text); err != nil {
			return "", nil, fmt.Errorf("sqlite: search texts: %w", err)
		}
		if n == 0 {
			name = text
		} else {
			msgs = append(msgs, text)
		}
	}
	return name, msgs, rows.Err()
}

// backfill indexes the sessions search_backfill lists (those written
// before version 5) from their logs, through the indexer, a transaction
// of up to backfillChunk sessions at a time, so an interrupted Open goes on
// where it stopped. It runs on the write connection before the writer
// starts.
func (s *Store) backfill(ctx context.Context, indexer store.Indexer) error {
	for {
		ids, err := s.pendingBackfill(ctx)
		if err != nil || len(ids) == 0 {
			return err
		}
		if _, err := s.w.begin.ExecContext(ctx); err != nil {
			return fmt.Errorf("sqlite: backfill: %w", err)
		}
		for _, id := range ids {
			if err := s.backfillOne(ctx, indexer, id); err != nil {
				_, _ = s.w.rollback.ExecContext(ctx)
				return fmt.Errorf("sqlite: backfill %q: %w", id, err)
			}
		}
		if _, err := s.w.commit.ExecContext(ctx); err != nil {
			_, _ = s.w.rollback.ExecContext(ctx)
			return fmt.Errorf("sqlite: backfill: %w", err)
		}
	}
}

const backfillChunk = 64

func (s *Store) pendingBackfill(ctx context.Context) ([]string, error) {
	rows, err := s.wc.QueryContext(ctx, `SELECT session_id FROM search_backfill LIMIT ?`, backfillChunk)
	if err != nil {
		return nil, fmt.Errorf("sqlite: backfill: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqlite: backfill: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// backfillOne indexes one session's log, replacing whatever index it had.
func (s *Store) backfillOne(ctx context.Context, indexer store.Indexer, id string) error {
	rows, err := s.wc.QueryContext(ctx, `SELECT seq, method, CAST(params AS BLOB) FROM events WHERE session_id = ? ORDER BY seq`, id)
	if err != nil {
		return err
	}
	var t store.Text
	for rows.Next() {
		var r store.Record
		if err := rows.Scan(&r.Seq, &r.Method, &r.Params); err != nil {
			rows.Close()
			return err
		}
		t.Add(indexer, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, st := range []*sql.Stmt{s.w.deleteTokens, s.w.deleteTexts, s.w.deleteBackfill} {
		if _, err := st.ExecContext(ctx, id); err != nil {
			return err
		}
	}
	return s.indexText(ctx, id, &t)
}
