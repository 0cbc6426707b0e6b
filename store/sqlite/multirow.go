package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// maxRowsPerInsert bounds the rows of one multi-row INSERT: a longer run
// is written in chunks. At 4 parameters a row it stays far below SQLite's
// bound on a statement's parameters (32,766 in modernc.org/sqlite's
// build), and it bounds the statements a multiRow prepares.
const maxRowsPerInsert = 64

// multiRow is an INSERT of several rows in one statement: one statement's
// dispatch, bind and VDBE setup for a batch's records or a message's
// tokens rather than one per row (the writer runs each of them for every
// batch of a group, BENCHMARKS.md's notice burst). The statement for n
// rows is prepared on the writer's connection the first time n is met
// and kept for the store's life. Writer goroutine only.
type multiRow struct {
	prefix string // up to VALUES
	row    string // one row's placeholders, "(?, ?)"
	suffix string // after the rows: an ON CONFLICT clause, or ""
	stmts  [maxRowsPerInsert]*sql.Stmt
	args   []any // reused between executions: the writer runs one at a time
}

// exec inserts rows rows, each of width arguments taken in order from
// fill(i, args) for row i, in chunks of at most maxRowsPerInsert.
func (m *multiRow) exec(ctx context.Context, conn *sql.Conn, rows int, fill func(i int, args []any) []any) error {
	for from := 0; from < rows; from += maxRowsPerInsert {
		n := min(rows-from, maxRowsPerInsert)
		st, err := m.stmt(ctx, conn, n)
		if err != nil {
			return err
		}
		args := m.args[:0]
		for i := from; i < from+n; i++ {
			args = fill(i, args)
		}
		_, err = st.ExecContext(ctx, args...)
		clear(args) // holds no batch's bytes past its write
		m.args = args[:0]
		if err != nil {
			return err
		}
	}
	return nil
}

// stmt returns the statement inserting n rows, preparing it once.
func (m *multiRow) stmt(ctx context.Context, conn *sql.Conn, n int) (*sql.Stmt, error) {
	if st := m.stmts[n-1]; st != nil {
		return st, nil
	}
	var sb strings.Builder
	sb.WriteString(m.prefix)
	for i := range n {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(m.row)
	}
	sb.WriteString(m.suffix)
	st, err := conn.PrepareContext(ctx, sb.String())
	if err != nil {
		return nil, fmt.Errorf("prepare an insert of %d rows: %w", n, err)
	}
	m.stmts[n-1] = st
	return st, nil
}

// close closes the statements prepared.
func (m *multiRow) close() []error {
	var errs []error
	for i, st := range m.stmts {
		if st != nil {
			errs = append(errs, st.Close())
			m.stmts[i] = nil
		}
	}
	return errs
}
