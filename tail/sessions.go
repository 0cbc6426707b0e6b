package tail

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"mspd/client"
	"mspd/schema/msp"
)

// Table is the session list as a table for people (`mspd sessions`).
const Table = "table"

// ListOptions configure List.
type ListOptions struct {
	// URL is the server's MSP WebSocket endpoint.
	URL string
	// Token authenticates to a server that requires one.
	Token string
	// Limit is how many sessions to list at most (0: all).
	Limit int
	// Format is Table or JSON (one Session object per line, as the server
	// sent it).
	Format string
	// Now is the time "3m ago" counts from (nil: time.Now).
	Now func() time.Time
}

// listPage is the most session/list returns at once.
const listPage = 200

// List writes the principal's sessions to out, most recently active first,
// paging through session/list. A refused token is ErrUnauthorized.
func List(ctx context.Context, opts ListOptions, out io.Writer) error {
	c, err := dial(ctx, opts.URL, opts.Token, client.Options{ClientName: "mspd_sessions"})
	if err != nil {
		return cmp.Or(unauthorized(err, opts.URL), err)
	}
	defer c.Close()
	rows, err := listSessions(ctx, c, opts.Limit)
	if err != nil {
		return err
	}
	if opts.Format == JSON {
		for _, raw := range rows {
			fmt.Fprintf(out, "%s\n", raw)
		}
		return nil
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	return writeTable(out, rows, now())
}

// listSessions pages through session/list until limit sessions (0: all),
// keeping each as the server sent it.
func listSessions(ctx context.Context, c *client.Client, limit int) ([]json.RawMessage, error) {
	var rows []json.RawMessage
	var cursor *string
	for limit == 0 || len(rows) < limit {
		n := listPage
		if limit > 0 {
			n = min(n, limit-len(rows))
		}
		var res struct {
			Sessions   []json.RawMessage `json:"sessions"`
			NextCursor *string           `json:"nextCursor"`
		}
		if err := c.Call(ctx, msp.MethodSessionList, msp.SessionListParams{Cursor: cursor, Limit: &n}, &res); err != nil {
			return nil, err
		}
		rows = append(rows, res.Sessions...)
		if res.NextCursor == nil {
			break
		}
		cursor = res.NextCursor
	}
	if limit > 0 && len(rows) > limit {
		rows = rows[:limit]
	}
	return rows, nil
}

// writeTable writes sessions as aligned columns.
func writeTable(out io.Writer, rows []json.RawMessage, now time.Time) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tTURNS\tLAST ACTIVITY")
	for _, raw := range rows {
		var s msp.Session
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("session/list: a session the client cannot read: %w", err)
		}
		name := "-"
		if s.Name != "" {
			name = clip(oneLine(s.Name), 40)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", oneLine(s.SessionID), name, oneLine(s.Status),
			strconv.Itoa(s.TurnCount), ago(s.UpdatedAt, now))
	}
	return tw.Flush()
}

// ago words an RFC 3339 time relative to now: "just now", "3m ago", "5h
// ago", "2d ago", then the date.
func ago(stamp string, now time.Time) string {
	t, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		return oneLine(stamp)
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", d/time.Minute)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh ago", d/time.Hour)
	case d < 30*24*time.Hour:
		return fmt.Sprintf("%dd ago", d/(24*time.Hour))
	}
	return t.Local().Format("2006-01-02")
}
