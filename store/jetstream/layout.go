package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"mspd/store"
)

// indexLayout is the layout each stream is written in: 2, the owner index
// (<p>.own.*.*) and the busy index (<p>.busy.*). A stream without a layout
// marker was written before the marker, by code that may have written
// neither index.
const indexLayout = 2

// layoutVersion is the newest layout this code reads: 3, a deployment
// spread over several streams, whose stream 0 marker lists the stream
// counts it has used (hdrStreams). Stream 0 of a deployment that never
// used more than one stream stays at 2, so that an mspd from before
// streams could grow still opens it; one that did refuses layout 3 rather
// than miss the sessions in the other streams.
const layoutVersion = 3

// ErrNewerLayout is wrapped by the error Open returns for a stream whose
// layout marker names a layout newer than this code's.
var ErrNewerLayout = errors.New("jetstream: the stream was written by a newer mspd")

func newerLayout(v int64) error {
	return fmt.Errorf("%w (layout %d); this one reads layout %d: upgrade it", ErrNewerLayout, v, layoutVersion)
}

// ErrFewerStreams is wrapped by the error Open returns when Options.Streams
// is below the stream count the deployment already uses: the sessions of
// the streams left out would be lost from sight.
var ErrFewerStreams = errors.New("jetstream: fewer streams than the deployment uses")

func fewerStreams(want int, history []int) error {
	last := history[len(history)-1]
	return fmt.Errorf("%w: its sessions are spread over %d streams (counts used: %s) and %d would leave some out; streams can be added, never removed: open it with %d",
		ErrFewerStreams, last, formatCounts(history), want, last)
}

// marker is what Open reads of stream 0's layout marker before it touches
// any stream's configuration.
type marker struct {
	version int64
	// history is the stream counts used, oldest first: from the marker
	// when it lists them; [1] for a deployment written before (a marker
	// without the list, or data without a marker); empty for a new one.
	history []int
}

// readMarker reads stream 0's layout marker, and fails when it names a
// layout newer than this code's, before Open updates the stream's
// configuration to this code's (which could undo a newer mspd's).
func readMarker(ctx context.Context, js jetstream.JetStream, opts Options) (marker, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	st, err := js.Stream(ctx, opts.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return marker{}, nil
	}
	if err != nil {
		return marker{}, fmt.Errorf("jetstream: stream %s: %w", opts.Stream, err)
	}
	m, err := st.GetLastMsgForSubject(ctx, subjects{prefix: opts.Subject}.layout())
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		if st.CachedInfo().State.Msgs > 0 {
			return marker{history: []int{1}}, nil // written before the marker
		}
		return marker{}, nil
	}
	if err != nil {
		return marker{}, fmt.Errorf("jetstream: reading the layout marker: %w", err)
	}
	mk, err := parseMarker(m.Header)
	if err != nil {
		return marker{}, fmt.Errorf("jetstream: layout marker at %d: %w", m.Sequence, err)
	}
	if mk.version > layoutVersion {
		return marker{}, newerLayout(mk.version)
	}
	return mk, nil
}

// parseMarker reads a layout marker's headers.
func parseMarker(h nats.Header) (marker, error) {
	v, err := strconv.ParseInt(h.Get(hdrLayout), 10, 64)
	if err != nil {
		return marker{}, err
	}
	mk := marker{version: v, history: []int{1}}
	if list := h.Get(hdrStreams); list != "" {
		if mk.history, err = parseCounts(list); err != nil {
			return marker{}, err
		}
	}
	return mk, nil
}

// parseCounts reads a stream-count history ("1,4").
func parseCounts(list string) ([]int, error) {
	var counts []int
	for f := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > MaxStreams || (len(counts) > 0 && n <= counts[len(counts)-1]) {
			return nil, fmt.Errorf("bad stream counts %q", list)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

func formatCounts(counts []int) string {
	parts := make([]string, len(counts))
	for i, n := range counts {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

// upgrade brings the shard's stream to indexLayout: below it (or without
// a marker) it indexes the rows written without their index entries
// (backfill), then writes the marker, so that a later Open reads the
// marker alone instead of every row.
func (s *shard) upgrade(ctx context.Context) error {
	v, seq, err := s.layout(ctx)
	switch {
	case err != nil:
		return err
	case v > layoutVersion:
		return newerLayout(v)
	case v >= indexLayout:
		return nil
	}
	if err := s.backfill(ctx); err != nil {
		return err
	}
	return s.markLayout(ctx, seq)
}

// layout reads the layout marker: its version and stream sequence, zeros
// when there is none.
func (s *shard) layout(ctx context.Context) (version int64, seq uint64, err error) {
	mk, seq, err := s.readLayout(ctx)
	return mk.version, seq, err
}

// readLayout reads the layout marker and its stream sequence; a zero
// marker and sequence when there is none.
func (s *shard) readLayout(ctx context.Context) (marker, uint64, error) {
	m, err := s.get(ctx, getRequest{LastFor: s.subj.layout()})
	if errors.Is(err, errNoMsg) {
		return marker{}, 0, nil
	}
	if err != nil {
		return marker{}, 0, fmt.Errorf("jetstream: reading the layout marker: %w", err)
	}
	mk, err := parseMarker(m.header)
	if err != nil {
		return marker{}, 0, fmt.Errorf("jetstream: layout marker at %d: %w", m.seq, err)
	}
	return mk, m.seq, nil
}

// markLayout writes the marker, guarded by the one upgrade read (seq, 0:
// none), so that a marker another node wrote meanwhile is not overwritten;
// that one is read instead.
func (s *shard) markLayout(ctx context.Context, seq uint64) error {
	err := s.publish(ctx, []*nats.Msg{s.markerMsg(indexLayout, nil, seq)})
	if !errors.Is(err, store.ErrConflict) {
		if err != nil {
			return fmt.Errorf("jetstream: writing the layout marker: %w", err)
		}
		return nil
	}
	v, _, err := s.layout(ctx)
	switch {
	case err != nil:
		return err
	case v > layoutVersion:
		return newerLayout(v)
	case v < indexLayout:
		return fmt.Errorf("jetstream: the layout marker went to %d while this node upgraded to %d", v, indexLayout)
	}
	return nil
}

// markerMsg is a layout marker of version v, listing counts when there
// are any, guarded by seq (the marker it replaces, 0: none).
func (s *shard) markerMsg(v int, counts []int, seq uint64) *nats.Msg {
	m := nats.NewMsg(s.subj.layout())
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Header.Set(hdrLayout, strconv.Itoa(v))
	if len(counts) > 0 {
		m.Header.Set(hdrStreams, formatCounts(counts))
	}
	expect(m, seq, s.subj.layout())
	m.Header.Set(jetstream.MsgIDHeader, "mspd-"+nuid.Next())
	return m
}

// backfill gives each row its missing index entries: a row without the
// Mspd-Owner header (written before the owner index) its owner's entry,
// the owner taken from its state as store.LegacyOwner reads it; a busy
// row without a busy entry (written before the busy index) that entry.
// Each row's upgrade is one batch guarded by the row's stream sequence:
// a row rewritten meanwhile by a Commit (which writes its entries too) is
// left alone. One scan of the rows and one of the busy entries.
func (s *shard) backfill(ctx context.Context) error {
	rows, err := s.lastOn(ctx, s.subj.rows())
	if err != nil {
		return fmt.Errorf("jetstream: indexing rows: %w", err)
	}
	entries, err := s.lastOn(ctx, s.subj.busyAll())
	if err != nil {
		return fmt.Errorf("jetstream: indexing rows: %w", err)
	}
	for subject, m := range rows {
		id, err := s.subj.rowID(subject)
		if err != nil {
			return err
		}
		msgs, err := s.upgradeRow(id, m, entries[s.subj.busy(id)].header.Get(hdrBusy) == "1")
		if err != nil {
			return err
		}
		if msgs == nil {
			continue
		}
		err = s.publish(ctx, msgs)
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("jetstream: indexing row %q: %w", id, err)
		}
	}
	return nil
}

// upgradeRow is the batch that gives row m of session id its missing
// entries, nil when it has them; busyEntry tells whether its busy entry
// says busy. An ownerless row is written again, unchanged but for that
// header, with its entries; otherwise the busy entry goes alone, guarded
// by the row's sequence all the same.
func (s *shard) upgradeRow(id string, m storedMsg, busyEntry bool) ([]*nats.Msg, error) {
	ownerless := len(m.header.Values(hdrOwner)) == 0
	unindexedBusy := m.header.Get(hdrBusy) == "1" && m.header.Get(hdrErasing) != "1" && !busyEntry
	if !ownerless && !unindexedBusy {
		return nil, nil
	}
	var msgs []*nats.Msg
	if ownerless {
		row, err := decodeRow(id, m)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, rowMsg(m.subject, &row), indexMsg(s.subj.owned(row.Owner, id), &row))
	}
	if unindexedBusy {
		msgs = append(msgs, busyMsg(s.subj.busy(id), true, s.opts.idleTTL))
	}
	expect(msgs[0], m.seq, m.subject)
	msgs[0].Header.Set(jetstream.MsgIDHeader, "mspd-"+nuid.Next())
	return msgs, nil
}
