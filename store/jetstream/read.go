package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"mspd/store"
)

// Records implements store.Store; see the package doc for how it finds
// the record after the cursor.
func (s *shard) Records(ctx context.Context, sessionID string, after int64, lim store.Limit) ([]store.Record, error) {
	done, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer done()
	if lim.Rows <= 0 {
		return nil, nil
	}
	var rs []store.Record
	used := 0
	err = s.each(ctx, sessionID, after, lim.Rows, func() int { return lim.Bytes - used }, func(r store.Record) bool {
		if !lim.Admits(len(rs), used, len(r.Params)) {
			return false
		}
		rs, used = append(rs, r), used+len(r.Params)
		return true
	})
	return rs, err
}

// each hands fn the records of a session after seq after, ascending, up
// to rows of them, until fn returns false. room tells how many bytes of
// records the read has room for now, so that no batch brings much more.
// The stream cannot tell a message's size before sending it, so fn may be
// handed one record past a bound, which it drops.
func (s *shard) each(ctx context.Context, sessionID string, after int64, rows int, room func() int, fn func(store.Record) bool) error {
	at, err := s.seek(ctx, sessionID, max(after, 0)+1)
	if errors.Is(err, errNoMsg) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("jetstream: records of %q: %w", sessionID, err)
	}
	if !fn(at.Record) || rows == 1 {
		return nil
	}
	n := 1
	err = s.scan(ctx, s.subj.log(sessionID), at.stream+1, room, func(m storedMsg) (bool, error) {
		r, err := decodeRecord(m)
		if err != nil {
			return false, err
		}
		n++
		return fn(r.Record) && n < rows, nil
	})
	if err != nil {
		return fmt.Errorf("jetstream: records of %q: %w", sessionID, err)
	}
	return nil
}

// seek finds a session's record target, or errNoMsg when the log ends
// before it. The first record of target's page is one get; from a record
// d at stream sequence S, record target cannot sit before S+(target-d),
// as each record between takes a sequence of its own, so a get of the
// session's next record from there lands on target or closer to it. A
// Commit's records are contiguous in the stream, so this takes one or two
// gets unless the page's records are scattered among other sessions'.
func (s *shard) seek(ctx context.Context, sessionID string, target int64) (positioned, error) {
	m, err := s.get(ctx, getRequest{NextFor: s.subj.logPage(sessionID, target)})
	if err != nil {
		return positioned{}, err
	}
	for {
		at, err := decodeRecord(m)
		if err != nil || at.Seq >= target {
			return at, err
		}
		if m, err = s.get(ctx, getRequest{Seq: m.seq + uint64(target-at.Seq), NextFor: s.subj.log(sessionID)}); err != nil {
			return positioned{}, err
		}
	}
}

// RecordsBefore implements store.Store. The stream reads forward only,
// so it reads back in spans, each forward from its start: the first is
// the record just below before, and each span after is as many records
// as the room left would hold were they as large as those read so far,
// up to four times as many as read so far. Of the span that meets the
// bound it keeps the records nearest before that fit, dropping the others
// as it reads, so it holds about the bound however long the span.
func (s *shard) RecordsBefore(ctx context.Context, sessionID string, before int64, lim store.Limit) ([]store.Record, error) {
	done, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer done()
	if lim.Rows <= 0 || before <= 1 {
		return nil, nil
	}
	h, err := s.head(ctx, sessionID) // before may lie past the end
	if err != nil {
		return nil, err
	}
	hi := min(before, h.seq+1) // the spans read so far start at hi
	from := max(hi-int64(lim.Rows), 1)
	var out []store.Record // ascending; nearest before last
	used := 0
	for span := int64(1); hi > from; {
		lo := max(hi-span, from)
		var kept []store.Record // the span's records that fit, ascending
		spanUsed, full := 0, false
		err := s.each(ctx, sessionID, lo-1, int(hi-lo), func() int { return lim.Bytes - used }, func(r store.Record) bool {
			kept, spanUsed = append(kept, r), spanUsed+len(r.Params)
			for len(kept) > 0 && !lim.Admits(len(out)+len(kept)-1, used+spanUsed-len(r.Params), len(r.Params)) {
				spanUsed -= len(kept[0].Params)
				kept[0] = store.Record{} // let go of its params now
				kept, full = kept[1:], true
			}
			return true
		})
		if err != nil {
			return nil, err
		}
		out, used = append(kept, out...), used+spanUsed
		if full || len(kept) < int(hi-lo) {
			break // the bound is met, or the log is shorter than its head said (erased since)
		}
		hi = lo
		span = int64(len(out)) * 4
		if room := lim.Bytes - used; used > 0 {
			span = min(span, max(int64(room)*int64(len(out))/int64(used), 1))
		}
	}
	return out, nil
}

// Head implements store.Store.
func (s *shard) Head(ctx context.Context, sessionID string) (int64, error) {
	done, err := s.enter()
	if err != nil {
		return 0, err
	}
	defer done()
	h, err := s.head(ctx, sessionID)
	return h.seq, err
}

// headPos is a session's last record: its dense seq and stream sequence,
// zeros for an empty log.
type headPos struct {
	seq    int64
	stream uint64
}

func (s *shard) head(ctx context.Context, sessionID string) (headPos, error) {
	m, err := s.get(ctx, getRequest{LastFor: s.subj.log(sessionID)})
	if errors.Is(err, errNoMsg) {
		return headPos{}, nil
	}
	if err != nil {
		return headPos{}, fmt.Errorf("jetstream: head of %q: %w", sessionID, err)
	}
	seq, err := headerInt(m, hdrSeq)
	if err != nil {
		return headPos{}, err
	}
	return headPos{seq: seq, stream: m.seq}, nil
}

// Session implements store.Store.
func (s *shard) Session(ctx context.Context, id string) (store.Session, error) {
	done, err := s.enter()
	if err != nil {
		return store.Session{}, err
	}
	defer done()
	m, err := s.get(ctx, getRequest{LastFor: s.subj.row(id)})
	if errors.Is(err, errNoMsg) {
		return store.Session{}, fmt.Errorf("jetstream: session %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Session{}, fmt.Errorf("jetstream: session %q: %w", id, err)
	}
	return decodeRow(id, m)
}

// compareKeys orders (updatedAt, id) pairs ascending.
func compareKeys(at1 int64, id1 string, at2 int64, id2 string) int {
	return cmp.Or(cmp.Compare(at1, at2), strings.Compare(id1, id2))
}

// BusySessions is Store.BusySessions on this shard's stream. It asks the
// stream leader which busy entries there are (the subjects on <p>.busy.*,
// from its per-subject index), then reads their rows in direct-get
// batches (lastOf): the row is the truth, so one that is not busy (its
// entry says idle, until that expires), erasing or gone is left out, and
// the entries themselves need not be read. The cost is the busy sessions
// and the ones gone idle within idleTTL, whatever is stored: a scan of
// the entries instead would walk the stream's blocks between them. They
// come sorted by id.
func (s *shard) BusySessions(ctx context.Context) ([]store.Session, error) {
	done, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer done()
	view, err := s.subjectsOn(ctx, s.subj.busyAll())
	if err != nil {
		return nil, fmt.Errorf("jetstream: busy sessions: %w", err)
	}
	ids, err := view.ids(s.subj.busyID)
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	rows, err := s.rows(ctx, ids, view.last)
	if err != nil {
		return nil, fmt.Errorf("jetstream: busy sessions: %w", err)
	}
	out := rows[:0]
	for _, row := range rows {
		if row.Busy && !row.Erasing {
			out = append(out, row)
		}
	}
	return out, nil
}

// rows reads the rows of ids as new as a leader whose last sequence was
// last, in the order of ids; a session with no row is left out.
func (s *shard) rows(ctx context.Context, ids []string, last uint64) ([]store.Session, error) {
	subjects := make([]string, len(ids))
	for i, id := range ids {
		subjects[i] = s.subj.row(id)
	}
	msgs, err := s.lastOf(ctx, subjects, last)
	if err != nil {
		return nil, err
	}
	out := make([]store.Session, 0, len(msgs))
	for i, id := range ids {
		m, ok := msgs[subjects[i]]
		if !ok {
			continue
		}
		row, err := decodeRow(id, m)
		if err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, nil
}

// parallelGets is how many single-message gets one read has in flight:
// the subjects a lagging replica left to the leader (lastOf).
const parallelGets = 8

// getEach calls get for each of items, parallelGets at once, and returns
// the values get found, in the order of items.
func getEach[I, T any](ctx context.Context, items []I, get func(context.Context, I) (T, bool, error)) ([]T, error) {
	vals := make([]T, len(items))
	found := make([]bool, len(items))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelGets)
	for i, item := range items {
		g.Go(func() (err error) {
			vals[i], found[i], err = get(gctx, item)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := vals[:0]
	for i, v := range vals {
		if found[i] {
			out = append(out, v)
		}
	}
	return out, nil
}

// subjectsOn asks the stream leader which subjects filter matches, and
// its last sequence.
func (s *shard) subjectsOn(ctx context.Context, filter string) (leaderView, error) {
	ctx, cancel := s.timeout(ctx)
	defer cancel()
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return leaderView{}, err
	}
	return leaderView{subjects: info.State.Subjects, last: info.State.LastSeq}, nil
}

// lastOn reads the last message of each subject filter matches, by
// subject. Those are rolled-up subjects (rows, index entries): a message
// read from a lagging replica may be followed by its successor from the
// leader (see scan), and the later one wins.
func (s *shard) lastOn(ctx context.Context, filter string) (map[string]storedMsg, error) {
	last := map[string]storedMsg{}
	err := s.scan(ctx, filter, 0, nil, func(m storedMsg) (bool, error) {
		last[m.subject] = m
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if err := s.dropDeleted(ctx, filter, last); err != nil {
		return nil, err
	}
	return last, nil
}

// dropDeleted removes, with several replicas, the messages on filter that
// a lagging replica still served although the leader has deleted them:
// the leader lists the subjects it holds, after the scan, so a deletion
// acknowledged before the scan began is seen.
func (s *shard) dropDeleted(ctx context.Context, filter string, rows map[string]storedMsg) error {
	if !s.verify || len(rows) == 0 {
		return nil
	}
	held, err := s.subjectsOn(ctx, filter)
	if err != nil {
		return err
	}
	for subject := range rows {
		if _, ok := held.subjects[subject]; !ok {
			delete(rows, subject)
		}
	}
	return nil
}

// command is Store.Command on this shard's stream.
func (s *shard) command(ctx context.Context, id string) (store.Command, error) {
	done, err := s.enter()
	if err != nil {
		return store.Command{}, err
	}
	defer done()
	m, err := s.get(ctx, getRequest{LastFor: s.subj.commandAny(id)})
	if errors.Is(err, errNoMsg) {
		return store.Command{}, fmt.Errorf("jetstream: command %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Command{}, fmt.Errorf("jetstream: command %q: %w", id, err)
	}
	return decodeCommand(id, m)
}
